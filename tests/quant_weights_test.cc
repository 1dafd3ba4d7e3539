// MaterializeParam and the interpreter's view of block-format weights: a tensor already in the
// param's block format passes through, a float tensor is quantized for a block-format param (as
// --quant does at load), a block tensor is dequantized for a float param, and block -> another
// block format is refused with the file and tensor named.
#include <gtest/gtest.h>

#include <map>

#include "checkpoints/weights.h"
#include "graph/builder.h"
#include "quant/float_codec.h"
#include "quant/quant.h"
#include "tests/support/gpu_runner.h"

namespace doppler {
namespace {

using graph::Dim;
using graph::DType;

class MapStore : public formats::WeightStore {
 public:
  void Put(const std::string& name, DType dtype, std::vector<int64_t> shape, std::vector<uint8_t> bytes) {
    data_[name] = std::move(bytes);
    views_[name] = formats::TensorView{name, dtype, std::move(shape), data_[name].data(), data_[name].size(), "mem.bin"};
  }
  bool Has(std::string_view name) const override { return views_.count(std::string(name)) != 0; }
  absl::StatusOr<formats::TensorView> Get(std::string_view name) const override {
    auto it = views_.find(std::string(name));
    if (it == views_.end()) return absl::NotFoundError(std::string(name));
    return it->second;
  }
  std::vector<std::string> Names() const override {
    std::vector<std::string> n;
    for (const auto& [k, v] : views_) n.push_back(k);
    return n;
  }
  std::string Describe() const override { return "mem.bin"; }

 private:
  std::map<std::string, std::vector<uint8_t>> data_;
  std::map<std::string, formats::TensorView> views_;
};

// The param node of a one-param graph.
graph::Node ParamNode(const std::string& name, DType dtype, int64_t rows, int64_t cols) {
  graph::GraphBuilder b;
  b.Output("w", b.Param(name, {dtype, {Dim::Static(rows), Dim::Static(cols)}}));
  absl::StatusOr<graph::Graph> g = std::move(b).Finish();
  EXPECT_TRUE(g.ok()) << g.status();
  for (const graph::Node& n : g->nodes()) {
    if (n.kind == graph::OpKind::kParam) return n;
  }
  return {};
}

TEST(QuantWeights, MaterializeParamPassesQuantizesAndDequantizes) {
  const int64_t rows = 6, cols = 512;
  const std::vector<float> x = test::RandomFloats(static_cast<size_t>(rows * cols), 3);
  absl::StatusOr<std::vector<uint8_t>> q4 = quant::QuantizeRows(DType::kQ4_K, x.data(), rows, cols);
  ASSERT_TRUE(q4.ok());
  std::vector<float> dq(x.size());
  ASSERT_TRUE(quant::DequantizeRow(DType::kQ4_K, q4->data(), static_cast<int64_t>(dq.size()), dq.data()).ok());
  MapStore store;
  store.Put("f32", DType::kF32, {rows, cols}, quant::EncodeFloats(DType::kF32, x));
  store.Put("q4", DType::kQ4_K, {rows, cols}, *q4);

  // Block tensor, block param: the bytes as stored.
  absl::StatusOr<std::vector<uint8_t>> same = checkpoints::MaterializeParam(store, ParamNode("q4", DType::kQ4_K, rows, cols));
  ASSERT_TRUE(same.ok()) << same.status();
  EXPECT_EQ(*same, *q4);
  // Float tensor, block param: quantized at load, exactly as QuantizeRows does.
  absl::StatusOr<std::vector<uint8_t>> quantized =
      checkpoints::MaterializeParam(store, ParamNode("f32", DType::kQ4_K, rows, cols));
  ASSERT_TRUE(quantized.ok()) << quantized.status();
  EXPECT_EQ(*quantized, *q4);
  // Block tensor, float param: dequantized.
  absl::StatusOr<std::vector<uint8_t>> f32 = checkpoints::MaterializeParam(store, ParamNode("q4", DType::kF32, rows, cols));
  ASSERT_TRUE(f32.ok()) << f32.status();
  EXPECT_EQ(quant::DecodeFloats(DType::kF32, *f32), dq);
  // The interpreter sees the dequantized values of a block-format param.
  checkpoints::StoreParamSource source(store);
  absl::StatusOr<std::vector<float>> seen = source.Float32(ParamNode("q4", DType::kQ4_K, rows, cols));
  ASSERT_TRUE(seen.ok()) << seen.status();
  EXPECT_EQ(*seen, dq);
  // Block -> another block format: refused, naming the file and the tensor.
  absl::Status s = checkpoints::MaterializeParam(store, ParamNode("q4", DType::kQ8_0, rows, cols)).status();
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("mem.bin"), absl::string_view::npos) << s;
  EXPECT_NE(s.message().find("'q4'"), absl::string_view::npos) << s;
  EXPECT_NE(s.message().find("re-quantizing"), absl::string_view::npos) << s;
  // Rows a block format cannot hold.
  store.Put("odd", DType::kF32, {2, 100}, quant::EncodeFloats(DType::kF32, std::vector<float>(200, 1.0f)));
  s = checkpoints::MaterializeParam(store, ParamNode("odd", DType::kQ8_0, 2, 100)).status();
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("'odd'"), absl::string_view::npos) << s;
  // A block tensor whose byte count disagrees with its shape.
  store.Put("short", DType::kQ8_0, {2, 64}, std::vector<uint8_t>(100));
  s = checkpoints::MaterializeParam(store, ParamNode("short", DType::kQ8_0, 2, 64)).status();
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("'short'"), absl::string_view::npos) << s;
}

TEST(QuantWeights, ToFloat32DequantizesBlockTensors) {
  const std::vector<float> x = test::RandomFloats(2 * 64, 9);
  absl::StatusOr<std::vector<uint8_t>> q8 = quant::QuantizeRows(DType::kQ8_0, x.data(), 2, 64);
  ASSERT_TRUE(q8.ok());
  formats::TensorView t{"w", DType::kQ8_0, {2, 64}, q8->data(), q8->size(), "f.gguf"};
  absl::StatusOr<std::vector<float>> v = quant::ToFloat32(t);
  ASSERT_TRUE(v.ok()) << v.status();
  std::vector<float> want(x.size());
  ASSERT_TRUE(quant::DequantizeRow(DType::kQ8_0, q8->data(), 128, want.data()).ok());
  EXPECT_EQ(*v, want);
  t.nbytes -= 1;
  EXPECT_FALSE(quant::ToFloat32(t).ok());
}

}  // namespace
}  // namespace doppler
