// The matrix-vector variant (a few rows of x, as in decode). A workgroup computes RN output
// columns for all TM rows of x. K is visited in chunks: the workgroup first copies a chunk of x
// into shared memory with coalesced loads (multiplied by the norm weight, with a norm prologue),
// then its invocations split the chunk by parts (codegen/weight_parts.h), invocation i taking
// parts i, i + WG, ... of each of the RN·G weight rows, so the workgroup reads contiguous weight
// bytes and each weight row is read once per step. x is read from shared memory at slots permuted
// per weight format so that a subgroup's reads hit distinct banks. The workgroup is as wide as it
// takes to keep enough invocations in flight for the whole matrix (narrow for many columns, wide
// for few), but never wider than a row has parts. Sums are reduced with subgroupAdd and then
// across subgroups in shared memory (entirely in shared memory without subgroup arithmetic).
//
// With a norm prologue (rms_norm fused in), the copy also sums x², and the results are scaled by
// 1/rms at the end.
#include <algorithm>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "codegen/glsl_common.h"
#include "codegen/matmul.h"
#include "codegen/weight_parts.h"

namespace doppler::codegen {
namespace {
// Weight rows per workgroup (RN output columns times G): x, staged once, serves them all.
constexpr int64_t kWeightRowsPerWorkgroup = 4;
// Invocations a matrix-vector product should keep in flight to saturate a large GPU's memory.
constexpr int64_t kTargetInvocations = int64_t{1} << 17;
constexpr uint32_t kMinWorkgroup = 32, kMaxWorkgroup = 256;
// Most x values (per row of x) staged in shared memory at once.
constexpr int64_t kMaxChunk = 4096;

uint32_t WorkgroupSize(const TargetCaps& caps, int64_t workgroups, int64_t parts_per_row) {
  const uint32_t cap = std::min(kMaxWorkgroup, caps.max_workgroup_invocations);
  uint32_t wg = std::min(kMinWorkgroup, cap);
  while (wg * 2 <= cap && workgroups * wg < kTargetInvocations && wg < parts_per_row) wg *= 2;
  return wg;
}

}  // namespace

absl::StatusOr<Kernel> EmitGemv(const EmitContext& c, const MatMulSpec& s) {
  absl::StatusOr<WeightParts> parts = WeightPartDecoder(3, s.w_dtype, s.k);
  if (!parts.ok()) return parts.status();
  const int64_t rows_per_workgroup = kWeightRowsPerWorkgroup / s.gates;
  const uint32_t groups = CeilDiv(s.n, rows_per_workgroup);
  const uint32_t wg = WorkgroupSize(c.caps, groups, parts->per_row);
  const bool subgroups = c.caps.subgroup_arithmetic;
  const int64_t outs = s.m * rows_per_workgroup * s.gates + (s.norm ? s.m : 0);
  // The chunk: whole blocks (and whole vec4s of them), within the shared memory left after the
  // reduction's.
  const bool vec4 = parts->values % 4 == 0;
  const int64_t unit = vec4 ? std::lcm<int64_t>(parts->block, 16) : parts->block;
  const int64_t shared_floats =
      (static_cast<int64_t>(c.caps.max_shared_memory) / 4 - outs * wg) / s.m;
  const int64_t chunk = std::min(s.k, std::min(kMaxChunk, shared_floats) / unit * unit);
  if (chunk <= 0) return absl::ResourceExhaustedError("not enough shared memory for a chunk of x");
  // Staging and reading x: vec4 slots permuted by the weight format, or plain floats (K not a
  // multiple of 4).
  const std::string x_io =
      vec4 ? absl::StrCat(R"(
layout(std430, set = 0, binding = 2) readonly buffer Buf_x { vec4 x4[]; };
const uint CHUNK4 = (CHUNK + 3u) / 4u;
shared vec4 xs[TM][CHUNK4];
uint x_slot(uint v) { return )",
                          parts->x_slot, R"(; }
// Copies values k0.. k0 + len of x's row t into shared memory; returns their sum of squares.
float stage_x(uint t, uint k0, uint len, bool live) {
  float ss = 0.0;
  for (uint j = gl_LocalInvocationID.x; j < len / 4u; j += WG) {
    vec4 v = live ? x4[(t * K + k0) / 4u + j] : vec4(0.0);
    ss += dot(v, v);
#if NORM
    uint k = k0 + 4u * j;
    v *= vec4(norm_weight(k), norm_weight(k + 1u), norm_weight(k + 2u), norm_weight(k + 3u));
#endif
    xs[t][x_slot(j)] = v;
  }
  return ss;
}
// The values of part p (whose chunk starts at k0) of row t.
void read_x(uint t, uint p, uint k0, out float v[PV]) {
  [[unroll]] for (uint i = 0u; i < PV; i += 4u) {
    vec4 q = xs[t][x_slot((w_part_k(p, i) - k0) / 4u)];
    v[i] = q.x; v[i + 1u] = q.y; v[i + 2u] = q.z; v[i + 3u] = q.w;
  }
}
)")
         : absl::StrCat(FloatBuffer(2, "x", graph::DType::kF32, true), R"(
shared float xs[TM][CHUNK];
float stage_x(uint t, uint k0, uint len, bool live) {
  float ss = 0.0;
  for (uint j = gl_LocalInvocationID.x; j < len; j += WG) {
    float v = live ? x[t * K + k0 + j] : 0.0;
    ss += v * v;
#if NORM
    v *= norm_weight(k0 + j);
#endif
    xs[t][j] = v;
  }
  return ss;
}
void read_x(uint t, uint p, uint k0, out float v[PV]) {
  [[unroll]] for (uint i = 0u; i < PV; ++i) v[i] = xs[t][w_part_k(p, i) - k0];
}
)");
  // `void wg_reduce(inout float v[OUTS])`: every invocation gets the workgroup's sums. red holds a
  // slot per invocation, enough for any subgroup count.
  const std::string reduce =
      subgroups ? R"(
shared float red[OUTS][WG];
void wg_reduce(inout float v[OUTS]) {
  [[unroll]] for (uint o = 0u; o < OUTS; ++o) v[o] = subgroupAdd(v[o]);
  if (gl_NumSubgroups == 1u) return;  // uniform
  if (subgroupElect()) {
    [[unroll]] for (uint o = 0u; o < OUTS; ++o) red[o][gl_SubgroupID] = v[o];
  }
  barrier();
  [[unroll]] for (uint o = 0u; o < OUTS; ++o) {
    float s = 0.0;
    for (uint i = 0u; i < gl_NumSubgroups; ++i) s += red[o][i];
    v[o] = s;
  }
}
)"
                : R"(
shared float red[OUTS][WG];
void wg_reduce(inout float v[OUTS]) {
  uint lid = gl_LocalInvocationID.x;
  [[unroll]] for (uint o = 0u; o < OUTS; ++o) red[o][lid] = v[o];
  barrier();
  for (uint s = WG / 2u; s > 0u; s >>= 1) {
    if (lid < s) {
      [[unroll]] for (uint o = 0u; o < OUTS; ++o) red[o][lid] += red[o][lid + s];
    }
    barrier();
  }
  [[unroll]] for (uint o = 0u; o < OUTS; ++o) v[o] = red[o][0];
}
)";
  Kernel k;
  k.variant = absl::StrCat("gemv.", graph::Name(s.w_dtype), ".t", s.m, "x", rows_per_workgroup, ".wg", wg,
                           subgroups ? ".sg" : "", s.variant_suffix);
  k.glsl = absl::StrCat(ShaderHeader(wg),
                        subgroups ? "#extension GL_KHR_shader_subgroup_basic : enable\n"
                                    "#extension GL_KHR_shader_subgroup_arithmetic : enable\n"
                                  : "",
                        s.io_glsl, parts->glsl,
                        Fill(R"(
#define NORM {{NORM}}
const uint WG = {{WG}}u, TM = {{TM}}u, RN = {{RN}}u, CHUNK = {{CHUNK}}u;
const uint RUN = PV / RUNS;
const uint OUTS = TM * RN * G + (NORM == 1 ? TM : 0u);  // dot products, then sums of x²
)",
                             {{"NORM", s.norm ? "1" : "0"},
                              {"WG", absl::StrCat(wg)},
                              {"TM", absl::StrCat(s.m)},
                              {"RN", absl::StrCat(rows_per_workgroup)},
                              {"CHUNK", absl::StrCat(chunk)}}),
                        x_io, reduce, Fill(R"(
void main() {
  uint lid = gl_LocalInvocationID.x;
  uint col0 = (gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x) * RN;
  uint m = {{ROWS}};
  float acc[OUTS];
  [[unroll]] for (uint o = 0u; o < OUTS; ++o) acc[o] = 0.0;

  for (uint k0 = 0u; k0 < K; k0 += CHUNK) {
    uint len = min(CHUNK, K - k0);
    [[unroll]] for (uint t = 0u; t < TM; ++t) {
      float ss = stage_x(t, k0, len, t < m);
#if NORM
      acc[TM * RN * G + t] += ss;
#endif
    }
    barrier();
    for (uint p = k0 / PV + lid; p < (k0 + len) / PV; p += WG) {
      float xv[TM][PV], xrun[TM][RUNS];
      [[unroll]] for (uint t = 0u; t < TM; ++t) {
        read_x(t, p, k0, xv[t]);
        [[unroll]] for (uint r = 0u; r < RUNS; ++r) {
          float sum = 0.0;
          [[unroll]] for (uint i = 0u; i < RUN; ++i) sum += xv[t][r * RUN + i];
          xrun[t][r] = sum;
        }
      }
      [[unroll]] for (uint r = 0u; r < RN; ++r) {
        if (col0 + r < N) {
          [[unroll]] for (uint g = 0u; g < G; ++g) {
            [[unroll]] for (uint t = 0u; t < TM; ++t) acc[(t * RN + r) * G + g] += w_dot(col0 + r + g * N, p, xv[t], xrun[t]);
          }
        }
      }
    }
    barrier();
  }
  wg_reduce(acc);
  // Invocation t·RN + r writes column col0 + r of row t: the epilogues run side by side. The
  // selects with constant indices keep acc in registers.
  [[unroll]] for (uint t = 0u; t < TM; ++t) {
#if NORM
    float scale = norm_scale(acc[TM * RN * G + t]);
#else
    float scale = 1.0;
#endif
    [[unroll]] for (uint r = 0u; r < RN; ++r) {
      if (lid == t * RN + r && t < m && col0 + r < N) {
        store(t, col0 + r, acc[(t * RN + r) * G] * scale, acc[(t * RN + r) * G + G - 1u] * scale);
      }
    }
  }
}
)",
                                           {{"ROWS", s.rows_expr}}));
  k.groups = WideGrid(groups);
  return k;
}

}  // namespace doppler::codegen
