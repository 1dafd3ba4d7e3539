// Reader for HF safetensors checkpoints: one model.safetensors, or shards listed by
// model.safetensors.index.json. Every header is validated before any offset is trusted.
#pragma once

#include <filesystem>
#include <memory>

#include "absl/status/statusor.h"
#include "formats/weight_store.h"

namespace doppler::formats {

// Opens model_dir/model.safetensors.index.json (and every shard it names) if present, else
// model_dir/model.safetensors. Neither present -> NotFound naming the directory.
// Tensors of dtypes other than F32/F16/BF16 are listed, but Get() on them fails, so a
// checkpoint with an unused integer buffer still opens. A pair `X_blocks`, `X_scales` (how
// transformers saves an MXFP4-quantized weight, GPT-OSS's experts) is also the tensor `X` of type
// MXFP4 [..., in] in ggml's blocks, repacked when first asked for and held while the store lives.
absl::StatusOr<std::unique_ptr<WeightStore>> OpenSafetensors(const std::filesystem::path& model_dir);

// Opens one .safetensors file on its own (any file name).
absl::StatusOr<std::unique_ptr<WeightStore>> OpenSafetensorsFile(const std::filesystem::path& file);

}  // namespace doppler::formats
