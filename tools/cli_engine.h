// Options shared by the commands that load a model, and turning them into EngineOptions, a
// tokenizer and sampling settings.
#pragma once

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/engine.h"
#include "tokenizers/tokenizer.h"
#include "tools/cli_args.h"

namespace doppler::cli {

// The model used without --model: default_model/default-q8_0.gguf in the folder of the
// executable, in the folder above it (a build folder inside the checkout), or in the source tree
// the executable was built from (docs/cli.md).
absl::StatusOr<std::filesystem::path> DefaultModel();

// --model, --tokenizer, --dtype, --quant, -c/--ctx-size, --device, --verbose.
std::vector<OptionSpec> EngineOptionSpecs();
absl::StatusOr<runtime::EngineOptions> EngineOptionsFromArgs(const ParsedArgs& args);

// --tokenizer FILE (tokenizer.json, or a llama2.c tokenizer.bin), else MODEL/tokenizer.json, or
// the tokenizer in a GGUF model's metadata.
absl::StatusOr<std::unique_ptr<tokenizers::Tokenizer>> OpenTokenizer(const ParsedArgs& args);
// A tokenizer file by its kind: a tokenizer.json (by name), else a llama2.c tokenizer.bin.
absl::StatusOr<std::unique_ptr<tokenizers::Tokenizer>> OpenTokenizerFile(const std::filesystem::path& file);
// A tokenizer with more tokens than the model's vocabulary, or far fewer (more than an eighth of
// the vocabulary unknown to it: a model's padding rows are fewer), is another model's.
absl::Status CheckTokenizerFitsModel(const tokenizers::Tokenizer& tokenizer, int64_t model_vocab);
// Whether OpenTokenizer finds one without --tokenizer.
bool ModelHasTokenizer(const std::filesystem::path& model);

// --temp, --top-k, --top-p, --min-p, --repeat-penalty, --repeat-last-n, --seed.
std::vector<OptionSpec> SamplingOptionSpecs();
// --decode-activations MODE (auto, q8, f32): how decode steps take a block-quantized matmul's x,
// for the engine's commands and for graph's decode-step plans.
OptionSpec DecodeActivationsOptionSpec();
absl::StatusOr<runtime::DecodeActivations> DecodeActivationsFromArgs(const ParsedArgs& args);
// --gpu-loop N, for the commands that decode (run, bench); EngineOptionsFromArgs reads it when given.
OptionSpec GpuLoopOptionSpec();
// The seed, when not given, is drawn at random (the run summary reports it).
absl::StatusOr<runtime::SamplingOptions> SamplingOptionsFromArgs(const ParsedArgs& args);

}  // namespace doppler::cli
