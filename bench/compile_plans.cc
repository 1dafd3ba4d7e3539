// doppler_compile_bench: the host's work before a model's first token, without a device or its
// weights, for a synthetic model (default: Llama-3.1-405B's shape, 126 layers, Q4_K_M): building
// the step graph, the pass pipeline, the decode graph's q8 activations, the kernels of a decode
// plan (T = 1) and a prefill plan (T = --tokens) for an NVIDIA-like target, their memory plans, and
// the SPIR-V of every distinct kernel through the on-disk cache (run it twice to see a warm cache;
// XDG_CACHE_HOME picks where). Prints the CPU seconds of each stage (and of each pass) and their
// sum. LAYERS builds that many layers of the model's shape instead of its own count.
//
//   doppler_compile_bench [NAME [TOKENS [LAYERS]]]
#include <cstdio>
#include <ctime>
#include <set>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "codegen/kernel.h"
#include "codegen/known_targets.h"
#include "codegen/lowering.h"
#include "codegen/shader_compiler.h"
#include "codegen/spirv_cache.h"
#include "passes/memory_plan.h"
#include "passes/pass.h"
#include "runtime/decode_activations.h"
#include "runtime/model_source.h"
#include "runtime/plan_compile.h"

namespace doppler {
namespace {

class Stages {
 public:
  // Records the CPU time since the previous stage under `name`.
  void End(const char* name) {
    const double now = Now();
    std::printf("%-28s %8.3f s\n", name, now - last_);
    total_ += now - last_;
    last_ = now;
  }
  void Total() const { std::printf("%-28s %8.3f s\n", "total", total_); }
  static double Now() { return static_cast<double>(std::clock()) / CLOCKS_PER_SEC; }

 private:
  double last_ = Now(), total_ = 0;
};

absl::Status Run(const std::string& name, int64_t tokens, int layers) {
  Stages stages;
  runtime::EngineOptions options;
  options.synthetic = name;
  options.quant = quant::QuantScheme::kQ4_K_M;
  options.prefill_chunk = tokens;
  absl::StatusOr<runtime::OpenedModel> model = runtime::OpenModel(options);
  if (!model.ok()) return model.status();
  if (layers > 0) model->config.num_layers = layers;
  absl::StatusOr<graph::Graph> g = runtime::StepGraph(model->config, model->build, runtime::SamplingOptions{}, "none");
  if (!g.ok()) return g.status();
  std::printf("%s: %d layers, %d nodes before the passes\n", name.c_str(), model->config.num_layers, g->size());
  stages.End("graph");

  absl::StatusOr<passes::PassManager> pm = passes::PassManager::Parse("default");
  if (!pm.ok()) return pm.status();
  double pass_start = Stages::Now();
  absl::Status passed = pm->Run(*g, [&](const std::string& pass, const graph::Graph&, bool) {
    const double now = Stages::Now();
    std::printf("  %-26s %8.3f s\n", pass.c_str(), now - pass_start);
    pass_start = now;
  });
  if (!passed.ok()) return passed;
  stages.End("passes (and verifying)");
  const codegen::TargetCaps caps = codegen::H100LikeCaps();
  absl::StatusOr<graph::Graph> decode =
      runtime::WithDecodeActivations(*g, runtime::DecodeActivations::kAuto, caps, "the H100-like target");
  if (!decode.ok()) return decode.status();
  stages.End("q8-activations (decode)");

  std::set<std::string> sources;
  int dispatches = 0;
  std::vector<std::vector<codegen::Dispatch>> lowered;
  for (const auto& [plan, t] : {std::pair<const graph::Graph*, int64_t>{&*decode, 1}, {&*g, options.prefill_chunk}}) {
    absl::StatusOr<std::vector<codegen::Dispatch>> ds = codegen::Lower(*plan, caps, t);
    if (!ds.ok()) return ds.status();
    for (const codegen::Dispatch& d : *ds) sources.insert(d.kernel.glsl);
    dispatches += static_cast<int>(ds->size());
    lowered.push_back(*std::move(ds));
  }
  std::printf("%d dispatches in two plans, %zu distinct kernels\n", dispatches, sources.size());
  stages.End("lowering (kernels' GLSL)");

  size_t i = 0;
  for (const auto& [plan, t] : {std::pair<const graph::Graph*, int64_t>{&*decode, 1}, {&*g, options.prefill_chunk}}) {
    std::set<graph::ValueId> outside;
    if (std::optional<graph::ValueId> next = plan->output("next_token")) outside.insert(*next);
    absl::StatusOr<passes::MemoryPlan> memory = passes::PlanMemory(*plan, runtime::BindingsOf(lowered[i++]), t, outside);
    if (!memory.ok()) return memory.status();
  }
  stages.End("memory plans");

  codegen::ResetShaderCacheStats();
  for (const std::string& glsl : sources) {
    absl::StatusOr<codegen::CompiledShader> spirv = codegen::CompileComputeShader(glsl);
    if (!spirv.ok()) return spirv.status();
  }
  const codegen::ShaderCacheStats cache = codegen::GetShaderCacheStats();
  stages.End("SPIR-V (through the cache)");
  std::printf("shader cache: %llu hits, %llu compiled\n", static_cast<unsigned long long>(cache.hits),
              static_cast<unsigned long long>(cache.misses));
  stages.Total();
  return absl::OkStatus();
}

}  // namespace
}  // namespace doppler

int main(int argc, char** argv) {
  const std::string name = argc > 1 ? argv[1] : "llama-3.1-405b";
  int64_t tokens = 256;
  int layers = 0;
  if ((argc > 2 && (!absl::SimpleAtoi(argv[2], &tokens) || tokens <= 0)) ||
      (argc > 3 && (!absl::SimpleAtoi(argv[3], &layers) || layers <= 0))) {
    std::fprintf(stderr, "doppler_compile_bench: TOKENS and LAYERS must be positive numbers\n");
    return 2;
  }
  if (absl::Status s = doppler::Run(name, tokens, layers); !s.ok()) {
    std::fprintf(stderr, "doppler_compile_bench: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  return 0;
}
