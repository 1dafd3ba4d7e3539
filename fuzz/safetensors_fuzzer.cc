// libFuzzer target for the safetensors reader: open, then read every tensor it lists.
#include <cstddef>
#include <cstdint>
#include <memory>

#include "formats/safetensors.h"
#include "fuzz/fuzz_file.h"
#include "quant/float_codec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace doppler;
  static fuzz::FuzzFile file;
  // The exact bytes (every truncation path), then zero-padded (headers reach the tensor code).
  for (size_t min_size : {size_t{0}, fuzz::kPaddedSize}) {
    absl::StatusOr<std::unique_ptr<formats::WeightStore>> store =
        formats::OpenSafetensorsFile(file.Write(data, size, min_size));
    if (!store.ok()) continue;
    for (const std::string& name : (*store)->Names()) {
      absl::StatusOr<formats::TensorView> t = (*store)->Get(name);
      if (t.ok() && t->nbytes <= 4 * fuzz::kMaxDecodedValues) (void)quant::ToFloat32(*t);
    }
  }
  return 0;
}
