// Synthetic models: random weights in the exact shapes of published configurations, so that every
// benchmark runs with no download (`doppler bench --synthetic llama-3.2-1b`).
//
// Each configuration is the model's published config.json (hidden, intermediate, layers, heads,
// kv heads, head_dim, vocab, rope theta and scaling, tied embeddings, Gemma 3's sliding pattern and
// window), parsed by the ordinary config reader. The weights are generated lazily, when a tensor is
// first asked for, deterministically from (seed, tensor name, row), directly in the storage type the
// model is built with: f32/f16/bf16 values uniform with standard deviation 1/sqrt(fan_in), or, for
// block formats (--quant q8_0|q4_k_m picks them per tensor as for an HF checkpoint), random blocks
// written directly — random scales and quants in their valid ranges, chosen so that the decoded
// values have mean ~0 and standard deviation ~1/sqrt(fan_in) — instead of quantizing floats, which
// would take minutes for 8B parameters. Norm weights are ~1 (~0 where the family adds 1, Gemma);
// biases are small. Activations stay finite; the text is meaningless.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "formats/hf_config.h"
#include "formats/weight_store.h"
#include "graph/dtype.h"
#include "quant/quant_scheme.h"

namespace doppler::models {

// The known names: llama-3.2-1b, llama-3.2-3b, llama-3.1-8b, llama-3.1-405b (for compile benchmarks:
// its weights fit no GPU), qwen2.5-1.5b, qwen3-0.6b, gemma-3-1b, the mixtures of experts
// qwen3-30b-a3b, mixtral-8x7b and gpt-oss-20b (its experts in MXFP4, as published), and tiny (a 2-layer Llama-shaped model for tests).
std::vector<std::string> SyntheticModelNames();

// The configuration of a named synthetic model; an unknown name is an error listing the known ones.
absl::StatusOr<formats::ModelConfig> SyntheticConfig(std::string_view name);

struct SyntheticTensor {
  std::vector<int64_t> shape;
  graph::DType dtype;
};

class SyntheticWeightStore : public formats::WeightStore {
 public:
  // The tensors are those the model's graph reads, in the storage type `weight_dtype` (matrices),
  // or QuantizedDType(quant, ...) per matrix when quant is not kNone; vectors are f32.
  static absl::StatusOr<std::unique_ptr<SyntheticWeightStore>> Create(const std::string& name,
                                                                      const formats::ModelConfig& config,
                                                                      graph::DType weight_dtype, quant::QuantScheme quant,
                                                                      uint64_t seed = 1);

  bool Has(std::string_view name) const override;
  // Generates the tensor on first use. The most recently generated tensors are kept (up to a
  // budget of host memory); a TensorView stays valid until about that many bytes of other tensors
  // have been generated since, which is enough for every caller that copies a tensor before it
  // asks for the next (the engine's loader, the interpreter's param source).
  absl::StatusOr<formats::TensorView> Get(std::string_view name) const override;
  std::vector<std::string> Names() const override;
  std::string Describe() const override { return "synthetic:" + name_; }

  // The storage type of a tensor (default_dtype for a name the model does not have). Does not
  // generate anything: for BuildOptions::dtype_of.
  graph::DType DTypeOf(const std::string& tensor, graph::DType default_dtype) const;
  // Bytes of every tensor in its storage type.
  uint64_t TotalBytes() const;
  // Values (parameters) of every tensor.
  uint64_t TotalParameters() const;
  const std::map<std::string, SyntheticTensor>& tensors() const { return tensors_; }

 private:
  SyntheticWeightStore() = default;
  std::string name_;
  uint64_t seed_ = 1;
  float norm_base_ = 1.0f;  // 0 for families whose norms scale by (1 + w)
  std::map<std::string, SyntheticTensor> tensors_;
  // Generated tensors, oldest first (bounded by kKeepBytes, the newest always kept).
  mutable std::mutex mu_;
  mutable std::deque<std::pair<std::string, std::unique_ptr<std::vector<uint8_t>>>> cache_;
  mutable uint64_t cached_bytes_ = 0;
};

// Fills `out` with `rows` rows of `cols` random values in `dtype`, row r drawn from (seed, r):
// float types uniform with standard deviation `stddev` around `mean`, block formats random blocks
// of about that distribution (mean 0). `out` must hold ByteSize(dtype, rows * cols) bytes. Uses
// several threads for large tensors.
void FillRandom(graph::DType dtype, int64_t rows, int64_t cols, uint64_t seed, float mean, float stddev,
                uint8_t* out);

}  // namespace doppler::models
