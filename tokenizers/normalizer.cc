#include "tokenizers/normalizer.h"

#include "absl/strings/str_cat.h"
#include "tokenizers/json_fields.h"
#include "tokenizers/unicode_nfc.h"

namespace doppler::tokenizers {

absl::StatusOr<Normalizer> Normalizer::FromJson(const nlohmann::json& spec, const std::string& where) {
  Normalizer normalizer;
  if (absl::Status status = normalizer.Add(spec, where); !status.ok()) return status;
  return normalizer;
}

absl::Status Normalizer::Add(const nlohmann::json& spec, const std::string& where) {
  if (spec.is_null()) return absl::OkStatus();
  absl::StatusOr<std::string> type = StringField(spec, "type", where);
  if (!type.ok()) return type.status();
  if (*type == "Sequence") {
    const auto it = spec.find("normalizers");
    if (it == spec.end() || !it->is_array()) return JsonError(where, "Sequence needs a \"normalizers\" array");
    for (size_t i = 0; i < it->size(); ++i) {
      if (absl::Status status = Add((*it)[i], absl::StrCat(where, ".normalizers[", i, "]")); !status.ok()) {
        return status;
      }
    }
    return absl::OkStatus();
  }
  if (*type == "NFC") {
    steps_.push_back({Step::Kind::kNfc, {}, std::nullopt});
    return absl::OkStatus();
  }
  if (*type == "Prepend") {
    absl::StatusOr<std::string> prepend = StringField(spec, "prepend", where);
    if (!prepend.ok()) return prepend.status();
    steps_.push_back({Step::Kind::kPrepend, *std::move(prepend), std::nullopt});
    return absl::OkStatus();
  }
  if (*type == "Replace") {
    absl::StatusOr<Regex> pattern = PatternField(spec, where);
    if (!pattern.ok()) return pattern.status();
    absl::StatusOr<std::string> content = StringField(spec, "content", where);
    if (!content.ok()) return content.status();
    steps_.push_back({Step::Kind::kReplace, *std::move(content), *std::move(pattern)});
    return absl::OkStatus();
  }
  return JsonError(where, absl::StrCat("unsupported normalizer type \"", *type, "\""));
}

absl::StatusOr<std::string> Normalizer::Apply(std::string_view text) const {
  std::string current(text);
  for (const Step& step : steps_) {
    switch (step.kind) {
      case Step::Kind::kNfc:
        current = NfcNormalize(current);
        break;
      case Step::Kind::kPrepend:
        if (!current.empty()) current.insert(0, step.text);  // HF leaves empty text empty
        break;
      case Step::Kind::kReplace: {
        absl::StatusOr<std::vector<std::pair<size_t, size_t>>> matches = step.pattern->FindAll(current);
        if (!matches.ok()) return matches.status();
        std::string replaced;
        size_t done = 0;
        for (auto [begin, end] : *matches) {
          replaced.append(current, done, begin - done);
          replaced += step.text;
          done = end;
        }
        replaced.append(current, done);
        current = std::move(replaced);
        break;
      }
    }
  }
  return current;
}

}  // namespace doppler::tokenizers
