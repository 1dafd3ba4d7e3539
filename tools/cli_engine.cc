#include "tools/cli_engine.h"

#include <unistd.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace doppler::cli {

std::vector<OptionSpec> EngineOptionSpecs() {
  return {
      {"model", "m", "DIR", "HF model directory (config.json + *.safetensors)", ""},
      {"dtype", "", "TYPE", "weight storage type on the GPU: f16, bf16 or f32 (f32 also keeps an f32 KV cache)",
       "f16"},
      {"ctx", "c", "N", "context size in tokens (default: the model's, at most 4096)", ""},
      {"device", "", "N", "Vulkan device index (see doppler devices); default: the best GPU", ""},
      {"verbose", "v", "", "print the plans: every node and the kernel variant it uses", ""},
  };
}

absl::StatusOr<runtime::EngineOptions> EngineOptionsFromArgs(const ParsedArgs& args) {
  runtime::EngineOptions o;
  if (!args.Has("model")) return absl::InvalidArgumentError("--model DIR is required");
  o.model_dir = args.Get("model");
  std::optional<graph::DType> dtype = graph::ParseDType(args.Get("dtype"));
  if (!dtype || !graph::IsFloat(*dtype)) {
    return absl::InvalidArgumentError(absl::StrCat("--dtype: '", args.Get("dtype"), "' is not one of f16, bf16, f32"));
  }
  o.weight_dtype = *dtype;
  if (args.Has("ctx")) {
    absl::StatusOr<int64_t> ctx = args.GetInt("ctx");
    if (!ctx.ok()) return ctx.status();
    if (*ctx <= 0) return absl::InvalidArgumentError("--ctx must be positive");
    o.context = *ctx;
  }
  if (args.Has("device")) {
    absl::StatusOr<int64_t> dev = args.GetInt("device");
    if (!dev.ok()) return dev.status();
    o.device_index = static_cast<int>(*dev);
  }
  o.verbose = args.Has("verbose");
  o.progress = isatty(STDERR_FILENO) != 0;
  return o;
}

}  // namespace doppler::cli
