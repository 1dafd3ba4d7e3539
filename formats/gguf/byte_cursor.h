// A bounds-checked little-endian reader over a byte range, for the GGUF parser. Every read
// checks the bytes left first, so a truncated or lying file yields an error, never a read past
// the end. Errors say what was being read and at which byte offset.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace doppler::formats::gguf_internal {

class ByteCursor {
 public:
  // `base` is the offset of data[0] in the file, so messages give file offsets.
  ByteCursor(const uint8_t* data, size_t size, size_t base = 0) : data_(data), size_(size), base_(base) {}

  size_t pos() const { return pos_; }  // relative to data
  size_t remaining() const { return size_ - pos_; }
  const uint8_t* here() const { return data_ + pos_; }
  size_t file_offset() const { return base_ + pos_; }

  absl::StatusOr<uint64_t> Uint(int bytes, absl::string_view what) {
    if (absl::Status st = Need(static_cast<uint64_t>(bytes), what); !st.ok()) return st;
    uint64_t v = 0;
    for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | data_[pos_ + i];
    pos_ += bytes;
    return v;
  }
  absl::StatusOr<uint32_t> U32(absl::string_view what) {
    absl::StatusOr<uint64_t> v = Uint(4, what);
    if (!v.ok()) return v.status();
    return static_cast<uint32_t>(*v);
  }
  absl::StatusOr<uint64_t> U64(absl::string_view what) { return Uint(8, what); }

  // A u64 length, then that many bytes; the view points into the data.
  absl::StatusOr<absl::string_view> String(absl::string_view what) {
    absl::StatusOr<uint64_t> n = U64(absl::StrCat("the length of ", what));
    if (!n.ok()) return n.status();
    if (*n > remaining()) {
      return absl::InvalidArgumentError(absl::StrCat("byte ", file_offset() - 8, ": ", what, " claims ", *n,
                                                     " bytes but only ", remaining(), " are left in the file"));
    }
    absl::string_view s(reinterpret_cast<const char*>(here()), static_cast<size_t>(*n));
    pos_ += static_cast<size_t>(*n);
    return s;
  }

  absl::Status Skip(uint64_t n, absl::string_view what) {
    if (absl::Status st = Need(n, what); !st.ok()) return st;
    pos_ += static_cast<size_t>(n);
    return absl::OkStatus();
  }

 private:
  absl::Status Need(uint64_t n, absl::string_view what) const {
    if (n <= remaining()) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat("byte ", file_offset(), ": truncated while reading ", what,
                                                   " (", n, " bytes needed, ", remaining(), " left)"));
  }

  const uint8_t* data_;
  size_t size_;
  size_t base_;
  size_t pos_ = 0;
};

}  // namespace doppler::formats::gguf_internal
