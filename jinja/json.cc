// tojson as transformers defines it: Python's json.dumps(value, ensure_ascii=False, indent=...,
// separators=..., sort_keys=...).
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "jinja/builtins.h"

namespace doppler::jinja {
namespace {

class JsonWriter {
 public:
  JsonWriter(const JsonFormat& f, size_t max_bytes) : f_(f), max_(max_bytes) {}

  absl::Status Write(const Value& v, int level) {
    if (out_.size() > max_) return absl::ResourceExhaustedError(absl::StrCat("tojson output over ", max_, " bytes"));
    switch (v.kind()) {
      case Value::Kind::kNone: out_ += "null"; return absl::OkStatus();
      case Value::Kind::kBool: out_ += v.as_bool() ? "true" : "false"; return absl::OkStatus();
      case Value::Kind::kInt: absl::StrAppend(&out_, v.as_int()); return absl::OkStatus();
      case Value::Kind::kFloat: {
        const double d = v.as_double();
        out_ += std::isnan(d) ? "NaN" : std::isinf(d) ? (d > 0 ? "Infinity" : "-Infinity") : FloatRepr(d);
        return absl::OkStatus();
      }
      case Value::Kind::kString: String(v.as_string()); return absl::OkStatus();
      case Value::Kind::kList: {
        const List& items = v.as_list();
        if (items.empty()) {
          out_ += "[]";
          return absl::OkStatus();
        }
        out_ += '[';
        for (size_t i = 0; i < items.size(); ++i) {
          if (i > 0) out_ += f_.item_separator;
          NewLine(level + 1);
          if (absl::Status s = Write(items[i], level + 1); !s.ok()) return s;
        }
        NewLine(level);
        out_ += ']';
        return absl::OkStatus();
      }
      case Value::Kind::kDict: {
        if (v.as_dict().empty()) {
          out_ += "{}";
          return absl::OkStatus();
        }
        std::vector<const std::pair<std::string, Value>*> items;
        for (const auto& kv : v.as_dict()) items.push_back(&kv);
        if (f_.sort_keys) {
          std::stable_sort(items.begin(), items.end(), [](auto* a, auto* b) { return a->first < b->first; });
        }
        out_ += '{';
        for (size_t i = 0; i < items.size(); ++i) {
          if (i > 0) out_ += f_.item_separator;
          NewLine(level + 1);
          String(items[i]->first);
          out_ += f_.key_separator;
          if (absl::Status s = Write(items[i]->second, level + 1); !s.ok()) return s;
        }
        NewLine(level);
        out_ += '}';
        return absl::OkStatus();
      }
      default:
        return absl::InvalidArgumentError(absl::StrCat("Object of type ", TypeName(v), " is not JSON serializable"));
    }
  }

  std::string Take() { return std::move(out_); }

 private:
  void NewLine(int level) {
    if (!f_.has_indent) return;
    out_ += '\n';
    for (int i = 0; i < level && out_.size() <= max_; ++i) out_ += f_.indent;
  }

  // A code point as \uXXXX (a surrogate pair above U+FFFF), as json.dumps(ensure_ascii=True) writes it.
  void Escaped(uint32_t cp) {
    char buf[16];
    if (cp >= 0x10000) {
      cp -= 0x10000;
      std::snprintf(buf, sizeof buf, "\\u%04x\\u%04x", 0xd800 + (cp >> 10), 0xdc00 + (cp & 0x3ff));
    } else {
      std::snprintf(buf, sizeof buf, "\\u%04x", cp);
    }
    out_ += buf;
  }

  void String(const std::string& s) {
    out_ += '"';
    for (size_t i = 0; i < s.size(); ++i) {
      const char c = s[i];
      const unsigned char u = static_cast<unsigned char>(c);
      if (f_.ensure_ascii && u >= 0x80) {
        const size_t n = (u >> 5) == 0x6 ? 2 : (u >> 4) == 0xe ? 3 : (u >> 3) == 0x1e ? 4 : 1;
        uint32_t cp = n == 1 ? u : u & (0x7f >> n);
        for (size_t k = 1; k < n && i + k < s.size(); ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3f);
        i += n - 1;
        Escaped(cp);
        continue;
      }
      switch (c) {
        case '"': out_ += "\\\""; break;
        case '\\': out_ += "\\\\"; break;
        case '\n': out_ += "\\n"; break;
        case '\r': out_ += "\\r"; break;
        case '\t': out_ += "\\t"; break;
        case '\b': out_ += "\\b"; break;
        case '\f': out_ += "\\f"; break;
        default:
          if (static_cast<unsigned char>(c) < 0x20) {
            char buf[8];
            std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned char>(c));
            out_ += buf;
          } else {
            out_ += c;
          }
      }
    }
    out_ += '"';
  }

  const JsonFormat& f_;
  size_t max_;
  std::string out_;
};

}  // namespace

absl::StatusOr<std::string> ToJson(const Value& v, const JsonFormat& format, size_t max_bytes) {
  JsonWriter w(format, max_bytes);
  if (absl::Status s = w.Write(v, 0); !s.ok()) return s;
  std::string out = w.Take();
  if (out.size() > max_bytes) return absl::ResourceExhaustedError(absl::StrCat("tojson output over ", max_bytes, " bytes"));
  return out;
}

}  // namespace doppler::jinja
