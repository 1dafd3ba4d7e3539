#include "graph/shape.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace doppler::graph {

int64_t NumElements(const Shape& shape, int64_t tokens) {
  int64_t n = 1;
  for (const Dim& d : shape) n *= d.Resolve(tokens);
  return n;
}

std::vector<int64_t> Resolve(const Shape& shape, int64_t tokens) {
  std::vector<int64_t> out;
  out.reserve(shape.size());
  for (const Dim& d : shape) out.push_back(d.Resolve(tokens));
  return out;
}

std::string ToString(const Shape& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", ", [](std::string* out, const Dim& d) {
    absl::StrAppend(out, d.tokens ? std::string("T") : absl::StrCat(d.value));
  }), "]");
}

std::string ToString(const TensorType& type) { return absl::StrCat(Name(type.dtype), ToString(type.shape)); }

}  // namespace doppler::graph
