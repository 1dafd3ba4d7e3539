// Methods of str, dict and list that templates call, with Python's meaning. Methods that would
// change a list or dict are refused, as in transformers' ImmutableSandboxedEnvironment.
#include <algorithm>
#include <cctype>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "jinja/builtins.h"

namespace doppler::jinja {
namespace {

absl::Status TypeError(const std::string& what) { return absl::InvalidArgumentError(what); }

bool IsPySpace(char c) { return c == ' ' || (c >= '\t' && c <= '\r') || (c >= '\x1c' && c <= '\x1f'); }

// The chars argument of strip/lstrip/rstrip: nullopt for whitespace.
absl::StatusOr<std::vector<std::string>> StripSet(const Args& a) {
  const Value* chars = a.Get(0, "chars");
  if (chars == nullptr || chars->is_none()) return std::vector<std::string>{};
  if (!chars->is_string()) return TypeError("strip arg must be None or str");
  return CodePoints(chars->as_string());
}

std::string Strip(const std::string& s, const std::vector<std::string>& set, bool left, bool right) {
  if (set.empty()) {
    size_t b = 0;
    size_t e = s.size();
    if (left) while (b < e && IsPySpace(s[b])) ++b;
    if (right) while (e > b && IsPySpace(s[e - 1])) --e;
    return s.substr(b, e - b);
  }
  std::vector<std::string> cps = CodePoints(s);
  size_t b = 0;
  size_t e = cps.size();
  auto in = [&](const std::string& c) { return std::find(set.begin(), set.end(), c) != set.end(); };
  if (left) while (b < e && in(cps[b])) ++b;
  if (right) while (e > b && in(cps[e - 1])) --e;
  std::string out;
  for (size_t i = b; i < e; ++i) out += cps[i];
  return out;
}

absl::StatusOr<Value> Split(const std::string& s, const Args& a) {
  const Value* sep = a.Get(0, "sep");
  const Value* max = a.Get(1, "maxsplit");
  int64_t maxsplit = max != nullptr && max->is_int() ? max->as_int() : -1;
  List parts;
  if (sep == nullptr || sep->is_none()) {
    size_t i = 0;
    while (true) {
      while (i < s.size() && IsPySpace(s[i])) ++i;
      if (i >= s.size()) break;
      if (maxsplit == 0) {
        size_t e = s.size();
        while (e > i && IsPySpace(s[e - 1])) --e;
        parts.emplace_back(s.substr(i, e - i));
        break;
      }
      size_t j = i;
      while (j < s.size() && !IsPySpace(s[j])) ++j;
      parts.emplace_back(s.substr(i, j - i));
      --maxsplit;
      i = j;
    }
    return Value::MakeList(std::move(parts));
  }
  if (!sep->is_string()) return TypeError("must be str or None");
  const std::string& d = sep->as_string();
  if (d.empty()) return absl::InvalidArgumentError("empty separator");
  size_t start = 0;
  while (maxsplit != 0) {
    const size_t p = s.find(d, start);
    if (p == std::string::npos) break;
    parts.emplace_back(s.substr(start, p - start));
    start = p + d.size();
    --maxsplit;
  }
  parts.emplace_back(s.substr(start));
  return Value::MakeList(std::move(parts));
}

// rsplit(sep, maxsplit): splits from the right; without sep, splits on whitespace as split() does
// when maxsplit is not given.
absl::StatusOr<Value> RSplit(const std::string& s, const Args& a) {
  const Value* sep = a.Get(0, "sep");
  const Value* max = a.Get(1, "maxsplit");
  const int64_t maxsplit = max != nullptr && max->is_int() ? max->as_int() : -1;
  if (sep == nullptr || sep->is_none()) {
    if (maxsplit >= 0) return absl::UnimplementedError("rsplit() on whitespace with maxsplit is not supported");
    return Split(s, Args{});
  }
  if (!sep->is_string()) return TypeError("must be str or None");
  const std::string& d = sep->as_string();
  if (d.empty()) return absl::InvalidArgumentError("empty separator");
  List parts;
  size_t end = s.size();
  for (int64_t n = 0; maxsplit < 0 || n < maxsplit; ++n) {
    if (end < d.size()) break;
    const size_t p = s.rfind(d, end - d.size());
    if (p == std::string::npos) break;
    parts.emplace(parts.begin(), s.substr(p + d.size(), end - p - d.size()));
    end = p;
  }
  parts.emplace(parts.begin(), s.substr(0, end));
  return Value::MakeList(std::move(parts));
}

absl::StatusOr<Value> Replace(const std::string& s, const Args& a) {
  const Value* from = a.Get(0, "old");
  const Value* to = a.Get(1, "new");
  const Value* count_arg = a.Get(2, "count");
  if (from == nullptr || to == nullptr || !from->is_string() || !to->is_string()) {
    return TypeError("replace() takes two strings");
  }
  int64_t count = count_arg != nullptr && (count_arg->is_int()) ? count_arg->as_int() : -1;
  const std::string& old = from->as_string();
  const std::string& neu = to->as_string();
  std::string out;
  if (old.empty()) {  // Python inserts the replacement around every character
    std::vector<std::string> cps = CodePoints(s);
    for (size_t i = 0; i <= cps.size(); ++i) {
      if (count != 0) {
        out += neu;
        --count;
      }
      if (i < cps.size()) out += cps[i];
      if (out.size() > a.max_size) return absl::ResourceExhaustedError("replace() result too long");
    }
    return Value(std::move(out));
  }
  size_t start = 0;
  while (count != 0) {
    const size_t p = s.find(old, start);
    if (p == std::string::npos) break;
    out.append(s, start, p - start);
    out += neu;
    start = p + old.size();
    --count;
    if (out.size() > a.max_size) return absl::ResourceExhaustedError("replace() result too long");
  }
  out.append(s, start, std::string::npos);
  return Value(std::move(out));
}

std::string MapCase(const std::string& s, int (*f)(int)) {
  std::string out = s;
  for (char& c : out) {
    if (static_cast<unsigned char>(c) < 0x80) c = static_cast<char>(f(static_cast<unsigned char>(c)));
  }
  return out;
}

bool IsAsciiAlpha(char c) { return static_cast<unsigned char>(c) < 0x80 && std::isalpha(static_cast<unsigned char>(c)); }

std::string Title(const std::string& s) {
  std::string out = s;
  bool prev_cased = false;
  for (char& c : out) {
    if (IsAsciiAlpha(c)) {
      c = static_cast<char>(prev_cased ? std::tolower(c) : std::toupper(c));
      prev_cased = true;
    } else {
      prev_cased = false;
    }
  }
  return out;
}

std::string Capitalize(const std::string& s) {
  std::string out = MapCase(s, std::tolower);
  if (!out.empty() && static_cast<unsigned char>(out[0]) < 0x80) out[0] = static_cast<char>(std::toupper(out[0]));
  return out;
}

// startswith/endswith: a string or a tuple of strings.
absl::StatusOr<bool> Affix(const std::string& s, const Value* arg, bool start) {
  if (arg == nullptr) return TypeError("startswith/endswith takes an argument");
  List options = arg->is_list() ? arg->as_list() : List{*arg};
  for (const Value& o : options) {
    if (!o.is_string()) return TypeError("startswith/endswith first arg must be str or a tuple of str");
    const std::string& p = o.as_string();
    if (p.size() > s.size()) continue;
    if (start ? s.compare(0, p.size(), p) == 0 : s.compare(s.size() - p.size(), p.size(), p) == 0) return true;
  }
  return false;
}

int64_t CodePointIndex(const std::string& s, size_t byte) {
  int64_t n = 0;
  for (size_t i = 0; i < byte && i < s.size(); ++i) n += (static_cast<unsigned char>(s[i]) & 0xc0) != 0x80;
  return n;
}

template <typename Pred>
bool AllOf(const std::string& s, Pred p) {
  if (s.empty()) return false;
  for (char c : s) {
    if (!p(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

absl::StatusOr<Value> StringMethod(const std::string& s, const std::string& name, const Args& a) {
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    absl::StatusOr<std::vector<std::string>> set = StripSet(a);
    if (!set.ok()) return set.status();
    return Value(Strip(s, *set, name != "rstrip", name != "lstrip"));
  }
  if (name == "split") return Split(s, a);
  if (name == "rsplit") return RSplit(s, a);
  if (name == "splitlines") {
    List lines;
    size_t start = 0;
    for (size_t i = 0; i < s.size(); ++i) {
      if (s[i] == '\n' || s[i] == '\r') {
        lines.emplace_back(s.substr(start, i - start));
        if (s[i] == '\r' && i + 1 < s.size() && s[i + 1] == '\n') ++i;
        start = i + 1;
      }
    }
    if (start < s.size()) lines.emplace_back(s.substr(start));
    return Value::MakeList(std::move(lines));
  }
  if (name == "startswith" || name == "endswith") {
    absl::StatusOr<bool> r = Affix(s, a.Get(0, "prefix"), name == "startswith");
    if (!r.ok()) return r.status();
    return Value(*r);
  }
  if (name == "replace") return Replace(s, a);
  if (name == "lower") return Value(MapCase(s, std::tolower));
  if (name == "upper") return Value(MapCase(s, std::toupper));
  if (name == "title") return Value(Title(s));
  if (name == "capitalize") return Value(Capitalize(s));
  if (name == "find" || name == "rfind" || name == "count" || name == "index") {
    const Value* sub = a.Get(0, "sub");
    if (sub == nullptr || !sub->is_string()) return TypeError(absl::StrCat(name, "() needs a string"));
    const std::string& t = sub->as_string();
    if (name == "count") {
      if (t.empty()) return Value(static_cast<int64_t>(CodePoints(s).size()) + 1);
      int64_t n = 0;
      for (size_t p = s.find(t); p != std::string::npos; p = s.find(t, p + t.size())) ++n;
      return Value(n);
    }
    const size_t p = name == "rfind" ? s.rfind(t) : s.find(t);
    if (p == std::string::npos) {
      if (name == "index") return absl::InvalidArgumentError("substring not found");
      return Value(int64_t{-1});
    }
    return Value(CodePointIndex(s, p));
  }
  if (name == "join") {
    const Value* items = a.Get(0, "iterable");
    if (items == nullptr) return TypeError("join() takes an iterable");
    absl::StatusOr<List> list = Iterate(*items);
    if (!list.ok()) return list.status();
    std::string out;
    for (size_t i = 0; i < list->size(); ++i) {
      if (!(*list)[i].is_string()) return TypeError(absl::StrCat("sequence item ", i, ": expected str instance, ", TypeName((*list)[i]), " found"));
      if (i > 0) out += s;
      out += (*list)[i].as_string();
      if (out.size() > a.max_size) return absl::ResourceExhaustedError("join() result too long");
    }
    return Value(std::move(out));
  }
  if (name == "removeprefix" || name == "removesuffix") {
    const Value* x = a.Get(0, "affix");
    if (x == nullptr || !x->is_string()) return TypeError(absl::StrCat(name, "() needs a string"));
    const std::string& t = x->as_string();
    if (t.size() <= s.size()) {
      if (name == "removeprefix" && s.compare(0, t.size(), t) == 0) return Value(s.substr(t.size()));
      if (name == "removesuffix" && s.compare(s.size() - t.size(), t.size(), t) == 0) return Value(s.substr(0, s.size() - t.size()));
    }
    return Value(s);
  }
  if (name == "isdigit") return Value(AllOf(s, [](unsigned char c) { return std::isdigit(c) != 0; }));
  if (name == "isalpha") return Value(AllOf(s, [](unsigned char c) { return std::isalpha(c) != 0; }));
  if (name == "isalnum") return Value(AllOf(s, [](unsigned char c) { return std::isalnum(c) != 0; }));
  if (name == "isspace") return Value(AllOf(s, [](unsigned char c) { return IsPySpace(static_cast<char>(c)); }));
  if (name == "islower" || name == "isupper") {
    bool cased = false;
    for (char c : s) {
      if (!IsAsciiAlpha(c)) continue;
      cased = true;
      if (name == "islower" ? std::isupper(static_cast<unsigned char>(c)) : std::islower(static_cast<unsigned char>(c))) return Value(false);
    }
    return Value(cased);
  }
  return absl::NotFoundError(absl::StrCat("'str' object has no attribute '", name, "'"));
}

absl::StatusOr<Value> DictMethod(const Value& d, const std::string& name, const Args& a) {
  if (name == "get") {
    const Value* key = a.Get(0, "key");
    const Value* fallback = a.Get(1, "default");
    if (key == nullptr) return TypeError("get expected at least 1 argument");
    if (key->is_string()) {
      if (const Value* v = d.Find(key->as_string())) return *v;
    }
    return fallback != nullptr ? *fallback : Value::None();
  }
  if (name == "items") {
    List items;
    for (const auto& [k, v] : d.as_dict()) items.push_back(Value::MakeList({Value(k), v}, /*tuple=*/true));
    return Value::MakeList(std::move(items));
  }
  if (name == "keys" || name == "values") {
    List items;
    for (const auto& [k, v] : d.as_dict()) items.push_back(name == "keys" ? Value(k) : v);
    return Value::MakeList(std::move(items));
  }
  for (const char* m : {"update", "pop", "popitem", "setdefault", "clear"}) {
    if (name == m) return absl::InvalidArgumentError(absl::StrCat("access to attribute '", name, "' of 'dict' object is unsafe."));
  }
  return absl::NotFoundError(absl::StrCat("'dict' object has no attribute '", name, "'"));
}

absl::StatusOr<Value> ListMethod(const Value& l, const std::string& name, const Args& a) {
  if (name == "index" || name == "count") {
    const Value* x = a.Get(0, "value");
    if (x == nullptr) return TypeError(absl::StrCat(name, "() takes exactly one argument"));
    int64_t n = 0;
    for (size_t i = 0; i < l.as_list().size(); ++i) {
      if (!Equal(l.as_list()[i], *x)) continue;
      if (name == "index") return Value(static_cast<int64_t>(i));
      ++n;
    }
    if (name == "index") return absl::InvalidArgumentError(absl::StrCat(Repr(*x), " is not in list"));
    return Value(n);
  }
  for (const char* m : {"append", "extend", "insert", "pop", "remove", "clear", "sort", "reverse"}) {
    if (name == m) {
      return absl::InvalidArgumentError(absl::StrCat("access to attribute '", name, "' of '", TypeName(l), "' object is unsafe."));
    }
  }
  return absl::NotFoundError(absl::StrCat("'", TypeName(l), "' object has no attribute '", name, "'"));
}

}  // namespace

absl::StatusOr<Value> CallMethod(const Value& obj, const std::string& name, const Args& args) {
  if (obj.is_string()) return StringMethod(obj.as_string(), name, args);
  if (obj.is_dict()) return DictMethod(obj, name, args);
  if (obj.is_list()) return ListMethod(obj, name, args);
  return absl::NotFoundError(absl::StrCat("'", TypeName(obj), "' object has no attribute '", name, "'"));
}

}  // namespace doppler::jinja
