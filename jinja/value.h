// The values a template computes with, with Python's semantics (jinja2 hands templates Python
// objects): none, booleans, integers, floats, strings, lists (and tuples), dicts that keep their
// insertion order, jinja2's Undefined, namespace() objects and callables (macros, builtins).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace doppler::jinja {

class Value;
using List = std::vector<Value>;
using Dict = std::vector<std::pair<std::string, Value>>;  // insertion order, unique keys

// Objects whose identity matters (namespace(), macros, caller) live in the render's arena; a
// Value holds a plain pointer to them, so no value can keep another alive in a cycle.
struct Namespace;
struct Callable;

class Value {
 public:
  enum class Kind { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kNamespace, kCallable };

  Value() = default;  // undefined
  static Value Undefined(std::string name) { Value v; v.str_ = std::make_shared<std::string>(std::move(name)); return v; }
  static Value None() { Value v; v.kind_ = Kind::kNone; return v; }
  Value(bool b) : kind_(Kind::kBool), int_(b) {}
  Value(int64_t i) : kind_(Kind::kInt), int_(i) {}
  Value(int i) : kind_(Kind::kInt), int_(i) {}
  Value(double d) : kind_(Kind::kFloat), float_(d) {}
  Value(std::string s) : kind_(Kind::kString), str_(std::make_shared<std::string>(std::move(s))) {}
  Value(const char* s) : Value(std::string(s)) {}
  static Value MakeList(List items, bool tuple = false);
  static Value MakeDict(Dict items);
  Value(Namespace* ns) : kind_(Kind::kNamespace), ns_(ns) {}
  Value(Callable* c) : kind_(Kind::kCallable), callable_(c) {}

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_bool() const { return kind_ == Kind::kBool; }
  bool is_int() const { return kind_ == Kind::kInt; }
  bool is_float() const { return kind_ == Kind::kFloat; }
  bool is_number() const { return kind_ == Kind::kInt || kind_ == Kind::kFloat || kind_ == Kind::kBool; }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_list() const { return kind_ == Kind::kList; }
  bool is_tuple() const { return kind_ == Kind::kList && tuple_; }
  bool is_dict() const { return kind_ == Kind::kDict; }
  bool is_namespace() const { return kind_ == Kind::kNamespace; }
  bool is_callable() const { return kind_ == Kind::kCallable; }

  bool as_bool() const { return int_ != 0; }
  int64_t as_int() const { return int_; }  // kInt and kBool
  double as_double() const { return kind_ == Kind::kFloat ? float_ : static_cast<double>(int_); }
  const std::string& as_string() const { return *str_; }
  const List& as_list() const { return *list_; }
  const Dict& as_dict() const { return *dict_; }
  Namespace* as_namespace() const { return ns_; }
  Callable* as_callable() const { return callable_; }
  // The name an undefined value was looked up by ("" when none).
  const std::string& undefined_name() const;
  // How many lists/dicts deep this value nests (0 for a scalar); bounded by the interpreter.
  int depth() const { return depth_; }

  // Python truthiness (an undefined value is false).
  bool Truthy() const;
  // A dict's value for key, or nullptr.
  const Value* Find(const std::string& key) const;

 private:
  Kind kind_ = Kind::kUndefined;
  bool tuple_ = false;
  int depth_ = 0;
  int64_t int_ = 0;
  double float_ = 0;
  std::shared_ptr<const std::string> str_;
  std::shared_ptr<const List> list_;
  std::shared_ptr<const Dict> dict_;
  Namespace* ns_ = nullptr;
  Callable* callable_ = nullptr;
};

struct Namespace {
  Dict attrs;
};

// Python's == (1 == 1.0 == True; lists and dicts element-wise; undefined equals only undefined).
bool Equal(const Value& a, const Value& b);
// Python's str(): what {{ value }} prints (None, True, 1.0, ['a', 1], {'k': 'v'}).
std::string ToStr(const Value& v);
// Python's repr(): strings quoted as Python quotes them.
std::string Repr(const Value& v);
// Python's repr of a float: the shortest text that reads back as the same double.
std::string FloatRepr(double d);
// The Python type name, for error messages ("str", "int", "list", "dict", "NoneType", ...).
std::string TypeName(const Value& v);

// Python's str of a sequence of code points: UTF-8 strings are sliced and measured in code
// points, not bytes.
std::vector<std::string> CodePoints(const std::string& s);

}  // namespace doppler::jinja
