// The generation engine: loads a model onto the device, compiles its step plans once, and runs
// prefill and decode by replaying them.
//
// Plans: "prefill" (a chunk of up to prefill_chunk tokens, logits of the last token only),
// "decode" (one token), and, built on first use, "logits" (a chunk with logits for every token).
// The next token is chosen on the GPU (argmax) and written straight into the decode plan's input,
// so a decode step costs one submit and a 4-byte read.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "backend_vk/context.h"
#include "backend_vk/pipeline_cache.h"
#include "backend_vk/plan.h"
#include "formats/weight_store.h"
#include "graph/graph.h"
#include "models/architecture.h"
#include "quant/quant_scheme.h"
#include "runtime/resources.h"
#include "runtime/token_choice.h"

namespace doppler::runtime {

// How decode steps' matrix-vector products take their input x (graph/activation_quant.h).
enum class DecodeActivations {
  kAuto,  // q8 where the device has integer dot products, else f32
  kF32,   // exact: the weights are decoded to floats and multiplied with x as it is
  kQ8,    // x rounded through q8 blocks and multiplied with the weights' integer quants (llama.cpp's
          // numerics): matmuls with Q4_K, Q5_K, Q6_K, Q8_0 or Q5_0 weights only
};

struct EngineOptions {
  // An HF directory (config.json + *.safetensors) or a GGUF file (see IsGgufModel).
  std::filesystem::path model_path;
  // When set, a synthetic model of that name (models/synthetic.h: random weights in the exact
  // shapes of a published configuration) instead of model_path.
  std::string synthetic;
  // HF: the storage type of matrices and embeddings, f16 (default), bf16 or f32. A GGUF keeps each
  // tensor's own type (Q4_K, Q6_K, Q8_0, F16, ...) whatever this says.
  graph::DType weight_dtype = graph::DType::kF16;
  // HF only: quantize matrices at load (q8_0, q4_k_m; quant/quant_scheme.h says which gets what).
  quant::QuantScheme quant = quant::QuantScheme::kNone;
  // The KV cache's type; unset: f32 when the weights are plain f32 (an HF model with --dtype f32
  // and no --quant), else f16.
  std::optional<graph::DType> kv_dtype;
  int64_t context = 0;                             // 0: min(4096, the model's max_position_embeddings)
  int64_t prefill_chunk = 256;                     // tokens per prefill step
  std::optional<int> device_index;
  bool validation = false;
  bool verbose = false;   // print the kernel variant chosen for every node
  bool progress = false;  // a progress line on stderr while weights load and kernels compile
  SamplingOptions sampling;  // how prefill and decode choose the next token (default: greedy)
  std::string passes = "default";  // the pass pipeline: "default", "none", or pass names (passes/pass.h)
  // Decode steps recorded back to back in one command buffer (DecodeUpTo): each step's token goes
  // straight to the next step's input on the GPU, and the host waits once for all of them. 1: one
  // step per submit. Taken as at most prefill_chunk: a sliding-window cache keeps that many spare
  // rows, so the steps run past a stop token overwrite nothing still needed.
  int gpu_loop = 8;
  // The decode plans' matmuls with block-quantized weights (the q8-activations pass on their graph);
  // prefill keeps f32 activations.
  DecodeActivations decode_activations = DecodeActivations::kAuto;
};

// True when `path` names a file (taken as a GGUF model) rather than a directory (an HF model).
bool IsGgufModel(const std::filesystem::path& path);

class Engine {
 public:
  static absl::StatusOr<std::unique_ptr<Engine>> Create(const EngineOptions& options);
  ~Engine();

  // Feeds `ids` at the current position (in chunks) and returns the next token.
  absl::StatusOr<int32_t> Prefill(std::span<const int32_t> ids);
  // Feeds the token the last step produced and returns the next one.
  absl::StatusOr<int32_t> DecodeNext();
  // Up to `wanted` (>= 1) DecodeNext steps in one submit: a whole GPU loop where all of its
  // gpu_loop() tokens are wanted and the context has room for them, else one step. Returns the
  // tokens, in order. Where at least two loops' tokens are wanted, the next loop is started before
  // this one's tokens are read, so the GPU does not wait for the host between them; any other call
  // (Rewind after a stop, say) drops it.
  absl::StatusOr<std::vector<int32_t>> DecodeUpTo(int64_t wanted);
  // Takes the sequence back to `position` (at most position()), with `next_token` as the token the
  // next decode step feeds: after a GPU loop whose tokens ran past a stop.
  absl::Status Rewind(int64_t position, int32_t next_token);
  int gpu_loop() const { return decode_loops_[0] ? decode_loops_[0]->steps() : 1; }
  // Up to `steps` DecodeNext steps (as many as the context has room for) through the decode plan's
  // profiling recordings (vk::Plan::RunProfiled): for each, the GPU nanoseconds of each of its
  // dispatches (decode_plan().dispatches() order) and of the step timed at its ends.
  absl::StatusOr<std::vector<vk::ProfiledStep>> ProfileDecodeSteps(int64_t steps);
  // The same for one prefill chunk (ids.size() <= the prefill chunk; prefill_plan() order).
  absl::StatusOr<vk::ProfiledStep> ProfilePrefillChunk(std::span<const int32_t> ids);

  // Logits of every token of `ids` fed at the current position: [ids.size(), vocab].
  absl::StatusOr<std::vector<float>> PrefillLogits(std::span<const int32_t> ids);
  // Feeds `id` as one decode step and returns its logits [vocab].
  absl::StatusOr<std::vector<float>> DecodeLogits(int32_t id);

  // Starts a new sequence (the KV cache is overwritten from position 0).
  void Reset() {
    (void)DropAhead();
    position_ = 0;
  }

  int64_t position() const { return position_; }
  int64_t context() const { return options_.context; }
  const formats::ModelConfig& config() const { return config_; }
  const graph::Graph& graph() const { return graph_; }  // the step graph the prefill plans run
  // The decode plans' graph: graph() with x_quant on its quantized matmuls where decode rounds x
  // through q8 (the same nodes, by id, as graph()).
  const graph::Graph& decode_graph() const { return decode_graph_; }
  const vk::Context& device() const { return *ctx_; }
  vk::Context& mutable_device() { return *ctx_; }  // for measurements beside the engine (bench)
  const vk::Plan& decode_plan() const { return *decode_; }
  const vk::Plan& prefill_plan() const { return *prefill_; }

 private:
  Engine() = default;
  absl::Status Load();
  absl::StatusOr<std::unique_ptr<vk::Plan>> BuildPlan(const graph::Graph& g, int64_t tokens, vk::Buffer* ids,
                                                      const std::string& name, int steps = 1,
                                                      const std::vector<vk::SteppedBinding>& stepped = {});
  absl::Status ChooseDecodeActivations();  // decode_graph_, from the option and the device
  absl::Status BuildDecodeLoop();
  absl::Status Warm();  // runs each plan once, before anything is timed
  absl::Status CheckIds(std::span<const int32_t> ids) const;
  absl::StatusOr<int32_t> ReadToken() const;
  absl::Status DropAhead();

  EngineOptions options_;
  formats::ModelConfig config_;
  std::unique_ptr<formats::WeightStore> store_;
  std::unique_ptr<vk::Context> ctx_;
  std::unique_ptr<vk::PipelineCache> pipelines_;
  codegen::TargetCaps caps_;
  models::BuildOptions build_;
  graph::Graph graph_;         // the step graph; the plans differ in their token bucket
  graph::Graph decode_graph_;  // and in their activations' rounding (decode_graph())
  // Params, consts and states by name: shared by every plan.
  Resources resources_;
  std::unique_ptr<vk::Buffer> token_;   // the next token: argmax writes it, decode reads it
  std::unique_ptr<vk::Buffer> prompt_;  // a prefill chunk's ids
  std::unique_ptr<vk::Plan> decode_, prefill_, logits_;
  // The decode loop, in two plans over a ring of token slots (loop_slot_ bytes apart, where a
  // descriptor may start): step s of the first reads its token from slot s and writes the next to
  // slot s + 1; the second's steps follow on (BuildDecodeLoop). DecodeUpTo starts one while the
  // other runs: ahead_ is the one started for position_, whose tokens are not read yet (-1: none).
  // Every other call waits for it first and drops it (DropAhead).
  std::unique_ptr<vk::Plan> decode_loops_[2];
  int ahead_ = -1;
  std::unique_ptr<vk::Buffer> loop_tokens_;
  size_t loop_slot_ = 0;
  graph::ValueId logits_output_ = -1;  // the logits value of the logits plan's graph
  int64_t position_ = 0;
};

}  // namespace doppler::runtime
