// Python's binary operators and comparisons on template values.
#include <algorithm>
#include <cmath>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "jinja/builtins.h"

namespace doppler::jinja {
namespace {

absl::Status TypeError(absl::string_view what) { return absl::InvalidArgumentError(what); }
absl::Status TooLarge(absl::string_view what) { return absl::ResourceExhaustedError(what); }
absl::Status UndefinedError(const Value& v) {
  return absl::InvalidArgumentError(v.undefined_name().empty() ? "a value is undefined" : v.undefined_name());
}

}  // namespace

absl::StatusOr<bool> CompareOp(const std::string& op, const Value& a, const Value& b) {
  if (op == "==") return Equal(a, b);
  if (op == "!=") return !Equal(a, b);
  if (op == "in" || op == "not in") {
    bool found = false;
    if (b.is_string()) {
      if (!a.is_string()) return TypeError("'in <string>' requires string as left operand");
      found = b.as_string().find(a.as_string()) != std::string::npos;
    } else if (b.is_dict()) {
      found = a.is_string() && b.Find(a.as_string()) != nullptr;
    } else if (b.is_list()) {
      found = std::any_of(b.as_list().begin(), b.as_list().end(), [&](const Value& x) { return Equal(x, a); });
    } else if (!b.is_undefined()) {
      return TypeError(absl::StrCat("argument of type '", TypeName(b), "' is not iterable"));
    }
    return op == "in" ? found : !found;
  }
  if (a.is_undefined()) return UndefinedError(a);
  if (b.is_undefined()) return UndefinedError(b);
  absl::StatusOr<int> o = Order(a, b);
  if (!o.ok()) return o.status();
  if (op == "<") return *o < 0;
  if (op == ">") return *o > 0;
  if (op == "<=") return *o <= 0;
  return *o >= 0;
}

absl::StatusOr<Value> BinaryOp(const std::string& op, const Value& a, const Value& b, size_t max_size) {
  if (op == "~") return Value(ToStr(a) + ToStr(b));
  if (a.is_undefined()) return UndefinedError(a);
  if (b.is_undefined()) return UndefinedError(b);
  const auto type_error = [&] {
    return TypeError(absl::StrCat("unsupported operand type(s) for ", op, ": '", TypeName(a), "' and '", TypeName(b), "'"));
  };
  if (op == "+") {
    if (a.is_string() && b.is_string()) return Value(a.as_string() + b.as_string());
    if (a.is_list() && b.is_list() && a.is_tuple() == b.is_tuple()) {
      if (a.as_list().size() + b.as_list().size() > max_size) return TooLarge("list too long");
      List items = a.as_list();
      items.insert(items.end(), b.as_list().begin(), b.as_list().end());
      return Value::MakeList(std::move(items), a.is_tuple());
    }
  }
  if (op == "*" && (a.is_string() || a.is_list() || b.is_string() || b.is_list())) {
    const Value& seq = a.is_string() || a.is_list() ? a : b;
    const Value& count = a.is_string() || a.is_list() ? b : a;
    if (!count.is_int() && !count.is_bool()) return type_error();
    const int64_t n = std::max<int64_t>(count.as_int(), 0);
    const size_t unit = seq.is_string() ? seq.as_string().size() : seq.as_list().size();
    if (unit != 0 && static_cast<uint64_t>(n) > max_size / unit) return TooLarge("a repeated string or list too long");
    if (seq.is_string()) {
      std::string out;
      for (int64_t i = 0; i < n; ++i) out += seq.as_string();
      return Value(std::move(out));
    }
    List items;
    for (int64_t i = 0; i < n; ++i) items.insert(items.end(), seq.as_list().begin(), seq.as_list().end());
    return Value::MakeList(std::move(items), seq.is_tuple());
  }
  if (a.is_string() && op == "%") {  // a tuple gives the arguments, anything else is the one argument
    absl::StatusOr<std::string> s = PercentFormat(a.as_string(), b.is_tuple() ? b.as_list() : List{b}, max_size);
    if (!s.ok()) return s.status();
    return Value(*std::move(s));
  }
  if (!a.is_number() || !b.is_number()) return type_error();
  if (op == "/") {
    if (b.as_double() == 0) return TypeError("division by zero");
    return Value(a.as_double() / b.as_double());
  }
  const bool floats = a.is_float() || b.is_float();
  if (op == "**") {
    if (!floats && b.as_int() >= 0) {
      int64_t r = 1;
      for (int64_t i = 0; i < b.as_int(); ++i) {
        if (__builtin_mul_overflow(r, a.as_int(), &r)) return TypeError("integer overflow");
        if (r == 0 || r == 1) break;
      }
      if (r == 1 && a.as_int() == -1 && b.as_int() % 2 == 1) r = -1;
      return Value(r);
    }
    return Value(std::pow(a.as_double(), b.as_double()));
  }
  if (floats) {
    const double x = a.as_double();
    const double y = b.as_double();
    if (op == "+") return Value(x + y);
    if (op == "-") return Value(x - y);
    if (op == "*") return Value(x * y);
    if (y == 0) return TypeError("float division by zero");
    if (op == "//") return Value(std::floor(x / y));
    const double m = std::fmod(x, y);
    return Value(m != 0 && ((m < 0) != (y < 0)) ? m + y : m);
  }
  const int64_t x = a.as_int();
  const int64_t y = b.as_int();
  int64_t r;
  if (op == "+") {
    if (__builtin_add_overflow(x, y, &r)) return TypeError("integer overflow");
    return Value(r);
  }
  if (op == "-") {
    if (__builtin_sub_overflow(x, y, &r)) return TypeError("integer overflow");
    return Value(r);
  }
  if (op == "*") {
    if (__builtin_mul_overflow(x, y, &r)) return TypeError("integer overflow");
    return Value(r);
  }
  if (y == 0) return TypeError("integer division or modulo by zero");
  if (x == INT64_MIN && y == -1) return TypeError("integer overflow");
  int64_t q = x / y;
  int64_t m = x % y;
  if (m != 0 && ((m < 0) != (y < 0))) {
    --q;
    m += y;
  }
  return Value(op == "//" ? q : m);
}

}  // namespace doppler::jinja
