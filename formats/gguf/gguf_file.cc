// Opening a GGUF file: header, metadata, tensor infos, then the data section, each checked
// against the file before anything is kept. Layout (little-endian):
//   "GGUF", u32 version, u64 tensor_count, u64 kv_count,
//   kv_count x (string key, u32 type, value),
//   tensor_count x (string name, u32 n_dims, u64 dims[n_dims], u32 ggml_type, u64 offset),
//   padding to `general.alignment` (default 32), the data section (offsets are relative to it).
// Strings are a u64 byte length and the bytes; arrays a u32 element type, a u64 count, elements.
#include "formats/gguf/gguf_file.h"

#include <algorithm>
#include <bit>
#include <optional>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "formats/gguf/byte_cursor.h"
#include "formats/gguf/gguf_value.h"

namespace doppler::formats {
namespace {

using gguf_internal::ByteCursor;

constexpr uint64_t kDefaultAlignment = 32;
constexpr uint32_t kMaxDims = 4;
// Smallest encodings, to bound the counts in the header by the bytes left: a key/value pair is
// at least an 8-byte key length, a type and a 1-byte value; a tensor info at least a name
// length, n_dims, one dim, a type and an offset.
constexpr uint64_t kMinKvBytes = 8 + 4 + 1;
constexpr uint64_t kMinTensorInfoBytes = 8 + 4 + 8 + 4 + 8;

struct GgmlType {
  uint32_t id;
  const char* name;
  std::optional<graph::DType> dtype;  // set for the types doppler loads
};

// ggml's type numbers. Unsupported ones are listed only to name them in errors.
constexpr GgmlType kGgmlTypes[] = {
    {0, "F32", graph::DType::kF32},       {1, "F16", graph::DType::kF16},       {2, "Q4_0", graph::DType::kQ4_0},
    {3, "Q4_1", graph::DType::kQ4_1},     {6, "Q5_0", graph::DType::kQ5_0},     {7, "Q5_1", graph::DType::kQ5_1},
    {8, "Q8_0", graph::DType::kQ8_0},     {9, "Q8_1", {}},                      {10, "Q2_K", graph::DType::kQ2_K},
    {11, "Q3_K", graph::DType::kQ3_K},    {12, "Q4_K", graph::DType::kQ4_K},    {13, "Q5_K", graph::DType::kQ5_K},
    {14, "Q6_K", graph::DType::kQ6_K},    {15, "Q8_K", {}},                     {16, "IQ2_XXS", {}},
    {17, "IQ2_XS", {}},                   {18, "IQ3_XXS", {}},                  {19, "IQ1_S", {}},
    {20, "IQ4_NL", graph::DType::kIQ4_NL}, {21, "IQ3_S", {}},                   {22, "IQ2_S", {}},
    {23, "IQ4_XS", graph::DType::kIQ4_XS}, {24, "I8", {}},                      {25, "I16", {}},
    {26, "I32", {}},                      {27, "I64", {}},                      {28, "F64", {}},
    {29, "IQ1_M", {}},                    {30, "BF16", graph::DType::kBF16},    {34, "TQ1_0", {}},
    {35, "TQ2_0", {}},                    {39, "MXFP4", graph::DType::kMXFP4},
};

const GgmlType* FindGgmlType(uint32_t id) {
  for (const GgmlType& t : kGgmlTypes) {
    if (t.id == id) return &t;
  }
  return nullptr;
}

absl::Status Bad(size_t offset, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat("byte ", offset, ": ", what));
}

// Returns `status` with the file path in front, so every message names the file.
absl::Status InFile(const std::string& path, const absl::Status& status) {
  return absl::Status(status.code(), absl::StrCat(path, ": ", status.message()));
}

}  // namespace

// Friend of GgufFile: fills one in, step by step, from its mapped bytes.
class GgufParser {
 public:
  explicit GgufParser(GgufFile& f) : f_(f), in_(f.map_.data(), f.map_.size()) {}

  absl::Status Parse() {
    uint64_t n_tensors = 0, n_kv = 0;
    if (absl::Status st = Header(n_tensors, n_kv); !st.ok()) return st;
    for (uint64_t i = 0; i < n_kv; ++i) {
      if (absl::Status st = KeyValue(i); !st.ok()) return st;
    }
    if (absl::Status st = Alignment(); !st.ok()) return st;
    for (uint64_t i = 0; i < n_tensors; ++i) {
      if (absl::Status st = TensorInfo(i); !st.ok()) return st;
    }
    return DataSection();
  }

 private:
  absl::Status Header(uint64_t& n_tensors, uint64_t& n_kv) {
    absl::StatusOr<uint32_t> magic = in_.U32("the magic");
    if (!magic.ok()) return absl::InvalidArgumentError("too short for a GGUF header: not a GGUF file?");
    if (*magic != 0x46554747) {  // "GGUF" read as a little-endian u32
      return absl::InvalidArgumentError("does not start with \"GGUF\": not a GGUF file");
    }
    absl::StatusOr<uint32_t> version = in_.U32("the version");
    if (!version.ok()) return version.status();
    if (*version != 2 && *version != 3) {
      const uint32_t swapped_version = __builtin_bswap32(*version);
      const bool swapped = swapped_version == 2 || swapped_version == 3;
      return Bad(4, absl::StrCat("GGUF version ", *version, " is not supported (only 2 and 3)",
                                 swapped ? "; this looks like a big-endian file" : ""));
    }
    f_.version_ = *version;
    absl::StatusOr<uint64_t> t = in_.U64("the tensor count");
    if (!t.ok()) return t.status();
    absl::StatusOr<uint64_t> kv = in_.U64("the metadata count");
    if (!kv.ok()) return kv.status();
    if (*kv > in_.remaining() / kMinKvBytes) {
      return Bad(16, absl::StrCat("metadata count ", *kv, " cannot fit in the ", in_.remaining(), " bytes left"));
    }
    if (*t > in_.remaining() / kMinTensorInfoBytes) {
      return Bad(8, absl::StrCat("tensor count ", *t, " cannot fit in the ", in_.remaining(), " bytes left"));
    }
    n_tensors = *t;
    n_kv = *kv;
    return absl::OkStatus();
  }

  absl::Status KeyValue(uint64_t i) {
    const size_t at = in_.file_offset();
    absl::StatusOr<absl::string_view> key = in_.String(absl::StrCat("the key of metadata entry ", i));
    if (!key.ok()) return key.status();
    const std::string name(*key);
    if (name.empty()) return Bad(at, absl::StrCat("metadata entry ", i, " has an empty key"));
    if (f_.metadata_.count(name) != 0) return Bad(at, absl::StrCat("metadata key '", name, "' appears twice"));
    absl::StatusOr<uint32_t> raw = in_.U32(absl::StrCat("the type of metadata '", name, "'"));
    if (!raw.ok()) return raw.status();
    std::optional<GgufType> type = gguf_internal::ToGgufType(*raw);
    if (!type) return Bad(in_.file_offset() - 4, absl::StrCat("metadata '", name, "' has unknown type ", *raw));
    absl::StatusOr<GgufValue> v = gguf_internal::ReadValue(in_, *type, absl::StrCat("metadata '", name, "'"));
    if (!v.ok()) return v.status();
    f_.keys_.push_back(name);
    f_.metadata_.emplace(name, *std::move(v));
    return absl::OkStatus();
  }

  absl::Status Alignment() {
    const GgufValue* v = f_.Find("general.alignment");
    if (v == nullptr) return absl::OkStatus();
    const uint64_t* a = std::get_if<uint64_t>(&v->value);  // the spec says u32; any unsigned will do
    if (a == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("general.alignment holds ", GgufTypeName(v->type), ", not an unsigned integer"));
    }
    if (!std::has_single_bit(*a)) {
      return absl::InvalidArgumentError(absl::StrCat("general.alignment (", *a, ") is not a power of two"));
    }
    f_.alignment_ = *a;
    return absl::OkStatus();
  }

  absl::Status TensorInfo(uint64_t i) {
    const size_t at = in_.file_offset();
    absl::StatusOr<absl::string_view> key = in_.String(absl::StrCat("the name of tensor ", i));
    if (!key.ok()) return key.status();
    GgufTensorInfo t;
    t.name = std::string(*key);
    const std::string what = absl::StrCat("tensor '", t.name, "'");
    if (t.name.empty()) return Bad(at, absl::StrCat("tensor ", i, " has an empty name"));
    if (f_.tensor_index_.count(t.name) != 0) return Bad(at, absl::StrCat(what, " appears twice"));

    absl::StatusOr<uint32_t> n_dims = in_.U32(absl::StrCat("the dimension count of ", what));
    if (!n_dims.ok()) return n_dims.status();
    if (*n_dims < 1 || *n_dims > kMaxDims) {
      return Bad(in_.file_offset() - 4, absl::StrCat(what, " has ", *n_dims, " dimensions (1 to ", kMaxDims, " allowed)"));
    }
    uint64_t count = 1;
    for (uint32_t d = 0; d < *n_dims; ++d) {
      absl::StatusOr<uint64_t> dim = in_.U64(absl::StrCat("dimension ", d, " of ", what));
      if (!dim.ok()) return dim.status();
      if (*dim == 0 || *dim > static_cast<uint64_t>(INT64_MAX) || __builtin_mul_overflow(count, *dim, &count) ||
          count > static_cast<uint64_t>(INT64_MAX)) {
        return Bad(in_.file_offset() - 8, absl::StrCat(what, ": dimension ", d, " (", *dim,
                                                      ") is zero or makes the element count overflow"));
      }
      t.dims.push_back(static_cast<int64_t>(*dim));
    }
    const std::string shape = absl::StrCat("[", absl::StrJoin(t.dims, ", "), "]");

    absl::StatusOr<uint32_t> type_id = in_.U32(absl::StrCat("the type of ", what));
    if (!type_id.ok()) return type_id.status();
    const GgmlType* type = FindGgmlType(*type_id);
    if (type == nullptr || !type->dtype) {
      return Bad(in_.file_offset() - 4,
                 absl::StrCat(what, " has ", type ? absl::StrCat("type ", type->name) : "unknown type", " (", *type_id,
                              "), which doppler cannot load (supported: F32, F16, BF16, Q8_0, Q5_0, Q5_1, Q4_0, Q4_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS)"));
    }
    t.dtype = *type->dtype;
    const graph::DTypeInfo& info = graph::Info(t.dtype);
    if (t.dims[0] % info.block_elems != 0) {
      return Bad(at, absl::StrCat(what, " of type ", type->name, " has rows of ", t.dims[0],
                                  " values, not a multiple of its block size ", info.block_elems));
    }
    uint64_t nbytes = 0;
    if (__builtin_mul_overflow(count / info.block_elems, static_cast<uint64_t>(info.block_bytes), &nbytes)) {
      return Bad(at, absl::StrCat(what, " ", shape, " of type ", type->name, " is too large (its size overflows 64 bits)"));
    }
    t.nbytes = static_cast<size_t>(nbytes);

    absl::StatusOr<uint64_t> offset = in_.U64(absl::StrCat("the data offset of ", what));
    if (!offset.ok()) return offset.status();
    if (*offset % f_.alignment_ != 0) {
      return Bad(in_.file_offset() - 8, absl::StrCat(what, " ", shape, ": data offset ", *offset,
                                                    " is not a multiple of the alignment ", f_.alignment_));
    }
    t.offset = *offset;  // relative for now; DataSection() makes it absolute once checked
    f_.tensor_index_.emplace(t.name, f_.tensors_.size());
    f_.tensors_.push_back(std::move(t));
    return absl::OkStatus();
  }

  absl::Status DataSection() {
    const uint64_t size = f_.map_.size();
    const uint64_t end_of_infos = in_.file_offset();
    uint64_t start = 0;
    if (__builtin_add_overflow(end_of_infos, f_.alignment_ - 1, &start)) {
      return absl::InvalidArgumentError(absl::StrCat("alignment ", f_.alignment_, " is too large"));
    }
    start -= start % f_.alignment_;
    for (GgufTensorInfo& t : f_.tensors_) {
      uint64_t begin = 0, end = 0;
      if (__builtin_add_overflow(start, t.offset, &begin) || __builtin_add_overflow(begin, t.nbytes, &end) ||
          end > size) {
        return absl::InvalidArgumentError(
            absl::StrCat("tensor '", t.name, "': data at offset ", t.offset, " (+", t.nbytes, " bytes) of the data section at byte ",
                         start, " runs past the end of the file (", size, " bytes): file truncated?"));
      }
      t.offset = begin;
    }
    // No two tensors may share bytes: a writer bug or a crafted file, either way not weights.
    std::vector<const GgufTensorInfo*> by_offset;
    for (const GgufTensorInfo& t : f_.tensors_) by_offset.push_back(&t);
    std::sort(by_offset.begin(), by_offset.end(), [](auto* a, auto* b) { return a->offset < b->offset; });
    for (size_t i = 1; i < by_offset.size(); ++i) {
      const GgufTensorInfo& a = *by_offset[i - 1];
      const GgufTensorInfo& b = *by_offset[i];
      if (a.offset + a.nbytes > b.offset) {
        return absl::InvalidArgumentError(absl::StrCat("tensors '", a.name, "' and '", b.name, "' overlap in the file"));
      }
    }
    return absl::OkStatus();
  }

  GgufFile& f_;
  ByteCursor in_;
};

absl::StatusOr<std::unique_ptr<GgufFile>> GgufFile::Open(const std::filesystem::path& path) {
  absl::StatusOr<MappedFile> map = MappedFile::Open(path);
  if (!map.ok()) return map.status();
  std::unique_ptr<GgufFile> f(new GgufFile());
  f->map_ = *std::move(map);
  f->alignment_ = kDefaultAlignment;
  if (absl::Status st = GgufParser(*f).Parse(); !st.ok()) return InFile(path.string(), st);
  return f;
}

bool GgufFile::Has(std::string_view name) const { return tensor_index_.find(name) != tensor_index_.end(); }

absl::StatusOr<TensorView> GgufFile::Get(std::string_view name) const {
  auto it = tensor_index_.find(name);
  if (it == tensor_index_.end()) {
    return absl::NotFoundError(absl::StrCat("tensor '", std::string(name), "' not found in ", path()));
  }
  const GgufTensorInfo& t = tensors_[it->second];
  return TensorView{t.name, t.dtype, std::vector<int64_t>(t.dims.rbegin(), t.dims.rend()), map_.data() + t.offset,
                    t.nbytes, path()};
}

std::vector<std::string> GgufFile::Names() const {
  std::vector<std::string> names;
  for (const auto& [name, unused] : tensor_index_) names.push_back(name);
  return names;  // std::map keeps them sorted
}

}  // namespace doppler::formats
