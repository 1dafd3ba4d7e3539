// Rotary position embedding from a precomputed cos/sin table; one invocation per rotated pair.
#include "absl/strings/str_cat.h"
#include "codegen/emitters.h"
#include "codegen/glsl_common.h"

namespace doppler::codegen {
namespace {
constexpr uint32_t kWorkgroup = 64;
}

absl::StatusOr<Kernel> EmitRope(const EmitContext& c) {
  const int64_t heads = c.node.attrs.Int("heads"), head_dim = c.node.attrs.Int("head_dim");
  const bool neox = c.node.attrs.Str("style") == "neox";
  const int64_t pairs = heads * head_dim / 2;
  Kernel k;
  k.family = "rope";
  k.variant = neox ? "neox" : "interleaved";
  // neox rotates (j, j + d/2) of each head; interleaved rotates (2j, 2j + 1).
  k.glsl = absl::StrCat(ShaderHeader(kWorkgroup), FloatBuffer(1, "y", graph::DType::kF32, false),
                        FloatBuffer(2, "x", graph::DType::kF32, true),
                        FloatBuffer(3, "table", graph::DType::kF32, true), Fill(R"(
void main() {
  uint pair = gl_GlobalInvocationID.x;
  uint t = gl_WorkGroupID.y;
  if (t >= step.n_tokens || pair >= {{PAIRS}}u) return;
  const uint half_dim = {{HD}}u / 2u;
  uint h = pair / half_dim, j = pair % half_dim;
  uint base = t * {{WIDTH}}u + h * {{HD}}u;
  uint ia = base + {{IA}};
  uint ib = base + {{IB}};
  uint tab = ((step.pos + t) * half_dim + j) * 2u;
  float cs = table[tab], sn = table[tab + 1u];
  float a = x[ia], b = x[ib];
  y[ia] = a * cs - b * sn;
  y[ib] = b * cs + a * sn;
}
)",
                                                                                  {{"PAIRS", absl::StrCat(pairs)},
                                                                                   {"HD", absl::StrCat(head_dim)},
                                                                                   {"WIDTH", absl::StrCat(heads * head_dim)},
                                                                                   {"IA", neox ? "j" : "2u * j"},
                                                                                   {"IB", neox ? "j + half_dim" : "2u * j + 1u"}}));
  k.args = {{c.node.id, true}, {c.node.inputs[0], false}, {c.node.inputs[1], false}};
  k.groups = {CeilDiv(pairs, kWorkgroup), static_cast<uint32_t>(c.tokens), 1};
  return k;
}

}  // namespace doppler::codegen
