#include "tests/support/npy.h"

#include <cstring>
#include <fstream>
#include <limits>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace doppler::test {
namespace {

absl::Status Bad(const std::filesystem::path& path, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(path.string(), ": ", what));
}

// The text after 'key': in the header dict, up to the next top-level comma or the closing brace.
// The dict is written by numpy as a Python literal, e.g.
// {'descr': '<f4', 'fortran_order': False, 'shape': (24, 512), }
bool FindValue(const std::string& header, const std::string& key, std::string& value) {
  size_t k = header.find("'" + key + "'");
  if (k == std::string::npos) return false;
  size_t colon = header.find(':', k);
  if (colon == std::string::npos) return false;
  size_t start = colon + 1, end = start;
  int depth = 0;
  for (; end < header.size(); ++end) {
    const char ch = header[end];
    if (ch == '(') ++depth;
    if (ch == ')') --depth;
    if ((ch == ',' && depth == 0) || (ch == '}' && depth == 0)) break;
  }
  value = std::string(absl::StripAsciiWhitespace(header.substr(start, end - start)));
  return true;
}

}  // namespace

absl::StatusOr<NpyArray> ReadNpy(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path.string(), ": cannot open"));
  char magic[8];
  if (!in.read(magic, 8) || std::memcmp(magic, "\x93NUMPY", 6) != 0) return Bad(path, "not a .npy file (bad magic)");
  const int major = static_cast<unsigned char>(magic[6]);
  if (major != 1 && major != 2) return Bad(path, absl::StrCat("unsupported .npy version ", major));
  // Version 1 stores the header length as u16, version 2 as u32 (both little-endian).
  unsigned char len_bytes[4] = {0, 0, 0, 0};
  const int len_size = major == 1 ? 2 : 4;
  if (!in.read(reinterpret_cast<char*>(len_bytes), len_size)) return Bad(path, "truncated header length");
  const uint32_t header_len = len_bytes[0] | (len_bytes[1] << 8) | (len_bytes[2] << 16) | (uint32_t{len_bytes[3]} << 24);
  std::string header(header_len, '\0');
  if (!in.read(header.data(), header_len)) return Bad(path, "truncated header");

  std::string descr, fortran, shape_text;
  if (!FindValue(header, "descr", descr) || !FindValue(header, "fortran_order", fortran) ||
      !FindValue(header, "shape", shape_text)) {
    return Bad(path, absl::StrCat("header dict lacks descr/fortran_order/shape: ", header));
  }
  if (descr != "'<f4'") return Bad(path, absl::StrCat("dtype ", descr, " is not little-endian float32 '<f4'"));
  if (fortran != "False") return Bad(path, "Fortran-order arrays are not supported");
  if (shape_text.size() < 2 || shape_text.front() != '(' || shape_text.back() != ')') {
    return Bad(path, absl::StrCat("cannot parse shape ", shape_text));
  }
  NpyArray arr;
  uint64_t count = 1;
  for (absl::string_view part : absl::StrSplit(shape_text.substr(1, shape_text.size() - 2), ',', absl::SkipWhitespace())) {
    int64_t d;
    if (!absl::SimpleAtoi(part, &d) || d < 0) return Bad(path, absl::StrCat("bad dimension '", part, "' in shape ", shape_text));
    if (d != 0 && count > std::numeric_limits<uint64_t>::max() / 4 / static_cast<uint64_t>(d)) {
      return Bad(path, absl::StrCat("shape ", shape_text, " is too large"));
    }
    arr.shape.push_back(d);
    count *= static_cast<uint64_t>(d);
  }
  const std::streamoff data_start = in.tellg();
  in.seekg(0, std::ios::end);
  const uint64_t available = static_cast<uint64_t>(in.tellg() - data_start);
  if (available != count * 4) {
    return Bad(path, absl::StrCat("shape ", shape_text, " needs ", count * 4, " data bytes, the file has ", available));
  }
  in.seekg(data_start);
  arr.data.resize(count);
  // The host is little-endian (x86-64, aarch64), matching '<f4': the bytes are the floats.
  if (count > 0 && !in.read(reinterpret_cast<char*>(arr.data.data()), static_cast<std::streamsize>(count * 4))) {
    return Bad(path, "read failed");
  }
  return arr;
}

}  // namespace doppler::test
