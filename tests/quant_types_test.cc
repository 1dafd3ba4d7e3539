// The GGUF quant types users download (quant/types/ fixtures: llama.cpp's llama-quantize output,
// dequantized by gguf-py): every tensor types.json lists decodes bit for bit on the CPU, and the
// quantizers write llama-quantize's bytes.
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "formats/gguf/gguf_file.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "quant/quant.h"
#include "tests/support/fixtures.h"
#include "tests/support/npy.h"

namespace doppler::quant {
namespace {

namespace fs = std::filesystem;

fs::path TypesDir() { return test::FixturesDir() / "quant" / "types"; }

// One dequantized reference: a tensor of a GGUF file and its values.
struct TypeRef {
  std::string gguf, tensor, ggml_type, npy;
};

std::vector<TypeRef> TypeRefs() {
  const nlohmann::json index = test::ReadJsonFile(TypesDir() / "types.json");
  std::vector<TypeRef> refs;
  for (const auto& [file, entry] : index.items()) {
    if (!entry.contains("dequantized")) continue;
    for (const auto& [type, ref] : entry["dequantized"].items()) {
      refs.push_back({file, ref["tensor"].get<std::string>(), type, ref["file"].get<std::string>()});
    }
  }
  return refs;
}

TEST(QuantTypesTest, EveryTypeDequantizesBitExactlyAsGgml) {
  const std::vector<TypeRef> refs = TypeRefs();
  ASSERT_GE(refs.size(), 9u);  // Q4_0, Q4_1, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, IQ4_NL, IQ4_XS
  for (const TypeRef& ref : refs) {
    SCOPED_TRACE(ref.npy);
    absl::StatusOr<std::unique_ptr<formats::GgufFile>> gguf = formats::GgufFile::Open(TypesDir() / ref.gguf);
    ASSERT_TRUE(gguf.ok()) << gguf.status();
    absl::StatusOr<formats::TensorView> t = (*gguf)->Get(ref.tensor);
    ASSERT_TRUE(t.ok()) << t.status();
    EXPECT_EQ(absl::AsciiStrToLower(ref.ggml_type), graph::Name(t->dtype));
    absl::StatusOr<test::NpyArray> want = test::ReadNpy(TypesDir() / ref.npy);
    ASSERT_TRUE(want.ok()) << want.status();
    ASSERT_EQ(want->shape, t->shape);
    std::vector<float> got(want->data.size());
    ASSERT_TRUE(DequantizeRow(t->dtype, t->data, static_cast<int64_t>(got.size()), got.data()).ok());
    int mismatches = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      if (std::memcmp(&got[i], &want->data[i], 4) != 0 && ++mismatches <= 5) {
        ADD_FAILURE() << "value " << i << ": " << got[i] << " vs gguf-py " << want->data[i];
      }
    }
    EXPECT_EQ(mismatches, 0);
  }
}

// llama-quantize made the quant/types files from gguf/llama_q-Q8_0.gguf (requantizing: the Q8_0
// values decoded to f32, then ggml's reference quantizers, no importance matrix), so quantizing the
// same decoded values gives its bytes: every tensor of a type doppler quantizes, in every file.
TEST(QuantTypesTest, QuantizersReproduceLlamaQuantize) {
  absl::StatusOr<std::unique_ptr<formats::GgufFile>> source = formats::GgufFile::Open(test::FixturesDir() / "gguf" / "llama_q-Q8_0.gguf");
  ASSERT_TRUE(source.ok()) << source.status();
  const nlohmann::json index = test::ReadJsonFile(TypesDir() / "types.json");
  std::map<std::string, int> checked;  // tensors a type
  for (const auto& [file, entry] : index.items()) {
    if (!entry.contains("tensor_types")) continue;
    absl::StatusOr<std::unique_ptr<formats::GgufFile>> gguf = formats::GgufFile::Open(TypesDir() / file);
    ASSERT_TRUE(gguf.ok()) << gguf.status();
    for (const formats::GgufTensorInfo& info : (*gguf)->Tensors()) {
      if (!graph::IsBlockFormat(info.dtype) || info.dims.size() != 2) continue;
      absl::StatusOr<formats::TensorView> from = (*source)->Get(info.name);
      absl::StatusOr<formats::TensorView> to = (*gguf)->Get(info.name);
      ASSERT_TRUE(from.ok() && to.ok()) << info.name;
      const int64_t rows = to->shape[0], cols = to->shape[1];
      std::vector<float> x(static_cast<size_t>(rows * cols));
      ASSERT_TRUE(DequantizeRow(from->dtype, from->data, rows * cols, x.data()).ok());
      absl::StatusOr<std::vector<uint8_t>> got = QuantizeRows(info.dtype, x.data(), rows, cols);
      if (!got.ok()) continue;  // a type doppler reads but does not write (Q2_K, Q3_K)
      ASSERT_EQ(got->size(), to->nbytes) << file << " " << info.name;
      const size_t block = static_cast<size_t>(graph::Info(info.dtype).block_bytes);
      int bad_blocks = 0;
      for (size_t b = 0; b < to->nbytes / block; ++b) {
        if (std::memcmp(got->data() + b * block, to->data + b * block, block) != 0 && ++bad_blocks <= 3) {
          ADD_FAILURE() << file << " " << info.name << " (" << graph::Name(info.dtype) << "): block " << b
                        << " differs from llama-quantize's";
        }
      }
      EXPECT_EQ(bad_blocks, 0) << file << " " << info.name;
      ++checked[graph::Name(info.dtype)];
    }
  }
  for (const char* type : {"q4_0", "q4_1", "q5_1", "iq4_nl", "iq4_xs", "q4_k", "q5_k", "q6_k"}) {
    EXPECT_GT(checked[type], 0) << type << " was not checked";
  }
}

}  // namespace
}  // namespace doppler::quant
