// The matrix-vector variant (a few rows of x, as in decode). Each subgroup is a team that computes
// RN output columns for all TM rows of x: its lanes split K by parts (codegen/weight_parts.h),
// lane i taking parts i, i + lanes, ... of each of the team's RN·G weight rows, so the team reads
// contiguous bytes and each weight row is read once per step. A part's x values are loaded once
// (16-byte loads) and reused for every row. The sums are reduced with subgroupAdd: no shared
// memory, no barrier. A workgroup holds WG / subgroup-size teams; were the driver to pick another
// subgroup size, teams loop over the workgroup's columns, so every column is still computed once.
// Without subgroup arithmetic the whole workgroup is one team and reduces in shared memory.
//
// With a norm prologue (rms_norm fused in), x is multiplied by the norm weight as it is loaded,
// the team sums x² over the same loads, and the result is scaled by 1/rms before the epilogue.
#include "absl/strings/str_cat.h"
#include "codegen/glsl_common.h"
#include "codegen/matmul.h"
#include "codegen/weight_parts.h"

namespace doppler::codegen {
namespace {
constexpr uint32_t kWorkgroup = 128;
constexpr int64_t kRowsPerTeam = 2;
}  // namespace

absl::StatusOr<Kernel> EmitGemv(const EmitContext& c, const MatMulSpec& s) {
  absl::StatusOr<WeightParts> parts = WeightPartDecoder(3, s.w_dtype, s.k);
  if (!parts.ok()) return parts.status();
  const uint32_t wg = std::min(kWorkgroup, c.caps.max_workgroup_invocations);
  const bool subgroups = c.caps.subgroup_arithmetic && c.caps.subgroup_size > 0 && wg % c.caps.subgroup_size == 0;
  const uint32_t teams = subgroups ? wg / c.caps.subgroup_size : 1;
  // x as vec4 where every run of 4 values of a part is 4-aligned in K (all block formats; floats
  // when K is a multiple of 4).
  const bool vec4_x = parts->values % 4 == 0;
  const std::string x_decl =
      vec4_x ? "layout(std430, set = 0, binding = 2) readonly buffer Buf_x { vec4 x4[]; };\n"
               "void load_x(uint t, uint p, out float v[PV]) {\n"
               "  [[unroll]] for (uint i = 0u; i < PV; i += 4u) {\n"
               "    vec4 q = x4[(t * K + w_part_k(p, i)) >> 2];\n"
               "    v[i] = q.x; v[i + 1u] = q.y; v[i + 2u] = q.z; v[i + 3u] = q.w;\n"
               "  }\n}\n"
             : absl::StrCat(FloatBuffer(2, "x", graph::DType::kF32, true),
                            "void load_x(uint t, uint p, out float v[PV]) {\n"
                            "  [[unroll]] for (uint i = 0u; i < PV; ++i) v[i] = x[t * K + w_part_k(p, i)];\n}\n");
  const std::string team =
      subgroups ? "#define TEAM gl_SubgroupID\n#define TEAMS gl_NumSubgroups\n#define LANE gl_SubgroupInvocationID\n"
                  "#define LANES gl_SubgroupSize\nfloat team_sum(float v) { return subgroupAdd(v); }\n"
                : absl::StrCat(WorkgroupReductions(wg),
                               "#define TEAM 0u\n#define TEAMS 1u\n#define LANE gl_LocalInvocationID.x\n#define LANES ", wg,
                               "u\nfloat team_sum(float v) { return wg_sum(v); }\n");
  Kernel k;
  k.variant = absl::StrCat("gemv.", graph::Name(s.w_dtype), ".t", s.m, "x", kRowsPerTeam, subgroups ? ".sg" : ".wg",
                           s.variant_suffix);
  k.glsl = absl::StrCat(ShaderHeader(wg),
                        subgroups ? "#extension GL_KHR_shader_subgroup_basic : enable\n"
                                    "#extension GL_KHR_shader_subgroup_arithmetic : enable\n"
                                  : "",
                        s.io_glsl, parts->glsl, x_decl, team, Fill(R"(
const uint TM = {{TM}}u, RN = {{RN}}u, PARTS = {{PARTS}}u, TEAMS_PER_WG = {{TEAMS}}u;
#define NORM {{NORM}}

void main() {
  uint wg_index = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
  uint m = {{ROWS}};
  for (uint team = TEAM; team < TEAMS_PER_WG; team += TEAMS) {
    uint col0 = (wg_index * TEAMS_PER_WG + team) * RN;
    float acc[TM][RN * G];
    float sum_sq[TM];
    [[unroll]] for (uint t = 0u; t < TM; ++t) {
      sum_sq[t] = 0.0;
      [[unroll]] for (uint o = 0u; o < RN * G; ++o) acc[t][o] = 0.0;
    }
    for (uint p = LANE; p < PARTS; p += LANES) {
      float xv[TM][PV];
      [[unroll]] for (uint t = 0u; t < TM; ++t) {
        if (t < m) {
          load_x(t, p, xv[t]);
        } else {
          [[unroll]] for (uint i = 0u; i < PV; ++i) xv[t][i] = 0.0;
        }
#if NORM
        [[unroll]] for (uint i = 0u; i < PV; ++i) {
          sum_sq[t] += xv[t][i] * xv[t][i];
          xv[t][i] *= norm_weight(w_part_k(p, i));
        }
#endif
      }
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
    [[unroll]] for (uint t = 0u; t < TM; ++t) {
#if NORM
      float scale = norm_scale(team_sum(sum_sq[t]));
#else
      float scale = 1.0;
#endif
      [[unroll]] for (uint r = 0u; r < RN; ++r) {
        float v = team_sum(acc[t][r * G]) * scale;
        float up = G == 2u ? team_sum(acc[t][r * G + G - 1u]) * scale : 0.0;
        if (LANE == 0u && t < m && col0 + r < N) store(t, col0 + r, v, up);
      }
    }
  }
}
)",
                                                                           {{"TM", absl::StrCat(s.m)},
                                                                            {"RN", absl::StrCat(kRowsPerTeam)},
                                                                            {"PARTS", absl::StrCat(parts->per_row)},
                                                                            {"TEAMS", absl::StrCat(teams)},
                                                                            {"NORM", s.norm ? "1" : "0"},
                                                                            {"ROWS", s.rows_expr}}));
  k.groups = WideGrid(CeilDiv(s.n, kRowsPerTeam * teams));
  return k;
}

}  // namespace doppler::codegen
