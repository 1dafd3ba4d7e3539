// The matrix-vector variant (a few rows of x, as in decode): a workgroup computes RN output
// columns for all TM rows. Its invocations split K by parts (codegen/weight_parts.h): invocation
// i takes parts i, i + WG, ... of each of its RN·G weight rows, so a subgroup reads contiguous
// bytes and each row is read once per step. Each part's x values are loaded once and reused for
// every row. The partial sums are reduced with subgroupAdd, then across subgroups in shared
// memory (without subgroup arithmetic, entirely in shared memory).
#include "absl/strings/str_cat.h"
#include "codegen/glsl_common.h"
#include "codegen/matmul.h"
#include "codegen/weight_parts.h"

namespace doppler::codegen {
namespace {
constexpr uint32_t kWorkgroup = 128;
constexpr int64_t kRowsPerWorkgroup = 2;
}  // namespace

absl::StatusOr<Kernel> EmitGemv(const EmitContext& c, const MatMulSpec& s) {
  absl::StatusOr<WeightParts> parts = WeightPartDecoder(3, s.w_dtype, s.k);
  if (!parts.ok()) return parts.status();
  const uint32_t wg = std::min(kWorkgroup, c.caps.max_workgroup_invocations);
  const bool subgroups = c.caps.subgroup_arithmetic;
  // Sums the partials of output o (0..OUTS) over the workgroup into red[o * WG] (every invocation
  // calls it; `red` must then be read after a barrier).
  const std::string reduce =
      subgroups ? R"(
  [[unroll]] for (uint o = 0u; o < OUTS; ++o) {
    float v = subgroupAdd(acc[o / (RN * G)][o % (RN * G)]);
    if (subgroupElect()) red[o * WG + gl_SubgroupID] = v;
  }
  barrier();
  if (lid < OUTS) {
    float v = 0.0;
    for (uint i = 0u; i < gl_NumSubgroups; ++i) v += red[lid * WG + i];
    red[lid * WG] = v;
  }
  barrier();
)"
                : R"(
  [[unroll]] for (uint o = 0u; o < OUTS; ++o) red[o * WG + lid] = acc[o / (RN * G)][o % (RN * G)];
  barrier();
  if (lid < OUTS) {
    float v = 0.0;
    for (uint i = 0u; i < WG; ++i) v += red[lid * WG + i];
    red[lid * WG] = v;
  }
  barrier();
)";
  Kernel k;
  k.variant = absl::StrCat("gemv.", graph::Name(s.w_dtype), ".t", s.m, "x", kRowsPerWorkgroup,
                           subgroups ? ".sg" : "", s.variant_suffix);
  k.glsl = absl::StrCat(ShaderHeader(wg),
                        subgroups ? "#extension GL_KHR_shader_subgroup_basic : enable\n"
                                    "#extension GL_KHR_shader_subgroup_arithmetic : enable\n"
                                  : "",
                        s.io_glsl, parts->glsl, Fill(R"(
const uint WG = {{WG}}u, TM = {{TM}}u, RN = {{RN}}u, PARTS = {{PARTS}}u, OUTS = TM * RN * G;
shared float red[OUTS * WG];

void main() {
  uint lid = gl_LocalInvocationID.x;
  uint col0 = (gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x) * RN;
  uint m = {{ROWS}};

  float acc[TM][RN * G];
  [[unroll]] for (uint t = 0u; t < TM; ++t)
    [[unroll]] for (uint o = 0u; o < RN * G; ++o) acc[t][o] = 0.0;

  for (uint p = lid; p < PARTS; p += WG) {
    float xv[TM][PV];
    [[unroll]] for (uint t = 0u; t < TM; ++t)
      [[unroll]] for (uint i = 0u; i < PV; ++i) xv[t][i] = t < m ? x[t * K + w_part_k(p, i)] : 0.0;
    [[unroll]] for (uint r = 0u; r < RN; ++r) {
      if (col0 + r < N) {
        [[unroll]] for (uint g = 0u; g < G; ++g) {
          float wv[PV];
          w_part(col0 + r + g * N, p, wv);
          [[unroll]] for (uint t = 0u; t < TM; ++t) {
            float d = 0.0;
            [[unroll]] for (uint i = 0u; i < PV; ++i) d += xv[t][i] * wv[i];
            acc[t][r * G + g] += d;
          }
        }
      }
    }
  }
{{REDUCE}}
  if (lid < TM * RN) {
    uint t = lid / RN, col = col0 + lid % RN;
    if (t < m && col < N) store(t, col, red[(t * RN * G + (col - col0) * G) * WG], G == 2u ? red[(t * RN * G + (col - col0) * G + 1u) * WG] : 0.0);
  }
}
)",
                                                                     {{"WG", absl::StrCat(wg)},
                                                                      {"TM", absl::StrCat(s.m)},
                                                                      {"RN", absl::StrCat(kRowsPerWorkgroup)},
                                                                      {"PARTS", absl::StrCat(parts->per_row)},
                                                                      {"REDUCE", reduce},
                                                                      {"ROWS", s.rows_expr}}));
  k.groups = WideGrid(CeilDiv(s.n, kRowsPerWorkgroup));
  return k;
}

}  // namespace doppler::codegen
