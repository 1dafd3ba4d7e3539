// RMSNorm: one workgroup per group of a row (the whole row, or e.g. one head); the sum of squares
// is reduced in shared memory.
#include "absl/strings/str_cat.h"
#include "codegen/emitters.h"
#include "codegen/glsl_common.h"

namespace doppler::codegen {
namespace {
constexpr uint32_t kWorkgroup = 128;
}

absl::StatusOr<Kernel> EmitRmsNorm(const EmitContext& c) {
  const graph::Node& w = c.input(1);
  const int64_t width = c.node.type.shape[1].value;
  const int64_t dim = c.node.attrs.Has("group") ? c.node.attrs.Int("group") : width;  // values per group
  Kernel k;
  k.family = "rms_norm";
  k.variant = dim == width ? absl::StrCat("row.", graph::Name(w.type.dtype))
                           : absl::StrCat("group", dim, ".", graph::Name(w.type.dtype));
  k.glsl = absl::StrCat(ShaderHeader(kWorkgroup), FloatBuffer(1, "y", graph::DType::kF32, false),
                        FloatBuffer(2, "x", graph::DType::kF32, true), FloatBuffer(3, "w", w.type.dtype, true),
                        WorkgroupReductions(kWorkgroup), Fill(R"(
void main() {
  uint row = gl_WorkGroupID.y;
  if (row >= {{ROWS}}) return;  // uniform across the workgroup
  uint base = row * {{WIDTH}}u + gl_WorkGroupID.x * {{D}}u;
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
                                                                                {"WIDTH", absl::StrCat(width)},
                                                                                {"WG", absl::StrCat(kWorkgroup)},
                                                                                {"EPS", FloatLiteral(c.node.attrs.Float("eps"))},
                                                                                {"OFFSET", FloatLiteral(c.node.attrs.Float("weight_offset"))}}));
  k.args = {{c.node.id, true}, {c.node.inputs[0], false}, {c.node.inputs[1], false}};
  k.groups = {static_cast<uint32_t>(width / dim), static_cast<uint32_t>(c.rows(c.node)), 1};
  return k;
}

}  // namespace doppler::codegen
