#include "formats/gguf/gguf_value.h"

#include <cstring>
#include <iterator>

#include "absl/strings/str_cat.h"

namespace doppler::formats {

const char* GgufTypeName(GgufType t) {
  static const char* const kNames[] = {"u8",  "i8",     "u16",   "i16", "u32", "i32", "f32",
                                       "bool", "string", "array", "u64", "i64", "f64"};
  const auto i = static_cast<uint32_t>(t);
  return i < std::size(kNames) ? kNames[i] : "unknown";
}

namespace gguf_internal {
namespace {

// Arrays inside arrays are legal; this bounds the recursion a hostile file can cause.
constexpr int kMaxArrayDepth = 8;

// Bytes of one value of a fixed-size type; 0 for string and array.
int FixedSize(GgufType t) {
  switch (t) {
    case GgufType::kU8: case GgufType::kI8: case GgufType::kBool: return 1;
    case GgufType::kU16: case GgufType::kI16: return 2;
    case GgufType::kU32: case GgufType::kI32: case GgufType::kF32: return 4;
    case GgufType::kU64: case GgufType::kI64: case GgufType::kF64: return 8;
    case GgufType::kString: case GgufType::kArray: return 0;
  }
  return 0;
}

// The fewest bytes one element can take, to bound counts by the bytes left.
uint64_t MinEncodedSize(GgufType t) {
  if (t == GgufType::kString) return 8;   // the length
  if (t == GgufType::kArray) return 12;   // element type and count
  return static_cast<uint64_t>(FixedSize(t));
}

absl::StatusOr<GgufValue> Read(ByteCursor& in, GgufType type, const std::string& what, int depth);

// Checks every element of an array of `count` elements of `elem` (strings and nested arrays are
// walked, bools checked) without copying any.
absl::Status WalkArray(ByteCursor& in, GgufType elem, uint64_t count, const std::string& what, int depth) {
  if (elem != GgufType::kString && elem != GgufType::kArray && elem != GgufType::kBool) {
    return in.Skip(count * MinEncodedSize(elem), what);  // count was bounded by the bytes left
  }
  const std::string element = absl::StrCat("an element of ", what);
  for (uint64_t i = 0; i < count; ++i) {
    if (elem == GgufType::kString) {
      absl::StatusOr<absl::string_view> s = in.String(element);
      if (!s.ok()) return s.status();
    } else {
      absl::StatusOr<GgufValue> v = Read(in, elem, element, depth);
      if (!v.ok()) return v.status();
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<GgufValue> ReadArray(ByteCursor& in, const std::string& what, int depth) {
  if (depth >= kMaxArrayDepth) {
    return absl::InvalidArgumentError(absl::StrCat("byte ", in.file_offset(), ": ", what, " nests arrays more than ",
                                                   kMaxArrayDepth, " deep"));
  }
  absl::StatusOr<uint32_t> raw = in.U32(absl::StrCat("the element type of ", what));
  if (!raw.ok()) return raw.status();
  std::optional<GgufType> elem = ToGgufType(*raw);
  if (!elem) {
    return absl::InvalidArgumentError(absl::StrCat("byte ", in.file_offset() - 4, ": ", what,
                                                   " has unknown element type ", *raw));
  }
  absl::StatusOr<uint64_t> count = in.U64(absl::StrCat("the length of ", what));
  if (!count.ok()) return count.status();
  if (*count > in.remaining() / MinEncodedSize(*elem)) {
    return absl::InvalidArgumentError(absl::StrCat("byte ", in.file_offset() - 8, ": ", what, " claims ", *count,
                                                   " elements of type ", GgufTypeName(*elem), " but only ",
                                                   in.remaining(), " bytes are left in the file"));
  }
  const uint8_t* start = in.here();
  const size_t start_pos = in.pos();
  if (absl::Status st = WalkArray(in, *elem, *count, what, depth + 1); !st.ok()) return st;
  return GgufValue{GgufType::kArray, GgufArray{*elem, *count, start, in.pos() - start_pos}};
}

absl::StatusOr<GgufValue> Read(ByteCursor& in, GgufType type, const std::string& what, int depth) {
  if (type == GgufType::kArray) return ReadArray(in, what, depth);
  if (type == GgufType::kString) {
    absl::StatusOr<absl::string_view> s = in.String(what);
    if (!s.ok()) return s.status();
    return GgufValue{type, std::string(*s)};
  }
  const int size = FixedSize(type);
  absl::StatusOr<uint64_t> bits = in.Uint(size, what);
  if (!bits.ok()) return bits.status();
  switch (type) {
    case GgufType::kBool:
      if (*bits > 1) {
        return absl::InvalidArgumentError(absl::StrCat("byte ", in.file_offset() - 1, ": ", what,
                                                       " is a bool holding ", *bits, " (not 0 or 1)"));
      }
      return GgufValue{type, *bits == 1};
    case GgufType::kI8: return GgufValue{type, static_cast<int64_t>(static_cast<int8_t>(*bits))};
    case GgufType::kI16: return GgufValue{type, static_cast<int64_t>(static_cast<int16_t>(*bits))};
    case GgufType::kI32: return GgufValue{type, static_cast<int64_t>(static_cast<int32_t>(*bits))};
    case GgufType::kI64: return GgufValue{type, static_cast<int64_t>(*bits)};
    case GgufType::kF32: {
      const uint32_t b32 = static_cast<uint32_t>(*bits);
      float f;
      std::memcpy(&f, &b32, 4);
      return GgufValue{type, static_cast<double>(f)};
    }
    case GgufType::kF64: {
      double d;
      std::memcpy(&d, &*bits, 8);
      return GgufValue{type, d};
    }
    default: return GgufValue{type, *bits};  // the unsigned types
  }
}

}  // namespace

std::optional<GgufType> ToGgufType(uint32_t raw) {
  if (raw > static_cast<uint32_t>(GgufType::kF64)) return std::nullopt;
  return static_cast<GgufType>(raw);
}

absl::StatusOr<GgufValue> ReadValue(ByteCursor& in, GgufType type, const std::string& what) {
  return Read(in, type, what, 0);
}

}  // namespace gguf_internal
}  // namespace doppler::formats
