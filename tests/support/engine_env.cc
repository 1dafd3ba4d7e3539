#include "tests/support/engine_env.h"

namespace doppler::test {

absl::StatusOr<std::unique_ptr<runtime::Engine>> FixtureEngine(const std::filesystem::path& dir, graph::DType dtype,
                                                               int64_t context, int64_t prefill_chunk,
                                                               const std::string& passes) {
  runtime::EngineOptions o;
  o.model_path = dir;
  o.weight_dtype = dtype;
  o.context = context;
  o.prefill_chunk = prefill_chunk;
  o.validation = true;
  o.passes = passes;
  return runtime::Engine::Create(o);
}

}  // namespace doppler::test
