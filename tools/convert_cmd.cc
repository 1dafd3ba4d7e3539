// doppler convert: an HF checkpoint to a GGUF file (f16, q8_0, q6_k, q5_k_m, q4_k_m, q4_0 or iq4_xs), readable by doppler
// and by llama.cpp.
#include <unistd.h>

#include <cstdio>
#include <filesystem>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "checkpoints/hf_to_gguf.h"
#include "checkpoints/weights.h"
#include "models/architecture.h"
#include "runtime/model_source.h"
#include "tools/cli_args.h"
#include "tools/cli_engine.h"
#include "tools/commands.h"

namespace doppler::cli {
namespace {

CommandSpec Spec() {
  return CommandSpec{
      "convert",
      "Convert an HF model directory (config.json + *.safetensors [+ tokenizer.json]) to a GGUF v3 file with\n"
      "llama.cpp's tensor names and metadata (llama, qwen2, qwen3). q4_k_m: Q4_K for most matrices, Q6_K for\n"
      "the LM head and, of n layers, the v_proj / down_proj of layers i < n/8, i >= 7n/8 or (i - n/8) % 3 == 2;\n"
      "q5_k_m the same with Q5_K for Q4_K; q4_0 and iq4_xs: every matrix in that type, the LM head Q6_K.\n"
      "Rows that are not whole 256-value blocks take Q5_0 for Q4_K, Q5_1 for Q5_K, IQ4_NL for IQ4_XS and\n"
      "Q8_0 for Q6_K, as llama.cpp does.",
      {
          {"model", "m", "DIR", "HF model directory", ""},
          {"out", "o", "FILE", "the GGUF file to write", ""},
          {"quant", "", "TYPE", "f32, f16, q8_0, q6_k, q5_k_m, q4_k_m, q4_0 or iq4_xs (vectors such as norms stay f32)", "f16"},
          {"tokenizer", "", "FILE", "tokenizer to store: tokenizer.json or a llama2.c tokenizer.bin "
                                    "(default: MODEL/tokenizer.json if present)", ""},
          {"name", "", "NAME", "general.name (default: the model directory's name)", ""},
      }};
}

// The model is checked as `doppler run` checks it before anything is written: its config against
// the checkpoint, every tensor the model reads present in the shape the config implies, and the
// tokenizer's vocabulary against the model's.
absl::Status CheckInput(const checkpoints::HfToGgufOptions& o) {
  runtime::EngineOptions options;
  options.model_path = o.model_dir;
  options.context = 1;  // the tensors do not depend on it
  absl::StatusOr<runtime::OpenedModel> model = runtime::OpenModel(options);
  if (!model.ok()) return model.status();
  absl::StatusOr<graph::Graph> g = models::BuildModelGraph(model->config, model->build);
  if (!g.ok()) return g.status();
  for (const graph::Node& n : g->nodes()) {
    if (n.kind != graph::OpKind::kParam) continue;
    if (absl::StatusOr<formats::TensorView> t = checkpoints::ParamTensor(*model->store, n); !t.ok()) return t.status();
  }
  const std::filesystem::path tokenizer = o.tokenizer.empty() ? o.model_dir / "tokenizer.json" : o.tokenizer;
  std::error_code ec;
  if (!o.tokenizer.empty() || std::filesystem::exists(tokenizer, ec)) {
    absl::StatusOr<std::unique_ptr<tokenizers::Tokenizer>> tok = OpenTokenizerFile(tokenizer);
    if (!tok.ok()) return tok.status();
    return CheckTokenizerFitsModel(**tok, model->config.vocab_size);
  }
  return absl::OkStatus();
}

// The output is written to a temporary file renamed over --out: only where that replaces nothing
// but a regular file, and never one of the model's own files.
absl::Status CheckOutput(const checkpoints::HfToGgufOptions& o) {
  std::error_code ec;
  const std::filesystem::file_status st = std::filesystem::symlink_status(o.out, ec);
  if (ec || !std::filesystem::exists(st)) return absl::OkStatus();
  if (!std::filesystem::is_regular_file(st)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--out ", o.out.string(), " is ",
        std::filesystem::is_symlink(st) ? "a symbolic link" : std::filesystem::is_directory(st) ? "a directory" : "not a regular file",
        ": it would be replaced by a regular file; give the path of a new or a regular file"));
  }
  std::vector<std::filesystem::path> inputs;
  for (const std::filesystem::directory_entry& e : std::filesystem::directory_iterator(o.model_dir, ec)) {
    inputs.push_back(e.path());
  }
  if (!o.tokenizer.empty()) inputs.push_back(o.tokenizer);
  for (const std::filesystem::path& input : inputs) {
    if (std::filesystem::equivalent(input, o.out, ec)) {
      return absl::InvalidArgumentError(absl::StrCat("--out ", o.out.string(), " is one of the model's own files (",
                                                     input.string(), "): refusing to overwrite the input"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<int> ConvertCommand(const std::vector<std::string>& argv) {
  const CommandSpec spec = Spec();
  absl::StatusOr<std::optional<ParsedArgs>> parsed = ParseOrHelp(spec, argv);
  if (!parsed.ok()) return parsed.status();
  if (!parsed->has_value()) return 0;
  const ParsedArgs& args = **parsed;
  if (!args.Has("model")) return UsageError("--model DIR is required");
  if (!args.Has("out")) return UsageError("--out FILE is required");
  absl::StatusOr<quant::QuantScheme> quant = quant::ParseQuantScheme(args.Get("quant"));
  if (!quant.ok()) return absl::InvalidArgumentError(absl::StrCat("--quant: ", quant.status().message()));
  checkpoints::HfToGgufOptions o;
  o.model_dir = args.Get("model");
  o.out = args.Get("out");
  o.quant = *quant;
  if (args.Has("tokenizer")) o.tokenizer = args.Get("tokenizer");
  if (args.Has("name")) o.name = args.Get("name");
  const bool tty = isatty(STDERR_FILENO) != 0;
  o.progress = [tty](size_t done, size_t total, const std::string& tensor, const char* type) {
    // On a terminal one line is rewritten; otherwise every tensor gets a line (a log of the work).
    std::fprintf(stderr, "%s[%zu/%zu] %s (%s)%s", tty ? "\r\033[K" : "", done, total, tensor.c_str(), type,
                 tty && done < total ? "" : "\n");
    std::fflush(stderr);
  };
  o.note = [](const std::string& s) { std::fprintf(stderr, "note: %s\n", s.c_str()); };
  if (absl::Status s = CheckOutput(o); !s.ok()) return s;
  if (absl::Status s = CheckInput(o); !s.ok()) return s;
  if (absl::Status s = checkpoints::ConvertHfToGguf(o); !s.ok()) return s;
  std::error_code ec;
  const uintmax_t size = std::filesystem::file_size(o.out, ec);
  std::fprintf(stderr, "wrote %s (%s, %.1f MiB)\n", o.out.c_str(), quant::QuantSchemeName(o.quant),
               ec ? 0.0 : static_cast<double>(size) / (1024.0 * 1024.0));
  return 0;
}

}  // namespace doppler::cli
