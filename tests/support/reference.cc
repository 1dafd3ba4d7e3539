#include "tests/support/reference.h"

#include <algorithm>
#include <cmath>
#include <fstream>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "tests/support/fixtures.h"

namespace doppler::test {

absl::StatusOr<HfReference> LoadHfReference(const std::string& name) {
  HfReference r;
  r.dir = FixturesDir() / "hf" / name;
  std::ifstream in(r.dir / "reference.json");
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", (r.dir / "reference.json").string()));
  nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return absl::InvalidArgumentError("reference.json does not parse");
  r.input_ids = j["input_ids"].get<std::vector<int32_t>>();
  r.greedy_tokens = j["greedy_tokens"].get<std::vector<int32_t>>();
  r.next_token_after_greedy = j["next_token_after_greedy"].get<int32_t>();
  absl::StatusOr<NpyArray> prefill = ReadNpy(r.dir / "prefill_logits.npy");
  if (!prefill.ok()) return prefill.status();
  absl::StatusOr<NpyArray> decode = ReadNpy(r.dir / "decode_logits.npy");
  if (!decode.ok()) return decode.status();
  r.prefill_logits = *std::move(prefill);
  r.decode_logits = *std::move(decode);
  return r;
}

absl::StatusOr<std::vector<BatchReferencePrompt>> LoadBatchReference(const std::string& name) {
  const std::filesystem::path dir = FixturesDir() / "hf" / name;
  std::ifstream in(dir / "batch_reference.json");
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", (dir / "batch_reference.json").string()));
  nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.contains("prompts")) return absl::InvalidArgumentError("batch_reference.json does not parse");
  std::vector<BatchReferencePrompt> out;
  for (const nlohmann::json& p : j["prompts"]) {
    BatchReferencePrompt r;
    r.input_ids = p["input_ids"].get<std::vector<int32_t>>();
    r.greedy_tokens = p["greedy_tokens"].get<std::vector<int32_t>>();
    absl::StatusOr<NpyArray> logits = ReadNpy(dir / p["logits_file"].get<std::string>());
    if (!logits.ok()) return logits.status();
    r.logits = *std::move(logits);
    out.push_back(std::move(r));
  }
  return out;
}

double WorstRowError(const std::vector<float>& actual, const float* ref, int64_t rows, int64_t cols) {
  double worst = 0.0;
  for (int64_t r = 0; r < rows; ++r) {
    double diff = 0.0, scale = 0.0;
    for (int64_t c = 0; c < cols; ++c) {
      const size_t i = static_cast<size_t>(r * cols + c);
      diff = std::max(diff, std::abs(static_cast<double>(actual[i]) - ref[i]));
      scale = std::max(scale, std::abs(static_cast<double>(ref[i])));
    }
    worst = std::max(worst, diff / scale);
  }
  return worst;
}

int32_t ArgmaxRow(const float* row, int64_t cols) {
  return static_cast<int32_t>(std::max_element(row, row + cols) - row);
}

}  // namespace doppler::test
