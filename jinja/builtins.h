// The operators, filters, tests and methods templates use, each with the meaning jinja2 3.1 (and
// Python, for operators and methods of str, dict and list) gives it, and JSON output as Python's
// json.dumps writes it.
#pragma once

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "jinja/value.h"

namespace doppler::jinja {

// The arguments of a call: positional, then keyword; max_size bounds any string or list a
// builtin builds (a hostile template cannot make one larger).
struct Args {
  std::vector<Value> pos;
  std::vector<std::pair<std::string, Value>> kw;
  size_t max_size = 0;

  // The argument at position i or named name, or nullptr.
  const Value* Get(size_t i, const char* name) const;
};

absl::StatusOr<Value> ApplyFilter(const std::string& name, const Value& v, const Args& args);
absl::StatusOr<bool> ApplyTest(const std::string& name, const Value& v, const Args& args);
// obj.name(args) for a str, dict or list; NotFound when the type has no such method.
absl::StatusOr<Value> CallMethod(const Value& obj, const std::string& name, const Args& args);

// Python's binary operators + - * / // % ** and ~ (jinja2's concatenation); strings and lists
// built are at most max_size long.
absl::StatusOr<Value> BinaryOp(const std::string& op, const Value& a, const Value& b, size_t max_size);
// Python's comparisons == != < > <= >= in, "not in" (chained comparisons are the renderer's).
absl::StatusOr<bool> CompareOp(const std::string& op, const Value& a, const Value& b);

// Python's format % args (%s %r %d %i %x %o %f %e %g with flags, width and precision).
absl::StatusOr<std::string> PercentFormat(const std::string& format, const List& args, size_t max_size);

struct JsonFormat {
  std::string indent;           // no indent (one line) unless has_indent
  bool has_indent = false;
  std::string item_separator = ", ";
  std::string key_separator = ": ";
  bool sort_keys = false;
  bool ensure_ascii = false;  // escape non-ASCII characters as \uXXXX
};
// json.dumps(v, ensure_ascii=False, ...): an error for values JSON cannot hold, or for output
// longer than max_bytes.
absl::StatusOr<std::string> ToJson(const Value& v, const JsonFormat& format, size_t max_bytes);

// Python's a < b for the values it orders (numbers, strings, lists); -1, 0 or 1.
absl::StatusOr<int> Order(const Value& a, const Value& b);
// obj[key] and obj.key as jinja2 looks them up; an undefined value when absent.
Value GetItem(const Value& obj, const Value& key);
// A dotted attribute path ("function.name", "0.id") as the attribute= argument of filters reads it.
Value GetPath(const Value& obj, const std::string& path);
// Python's len() (code points for strings), or an error.
absl::StatusOr<int64_t> Length(const Value& v);
// The items for a for loop or a filter: a list's items, a dict's keys, a string's characters,
// nothing for undefined.
absl::StatusOr<List> Iterate(const Value& v);

}  // namespace doppler::jinja
