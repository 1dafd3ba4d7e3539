// Python's printf-style formatting: the `%` operator on strings and the |format filter.
#include <cctype>
#include <cstdio>
#include <string_view>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "jinja/builtins.h"

namespace doppler::jinja {

absl::StatusOr<std::string> PercentFormat(const std::string& format, const List& args, size_t max_size) {
  std::string out;
  size_t next = 0;
  for (size_t i = 0; i < format.size(); ++i) {
    if (format[i] != '%') {
      out += format[i];
      continue;
    }
    // %[flags][width][.precision]type
    size_t j = i + 1;
    while (j < format.size() && std::string_view("-+ #0").find(format[j]) != std::string_view::npos) ++j;
    while (j < format.size() && std::isdigit(static_cast<unsigned char>(format[j]))) ++j;
    if (j < format.size() && format[j] == '.') {
      ++j;
      while (j < format.size() && std::isdigit(static_cast<unsigned char>(format[j]))) ++j;
    }
    if (j >= format.size()) return absl::InvalidArgumentError("incomplete format");
    const std::string spec = format.substr(i, j - i);
    const char type = format[j];
    i = j;
    if (type == '%') {
      out += '%';
      continue;
    }
    if (next >= args.size()) return absl::InvalidArgumentError("not enough arguments for format string");
    const Value& v = args[next++];
    if (spec.size() > 12) return absl::InvalidArgumentError("format width or precision too long");
    char buf[512];
    switch (type) {
      case 's':
      case 'r': {
        const std::string text = type == 's' ? ToStr(v) : Repr(v);
        if (spec == "%") {
          out += text;
        } else {  // width and precision apply to bytes here (ASCII text formats as Python does)
          std::snprintf(buf, sizeof buf, (spec + "s").c_str(), text.c_str());
          out += buf;
        }
        break;
      }
      case 'd':
      case 'i':
      case 'x':
      case 'X':
      case 'o':
        if (!v.is_number()) return absl::InvalidArgumentError(absl::StrCat("%", std::string(1, type), " format: a number is required, not ", TypeName(v)));
        std::snprintf(buf, sizeof buf, (spec + "ll" + (type == 'i' ? 'd' : type)).c_str(),
                      static_cast<long long>(v.is_float() ? static_cast<int64_t>(v.as_double()) : v.as_int()));
        out += buf;
        break;
      case 'f':
      case 'F':
      case 'e':
      case 'E':
      case 'g':
      case 'G':
        if (!v.is_number()) return absl::InvalidArgumentError(absl::StrCat("must be real number, not ", TypeName(v)));
        std::snprintf(buf, sizeof buf, (spec + type).c_str(), v.as_double());
        out += buf;
        break;
      default: return absl::InvalidArgumentError(absl::StrCat("unsupported format character '", std::string(1, type), "'"));
    }
    if (out.size() > max_size) return absl::ResourceExhaustedError("formatted string too long");
  }
  if (next < args.size()) return absl::InvalidArgumentError("not all arguments converted during string formatting");
  return out;
}

}  // namespace doppler::jinja
