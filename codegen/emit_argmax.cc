// Argmax of each row: a strided scan per invocation, then a reduction that keeps the larger value
// and, on ties, the lower index (the first maximum, as the interpreter defines). The scan issues
// kUnroll loads before it compares any (16-byte loads where the row length is a multiple of 4),
// so a 128k-entry row is a few rounds of loads in flight, not hundreds of waits. With subgroup
// arithmetic, subgroupMax then subgroupMin over the indices holding it reduce a subgroup, and the
// first subgroup reduces the subgroups' results; otherwise a shared-memory tree does it all.
#include "absl/strings/str_cat.h"
#include "codegen/emitters.h"
#include "codegen/glsl_common.h"

namespace doppler::codegen {
namespace {
// One workgroup per row: as wide as the device allows.
constexpr uint32_t kWorkgroup = 1024;
// Loads in flight per invocation. On the H100, 8 scalar loads a round took 19.8 µs for a
// 128,256-entry row and 35.5 µs for 262,144.
constexpr uint32_t kUnroll = 8;
}  // namespace

absl::StatusOr<Kernel> EmitArgmax(const EmitContext& c) {
  const graph::Node& x = c.input(0);
  const int64_t cols = x.type.shape[1].value;
  const uint32_t wg = WidestPowerOfTwoWorkgroup(c.caps, kWorkgroup);
  // Values per load: 4 where the row length allows 16-byte loads.
  const int width = cols % 4 == 0 ? 4 : 1;
  const bool subgroups = c.caps.subgroup_arithmetic;
  Kernel k;
  k.family = "argmax";
  k.variant = absl::StrCat("row", width == 4 ? ".vec4" : "", subgroups ? ".sg" : "");
  k.glsl = absl::StrCat(ShaderHeader(wg), IntBuffer(1, "ids", false),
                        Fill(absl::StrCat(R"(
const uint WG = {{WG}}u, N = {{N}}u, W = {{W}}u, NW = N / W, NONE = 0xFFFFFFFFu;
layout(std430, set = 0, binding = 2) readonly buffer Buf_x { {{VEC}} xw[]; };
float lane(vec4 v, uint e) { return v[e]; }
float lane(float v, uint e) { return v; }

// The invocation's values of the row, W per load, kUnroll loads in flight, in increasing index
// order, so that a strict > keeps its first maximum.
void scan(uint row, inout float best, inout uint best_i) {
  for (uint q0 = gl_LocalInvocationID.x; q0 < NW; q0 += {{U}}u * WG) {
    {{VEC}} v[{{U}}];
    [[unroll]] for (uint u = 0u; u < {{U}}u; ++u) v[u] = xw[row * NW + min(q0 + u * WG, NW - 1u)];
    [[unroll]] for (uint u = 0u; u < {{U}}u; ++u) {
      uint q = q0 + u * WG;
      [[unroll]] for (uint e = 0u; e < W; ++e) {
        if (q < NW && (lane(v[u], e) > best || best_i == NONE)) { best = lane(v[u], e); best_i = q * W + e; }
      }
    }
  }
}
)",
                                          FirstMaxReductionGlsl(subgroups), R"(
void main() {
  uint row = gl_WorkGroupID.x;
  if (row >= {{ROWS}}) return;  // uniform across the workgroup
  float best = uintBitsToFloat(0xFF800000u);  // -inf
  uint best_i = NONE;
  scan(row, best, best_i);
  best_i = first_max(best, best_i);
  if (gl_LocalInvocationID.x == 0u) ids[row] = int(min(best_i, N - 1u));
}
)"),
                             {{"WG", absl::StrCat(wg)},
                              {"U", absl::StrCat(kUnroll)},
                              {"W", absl::StrCat(width)},
                              {"VEC", width == 4 ? "vec4" : "float"},
                              {"N", absl::StrCat(cols)},
                              {"ROWS", RowsExpr(x.type.shape[0].tokens, c.rows(x))}}));
  k.args = {{c.node.id, true}, {c.node.inputs[0], false}};
  k.groups = {static_cast<uint32_t>(c.rows(x)), 1, 1};
  return k;
}

}  // namespace doppler::codegen
