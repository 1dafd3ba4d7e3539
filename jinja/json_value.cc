#include "jinja/json_value.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace doppler::jinja {
namespace {

using Json = nlohmann::ordered_json;

Value Convert(const Json& j) {
  switch (j.type()) {
    case Json::value_t::null: return Value::None();
    case Json::value_t::boolean: return Value(j.get<bool>());
    case Json::value_t::number_integer: return Value(j.get<int64_t>());
    case Json::value_t::number_unsigned: {
      const uint64_t u = j.get<uint64_t>();
      if (u > static_cast<uint64_t>(INT64_MAX)) return Value(static_cast<double>(u));
      return Value(static_cast<int64_t>(u));
    }
    case Json::value_t::number_float: return Value(j.get<double>());
    case Json::value_t::string: return Value(j.get<std::string>());
    case Json::value_t::array: {
      List items;
      for (const Json& e : j) items.push_back(Convert(e));
      return Value::MakeList(std::move(items));
    }
    case Json::value_t::object: {
      Dict items;
      for (const auto& [k, e] : j.items()) items.emplace_back(k, Convert(e));
      return Value::MakeDict(std::move(items));
    }
    default: return Value::None();
  }
}

}  // namespace

absl::StatusOr<Value> ValueFromJson(const std::string& json, int max_depth) {
  // Reject deep nesting before parsing: the parser and the conversion recurse.
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < json.size(); ++i) {
    const char c = json[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) return absl::InvalidArgumentError(absl::StrCat("JSON nested deeper than ", max_depth));
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  Json j = Json::parse(json, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return absl::InvalidArgumentError("not valid JSON");
  return Convert(j);
}

}  // namespace doppler::jinja
