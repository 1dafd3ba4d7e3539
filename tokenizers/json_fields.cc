#include "tokenizers/json_fields.h"

#include "absl/strings/str_cat.h"

namespace doppler::tokenizers {

absl::Status JsonError(const std::string& where, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(where, ": ", what));
}

absl::StatusOr<std::string> StringField(const nlohmann::json& obj, const char* key, const std::string& where) {
  if (!obj.is_object()) return JsonError(where, "expected an object");
  auto it = obj.find(key);
  if (it == obj.end() || !it->is_string()) return JsonError(where, absl::StrCat("\"", key, "\" must be a string"));
  return it->get<std::string>();
}

absl::StatusOr<bool> BoolField(const nlohmann::json& obj, const char* key, bool fallback, const std::string& where) {
  if (!obj.is_object()) return JsonError(where, "expected an object");
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) return JsonError(where, absl::StrCat("\"", key, "\" must be true or false"));
  return it->get<bool>();
}

absl::StatusOr<int32_t> IdValue(const nlohmann::json& value, const std::string& where) {
  if (!value.is_number_integer() || value.get<int64_t>() < 0 || value.get<int64_t>() > kMaxTokenId) {
    return JsonError(where, absl::StrCat("a token id must be an integer in [0, ", kMaxTokenId, "], not ",
                                         value.is_number_integer() ? value.dump() : value.type_name()));
  }
  return value.get<int32_t>();
}

absl::StatusOr<int32_t> IdField(const nlohmann::json& obj, const char* key, const std::string& where) {
  if (!obj.is_object() || !obj.contains(key)) return JsonError(where, absl::StrCat("missing \"", key, "\""));
  return IdValue(obj.at(key), absl::StrCat(where, ".", key));
}

absl::StatusOr<Regex> PatternField(const nlohmann::json& obj, const std::string& where) {
  const std::string pattern_where = absl::StrCat(where, ".pattern");
  if (!obj.is_object() || !obj.contains("pattern")) return JsonError(where, "missing \"pattern\"");
  const nlohmann::json& pattern = obj.at("pattern");
  const bool literal = pattern.contains("String");
  if (!literal && !pattern.contains("Regex")) {
    return JsonError(pattern_where, "expected {\"String\": ...} or {\"Regex\": ...}");
  }
  absl::StatusOr<std::string> text = StringField(pattern, literal ? "String" : "Regex", pattern_where);
  if (!text.ok()) return text.status();
  absl::StatusOr<Regex> regex = literal ? Regex::Literal(*text) : Regex::Compile(*text);
  if (!regex.ok()) return JsonError(pattern_where, std::string(regex.status().message()));
  return regex;
}

}  // namespace doppler::tokenizers
