// Rotary position embedding from a precomputed cos/sin table; one invocation per element.
#include "absl/strings/str_cat.h"
#include "codegen/emitters.h"
#include "codegen/glsl_common.h"
#include "codegen/step_rows.h"

namespace doppler::codegen {
namespace {
constexpr uint32_t kWorkgroup = 64;
}

absl::StatusOr<Kernel> EmitRope(const EmitContext& c) {
  const int64_t heads = c.node.attrs.Int("heads"), head_dim = c.node.attrs.Int("head_dim");
  const bool neox = c.node.attrs.Str("style") == "neox";
  const int64_t width = heads * head_dim;
  Kernel k;
  k.family = "rope";
  k.variant = neox ? "neox" : "interleaved";
  k.glsl = absl::StrCat(ShaderHeader(kWorkgroup), StepRowsGlsl(c.g.paging(), c.tokens), FloatBuffer(1, "y", graph::DType::kF32, false),
                        FloatBuffer(2, "x", graph::DType::kF32, true),
                        FloatBuffer(3, "table", graph::DType::kF32, true),
                        RopeFunction("roped", "load_x", "table", width, head_dim, neox), Fill(R"(
void main() {
  uint e = gl_GlobalInvocationID.x;
  uint t = gl_WorkGroupID.y;
  if (t >= step.n_tokens || e >= {{W}}u) return;
  y[t * {{W}}u + e] = roped(t, e);
}
)",
                                                                                           {{"W", absl::StrCat(width)}}));
  k.args = {{c.node.id, true}, {c.node.inputs[0], false}, {c.node.inputs[1], false}};
  k.groups = {CeilDiv(width, kWorkgroup), static_cast<uint32_t>(c.tokens), 1};
  return k;
}

}  // namespace doppler::codegen
