#include "tools/cli_prompt_text.h"

#include <cstdio>
#include <iostream>
#include <iterator>

#include "absl/strings/str_cat.h"
#include "formats/mapped_file.h"

namespace doppler::cli {

std::string ProcessEscapes(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '\\' || i + 1 == text.size()) {
      out += text[i];
      continue;
    }
    const char next = text[i + 1];
    switch (next) {
      case 'n': out += '\n'; ++i; continue;
      case 'r': out += '\r'; ++i; continue;
      case 't': out += '\t'; ++i; continue;
      case '\'': case '"': case '\\': out += next; ++i; continue;
      case 'x':
        if (i + 3 < text.size() && hex(text[i + 2]) >= 0 && hex(text[i + 3]) >= 0) {
          out += static_cast<char>(hex(text[i + 2]) * 16 + hex(text[i + 3]));
          i += 3;
          continue;
        }
        break;
      default:
        break;
    }
    out += text[i];
  }
  return out;
}

absl::StatusOr<std::string> ReadTextFile(const std::string& path) {
  absl::StatusOr<formats::MappedFile> file = formats::MappedFile::Open(path);
  if (!file.ok()) return file.status();
  return std::string(reinterpret_cast<const char*>(file->data()), file->size());
}

std::string ReadStandardInput() {
  return std::string(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
}

}  // namespace doppler::cli
