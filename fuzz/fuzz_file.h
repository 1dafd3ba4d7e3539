// Hands a fuzzer input to readers that take a path: the bytes go into an in-memory file (memfd)
// opened again through /proc/self/fd/N, so a run costs no disk I/O and leaves nothing behind.
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace doppler::fuzz {

class FuzzFile {
 public:
  FuzzFile() : fd_(memfd_create("doppler_fuzz", MFD_CLOEXEC)) {
    if (fd_ < 0) __builtin_trap();  // the harness cannot run at all: stop loudly
  }
  ~FuzzFile() { close(fd_); }

  // Makes the file hold `data`, then zeros up to `min_size` bytes (a sparse extension, so a large
  // min_size is free). Returns the path to open. Readers must have unmapped the previous contents.
  std::string Write(const uint8_t* data, size_t size, size_t min_size = 0) {
    if (ftruncate(fd_, 0) != 0) __builtin_trap();
    for (size_t done = 0; done < size;) {
      const ssize_t n = pwrite(fd_, data + done, size - done, static_cast<off_t>(done));
      if (n <= 0) __builtin_trap();
      done += static_cast<size_t>(n);
    }
    if (min_size > size && ftruncate(fd_, static_cast<off_t>(min_size)) != 0) __builtin_trap();
    return "/proc/self/fd/" + std::to_string(fd_);
  }

 private:
  int fd_;
};

// Fuzzed headers mostly point at data past the (short) input; zero-padding the file to this size
// lets such headers open, so mutations reach the code that uses the tensors.
constexpr size_t kPaddedSize = 8u << 20;

// Tensors up to this many values are decoded: enough to touch every format, bounded in time.
constexpr int64_t kMaxDecodedValues = 1 << 16;

}  // namespace doppler::fuzz
