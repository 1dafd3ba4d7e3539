// doppler logits: raw float32 logits of a prompt (every position) and of decode steps.
#include <cstdio>
#include <fstream>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "tools/cli_engine.h"
#include "tools/commands.h"

namespace doppler::cli {
namespace {

CommandSpec Spec() {
  CommandSpec spec{"logits",
                   "Write little-endian float32 logits [rows, vocab] to a file: one row per prompt position,\n"
                   "then one row per decode step (each --decode-ids token fed after the previous ones).",
                   EngineOptionSpecs()};
  spec.options.push_back({"ids", "", "IDS", "prompt token ids, comma-separated", ""});
  spec.options.push_back({"decode-ids", "", "IDS", "tokens fed one at a time after the prompt", ""});
  spec.options.push_back({"out", "o", "FILE", "output file", ""});
  return spec;
}

}  // namespace

absl::StatusOr<int> LogitsCommand(const std::vector<std::string>& argv) {
  const CommandSpec spec = Spec();
  absl::StatusOr<std::optional<ParsedArgs>> parsed = ParseOrHelp(spec, argv);
  if (!parsed.ok()) return parsed.status();
  if (!parsed->has_value()) return 0;
  const ParsedArgs* args = &**parsed;
  if (!args->Has("ids")) return UsageError("--ids IDS is required");
  if (!args->Has("out")) return UsageError("--out FILE is required");
  absl::StatusOr<std::vector<int32_t>> ids = args->GetIntList("ids");
  if (!ids.ok()) return ids.status();
  if (ids->empty()) return absl::InvalidArgumentError("--ids is empty");
  absl::StatusOr<std::vector<int32_t>> decode_ids = args->GetIntList("decode-ids");
  if (!decode_ids.ok()) return decode_ids.status();
  absl::StatusOr<runtime::EngineOptions> options = EngineOptionsFromArgs(*args);
  if (!options.ok()) return options.status();
  options->gpu_loop = 1;  // no decode loop here: logits are read after every step
  absl::StatusOr<std::unique_ptr<runtime::Engine>> engine = runtime::Engine::Create(*options);
  if (!engine.ok()) return engine.status();

  std::ofstream out(args->Get("out"), std::ios::binary);
  if (!out) return absl::PermissionDeniedError(absl::StrCat("cannot write ", args->Get("out")));
  absl::StatusOr<std::vector<float>> logits = (*engine)->PrefillLogits(*ids);
  if (!logits.ok()) return logits.status();
  out.write(reinterpret_cast<const char*>(logits->data()), static_cast<std::streamsize>(logits->size() * sizeof(float)));
  for (int32_t id : *decode_ids) {
    absl::StatusOr<std::vector<float>> row = (*engine)->DecodeLogits(id);
    if (!row.ok()) return row.status();
    out.write(reinterpret_cast<const char*>(row->data()), static_cast<std::streamsize>(row->size() * sizeof(float)));
  }
  out.close();
  if (!out) return absl::DataLossError(absl::StrCat("writing ", args->Get("out"), " failed"));
  std::fprintf(stderr, "wrote %zu rows x %d logits to %s\n", ids->size() + decode_ids->size(),
               (*engine)->config().vocab_size, args->Get("out").c_str());
  return 0;
}

}  // namespace doppler::cli
