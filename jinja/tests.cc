// jinja2's tests: `value is name(args)`.
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "jinja/builtins.h"

namespace doppler::jinja {
namespace {

absl::StatusOr<const Value*> Arg(const Args& a, const std::string& test) {
  const Value* v = a.Get(0, "other");
  if (v == nullptr) return absl::InvalidArgumentError(absl::StrCat("test '", test, "' needs an argument"));
  return v;
}

bool HasLetters(const std::string& s, bool upper) {
  bool any = false;
  for (char c : s) {
    if (c >= 'a' && c <= 'z') {
      if (upper) return false;
      any = true;
    } else if (c >= 'A' && c <= 'Z') {
      if (!upper) return false;
      any = true;
    }
  }
  return any;
}

}  // namespace

absl::StatusOr<bool> ApplyTest(const std::string& name, const Value& v, const Args& a) {
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "boolean") return v.is_bool();
  if (name == "true") return v.is_bool() && v.as_bool();
  if (name == "false") return v.is_bool() && !v.as_bool();
  if (name == "integer") return v.is_int();
  if (name == "float") return v.is_float();
  if (name == "number") return v.is_number();
  if (name == "string") return v.is_string();
  if (name == "mapping") return v.is_dict();
  if (name == "iterable") return v.is_string() || v.is_list() || v.is_dict() || v.is_undefined();
  if (name == "sequence") return v.is_string() || v.is_list() || v.is_dict();
  if (name == "callable") return v.is_callable();
  if (name == "escaped") return false;
  if (name == "lower" || name == "upper") return v.is_string() && HasLetters(v.as_string(), name == "upper");
  if (name == "odd" || name == "even" || name == "divisibleby") {
    if (!v.is_int() && !v.is_bool()) return absl::InvalidArgumentError(absl::StrCat("test '", name, "' needs an integer"));
    int64_t d = 2;
    if (name == "divisibleby") {
      absl::StatusOr<const Value*> n = Arg(a, name);
      if (!n.ok()) return n.status();
      if (!(*n)->is_int() || (*n)->as_int() == 0) return absl::InvalidArgumentError("divisibleby needs a non-zero integer");
      d = (*n)->as_int();
    }
    const int64_t r = d == -1 ? 0 : v.as_int() % d;
    return name == "odd" ? r != 0 : r == 0;
  }
  if (name == "sameas") {
    absl::StatusOr<const Value*> o = Arg(a, name);
    if (!o.ok()) return o.status();
    if (v.kind() != (*o)->kind()) return false;
    if (v.is_none() || v.is_bool()) return Equal(v, **o);
    return Equal(v, **o) && (v.is_namespace() || v.is_callable());
  }
  if (name == "in") {
    absl::StatusOr<const Value*> o = Arg(a, name);
    if (!o.ok()) return o.status();
    if ((*o)->is_string() && v.is_string()) return (*o)->as_string().find(v.as_string()) != std::string::npos;
    if ((*o)->is_dict()) return v.is_string() && (*o)->Find(v.as_string()) != nullptr;
    absl::StatusOr<List> items = Iterate(**o);
    if (!items.ok()) return items.status();
    for (const Value& e : *items) {
      if (Equal(e, v)) return true;
    }
    return false;
  }
  struct Cmp {
    const char* names[3];
    int want;  // bit 0: less, bit 1: equal, bit 2: greater
  };
  static const Cmp kCmps[] = {{{"eq", "equalto", "=="}, 2}, {{"ne", "!=", "!="}, 5}, {{"lt", "lessthan", "<"}, 1},
                              {{"le", "<=", "<="}, 3},      {{"gt", "greaterthan", ">"}, 4}, {{"ge", ">=", ">="}, 6}};
  for (const Cmp& c : kCmps) {
    if (name != c.names[0] && name != c.names[1] && name != c.names[2]) continue;
    absl::StatusOr<const Value*> o = Arg(a, name);
    if (!o.ok()) return o.status();
    if (c.want == 2 || c.want == 5) return Equal(v, **o) == (c.want == 2);
    absl::StatusOr<int> order = Order(v, **o);
    if (!order.ok()) return order.status();
    return ((c.want >> (*order + 1)) & 1) != 0;
  }
  return absl::InvalidArgumentError(absl::StrCat("no test named '", name, "'"));
}

}  // namespace doppler::jinja
