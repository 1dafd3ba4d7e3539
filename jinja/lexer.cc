#include "jinja/lexer.h"

#include <cctype>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace doppler::jinja {
namespace {

bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }
bool IsNameStart(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool IsNameChar(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

absl::Status Error(int line, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat("template line ", line, ": ", what));
}

class Lexer {
 public:
  explicit Lexer(const std::string& s) : src_(s) {}

  absl::StatusOr<std::vector<Token>> Run() {
    while (true) {
      size_t text_start = pos_;
      if (strip_next_) {
        while (text_start < src_.size() && IsSpace(src_[text_start])) ++text_start;
      } else if (trim_newline_) {
        if (src_.compare(text_start, 1, "\n") == 0) {
          text_start += 1;
        } else if (src_.compare(text_start, 2, "\r\n") == 0) {
          text_start += 2;
        }
      }
      strip_next_ = trim_newline_ = false;
      const size_t tag = FindTag(text_start);
      std::string text = src_.substr(text_start, tag - text_start);
      if (tag == src_.size()) {
        Emit(Token::Kind::kText, std::move(text), LineAt(text_start));
        break;
      }
      const char kind = src_[tag + 1];
      const char modifier = tag + 2 < src_.size() ? src_[tag + 2] : '\0';
      if (modifier == '-') {
        while (!text.empty() && IsSpace(text.back())) text.pop_back();
      } else if (modifier != '+' && kind != '{') {
        LstripBeforeTag(text, text_start);
      }
      Emit(Token::Kind::kText, std::move(text), LineAt(text_start));
      pos_ = tag + 2 + (modifier == '-' || modifier == '+' ? 1 : 0);
      absl::Status s = kind == '#' ? Comment() : kind == '%' ? Block(tag) : Variable();
      if (!s.ok()) return s;
    }
    tokens_.push_back({Token::Kind::kEnd, "", LineAt(src_.size())});
    return std::move(tokens_);
  }

 private:
  int LineAt(size_t p) {
    while (line_pos_ < p && line_pos_ < src_.size()) {
      if (src_[line_pos_] == '\n') ++line_;
      ++line_pos_;
    }
    return line_;
  }

  void Emit(Token::Kind k, std::string text, int line) {
    if (k == Token::Kind::kText && text.empty()) return;
    tokens_.push_back({k, std::move(text), line});
  }

  size_t FindTag(size_t from) const {
    for (size_t p = src_.find('{', from); p != std::string::npos; p = src_.find('{', p + 1)) {
      if (p + 1 < src_.size() && (src_[p + 1] == '{' || src_[p + 1] == '%' || src_[p + 1] == '#')) return p;
    }
    return src_.size();
  }

  // lstrip_blocks: spaces and tabs between the start of a line and a block tag go.
  void LstripBeforeTag(std::string& text, size_t text_start) const {
    const size_t nl = text.rfind('\n');
    const size_t line_start = nl == std::string::npos ? 0 : nl + 1;
    if (nl == std::string::npos && !(text_start == 0 || src_[text_start - 1] == '\n')) return;
    if (text.find_first_not_of(" \t", line_start) != std::string::npos) return;
    text.resize(line_start);
  }

  // After "%}" or "#}" with modifier ('-', '+' or none): "-" strips the following whitespace,
  // "+" keeps it, and otherwise trim_blocks drops one newline.
  void AfterBlockEnd(char modifier) {
    strip_next_ = modifier == '-';
    trim_newline_ = modifier != '-' && modifier != '+';
  }

  absl::Status Comment() {
    const size_t end = src_.find("#}", pos_);
    if (end == std::string::npos) return Error(LineAt(pos_), "unclosed comment ({# without #})");
    AfterBlockEnd(end > pos_ ? src_[end - 1] : '\0');
    pos_ = end + 2;
    return absl::OkStatus();
  }

  // "{% raw %}" (with optional whitespace and modifiers) at tag: returns the position after it.
  bool MatchWordTag(size_t p, const char* word, size_t* after, char* end_modifier) const {
    size_t q = p + 2;
    if (q < src_.size() && (src_[q] == '-' || src_[q] == '+')) ++q;
    while (q < src_.size() && IsSpace(src_[q])) ++q;
    const size_t n = std::strlen(word);
    if (src_.compare(q, n, word) != 0) return false;
    q += n;
    if (q < src_.size() && IsNameChar(src_[q])) return false;
    while (q < src_.size() && IsSpace(src_[q])) ++q;
    *end_modifier = '\0';
    if (q < src_.size() && (src_[q] == '-' || src_[q] == '+')) *end_modifier = src_[q++];
    if (src_.compare(q, 2, "%}") != 0) return false;
    *after = q + 2;
    return true;
  }

  absl::Status Raw(size_t body, char modifier) {
    const int line = LineAt(body);
    for (size_t p = src_.find("{%", body); p != std::string::npos; p = src_.find("{%", p + 1)) {
      size_t after;
      char end_modifier;
      if (!MatchWordTag(p, "endraw", &after, &end_modifier)) continue;
      std::string text = src_.substr(body, p - body);
      if (modifier == '-') {
        size_t i = 0;
        while (i < text.size() && IsSpace(text[i])) ++i;
        text.erase(0, i);
      } else if (modifier != '+' && text.compare(0, 1, "\n") == 0) {
        text.erase(0, 1);  // trim_blocks after {% raw %}
      }
      if (src_[p + 2] == '-') {
        while (!text.empty() && IsSpace(text.back())) text.pop_back();
      } else if (src_[p + 2] != '+') {
        LstripBeforeTag(text, body);
      }
      Emit(Token::Kind::kText, std::move(text), line);
      AfterBlockEnd(end_modifier);
      pos_ = after;
      return absl::OkStatus();
    }
    return Error(line, "{% raw %} without {% endraw %}");
  }

  absl::Status Block(size_t tag) {
    size_t after;
    char modifier;
    if (MatchWordTag(tag, "raw", &after, &modifier)) return Raw(after, modifier);
    tokens_.push_back({Token::Kind::kBlockBegin, "", LineAt(tag)});
    return TagBody(/*block=*/true);
  }

  absl::Status Variable() {
    tokens_.push_back({Token::Kind::kVarBegin, "", LineAt(pos_)});
    return TagBody(/*block=*/false);
  }

  // The expression tokens up to the tag's end ("%}" or "}}", brackets balanced).
  absl::Status TagBody(bool block) {
    int depth = 0;
    const int start_line = LineAt(pos_);
    while (true) {
      while (pos_ < src_.size() && IsSpace(src_[pos_])) ++pos_;
      if (pos_ >= src_.size()) return Error(start_line, block ? "unclosed tag ({% without %})" : "unclosed {{ without }}");
      const int line = LineAt(pos_);
      const char c = src_[pos_];
      const char* end = block ? "%}" : "}}";
      const bool end_here = depth == 0 && src_.compare(pos_, 2, end) == 0;
      const bool minus_end = depth == 0 && (c == '-' || c == '+') && src_.compare(pos_ + 1, 2, end) == 0;
      if (end_here || minus_end) {
        pos_ += minus_end ? 3 : 2;
        tokens_.push_back({block ? Token::Kind::kBlockEnd : Token::Kind::kVarEnd, "", line});
        if (block) {
          AfterBlockEnd(minus_end ? c : '\0');
        } else if (minus_end && c == '-') {
          strip_next_ = true;
        }
        return absl::OkStatus();
      }
      if (IsNameStart(c)) {
        size_t e = pos_;
        while (e < src_.size() && IsNameChar(src_[e])) ++e;
        tokens_.push_back({Token::Kind::kName, src_.substr(pos_, e - pos_), line});
        pos_ = e;
      } else if (std::isdigit(static_cast<unsigned char>(c))) {
        Number(line);
      } else if (c == '\'' || c == '"') {
        absl::Status s = String(line);
        if (!s.ok()) return s;
      } else {
        static const char* const kOps[] = {"//", "**", "==", "!=", "<=", ">=", "+", "-", "*", "/", "%", "~", "<",
                                           ">",  "=",  "(",  ")",  "[",  "]",  "{", "}", ",", ".", ":", "|"};
        const char* op = nullptr;
        for (const char* o : kOps) {
          if (src_.compare(pos_, std::strlen(o), o) == 0) {
            op = o;
            break;
          }
        }
        if (op == nullptr) return Error(line, absl::StrCat("unexpected character '", std::string(1, c), "'"));
        if (*op == '(' || *op == '[' || *op == '{') ++depth;
        if ((*op == ')' || *op == ']' || *op == '}') && depth > 0) --depth;
        tokens_.push_back({Token::Kind::kOp, op, line});
        pos_ += std::strlen(op);
      }
    }
  }

  void Number(int line) {
    size_t e = pos_;
    bool is_float = false;
    auto digits = [&] {
      while (e < src_.size() && (std::isdigit(static_cast<unsigned char>(src_[e])) || src_[e] == '_')) ++e;
    };
    digits();
    if (e + 1 < src_.size() && src_[e] == '.' && std::isdigit(static_cast<unsigned char>(src_[e + 1]))) {
      is_float = true;
      ++e;
      digits();
    }
    if (e < src_.size() && (src_[e] == 'e' || src_[e] == 'E')) {
      size_t q = e + 1;
      if (q < src_.size() && (src_[q] == '+' || src_[q] == '-')) ++q;
      if (q < src_.size() && std::isdigit(static_cast<unsigned char>(src_[q]))) {
        is_float = true;
        e = q;
        digits();
      }
    }
    std::string text;
    for (size_t i = pos_; i < e; ++i) {
      if (src_[i] != '_') text += src_[i];
    }
    tokens_.push_back({is_float ? Token::Kind::kFloat : Token::Kind::kInt, text, line});
    pos_ = e;
  }

  static void AppendUtf8(std::string& out, uint32_t cp) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xc0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3f));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xe0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
      out += static_cast<char>(0x80 | (cp & 0x3f));
    } else {
      out += static_cast<char>(0xf0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3f));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
      out += static_cast<char>(0x80 | (cp & 0x3f));
    }
  }

  // A string literal with Python's escapes.
  absl::Status String(int line) {
    const char quote = src_[pos_++];
    std::string out;
    while (true) {
      if (pos_ >= src_.size()) return Error(line, "unterminated string literal");
      const char c = src_[pos_++];
      if (c == quote) break;
      if (c != '\\' || pos_ >= src_.size()) {
        out += c;
        continue;
      }
      const char e = src_[pos_++];
      switch (e) {
        case 'n': out += '\n'; break;
        case 't': out += '\t'; break;
        case 'r': out += '\r'; break;
        case '0': out += '\0'; break;
        case 'a': out += '\a'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'v': out += '\v'; break;
        case '\\': out += '\\'; break;
        case '\'': out += '\''; break;
        case '"': out += '"'; break;
        case '\n': break;
        case 'x':
        case 'u':
        case 'U': {
          const size_t n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
          if (pos_ + n > src_.size()) return Error(line, "truncated escape in a string literal");
          uint32_t cp = 0;
          for (size_t i = 0; i < n; ++i) {
            const char h = src_[pos_ + i];
            if (!std::isxdigit(static_cast<unsigned char>(h))) return Error(line, "bad escape in a string literal");
            cp = cp * 16 + static_cast<uint32_t>(std::isdigit(static_cast<unsigned char>(h)) ? h - '0' : (std::tolower(h) - 'a' + 10));
          }
          if (cp > 0x10ffff) return Error(line, "bad escape in a string literal");
          pos_ += n;
          AppendUtf8(out, cp);
          break;
        }
        default:
          out += '\\';
          out += e;
      }
    }
    tokens_.push_back({Token::Kind::kString, std::move(out), line});
    return absl::OkStatus();
  }

  const std::string& src_;
  size_t pos_ = 0;
  size_t line_pos_ = 0;
  int line_ = 1;
  bool strip_next_ = false;
  bool trim_newline_ = false;
  std::vector<Token> tokens_;
};

}  // namespace

absl::StatusOr<std::vector<Token>> Lex(const std::string& source) {
  // As jinja2 reads a template: every \r\n, \r or \n becomes \n, and one newline at the very end
  // goes (keep_trailing_newline is off).
  std::string normalized;
  normalized.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      normalized += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      normalized += source[i];
    }
  }
  if (!normalized.empty() && normalized.back() == '\n') normalized.pop_back();
  return Lexer(normalized).Run();
}

}  // namespace doppler::jinja
