#include "checkpoints/gpt_oss_experts.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "quant/float_codec.h"
#include "quant/quant.h"

namespace doppler::checkpoints {
namespace {

using graph::DType;

absl::StatusOr<formats::TensorView> GetShaped(const formats::WeightStore& store, const std::string& name, const std::vector<int64_t>& shape,
                                     const std::string& because) {
  absl::StatusOr<formats::TensorView> t = store.Get(name);
  if (!t.ok()) return t.status();
  if (t->shape != shape) {
    return absl::InvalidArgumentError(absl::StrCat(t->file, ": tensor '", name, "' is [", absl::StrJoin(t->shape, ", "),
                                                   "] but the config gives [", absl::StrJoin(shape, ", "), "] (", because,
                                                   ")"));
  }
  return t;
}

// Rows `offset`, `offset` + `stride`, ... of each of `experts` matrices of `rows` rows stored back to
// back (row_bytes bytes a row): the de-interleaved half of gate_up_proj in whatever type it has.
std::vector<uint8_t> EveryOtherRow(const uint8_t* data, int64_t experts, int64_t rows, size_t row_bytes, int64_t offset,
                                   int64_t stride) {
  std::vector<uint8_t> out;
  out.reserve(static_cast<size_t>(experts * rows / stride) * row_bytes);
  for (int64_t e = 0; e < experts; ++e) {
    for (int64_t r = offset; r < rows; r += stride) {
      const uint8_t* row = data + static_cast<size_t>(e * rows + r) * row_bytes;
      out.insert(out.end(), row, row + row_bytes);
    }
  }
  return out;
}

// Each of `experts` matrices stored [in, out] (columns `offset`, `offset` + `stride`, ... of `cols`
// taken) as f32 [out, in], in = `in`.
std::vector<float> TransposedColumns(const std::vector<float>& x, int64_t experts, int64_t in, int64_t cols,
                                     int64_t offset, int64_t stride) {
  const int64_t out = cols / stride;
  std::vector<float> y(static_cast<size_t>(experts * out * in));
  for (int64_t e = 0; e < experts; ++e) {
    for (int64_t o = 0; o < out; ++o) {
      for (int64_t i = 0; i < in; ++i) {
        y[static_cast<size_t>((e * out + o) * in + i)] = x[static_cast<size_t>((e * in + i) * cols + offset + o * stride)];
      }
    }
  }
  return y;
}

std::vector<uint8_t> F32Bytes(const std::vector<float>& v) {
  std::vector<uint8_t> out(v.size() * sizeof(float));
  std::memcpy(out.data(), v.data(), out.size());
  return out;
}

}  // namespace

absl::StatusOr<std::vector<GgufTensorPlan>> GptOssExpertTensors(std::shared_ptr<const formats::WeightStore> store,
                                                                const formats::ModelConfig& c, const models::MoeSpec& moe,
                                                                quant::QuantScheme quant, int layer) {
  const int64_t E = moe.experts, I = moe.intermediate, H = c.hidden_size;
  const std::string p = absl::StrCat("model.layers.", layer, ".mlp.experts.");
  const std::string b = absl::StrCat("blk.", layer, ".");
  const std::string gate_up = p + "gate_up_proj", down = p + "down_proj";
  absl::StatusOr<formats::TensorView> gu = store->Get(gate_up);
  if (!gu.ok()) return gu.status();
  const bool mxfp4 = gu->dtype == DType::kMXFP4;
  // transformers' float experts are [E, in, out]; its MXFP4 ones [E, out, in] (models/gpt_oss.cc).
  const std::string experts_by = "num_local_experts x ";
  gu = GetShaped(*store, gate_up, mxfp4 ? std::vector<int64_t>{E, 2 * I, H} : std::vector<int64_t>{E, H, 2 * I},
                 experts_by + (mxfp4 ? "2 intermediate_size x hidden_size" : "hidden_size x 2 intermediate_size"));
  if (!gu.ok()) return gu.status();
  absl::StatusOr<formats::TensorView> dn =
      GetShaped(*store, down, mxfp4 ? std::vector<int64_t>{E, H, I} : std::vector<int64_t>{E, I, H},
                experts_by + (mxfp4 ? "hidden_size x intermediate_size" : "intermediate_size x hidden_size"));
  if (!dn.ok()) return dn.status();
  if ((dn->dtype == DType::kMXFP4) != mxfp4) {
    return absl::InvalidArgumentError(absl::StrCat(dn->file, ": tensor '", down, "' is ", graph::Name(dn->dtype), " but '",
                                                   gate_up, "' is ", graph::Name(gu->dtype)));
  }
  absl::StatusOr<formats::TensorView> gub = GetShaped(*store, gate_up + "_bias", {E, 2 * I}, experts_by + "2 intermediate_size");
  if (!gub.ok()) return gub.status();
  absl::StatusOr<formats::TensorView> db = GetShaped(*store, down + "_bias", {E, H}, experts_by + "hidden_size");
  if (!db.ok()) return db.status();

  std::vector<GgufTensorPlan> plans;
  for (const auto& [part, offset] : {std::pair{"ffn_gate_exps", int64_t{0}}, std::pair{"ffn_up_exps", int64_t{1}}}) {
    const int64_t off = offset;
    if (mxfp4) {
      plans.push_back({b + part + ".weight", DType::kMXFP4, {E, I, H}, [store, gate_up, E, I, H, off]()
                                                                           -> absl::StatusOr<std::vector<uint8_t>> {
                         absl::StatusOr<formats::TensorView> t = store->Get(gate_up);
                         if (!t.ok()) return t.status();
                         return EveryOtherRow(t->data, E, 2 * I, graph::ByteSize(DType::kMXFP4, H), off, 2);
                       }});
    } else {
      const DType dtype = quant::QuantizedDType(quant, gate_up, H, c.num_layers, c.tie_word_embeddings, E, DType::kF16);
      plans.push_back({b + part + ".weight", dtype, {E, I, H}, [store, gate_up, dtype, E, I, H, off]()
                                                                   -> absl::StatusOr<std::vector<uint8_t>> {
                         absl::StatusOr<formats::TensorView> t = store->Get(gate_up);
                         if (!t.ok()) return t.status();
                         absl::StatusOr<std::vector<float>> x = quant::ToFloat32(*t);
                         if (!x.ok()) return x.status();
                         const std::vector<float> y = TransposedColumns(*x, E, H, 2 * I, off, 2);
                         return quant::QuantizeRows(dtype, y.data(), E * I, H);
                       }});
    }
    plans.push_back({b + part + ".bias", DType::kF32, {E, I}, [store, gate_up, E, I, off]()
                                                                  -> absl::StatusOr<std::vector<uint8_t>> {
                       absl::StatusOr<formats::TensorView> t = store->Get(gate_up + "_bias");
                       if (!t.ok()) return t.status();
                       absl::StatusOr<std::vector<float>> x = quant::ToFloat32(*t);
                       if (!x.ok()) return x.status();
                       std::vector<float> y;
                       for (int64_t e = 0; e < E; ++e) {
                         for (int64_t i = 0; i < I; ++i) y.push_back((*x)[static_cast<size_t>(e * 2 * I + 2 * i + off)]);
                       }
                       return F32Bytes(y);
                     }});
  }
  if (mxfp4) {
    plans.push_back({b + "ffn_down_exps.weight", DType::kMXFP4, {E, H, I}, [store, down]()
                                                                              -> absl::StatusOr<std::vector<uint8_t>> {
                       absl::StatusOr<formats::TensorView> t = store->Get(down);
                       if (!t.ok()) return t.status();
                       return std::vector<uint8_t>(t->data, t->data + t->nbytes);
                     }});
  } else {
    const DType dtype = quant::QuantizedDType(quant, down, I, c.num_layers, c.tie_word_embeddings, E, DType::kF16);
    plans.push_back({b + "ffn_down_exps.weight", dtype, {E, H, I}, [store, down, dtype, E, I, H]()
                                                                       -> absl::StatusOr<std::vector<uint8_t>> {
                       absl::StatusOr<formats::TensorView> t = store->Get(down);
                       if (!t.ok()) return t.status();
                       absl::StatusOr<std::vector<float>> x = quant::ToFloat32(*t);
                       if (!x.ok()) return x.status();
                       const std::vector<float> y = TransposedColumns(*x, E, I, H, 0, 1);
                       return quant::QuantizeRows(dtype, y.data(), E * H, I);
                     }});
  }
  plans.push_back({b + "ffn_down_exps.bias", DType::kF32, {E, H}, [store, down]() -> absl::StatusOr<std::vector<uint8_t>> {
                     absl::StatusOr<formats::TensorView> t = store->Get(down + "_bias");
                     if (!t.ok()) return t.status();
                     absl::StatusOr<std::vector<float>> x = quant::ToFloat32(*t);
                     if (!x.ok()) return x.status();
                     return F32Bytes(*x);
                   }});
  return plans;
}

}  // namespace doppler::checkpoints
