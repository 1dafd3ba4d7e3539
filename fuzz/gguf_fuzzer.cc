// libFuzzer target for the GGUF reader and everything that consumes an opened file: metadata
// getters (nested arrays included), tensor views and their dequantization, the config reader and
// the HF-name adapter (which reorders q/k rows).
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "checkpoints/gguf_config.h"
#include "checkpoints/hf_names.h"
#include "formats/gguf/gguf_file.h"
#include "fuzz/fuzz_file.h"
#include "quant/quant.h"

namespace doppler::fuzz {
namespace {

using formats::GgufArray;
using formats::GgufFile;
using formats::GgufValue;

void WalkArray(const GgufFile& f, const GgufArray& a) {
  for (const GgufValue& e : f.Elements(a)) {
    if (const auto* inner = std::get_if<GgufArray>(&e.value)) WalkArray(f, *inner);
  }
}

void DecodeIfSmall(const formats::TensorView& t) {
  int64_t n = 1;
  for (int64_t d : t.shape) {
    if (d > kMaxDecodedValues || n * d > kMaxDecodedValues) return;
    n *= d;
  }
  std::vector<float> out(static_cast<size_t>(n));
  (void)quant::DequantizeRow(t.dtype, t.data, n, out.data());
}

void Exercise(std::unique_ptr<GgufFile> f) {
  for (const std::string& key : f->Keys()) {
    (void)f->GetString(key);
    (void)f->GetInt(key);
    (void)f->GetFloat(key);
    (void)f->GetBool(key);
    (void)f->GetStringArray(key);
    (void)f->GetIntArray(key);
    (void)f->GetFloatArray(key);
    if (const auto* a = std::get_if<GgufArray>(&f->Find(key)->value)) WalkArray(*f, *a);
  }
  for (const std::string& name : f->Names()) {
    absl::StatusOr<formats::TensorView> t = f->Get(name);
    if (t.ok()) DecodeIfSmall(*t);
  }
  (void)checkpoints::ConfigFromGguf(*f);
  absl::StatusOr<std::unique_ptr<formats::WeightStore>> hf = checkpoints::OpenHfNamedGguf(std::move(f));
  if (!hf.ok()) return;
  for (const std::string& name : (*hf)->Names()) {
    absl::StatusOr<formats::TensorView> t = (*hf)->Get(name);
    if (t.ok()) DecodeIfSmall(*t);
  }
}

}  // namespace
}  // namespace doppler::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace doppler::fuzz;
  static FuzzFile file;
  // The exact bytes (every truncation path), then zero-padded (headers reach the tensor code).
  for (size_t min_size : {size_t{0}, kPaddedSize}) {
    absl::StatusOr<std::unique_ptr<doppler::formats::GgufFile>> f =
        doppler::formats::GgufFile::Open(file.Write(data, size, min_size));
    if (f.ok()) Exercise(*std::move(f));
  }
  return 0;
}
