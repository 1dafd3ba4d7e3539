#include "formats/gguf/gguf_writer.h"

#include <bit>
#include <cstdio>
#include <cstring>
#include <memory>
#include <set>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace doppler::formats {
namespace {

// Metadata value types, numbered as in the file.
constexpr uint32_t kU32 = 4, kI32 = 5, kF32 = 6, kBool = 7, kString = 8, kArray = 9;

template <typename T>
void Put(std::vector<uint8_t>& out, T v) {
  uint8_t b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));  // the host is little-endian, as GGUF (checked below)
  out.insert(out.end(), b, b + sizeof(T));
}

void PutString(std::vector<uint8_t>& out, const std::string& s) {
  Put<uint64_t>(out, s.size());
  out.insert(out.end(), s.begin(), s.end());
}

uint64_t AlignUp(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

static_assert(std::endian::native == std::endian::little, "GGUF is little-endian; so must the host be");

struct FileCloser {
  void operator()(std::FILE* f) const {
    if (f != nullptr) std::fclose(f);
  }
};

}  // namespace

absl::StatusOr<uint32_t> GgmlTypeOf(graph::DType dtype) {
  switch (dtype) {
    case graph::DType::kF32: return 0;
    case graph::DType::kF16: return 1;
    case graph::DType::kQ8_0: return 8;
    case graph::DType::kQ5_0: return 6;
    case graph::DType::kQ4_0: return 2;
    case graph::DType::kQ4_1: return 3;
    case graph::DType::kQ5_1: return 7;
    case graph::DType::kQ2_K: return 10;
    case graph::DType::kQ3_K: return 11;
    case graph::DType::kIQ4_NL: return 20;
    case graph::DType::kIQ4_XS: return 23;
    case graph::DType::kQ4_K: return 12;
    case graph::DType::kQ5_K: return 13;
    case graph::DType::kQ6_K: return 14;
    case graph::DType::kBF16: return 30;
    case graph::DType::kMXFP4: return 39;
    default: return absl::InvalidArgumentError(absl::StrCat("no GGUF tensor type for ", graph::Name(dtype)));
  }
}

void GgufWriter::Key(const std::string& key, uint32_t type) {
  keys_.push_back(key);
  ++kv_count_;
  PutString(kv_, key);
  Put<uint32_t>(kv_, type);
}

void GgufWriter::AddString(const std::string& key, const std::string& value) {
  Key(key, kString);
  PutString(kv_, value);
}
void GgufWriter::AddU32(const std::string& key, uint32_t value) {
  Key(key, kU32);
  Put(kv_, value);
}
void GgufWriter::AddF32(const std::string& key, float value) {
  Key(key, kF32);
  Put(kv_, value);
}
void GgufWriter::AddBool(const std::string& key, bool value) {
  Key(key, kBool);
  Put<uint8_t>(kv_, value ? 1 : 0);
}
void GgufWriter::AddStringArray(const std::string& key, const std::vector<std::string>& values) {
  Key(key, kArray);
  Put<uint32_t>(kv_, kString);
  Put<uint64_t>(kv_, values.size());
  for (const std::string& v : values) PutString(kv_, v);
}
void GgufWriter::AddF32Array(const std::string& key, const std::vector<float>& values) {
  Key(key, kArray);
  Put<uint32_t>(kv_, kF32);
  Put<uint64_t>(kv_, values.size());
  for (float v : values) Put(kv_, v);
}
void GgufWriter::AddI32Array(const std::string& key, const std::vector<int32_t>& values) {
  Key(key, kArray);
  Put<uint32_t>(kv_, kI32);
  Put<uint64_t>(kv_, values.size());
  for (int32_t v : values) Put(kv_, v);
}

absl::Status GgufWriter::AddTensor(const std::string& name, graph::DType dtype, const std::vector<int64_t>& shape,
                                   Producer produce) {
  if (!GgmlTypeOf(dtype).ok()) {
    return absl::InvalidArgumentError(absl::StrCat("tensor '", name, "': no GGUF type for ", graph::Name(dtype)));
  }
  int64_t count = 1;
  for (int64_t d : shape) {
    if (d <= 0 || count > (int64_t{1} << 50) / d) {
      return absl::InvalidArgumentError(absl::StrCat("tensor '", name, "': bad shape [", absl::StrJoin(shape, ", "), "]"));
    }
    count *= d;
  }
  const int64_t block = graph::Info(dtype).block_elems;
  if (shape.empty() || shape.back() % block != 0) {
    return absl::InvalidArgumentError(absl::StrCat("tensor '", name, "': rows of [", absl::StrJoin(shape, ", "),
                                                   "] are not whole ", graph::Name(dtype), " blocks of ", block));
  }
  Tensor t{name, dtype, shape, graph::ByteSize(dtype, count), next_offset_, std::move(produce)};
  next_offset_ = AlignUp(next_offset_ + t.nbytes, alignment_);
  tensors_.push_back(std::move(t));
  return absl::OkStatus();
}

uint64_t GgufWriter::data_bytes() const { return next_offset_; }

absl::Status GgufWriter::Write(const std::filesystem::path& path, const Progress& progress) const {
  const std::string where = path.string();
  std::set<std::string> seen;
  for (const std::string& k : keys_) {
    if (!seen.insert(k).second) return absl::InvalidArgumentError(absl::StrCat(where, ": metadata key '", k, "' given twice"));
  }
  seen.clear();
  for (const Tensor& t : tensors_) {
    if (!seen.insert(t.name).second) return absl::InvalidArgumentError(absl::StrCat(where, ": tensor '", t.name, "' given twice"));
  }
  std::vector<uint8_t> header;
  header.insert(header.end(), {'G', 'G', 'U', 'F'});
  Put<uint32_t>(header, 3);
  Put<uint64_t>(header, tensors_.size());
  Put<uint64_t>(header, kv_count_);
  header.insert(header.end(), kv_.begin(), kv_.end());
  for (const Tensor& t : tensors_) {
    PutString(header, t.name);
    Put<uint32_t>(header, static_cast<uint32_t>(t.shape.size()));
    for (auto it = t.shape.rbegin(); it != t.shape.rend(); ++it) Put<uint64_t>(header, static_cast<uint64_t>(*it));
    Put<uint32_t>(header, *GgmlTypeOf(t.dtype));
    Put<uint64_t>(header, t.offset);
  }
  header.resize(AlignUp(header.size(), alignment_), 0);

  const std::filesystem::path tmp = std::filesystem::path(path.string() + ".tmp");
  std::unique_ptr<std::FILE, FileCloser> f(std::fopen(tmp.c_str(), "wb"));
  if (f == nullptr) return absl::PermissionDeniedError(absl::StrCat("cannot write ", tmp.string(), ": ", std::strerror(errno)));
  auto fail = [&](const std::string& what) {
    f.reset();
    std::error_code ignored;
    std::filesystem::remove(tmp, ignored);
    return absl::DataLossError(absl::StrCat(where, ": ", what));
  };
  auto write = [&](const void* data, size_t n) { return n == 0 || std::fwrite(data, 1, n, f.get()) == n; };
  if (!write(header.data(), header.size())) return fail("write failed");
  uint64_t pos = 0;
  const std::vector<uint8_t> zeros(alignment_, 0);
  for (size_t i = 0; i < tensors_.size(); ++i) {
    const Tensor& t = tensors_[i];
    absl::StatusOr<std::vector<uint8_t>> bytes = t.produce();
    if (!bytes.ok()) {
      absl::Status s = fail(absl::StrCat("tensor '", t.name, "': ", bytes.status().message()));
      return absl::Status(bytes.status().code(), s.message());
    }
    if (bytes->size() != t.nbytes) {
      return fail(absl::StrCat("tensor '", t.name, "': ", bytes->size(), " bytes produced, ", t.nbytes, " expected"));
    }
    if (!write(zeros.data(), t.offset - pos) || !write(bytes->data(), bytes->size())) return fail("write failed");
    pos = t.offset + t.nbytes;
    if (progress) progress(i + 1, tensors_.size(), t.name);
  }
  if (!write(zeros.data(), next_offset_ - pos)) return fail("write failed");
  if (std::fflush(f.get()) != 0 || std::fclose(f.release()) != 0) return fail("write failed");
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::filesystem::remove(tmp, ec);
    return absl::DataLossError(absl::StrCat("cannot rename ", tmp.string(), " to ", where));
  }
  return absl::OkStatus();
}

}  // namespace doppler::formats
