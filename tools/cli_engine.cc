#include "tools/cli_engine.h"

#include <unistd.h>

#include <cstdio>
#include <random>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "formats/gguf/gguf_file.h"
#include "tokenizers/gguf_tokenizer.h"

namespace doppler::cli {

absl::StatusOr<std::filesystem::path> DefaultModel() {
  const std::filesystem::path file = std::filesystem::path("default_model") / "default-q8_0.gguf";
  std::vector<std::filesystem::path> roots;
  std::error_code ec;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) roots.insert(roots.end(), {exe.parent_path(), exe.parent_path().parent_path()});
  roots.push_back(std::filesystem::path(__FILE__).parent_path().parent_path());  // this checkout
  std::vector<std::string> tried;
  for (const std::filesystem::path& root : roots) {
    const std::filesystem::path candidate = (root / file).lexically_normal();
    if (std::filesystem::is_regular_file(candidate, ec)) return candidate;
    tried.push_back(candidate.string());
  }
  return absl::NotFoundError(absl::StrCat("no --model given, and the default model is not at ",
                                          absl::StrJoin(tried, " nor "), ": give --model PATH"));
}

std::vector<OptionSpec> EngineOptionSpecs() {
  return {
      {"model", "m", "PATH", "HF model directory (config.json + *.safetensors) or a GGUF file", ""},
      {"synthetic", "", "NAME",
       "instead of --model: random weights in the exact shapes of llama-3.2-1b, llama-3.2-3b, llama-3.1-8b, "
       "qwen2.5-1.5b, qwen3-0.6b, gemma-3-1b, the mixtures of experts qwen3-30b-a3b, mixtral-8x7b and gpt-oss-20b, or tiny "
       "(no tokenizer: use token ids)",
       ""},
      {"tokenizer", "", "FILE",
       "tokenizer.json or a llama2.c tokenizer.bin (default: MODEL/tokenizer.json, or a GGUF's own tokenizer)", ""},
      {"dtype", "", "TYPE",
       "weight storage type on the GPU for an HF model: f16, bf16 or f32 (f32 also keeps an f32 KV cache); "
       "a GGUF keeps its tensors' types",
       "f16"},
      {"quant", "", "TYPE",
       "quantize an HF model's matrices at load: q8_0, q6_k, q4_k_m (Q4_K, with Q6_K for the LM head and some "
       "v_proj/down_proj, and Q5_0 / Q8_0 for rows not of whole 256-value blocks, as llama.cpp's Q4_K_M), q5_k_m "
       "(the same with Q5_K), q4_0 or iq4_xs (the LM head Q6_K)",
       ""},
      {"ctx-size", "c", "N",
       "context size in tokens (default: the model's trained length, at most 4096; more than the trained length "
       "is allowed with a warning)",
       ""},
      {"cache-type-k", "ctk", "TYPE",
       "the KV cache's storage type, f16 or f32 (llama.cpp's spelling; default f16, or f32 for an HF model with "
       "--dtype f32); K and V share one type",
       ""},
      {"cache-type-v", "ctv", "TYPE", "as --cache-type-k, which it must equal when both are given", ""},
      {"device", "", "N", "Vulkan device index (see doppler devices); default: the best GPU", ""},
      {"passes", "", "LIST", "the pass pipeline: default, none (run the model unfused) or pass names, comma-separated",
       "default"},
      DecodeActivationsOptionSpec(),
      {"verbose", "v", "", "print the device's class and the choices made for it, and the plans: every node and the kernel variant it uses", ""},
  };
}

absl::StatusOr<runtime::EngineOptions> EngineOptionsFromArgs(const ParsedArgs& args) {
  runtime::EngineOptions o;
  if (args.Has("synthetic")) {
    if (args.Has("model")) return UsageError("give either --model PATH or --synthetic NAME, not both");
    o.synthetic = args.Get("synthetic");
  } else {
    if (!args.Has("model")) return UsageError("--model PATH (or --synthetic NAME) is required");
    o.model_path = args.Get("model");
    std::error_code ec;
    if (!std::filesystem::exists(o.model_path, ec)) {
      return absl::NotFoundError(absl::StrCat("--model ", o.model_path.string(), ": no such file or directory"));
    }
  }
  if (args.Has("quant")) {
    absl::StatusOr<quant::QuantScheme> quant = quant::ParseQuantScheme(args.Get("quant"));
    if (!quant.ok() || *quant == quant::QuantScheme::kF16 || *quant == quant::QuantScheme::kF32) {
      return absl::InvalidArgumentError(absl::StrCat("--quant: '", args.Get("quant"), "' is not one of q8_0, q6_k, q5_k_m, q4_k_m, q4_0, iq4_xs"));
    }
    o.quant = *quant;
  }
  std::optional<graph::DType> dtype = graph::ParseDType(args.Get("dtype"));
  if (!dtype || !graph::IsFloat(*dtype)) {
    return absl::InvalidArgumentError(absl::StrCat("--dtype: '", args.Get("dtype"), "' is not one of f16, bf16, f32"));
  }
  o.weight_dtype = *dtype;
  if (args.Has("ctx-size")) {
    absl::StatusOr<int64_t> ctx = args.GetInt("ctx-size");
    if (!ctx.ok()) return ctx.status();
    if (*ctx <= 0) return absl::InvalidArgumentError("--ctx-size must be positive");
    o.context = *ctx;
  }
  for (const char* option : {"cache-type-k", "cache-type-v"}) {
    if (!args.Has(option)) continue;
    const std::string value = args.Get(option);
    const std::optional<graph::DType> kv = graph::ParseDType(value);
    if (!kv || (*kv != graph::DType::kF16 && *kv != graph::DType::kF32)) {
      return absl::InvalidArgumentError(absl::StrCat("--", option, ": '", value, "' is not one of f16, f32"));
    }
    if (o.kv_dtype && *o.kv_dtype != *kv) {
      return absl::InvalidArgumentError(absl::StrCat("--cache-type-k ", args.Get("cache-type-k"), " and --cache-type-v ",
                                                     value, " differ: K and V share one cache type"));
    }
    o.kv_dtype = *kv;
  }
  if (args.Has("device")) {
    absl::StatusOr<int64_t> dev = args.GetInt("device");
    if (!dev.ok()) return dev.status();
    o.device_index = static_cast<int>(*dev);
  }
  if (args.Has("gpu-loop")) {
    absl::StatusOr<int64_t> loop = args.GetInt("gpu-loop");
    if (!loop.ok()) return loop.status();
    if (*loop < 1 || *loop > 4096) return absl::InvalidArgumentError("--gpu-loop must be between 1 and 4096");
    o.gpu_loop = static_cast<int>(*loop);
  }
  absl::StatusOr<runtime::DecodeActivations> activations = DecodeActivationsFromArgs(args);
  if (!activations.ok()) return activations.status();
  o.decode_activations = *activations;
  o.verbose = args.Has("verbose");
  o.passes = args.Get("passes");
  o.progress = isatty(STDERR_FILENO) != 0;
  return o;
}

absl::StatusOr<std::unique_ptr<tokenizers::Tokenizer>> OpenTokenizerFile(const std::filesystem::path& file) {
  if (absl::EndsWith(file.string(), ".json")) return tokenizers::LoadHfTokenizerFile(file);
  return tokenizers::LoadLlama2cTokenizer(file);
}

absl::Status CheckTokenizerFitsModel(const tokenizers::Tokenizer& tokenizer, int64_t model_vocab) {
  const int64_t tokens = tokenizer.vocab_size();
  if (tokens > model_vocab || tokens * 8 < model_vocab * 7) {
    return absl::InvalidArgumentError(absl::StrCat("the tokenizer has ", tokens, " tokens but the model's vocabulary ",
                                                   model_vocab, ": it is not this model's tokenizer"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<tokenizers::Tokenizer>> OpenTokenizer(const ParsedArgs& args) {
  if (args.Has("tokenizer")) return OpenTokenizerFile(args.Get("tokenizer"));
  const std::filesystem::path dir = args.Get("model");
  if (runtime::IsGgufModel(dir)) {
    absl::StatusOr<std::unique_ptr<formats::GgufFile>> file = formats::GgufFile::Open(dir);
    if (!file.ok()) return file.status();
    if (!tokenizers::GgufHasTokenizer(**file)) {
      return absl::NotFoundError(absl::StrCat(dir.string(), " holds no tokenizer (tokenizer.ggml.model): name one with "
                                              "--tokenizer FILE, or give --prompt-ids"));
    }
    return tokenizers::LoadGgufTokenizer(**file);
  }
  if (!std::filesystem::exists(dir / "tokenizer.json")) {
    return absl::NotFoundError(absl::StrCat("no tokenizer.json in ", dir.string(),
                                            ": name one with --tokenizer FILE, or give --prompt-ids"));
  }
  return tokenizers::LoadHfTokenizer(dir);
}

bool ModelHasTokenizer(const std::filesystem::path& model) {
  if (!runtime::IsGgufModel(model)) return std::filesystem::exists(model / "tokenizer.json");
  absl::StatusOr<std::unique_ptr<formats::GgufFile>> file = formats::GgufFile::Open(model);
  return file.ok() && tokenizers::GgufHasTokenizer(**file);
}

OptionSpec DecodeActivationsOptionSpec() {
  return {"decode-activations", "", "MODE",
          "how decode steps multiply block-quantized weights: q8 rounds each matrix's input "
          "in blocks of 32 to 8-bit integers and multiplies those (integer dot products; llama.cpp's numerics), f32 "
          "multiplies the exact input; auto: q8 where the device has integer dot products. Prefill keeps f32",
          "auto"};
}

absl::StatusOr<runtime::DecodeActivations> DecodeActivationsFromArgs(const ParsedArgs& args) {
  const std::string mode = args.Has("decode-activations") ? args.Get("decode-activations") : "auto";
  if (mode == "auto") return runtime::DecodeActivations::kAuto;
  if (mode == "q8") return runtime::DecodeActivations::kQ8;
  if (mode == "f32") return runtime::DecodeActivations::kF32;
  return absl::InvalidArgumentError(absl::StrCat("--decode-activations: '", mode, "' is not one of auto, q8, f32"));
}

OptionSpec GpuLoopOptionSpec() {
  return {"gpu-loop", "", "N",
          "decode steps recorded back to back and run in one submit (each step's token feeds the next on the GPU; "
          "one readback of N ids; the next loop is submitted before it is read; steps past a stop are dropped); 1: a submit "
          "per token; at most the prefill chunk",
          absl::StrCat(runtime::EngineOptions{}.gpu_loop)};
}

std::vector<OptionSpec> SamplingOptionSpecs() {
  return {
      {"temp", "", "T", "sampling temperature; 0 is greedy", "0.8"},
      {"top-k", "", "K", "keep the K most likely tokens (0: off)", "40"},
      {"top-p", "", "P", "keep the most likely tokens holding probability P (1: off)", "0.95"},
      {"min-p", "", "P", "drop tokens less likely than P times the most likely one (0: off)", "0.05"},
      {"repeat-penalty", "", "X", "penalise tokens of the last --repeat-last-n positions (1: off)", "1.0"},
      {"repeat-last-n", "", "N", "positions the repeat penalty looks back over", "64"},
      {"seed", "s", "N", "random seed: the same seed gives the same text; -1: random (reported in the summary)", "-1"},
  };
}

absl::StatusOr<runtime::SamplingOptions> SamplingOptionsFromArgs(const ParsedArgs& args) {
  runtime::SamplingOptions s;
  absl::StatusOr<double> t = args.GetFloat("temp");
  absl::StatusOr<int64_t> k = args.GetInt("top-k");
  absl::StatusOr<double> p = args.GetFloat("top-p");
  absl::StatusOr<double> min_p = args.GetFloat("min-p");
  absl::StatusOr<double> penalty = args.GetFloat("repeat-penalty");
  absl::StatusOr<int64_t> last_n = args.GetInt("repeat-last-n");
  for (const absl::Status& st : {t.status(), k.status(), p.status(), min_p.status(), penalty.status(), last_n.status()}) {
    if (!st.ok()) return st;
  }
  if (*t < 0) return absl::InvalidArgumentError("--temp must be >= 0");
  if (*k < 0) return absl::InvalidArgumentError("--top-k must be >= 0");
  if (*p <= 0 || *p > 1) return absl::InvalidArgumentError("--top-p must be in (0, 1]");
  if (*min_p < 0 || *min_p >= 1) return absl::InvalidArgumentError("--min-p must be in [0, 1)");
  if (*penalty <= 0) return absl::InvalidArgumentError("--repeat-penalty must be positive");
  if (*last_n <= 0) return absl::InvalidArgumentError("--repeat-last-n must be positive");
  s.temperature = *t;
  s.top_k = *k;
  s.top_p = *p;
  s.min_p = *min_p;
  s.repeat_penalty = *penalty;
  s.repeat_last_n = *last_n;
  absl::StatusOr<int64_t> seed = args.GetInt("seed");
  if (!seed.ok()) return seed.status();
  if (*seed < -1 || *seed > UINT32_MAX) {
    return absl::InvalidArgumentError(absl::StrCat("--seed must be -1 (random) or in [0, ", UINT32_MAX, "]"));
  }
  s.seed = *seed == -1 ? std::random_device{}() : static_cast<uint32_t>(*seed);
  return s;
}

}  // namespace doppler::cli
