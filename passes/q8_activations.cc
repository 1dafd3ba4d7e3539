// q8-activations: every matmul and expert product whose weights are in a block format with
// 8-bit-or-narrower integer quants (every one doppler reads) rounds its x through q8 blocks first
// (attr x_quant = "q8", graph/activation_quant.h), so that its kernel multiplies 8-bit integers
// (integer dot products) instead of decoding every weight to a float; this is how llama.cpp
// multiplies such weights.
//
//   before:  y = matmul(x, w: q4_k) {E}            h = expert_matmul(x, w: q4_k, ids) {E}
//   after:   y = matmul(x, w: q4_k) {E, x_quant = q8}   h = expert_matmul(...) {E, x_quant = q8}
//
// It changes the results (by about 1% of a logit's spread, as llama.cpp's), so it is not in the
// default pipeline: the engine runs it on the decode plan's graph only (EngineOptions::
// decode_activations), where the matrix-vector kernel takes it.
#include "graph/dtype.h"
#include "graph/matmul_inputs.h"
#include "passes/registry.h"
#include "passes/rewrite.h"

namespace doppler::passes {
namespace {

bool IntegerQuants(graph::DType t) {
  using graph::DType;
  return t == DType::kQ4_K || t == DType::kQ5_K || t == DType::kQ6_K || t == DType::kQ8_0 || t == DType::kQ5_0 ||
         t == DType::kQ4_0 || t == DType::kQ4_1 || t == DType::kQ5_1 || t == DType::kIQ4_NL || t == DType::kIQ4_XS ||
         t == DType::kQ2_K || t == DType::kQ3_K || t == DType::kMXFP4;
}

class Q8Activations : public Pass {
 public:
  const char* name() const override { return "q8-activations"; }

  absl::StatusOr<bool> Run(Graph& g) const override {
    bool changed = false;
    for (ValueId id = 0; id < g.size(); ++id) {
      Node& n = g.mutable_node(id);
      if ((n.kind != OpKind::kMatMul && n.kind != OpKind::kExpertMatMul) || n.attrs.Has("x_quant") ||
          !IntegerQuants(g.node(graph::MatMulInputsOf(n).w).type.dtype)) {
        continue;
      }
      n.attrs.Set("x_quant", std::string("q8"));
      changed = true;
    }
    return changed;
  }
};

}  // namespace

std::unique_ptr<Pass> MakeQ8Activations() { return std::make_unique<Q8Activations>(); }

}  // namespace doppler::passes
