// Argmax of each row: strided scan per invocation, then a shared-memory tree that keeps the
// larger value and, on ties, the lower index (the first maximum, as the interpreter defines). The
// scan loads 8 values before it compares any, so a row is a few rounds of loads in flight, not
// hundreds of waits.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "codegen/emitters.h"
#include "codegen/glsl_common.h"

namespace doppler::codegen {
namespace {
// One workgroup per row: as wide as the device allows, so a 256k-entry row is 256 loads per
// invocation, not thousands.
constexpr uint32_t kWorkgroup = 1024;
}

absl::StatusOr<Kernel> EmitArgmax(const EmitContext& c) {
  const graph::Node& x = c.input(0);
  const int64_t cols = x.type.shape[1].value;
  uint32_t wg = 1;
  while (wg * 2 <= std::min(kWorkgroup, c.caps.max_workgroup_invocations)) wg *= 2;  // a power of two for the tree
  Kernel k;
  k.family = "argmax";
  k.variant = "row";
  k.glsl = absl::StrCat(ShaderHeader(wg), IntBuffer(1, "ids", false), FloatBuffer(2, "x", graph::DType::kF32, true),
                        Fill(R"(
shared float s_val[{{WG}}];
shared uint s_idx[{{WG}}];

void main() {
  uint lid = gl_LocalInvocationID.x;
  uint row = gl_WorkGroupID.x;
  if (row >= {{ROWS}}) return;  // uniform across the workgroup
  float best = uintBitsToFloat(0xFF800000u);  // -inf
  uint best_i = 0xFFFFFFFFu;
  for (uint i0 = lid; i0 < {{N}}u; i0 += 8u * {{WG}}u) {
    float v[8];
    [[unroll]] for (uint u = 0u; u < 8u; ++u) {
      uint i = i0 + u * {{WG}}u;
      v[u] = i < {{N}}u ? x[row * {{N}}u + i] : 0.0;
    }
    [[unroll]] for (uint u = 0u; u < 8u; ++u) {
      uint i = i0 + u * {{WG}}u;
      if (i < {{N}}u && (v[u] > best || best_i == 0xFFFFFFFFu)) { best = v[u]; best_i = i; }
    }
  }
  s_val[lid] = best;
  s_idx[lid] = best_i;
  barrier();
  for (uint s = {{WG}}u / 2u; s > 0u; s >>= 1) {
    if (lid < s) {
      float ov = s_val[lid + s];
      uint oi = s_idx[lid + s];
      if (oi != 0xFFFFFFFFu && (s_idx[lid] == 0xFFFFFFFFu || ov > s_val[lid] || (ov == s_val[lid] && oi < s_idx[lid]))) {
        s_val[lid] = ov;
        s_idx[lid] = oi;
      }
    }
    barrier();
  }
  if (lid == 0u) ids[row] = int(min(s_idx[0], {{N}}u - 1u));
}
)",
                             {{"WG", absl::StrCat(wg)},
                              {"N", absl::StrCat(cols)},
                              {"ROWS", RowsExpr(x.type.shape[0].tokens, c.rows(x))}}));
  k.args = {{c.node.id, true}, {c.node.inputs[0], false}};
  k.groups = {static_cast<uint32_t>(c.rows(x)), 1, 1};
  return k;
}

}  // namespace doppler::codegen
