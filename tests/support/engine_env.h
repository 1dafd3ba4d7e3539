// Creating engines on fixture models for tests: validation on, a small context.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "runtime/batch_engine.h"
#include "runtime/engine.h"

namespace doppler::test {

absl::StatusOr<std::unique_ptr<runtime::Engine>> FixtureEngine(const std::filesystem::path& dir, graph::DType dtype,
                                                               int64_t context = 64, int64_t prefill_chunk = 32,
                                                               const std::string& passes = "default", int gpu_loop = 8);

// Options for an engine checked against a fixture's reference logits: an f32 KV cache (as the
// references keep), validation on, a small context; the caller adds what its case varies.
runtime::EngineOptions ReferenceEngineOptions(const std::filesystem::path& model, int64_t prefill_chunk = 32);
// Batch options beside them: `sequences` at once in pages of `page_rows`, the pool holding four of
// their 64-token contexts and one more.
runtime::BatchOptions ReferenceBatchOptions(int sequences, int64_t page_rows = 5);

// `count` tokens generated from `prompt` on a fresh sequence, through the GPU's token choice.
absl::StatusOr<std::vector<int32_t>> Generate(runtime::Engine& e, const std::vector<int32_t>& prompt, size_t count);

}  // namespace doppler::test
