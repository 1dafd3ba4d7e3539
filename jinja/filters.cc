// jinja2's filters: `value | name(args)`, with jinja2 3.1's meaning and transformers' tojson.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "jinja/builtins.h"

namespace doppler::jinja {
namespace {

absl::Status Bad(const std::string& filter, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat("filter '", filter, "': ", what));
}

bool Flag(const Args& a, size_t i, const char* name) {
  const Value* v = a.Get(i, name);
  return v != nullptr && v->Truthy();
}

// The value as jinja2's soft_str would print it.
std::string Text(const Value& v) { return ToStr(v); }

absl::StatusOr<Value> ToJsonFilter(const Value& v, const Args& a) {
  JsonFormat f;
  const Value* indent = a.Get(0, "indent");
  if (indent != nullptr && !indent->is_none()) {
    f.has_indent = true;
    f.item_separator = std::string(",");  // json.dumps with indent: no space after the comma
    if (indent->is_int()) {
      if (indent->as_int() < 0) return Bad("tojson", "indent must not be negative");
      if (static_cast<size_t>(indent->as_int()) > a.max_size) return absl::ResourceExhaustedError("tojson: indent too wide");
      f.indent.resize(static_cast<size_t>(indent->as_int()), ' ');
    } else if (indent->is_string()) {
      f.indent = indent->as_string();
    } else {
      return Bad("tojson", "indent must be an integer or a string");
    }
  }
  if (const Value* sep = a.Get(99, "separators"); sep != nullptr && !sep->is_none()) {
    if (!sep->is_list() || sep->as_list().size() != 2 || !sep->as_list()[0].is_string() || !sep->as_list()[1].is_string()) {
      return Bad("tojson", "separators must be a pair of strings");
    }
    f.item_separator = sep->as_list()[0].as_string();
    f.key_separator = sep->as_list()[1].as_string();
  }
  f.sort_keys = Flag(a, 99, "sort_keys");
  f.ensure_ascii = Flag(a, 99, "ensure_ascii");
  absl::StatusOr<std::string> s = ToJson(v, f, a.max_size);
  if (!s.ok()) return s.status();
  return Value(*std::move(s));
}

// select/reject/selectattr/rejectattr: keep the items whose (attribute's) test is `keep`.
absl::StatusOr<Value> Select(const Value& v, const Args& a, bool by_attr, bool keep) {
  absl::StatusOr<List> items = Iterate(v);
  if (!items.ok()) return items.status();
  size_t next = 0;
  std::string attr;
  if (by_attr) {
    if (a.pos.empty() || !a.pos[0].is_string()) return Bad("selectattr", "needs an attribute name");
    attr = a.pos[0].as_string();
    next = 1;
  }
  std::string test;
  Args test_args;
  test_args.max_size = a.max_size;
  if (next < a.pos.size()) {
    if (!a.pos[next].is_string()) return Bad("select", "the test must be named by a string");
    test = a.pos[next].as_string();
    test_args.pos.assign(a.pos.begin() + static_cast<ptrdiff_t>(next) + 1, a.pos.end());
  }
  List out;
  for (const Value& item : *items) {
    const Value subject = by_attr ? GetPath(item, attr) : item;
    bool pass;
    if (test.empty()) {
      pass = subject.Truthy();
    } else {
      absl::StatusOr<bool> r = ApplyTest(test, subject, test_args);
      if (!r.ok()) return r.status();
      pass = *r;
    }
    if (pass == keep) out.push_back(item);
  }
  return Value::MakeList(std::move(out));
}

absl::StatusOr<Value> Map(const Value& v, const Args& a) {
  absl::StatusOr<List> items = Iterate(v);
  if (!items.ok()) return items.status();
  List out;
  if (const Value* attr = a.Get(99, "attribute")) {
    const Value* fallback = a.Get(99, "default");
    for (const Value& item : *items) {
      Value x = GetPath(item, Text(*attr));
      out.push_back(x.is_undefined() && fallback != nullptr ? *fallback : x);
    }
    return Value::MakeList(std::move(out));
  }
  if (a.pos.empty() || !a.pos[0].is_string()) return Bad("map", "needs a filter name or attribute=");
  Args rest;
  rest.max_size = a.max_size;
  rest.pos.assign(a.pos.begin() + 1, a.pos.end());
  rest.kw = a.kw;
  for (const Value& item : *items) {
    absl::StatusOr<Value> x = ApplyFilter(a.pos[0].as_string(), item, rest);
    if (!x.ok()) return x.status();
    out.push_back(*std::move(x));
  }
  return Value::MakeList(std::move(out));
}

// Sort keys: the item or its attribute, lowercased strings unless case_sensitive.
Value SortKey(const Value& item, const std::string& attr, bool case_sensitive) {
  Value k = attr.empty() ? item : GetPath(item, attr);
  if (!case_sensitive && k.is_string()) return Value(absl::AsciiStrToLower(k.as_string()));
  return k;
}

absl::StatusOr<List> SortedBy(List items, const std::string& attr, bool case_sensitive, bool reverse) {
  absl::Status error;
  std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
    absl::StatusOr<int> o = Order(SortKey(x, attr, case_sensitive), SortKey(y, attr, case_sensitive));
    if (!o.ok()) {
      error = o.status();
      return false;
    }
    return reverse ? *o > 0 : *o < 0;
  });
  if (!error.ok()) return error;
  return items;
}

absl::StatusOr<Value> Indent(const Value& v, const Args& a) {
  const Value* width = a.Get(0, "width");
  std::string pad = "    ";
  if (width != nullptr) {
    if (width->is_string()) {
      pad = width->as_string();
    } else if (width->is_int() && width->as_int() >= 0) {
      if (static_cast<size_t>(width->as_int()) > a.max_size) return absl::ResourceExhaustedError("indent: width too wide");
      pad.assign(static_cast<size_t>(width->as_int()), ' ');
    } else {
      return Bad("indent", "width must be an integer or a string");
    }
  }
  const bool first = Flag(a, 1, "first");
  const bool blank = Flag(a, 2, "blank");
  absl::StatusOr<Value> lines_value = CallMethod(Value(Text(v) + "\n"), "splitlines", Args{});
  if (!lines_value.ok()) return lines_value.status();
  const List& lines = lines_value->as_list();
  std::string out;
  for (size_t i = 0; i < lines.size(); ++i) {
    const std::string& line = lines[i].as_string();
    if (i > 0) out += "\n";
    if ((i > 0 || first) && (blank || !line.empty())) out += pad;
    out += line;
    if (out.size() > a.max_size) return absl::ResourceExhaustedError("indent: result too long");
  }
  return Value(std::move(out));
}

absl::StatusOr<Value> ToInt(const Value& v, const Args& a) {
  const Value* fallback = a.Get(0, "default");
  const Value dflt = fallback != nullptr ? *fallback : Value(int64_t{0});
  if (v.is_int() || v.is_bool()) return Value(v.as_int());
  if (v.is_float()) {
    if (!std::isfinite(v.as_double()) || std::fabs(v.as_double()) > 9.2e18) return dflt;
    return Value(static_cast<int64_t>(v.as_double()));
  }
  if (v.is_string()) {
    const std::string s(absl::StripAsciiWhitespace(v.as_string()));
    int64_t i;
    if (absl::SimpleAtoi(s, &i)) return Value(i);
    double d;
    if (absl::SimpleAtod(s, &d) && std::isfinite(d) && std::fabs(d) < 9.2e18) return Value(static_cast<int64_t>(d));
  }
  return dflt;
}

absl::StatusOr<Value> Round(const Value& v, const Args& a) {
  if (!v.is_number()) return Bad("round", "needs a number");
  const Value* p = a.Get(0, "precision");
  const Value* m = a.Get(1, "method");
  const int64_t precision = p != nullptr && p->is_int() ? std::clamp<int64_t>(p->as_int(), -300, 300) : 0;
  const std::string method = m != nullptr && m->is_string() ? m->as_string() : "common";
  if ((v.is_int() || v.is_bool()) && precision >= 0) return Value(v.as_int());  // Python's round(int) is an int
  const double scale = std::pow(10.0, static_cast<double>(precision));
  const double x = v.as_double() * scale;
  double r;
  if (method == "common" && precision >= 0 && std::isfinite(v.as_double())) {
    // Python's round(): the exact binary value rounded in decimal, halves to even, as printf does.
    if (std::fabs(v.as_double()) >= 1e16 || precision > 20) return Value(v.as_double());  // nothing to round
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.*f", static_cast<int>(precision), v.as_double());
    return Value(std::strtod(buf, nullptr));
  } else if (method == "common") {
    r = std::nearbyint(x);
  } else if (method == "ceil") {
    r = std::ceil(x);
  } else if (method == "floor") {
    r = std::floor(x);
  } else {
    return Bad("round", "method must be common, ceil or floor");
  }
  return Value(r / scale);
}

absl::StatusOr<Value> MinMax(const Value& v, const Args& a, bool max) {
  absl::StatusOr<List> items = Iterate(v);
  if (!items.ok()) return items.status();
  if (items->empty()) return Value::Undefined("No aggregated item, sequence was empty.");
  const Value* attr = a.Get(99, "attribute");
  absl::StatusOr<List> sorted = SortedBy(*items, attr ? Text(*attr) : "", Flag(a, 0, "case_sensitive"), max);
  if (!sorted.ok()) return sorted.status();
  return sorted->front();
}

absl::StatusOr<Value> Sum(const Value& v, const Args& a) {
  absl::StatusOr<List> items = Iterate(v);
  if (!items.ok()) return items.status();
  const Value* attr = a.Get(0, "attribute");
  const Value* start = a.Get(1, "start");
  Value total = start != nullptr ? *start : Value(int64_t{0});
  for (const Value& item : *items) {
    const Value x = attr != nullptr && !attr->is_none() ? GetPath(item, Text(*attr)) : item;
    if (!x.is_number() || !total.is_number()) return Bad("sum", "needs numbers");
    if (x.is_float() || total.is_float()) {
      total = Value(total.as_double() + x.as_double());
    } else {
      int64_t r;
      if (__builtin_add_overflow(total.as_int(), x.as_int(), &r)) return Bad("sum", "integer overflow");
      total = Value(r);
    }
  }
  return total;
}

absl::StatusOr<Value> DictSort(const Value& v, const Args& a) {
  if (!v.is_dict()) return Bad("dictsort", "needs a dict");
  const bool case_sensitive = Flag(a, 0, "case_sensitive");
  const Value* by = a.Get(1, "by");
  const bool by_value = by != nullptr && by->is_string() && by->as_string() == "value";
  List pairs;
  for (const auto& [k, e] : v.as_dict()) pairs.push_back(Value::MakeList({Value(k), e}, true));
  absl::StatusOr<List> sorted = SortedBy(std::move(pairs), by_value ? "1" : "0", case_sensitive, Flag(a, 2, "reverse"));
  if (!sorted.ok()) return sorted.status();
  return Value::MakeList(*std::move(sorted));
}

std::string HtmlEscape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

}  // namespace

absl::StatusOr<Value> ApplyFilter(const std::string& name, const Value& v, const Args& a) {
  if (name == "tojson") return ToJsonFilter(v, a);
  if (name == "safe") return v;
  if (name == "string") return Value(Text(v));
  if (name == "trim") return CallMethod(Value(Text(v)), "strip", a);
  if (name == "upper" || name == "lower" || name == "capitalize" || name == "title") {
    return CallMethod(Value(Text(v)), name, Args{});
  }
  if (name == "replace") return CallMethod(Value(Text(v)), "replace", a);
  if (name == "length" || name == "count") {
    absl::StatusOr<int64_t> n = Length(v);
    if (!n.ok()) return n.status();
    return Value(*n);
  }
  if (name == "default" || name == "d") {
    const Value* fallback = a.Get(0, "default_value");
    const bool use = Flag(a, 1, "boolean") ? !v.Truthy() : v.is_undefined();
    if (!use) return v;
    return fallback != nullptr ? *fallback : Value(std::string());
  }
  if (name == "first" || name == "last") {
    absl::StatusOr<List> items = Iterate(v);
    if (!items.ok()) return items.status();
    if (items->empty()) return Value::Undefined(absl::StrCat("No ", name, " item, sequence was empty."));
    return name == "first" ? items->front() : items->back();
  }
  if (name == "list") {
    absl::StatusOr<List> items = Iterate(v);
    if (!items.ok()) return items.status();
    return Value::MakeList(*std::move(items));
  }
  if (name == "items") {
    if (v.is_undefined()) return Value::MakeList({});
    if (!v.is_dict()) return Bad("items", absl::StrCat("needs a mapping, not ", TypeName(v)));
    return CallMethod(v, "items", Args{});
  }
  if (name == "join") {
    absl::StatusOr<List> items = Iterate(v);
    if (!items.ok()) return items.status();
    const Value* sep = a.Get(0, "d");
    const Value* attr = a.Get(1, "attribute");
    std::string out;
    for (size_t i = 0; i < items->size(); ++i) {
      if (i > 0 && sep != nullptr) out += Text(*sep);
      out += Text(attr != nullptr && !attr->is_none() ? GetPath((*items)[i], Text(*attr)) : (*items)[i]);
      if (out.size() > a.max_size) return absl::ResourceExhaustedError("join: result too long");
    }
    return Value(std::move(out));
  }
  if (name == "select") return Select(v, a, false, true);
  if (name == "reject") return Select(v, a, false, false);
  if (name == "selectattr") return Select(v, a, true, true);
  if (name == "rejectattr") return Select(v, a, true, false);
  if (name == "map") return Map(v, a);
  if (name == "int") return ToInt(v, a);
  if (name == "float") {
    if (v.is_number()) return Value(v.as_double());
    double d;
    if (v.is_string() && absl::SimpleAtod(absl::StripAsciiWhitespace(v.as_string()), &d)) return Value(d);
    const Value* fallback = a.Get(0, "default");
    return fallback != nullptr ? *fallback : Value(0.0);
  }
  if (name == "abs") {
    if (v.is_float()) return Value(std::fabs(v.as_double()));
    if (v.is_int() || v.is_bool()) {
      if (v.as_int() == INT64_MIN) return Bad("abs", "integer overflow");
      return Value(std::abs(v.as_int()));
    }
    return Bad("abs", "needs a number");
  }
  if (name == "round") return Round(v, a);
  if (name == "sum") return Sum(v, a);
  if (name == "min") return MinMax(v, a, false);
  if (name == "max") return MinMax(v, a, true);
  if (name == "sort") {
    absl::StatusOr<List> items = Iterate(v);
    if (!items.ok()) return items.status();
    const Value* attr = a.Get(2, "attribute");
    absl::StatusOr<List> sorted =
        SortedBy(*std::move(items), attr ? Text(*attr) : "", Flag(a, 1, "case_sensitive"), Flag(a, 0, "reverse"));
    if (!sorted.ok()) return sorted.status();
    return Value::MakeList(*std::move(sorted));
  }
  if (name == "dictsort") return DictSort(v, a);
  if (name == "unique") {
    absl::StatusOr<List> items = Iterate(v);
    if (!items.ok()) return items.status();
    const Value* attr = a.Get(1, "attribute");
    const bool case_sensitive = Flag(a, 0, "case_sensitive");
    List out;
    std::vector<Value> seen;
    for (const Value& item : *items) {
      const Value key = SortKey(item, attr ? Text(*attr) : "", case_sensitive);
      if (std::any_of(seen.begin(), seen.end(), [&](const Value& s) { return Equal(s, key); })) continue;
      seen.push_back(key);
      out.push_back(item);
    }
    return Value::MakeList(std::move(out));
  }
  if (name == "reverse") {
    if (v.is_string()) {
      std::vector<std::string> cps = CodePoints(v.as_string());
      std::string out;
      for (auto it = cps.rbegin(); it != cps.rend(); ++it) out += *it;
      return Value(std::move(out));
    }
    absl::StatusOr<List> items = Iterate(v);
    if (!items.ok()) return items.status();
    std::reverse(items->begin(), items->end());
    return Value::MakeList(*std::move(items));
  }
  if (name == "indent") return Indent(v, a);
  if (name == "escape" || name == "e") return Value(HtmlEscape(Text(v)));
  if (name == "attr") {
    const Value* n = a.Get(0, "name");
    if (n == nullptr || !n->is_string()) return Bad("attr", "needs a name");
    return GetItem(v, *n);
  }
  if (name == "format") {
    absl::StatusOr<std::string> s = PercentFormat(Text(v), a.pos, a.max_size);
    if (!s.ok()) return s.status();
    return Value(*std::move(s));
  }
  if (name == "wordcount") {
    absl::StatusOr<Value> words = CallMethod(Value(Text(v)), "split", Args{});
    if (!words.ok()) return words.status();
    return Value(static_cast<int64_t>(words->as_list().size()));
  }
  return absl::InvalidArgumentError(absl::StrCat("no filter named '", name, "'"));
}

}  // namespace doppler::jinja
