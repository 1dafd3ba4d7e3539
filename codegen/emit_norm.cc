// RMSNorm: one workgroup per row; the sum of squares is reduced in shared memory.
#include "absl/strings/str_cat.h"
#include "codegen/emitters.h"
#include "codegen/glsl_common.h"

namespace doppler::codegen {
namespace {
constexpr uint32_t kWorkgroup = 128;
}

absl::StatusOr<Kernel> EmitRmsNorm(const EmitContext& c) {
  const graph::Node& w = c.input(1);
  const int64_t dim = c.node.type.shape[1].value;
  Kernel k;
  k.family = "rms_norm";
  k.variant = absl::StrCat("row.", graph::Name(w.type.dtype));
  k.glsl = absl::StrCat(ShaderHeader(kWorkgroup), FloatBuffer(1, "y", graph::DType::kF32, false),
                        FloatBuffer(2, "x", graph::DType::kF32, true), FloatBuffer(3, "w", w.type.dtype, true),
                        WorkgroupReductions(kWorkgroup), Fill(R"(
void main() {
  uint row = gl_WorkGroupID.x;
  if (row >= {{ROWS}}) return;  // uniform across the workgroup
  uint base = row * {{D}}u;
  float ss = 0.0;
  for (uint i = gl_LocalInvocationID.x; i < {{D}}u; i += {{WG}}u) ss += x[base + i] * x[base + i];
  float inv = inversesqrt(wg_sum(ss) / float({{D}}) + {{EPS}});
  for (uint i = gl_LocalInvocationID.x; i < {{D}}u; i += {{WG}}u) {
    y[base + i] = x[base + i] * inv * (load_w(i) + {{OFFSET}});
  }
}
)",
                                                                               {{"ROWS", RowsExpr(c.node.type.shape[0].tokens, c.rows(c.node))},
                                                                                {"D", absl::StrCat(dim)},
                                                                                {"WG", absl::StrCat(kWorkgroup)},
                                                                                {"EPS", FloatLiteral(c.node.attrs.Float("eps"))},
                                                                                {"OFFSET", FloatLiteral(c.node.attrs.Float("weight_offset"))}}));
  k.args = {{c.node.id, true}, {c.node.inputs[0], false}, {c.node.inputs[1], false}};
  k.groups = {static_cast<uint32_t>(c.rows(c.node)), 1, 1};
  return k;
}

}  // namespace doppler::codegen
