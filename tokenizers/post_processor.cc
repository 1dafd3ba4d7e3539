#include "tokenizers/post_processor.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "tokenizers/json_fields.h"

namespace doppler::tokenizers {
namespace {

// TemplateProcessing: "single" is a list of {"SpecialToken": {"id": NAME}} and {"Sequence":
// {"id": "A"}}; "special_tokens" maps each NAME to its "ids".
absl::Status AddTemplate(const nlohmann::json& spec, const std::string& where, SpecialTokenTemplate& out) {
  const auto single = spec.find("single");
  if (single == spec.end() || !single->is_array()) return JsonError(where, "\"single\" must be an array");
  const auto specials = spec.find("special_tokens");
  bool seen_sequence = false;
  for (size_t i = 0; i < single->size(); ++i) {
    const std::string item_where = absl::StrCat(where, ".single[", i, "]");
    const nlohmann::json& item = (*single)[i];
    if (item.contains("Sequence")) {
      absl::StatusOr<std::string> name = StringField(item.at("Sequence"), "id", item_where);
      if (!name.ok()) return name.status();
      if (*name != "A" || seen_sequence) return JsonError(item_where, "a single-sequence template holds $A once");
      seen_sequence = true;
      continue;
    }
    if (!item.contains("SpecialToken")) return JsonError(item_where, "expected SpecialToken or Sequence");
    absl::StatusOr<std::string> name = StringField(item.at("SpecialToken"), "id", item_where);
    if (!name.ok()) return name.status();
    if (specials == spec.end() || !specials->is_object() || !specials->contains(*name)) {
      return JsonError(item_where, absl::StrCat("\"", *name, "\" is not in special_tokens"));
    }
    const nlohmann::json& entry = specials->at(*name);
    const std::string entry_where = absl::StrCat(where, ".special_tokens[\"", *name, "\"]");
    if (!entry.contains("ids") || !entry.at("ids").is_array()) {
      return JsonError(entry_where, "\"ids\" must be an array");
    }
    for (const nlohmann::json& value : entry.at("ids")) {
      absl::StatusOr<int32_t> id = IdValue(value, entry_where);
      if (!id.ok()) return id.status();
      (seen_sequence ? out.suffix : out.prefix).push_back(*id);
    }
  }
  if (!seen_sequence) return JsonError(where, "\"single\" has no $A");
  return absl::OkStatus();
}

absl::Status Add(const nlohmann::json& spec, const std::string& where, SpecialTokenTemplate& out) {
  if (spec.is_null()) return absl::OkStatus();
  absl::StatusOr<std::string> type = StringField(spec, "type", where);
  if (!type.ok()) return type.status();
  if (*type == "ByteLevel") return absl::OkStatus();  // it only adjusts offsets
  if (*type == "TemplateProcessing") return AddTemplate(spec, where, out);
  if (*type == "Sequence") {
    const auto it = spec.find("processors");
    if (it == spec.end() || !it->is_array()) return JsonError(where, "Sequence needs a \"processors\" array");
    for (size_t i = 0; i < it->size(); ++i) {
      if (absl::Status status = Add((*it)[i], absl::StrCat(where, ".processors[", i, "]"), out); !status.ok()) {
        return status;
      }
    }
    return absl::OkStatus();
  }
  return JsonError(where, absl::StrCat("unsupported post_processor type \"", *type, "\""));
}

}  // namespace

absl::StatusOr<SpecialTokenTemplate> ParsePostProcessor(const nlohmann::json& spec, const std::string& where) {
  SpecialTokenTemplate out;
  if (absl::Status status = Add(spec, where, out); !status.ok()) return status;
  return out;
}

}  // namespace doppler::tokenizers
