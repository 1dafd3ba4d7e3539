#include "tests/support/engine_env.h"

namespace doppler::test {

absl::StatusOr<std::unique_ptr<runtime::Engine>> FixtureEngine(const std::filesystem::path& dir, graph::DType dtype,
                                                               int64_t context, int64_t prefill_chunk,
                                                               const std::string& passes, int gpu_loop) {
  runtime::EngineOptions o;
  o.model_path = dir;
  o.weight_dtype = dtype;
  o.context = context;
  o.prefill_chunk = prefill_chunk;
  o.validation = true;
  o.passes = passes;
  o.gpu_loop = gpu_loop;
  return runtime::Engine::Create(o);
}

runtime::EngineOptions ReferenceEngineOptions(const std::filesystem::path& model, int64_t prefill_chunk) {
  runtime::EngineOptions o;
  o.model_path = model;
  o.kv_dtype = graph::DType::kF32;
  o.context = 64;
  o.prefill_chunk = prefill_chunk;
  o.validation = true;
  return o;
}

runtime::BatchOptions ReferenceBatchOptions(int sequences, int64_t page_rows) {
  runtime::BatchOptions b;
  b.max_sequences = sequences;
  b.page_rows = page_rows;
  b.ctx_total = 4 * 64 + 64;
  return b;
}

absl::StatusOr<std::vector<int32_t>> Generate(runtime::Engine& e, const std::vector<int32_t>& prompt, size_t count) {
  e.Reset();
  std::vector<int32_t> out;
  absl::StatusOr<int32_t> token = e.Prefill(prompt);
  while (token.ok()) {
    out.push_back(*token);
    if (out.size() >= count) return out;
    token = e.DecodeNext();
  }
  return token.status();
}

}  // namespace doppler::test
