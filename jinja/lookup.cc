// Lookups shared by the interpreter and the builtins: subscripts, attribute paths, len(),
// iteration and ordering, as jinja2 and Python define them.
#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "jinja/builtins.h"

namespace doppler::jinja {

const Value* Args::Get(size_t i, const char* name) const {
  if (i < pos.size()) return &pos[i];
  for (const auto& [k, v] : kw) {
    if (k == name) return &v;
  }
  return nullptr;
}

absl::StatusOr<int> Order(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (!a.is_float() && !b.is_float()) return a.as_int() < b.as_int() ? -1 : a.as_int() > b.as_int() ? 1 : 0;
    return a.as_double() < b.as_double() ? -1 : a.as_double() > b.as_double() ? 1 : 0;
  }
  if (a.is_string() && b.is_string()) {
    const int c = a.as_string().compare(b.as_string());
    return c < 0 ? -1 : c > 0 ? 1 : 0;
  }
  if (a.is_list() && b.is_list() && a.is_tuple() == b.is_tuple()) {
    const List& x = a.as_list();
    const List& y = b.as_list();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (Equal(x[i], y[i])) continue;
      return Order(x[i], y[i]);
    }
    return x.size() < y.size() ? -1 : x.size() > y.size() ? 1 : 0;
  }
  return absl::InvalidArgumentError(absl::StrCat("'<' not supported between instances of '", TypeName(a), "' and '",
                                                 TypeName(b), "'"));
}

Value GetItem(const Value& obj, const Value& key) {
  if (obj.is_dict() && key.is_string()) {
    const Value* v = obj.Find(key.as_string());
    if (v != nullptr) return *v;
    return Value::Undefined(absl::StrCat("'dict object' has no attribute '", key.as_string(), "'"));
  }
  if (obj.is_namespace() && key.is_string()) {
    for (const auto& [k, v] : obj.as_namespace()->attrs) {
      if (k == key.as_string()) return v;
    }
    return Value::Undefined(absl::StrCat("'Namespace object' has no attribute '", key.as_string(), "'"));
  }
  if ((obj.is_list() || obj.is_string()) && (key.is_int() || key.is_bool())) {
    int64_t i = key.as_int();
    if (obj.is_list()) {
      const int64_t n = static_cast<int64_t>(obj.as_list().size());
      if (i < 0) i += n;
      if (i >= 0 && i < n) return obj.as_list()[static_cast<size_t>(i)];
    } else {
      const std::vector<std::string> cps = CodePoints(obj.as_string());
      const int64_t n = static_cast<int64_t>(cps.size());
      if (i < 0) i += n;
      if (i >= 0 && i < n) return Value(cps[static_cast<size_t>(i)]);
    }
    return Value::Undefined(absl::StrCat(TypeName(obj), " index out of range"));
  }
  return Value::Undefined(absl::StrCat("'", TypeName(obj), " object' has no attribute '", ToStr(key), "'"));
}

Value GetPath(const Value& obj, const std::string& path) {
  Value v = obj;
  for (absl::string_view part : absl::StrSplit(path, '.')) {
    int64_t index;
    if (absl::SimpleAtoi(part, &index) && v.is_list()) {
      v = GetItem(v, Value(index));
    } else {
      v = GetItem(v, Value(std::string(part)));
    }
    if (v.is_undefined()) return v;
  }
  return v;
}

absl::StatusOr<int64_t> Length(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined: return 0;
    case Value::Kind::kString: return static_cast<int64_t>(CodePoints(v.as_string()).size());
    case Value::Kind::kList: return static_cast<int64_t>(v.as_list().size());
    case Value::Kind::kDict: return static_cast<int64_t>(v.as_dict().size());
    default: return absl::InvalidArgumentError(absl::StrCat("object of type '", TypeName(v), "' has no len()"));
  }
}

absl::StatusOr<List> Iterate(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined: return List{};
    case Value::Kind::kList: return v.as_list();
    case Value::Kind::kDict: {
      List keys;
      for (const auto& [k, e] : v.as_dict()) keys.emplace_back(k);
      return keys;
    }
    case Value::Kind::kString: {
      List chars;
      for (std::string& c : CodePoints(v.as_string())) chars.emplace_back(std::move(c));
      return chars;
    }
    default: return absl::InvalidArgumentError(absl::StrCat("'", TypeName(v), "' object is not iterable"));
  }
}

}  // namespace doppler::jinja
