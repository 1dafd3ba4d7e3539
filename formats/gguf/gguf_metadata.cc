// Typed access to GGUF metadata. Integer getters accept every integer width (writers differ on
// u32 vs i32 vs u64 for the same key); float getters accept f32 and f64 and integers.
#include <limits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "formats/gguf/byte_cursor.h"
#include "formats/gguf/gguf_file.h"
#include "formats/gguf/gguf_value.h"

namespace doppler::formats {
namespace {

bool IsInt(GgufType t) {
  return t != GgufType::kF32 && t != GgufType::kF64 && t != GgufType::kBool && t != GgufType::kString &&
         t != GgufType::kArray;
}

std::optional<int64_t> AsInt(const GgufValue& v) {
  if (const auto* i = std::get_if<int64_t>(&v.value)) return *i;
  if (const auto* u = std::get_if<uint64_t>(&v.value)) {
    if (*u <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return static_cast<int64_t>(*u);
  }
  return std::nullopt;
}

std::optional<double> AsFloat(const GgufValue& v) {
  if (const auto* d = std::get_if<double>(&v.value)) return *d;
  if (const auto* i = std::get_if<int64_t>(&v.value)) return static_cast<double>(*i);
  if (const auto* u = std::get_if<uint64_t>(&v.value)) return static_cast<double>(*u);
  return std::nullopt;
}

std::string TypeOf(const GgufValue& v) {
  if (const auto* a = std::get_if<GgufArray>(&v.value)) return absl::StrCat("an array of ", GgufTypeName(a->elem_type));
  return GgufTypeName(v.type);
}

absl::Status WrongType(const std::string& file, std::string_view key, const GgufValue& v, const char* wanted) {
  return absl::InvalidArgumentError(
      absl::StrCat(file, ": metadata key '", std::string(key), "' holds ", TypeOf(v), ", not ", wanted));
}

}  // namespace

const GgufValue* GgufFile::Find(std::string_view key) const {
  auto it = metadata_.find(key);
  return it == metadata_.end() ? nullptr : &it->second;
}

absl::StatusOr<const GgufValue*> GgufFile::Lookup(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return absl::NotFoundError(absl::StrCat(path(), ": metadata key '", std::string(key), "' is missing"));
  return v;
}

absl::StatusOr<std::string> GgufFile::GetString(std::string_view key) const {
  absl::StatusOr<const GgufValue*> v = Lookup(key);
  if (!v.ok()) return v.status();
  if (const auto* s = std::get_if<std::string>(&(*v)->value)) return *s;
  return WrongType(path(), key, **v, "a string");
}

absl::StatusOr<std::optional<int64_t>> GgufFile::GetOptionalInt(std::string_view key) const {
  if (Find(key) == nullptr) return std::optional<int64_t>();
  absl::StatusOr<int64_t> v = GetInt(key);
  if (!v.ok()) return v.status();
  return std::optional<int64_t>(*v);
}

absl::StatusOr<int64_t> GgufFile::GetInt(std::string_view key) const {
  absl::StatusOr<const GgufValue*> v = Lookup(key);
  if (!v.ok()) return v.status();
  if (std::optional<int64_t> i = AsInt(**v)) return *i;
  return WrongType(path(), key, **v, "an integer that fits in int64");
}

absl::StatusOr<double> GgufFile::GetFloat(std::string_view key) const {
  absl::StatusOr<const GgufValue*> v = Lookup(key);
  if (!v.ok()) return v.status();
  if (std::optional<double> d = AsFloat(**v)) return *d;
  return WrongType(path(), key, **v, "a number");
}

absl::StatusOr<bool> GgufFile::GetBool(std::string_view key) const {
  absl::StatusOr<const GgufValue*> v = Lookup(key);
  if (!v.ok()) return v.status();
  if (const auto* b = std::get_if<bool>(&(*v)->value)) return *b;
  return WrongType(path(), key, **v, "a bool");
}

absl::StatusOr<uint64_t> GgufFile::GetArrayLength(std::string_view key) const {
  absl::StatusOr<const GgufValue*> v = Lookup(key);
  if (!v.ok()) return v.status();
  if (const auto* a = std::get_if<GgufArray>(&(*v)->value)) return a->count;
  return WrongType(path(), key, **v, "an array");
}

std::vector<GgufValue> GgufFile::Elements(const GgufArray& array) const {
  std::vector<GgufValue> out;
  gguf_internal::ByteCursor in(array.data, array.nbytes, static_cast<size_t>(array.data - map_.data()));
  for (uint64_t i = 0; i < array.count; ++i) {
    absl::StatusOr<GgufValue> v = gguf_internal::ReadValue(in, array.elem_type, "an array element");
    if (!v.ok()) break;  // cannot happen: the array was validated when the file was opened
    out.push_back(*std::move(v));
  }
  return out;
}

absl::StatusOr<std::vector<GgufValue>> GgufFile::GetArray(std::string_view key) const {
  absl::StatusOr<const GgufValue*> v = Lookup(key);
  if (!v.ok()) return v.status();
  if (const auto* a = std::get_if<GgufArray>(&(*v)->value)) return Elements(*a);
  return WrongType(path(), key, **v, "an array");
}

absl::StatusOr<std::vector<std::string>> GgufFile::GetStringArray(std::string_view key) const {
  absl::StatusOr<const GgufValue*> v = Lookup(key);
  if (!v.ok()) return v.status();
  const auto* a = std::get_if<GgufArray>(&(*v)->value);
  if (a == nullptr || a->elem_type != GgufType::kString) return WrongType(path(), key, **v, "an array of strings");
  std::vector<std::string> out;
  for (GgufValue& e : Elements(*a)) out.push_back(std::get<std::string>(std::move(e.value)));
  return out;
}

absl::StatusOr<std::vector<int64_t>> GgufFile::GetIntArray(std::string_view key) const {
  absl::StatusOr<const GgufValue*> v = Lookup(key);
  if (!v.ok()) return v.status();
  const auto* a = std::get_if<GgufArray>(&(*v)->value);
  if (a == nullptr || !IsInt(a->elem_type)) return WrongType(path(), key, **v, "an array of integers");
  std::vector<int64_t> out;
  for (const GgufValue& e : Elements(*a)) {
    std::optional<int64_t> i = AsInt(e);
    if (!i) return WrongType(path(), key, e, "an integer that fits in int64");
    out.push_back(*i);
  }
  return out;
}

absl::StatusOr<std::vector<double>> GgufFile::GetFloatArray(std::string_view key) const {
  absl::StatusOr<const GgufValue*> v = Lookup(key);
  if (!v.ok()) return v.status();
  const auto* a = std::get_if<GgufArray>(&(*v)->value);
  if (a == nullptr || !(IsInt(a->elem_type) || a->elem_type == GgufType::kF32 || a->elem_type == GgufType::kF64)) {
    return WrongType(path(), key, **v, "an array of numbers");
  }
  std::vector<double> out;
  for (const GgufValue& e : Elements(*a)) out.push_back(*AsFloat(e));
  return out;
}

}  // namespace doppler::formats
