// doppler convert: an HF checkpoint to a GGUF file (f16, q8_0, q6_k, q5_k_m, q4_k_m, q4_0 or iq4_xs), readable by doppler
// and by llama.cpp.
#include <unistd.h>

#include <cstdio>
#include <filesystem>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "models/gguf/hf_to_gguf.h"
#include "tools/cli_args.h"
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
          {"quant", "", "TYPE", "f16, q8_0, q6_k, q5_k_m, q4_k_m, q4_0 or iq4_xs (vectors such as norms stay f32)", "f16"},
          {"tokenizer", "", "FILE", "tokenizer to store: tokenizer.json or a llama2.c tokenizer.bin "
                                    "(default: MODEL/tokenizer.json if present)", ""},
          {"name", "", "NAME", "general.name (default: the model directory's name)", ""},
      }};
}

}  // namespace

absl::StatusOr<int> ConvertCommand(const std::vector<std::string>& argv) {
  const CommandSpec spec = Spec();
  absl::StatusOr<std::optional<ParsedArgs>> parsed = ParseOrHelp(spec, argv);
  if (!parsed.ok()) return parsed.status();
  if (!parsed->has_value()) return 0;
  const ParsedArgs& args = **parsed;
  if (!args.Has("model")) return absl::InvalidArgumentError("--model DIR is required");
  if (!args.Has("out")) return absl::InvalidArgumentError("--out FILE is required");
  absl::StatusOr<models::QuantScheme> quant = models::ParseQuantScheme(args.Get("quant"));
  if (!quant.ok()) return absl::InvalidArgumentError(absl::StrCat("--quant: ", quant.status().message()));
  models::HfToGgufOptions o;
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
  if (absl::Status s = models::ConvertHfToGguf(o); !s.ok()) return s;
  std::error_code ec;
  const uintmax_t size = std::filesystem::file_size(o.out, ec);
  std::fprintf(stderr, "wrote %s (%s, %.1f MiB)\n", o.out.c_str(), models::QuantSchemeName(o.quant),
               ec ? 0.0 : static_cast<double>(size) / (1024.0 * 1024.0));
  return 0;
}

}  // namespace doppler::cli
