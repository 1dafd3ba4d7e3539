// The matrix-vector variant (a few rows of x, as in decode). A workgroup computes RN output
// columns for TM rows of x (all of them, or block gl_WorkGroupID.z of TM rows, TM from
// tuning::ChooseGemv: as many as the x values of a part of every row fit in registers): its
// invocations split K by parts (codegen/weight_parts.h), invocation i taking parts i, i + WG, ...
// of each of the RN·G weight rows, so the workgroup reads contiguous bytes and each weight row is
// read once per step (and block). An invocation issues the loads of
// its next parts of every row before it computes with the current ones, so that its loads are in
// flight together and during its arithmetic (but for wide Q6_K workgroups, below). A part's x
// values are loaded once (16-byte loads) and reused for every row. The workgroup is as wide as it takes to keep enough
// invocations in flight for the whole matrix (narrow for many columns, wide for few), but never
// wider than a row has parts. Sums are reduced with subgroupAdd and then across subgroups in
// shared memory (entirely in shared memory without subgroup arithmetic).
//
// With a norm prologue (rms_norm fused in), x is multiplied by the norm weight as it is loaded,
// the workgroup sums x² over the same loads, and the results are scaled by 1/rms. Where x is a
// residual norm's normalised sum (MatMulSpec::restate), x is the sum of the norm's inputs as
// loaded, normalised the same way, and workgroup (0, 0) writes the sum. Where x is a plain norm
// whose other readers read its row (MatMulSpec::norm_out), every workgroup writes a share of the row
// from the normalised x its invocations hold, once the reduction has given its 1 / rms.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "codegen/glsl_common.h"
#include "codegen/matmul.h"
#include "codegen/tuning/gemv.h"
#include "codegen/tuning/gemv_shape.h"
#include "codegen/weight_parts.h"

namespace doppler::codegen {

std::string GemvRowBlockGlsl(uint32_t blocks, const std::string& rows_expr, bool interleaved) {
  return blocks > 1 ? absl::StrCat("  // This workgroup's block of rows: t0 .. t0 + m - 1.\n  uint rows = ", rows_expr,
                                   interleaved ? absl::StrCat(", t0 = (wgi % ", blocks, "u) * TM;\n  wgi /= ", blocks,
                                                              "u;\n  if (wgi >= WORKGROUPS) return;  // past the grid's last\n")
                                               : ", t0 = gl_WorkGroupID.z * TM;\n",
                                   "  if (t0 >= rows) return;  // uniform across the workgroup\n"
                                   "  uint m = min(rows - t0, TM);\n")
                    : absl::StrCat("  // The rows: t0 .. t0 + m - 1, all of them.\n  const uint t0 = 0u;\n  uint m = ", rows_expr,
                                   ";\n");
}

// A plain norm's row (MatMulSpec::norm_out), written a share by every workgroup (parts p with p %
// workgroups = its index), from the values its invocations hold (x times the norm's weight, as the
// loop left them in `held`) times the reduction's 1 / rms.
constexpr const char* kNormRowOut = R"(  {
    float scale = norm_scale(acc[TM * RN * G]);
    uint shares = gl_NumWorkGroups.x * gl_NumWorkGroups.y, share = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
    [[unroll]] for (uint it = 0u; it < ITERS; ++it) {
      uint p = lid + it * WG;
      if (p < PARTS && p % shares == share) {
        [[unroll]] for (uint i = 0u; i < PV; ++i) {
          uint k = w_part_k(p, i);
          if (k < K) store_xn(k, held[it][i] * scale);
        }
      }
    }
  }
)";

std::string DotsReduceGlsl(bool subgroups) {
  return subgroups ? R"(
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
}

absl::StatusOr<Kernel> EmitGemv(const EmitContext& c, const MatMulSpec& s) {
  absl::StatusOr<int64_t> float_part = tuning::GemvFloatPart(s.m, s.w_dtype, s.restate >= 0);
  if (!float_part.ok()) return float_part.status();
  absl::StatusOr<WeightParts> parts = WeightPartDecoder(3, s.w_dtype, s.k, {}, FloatPartForm{.float_values = *float_part});
  if (!parts.ok()) return parts.status();
  absl::StatusOr<tuning::GemvConfig> config = tuning::ChooseGemv(s.m, parts->values);
  if (!config.ok()) return config.status();
  const tuning::GemvShape shape = tuning::ChooseGemvShape(
      c.caps, {s.m, s.k, s.n, s.gates, s.w_dtype, parts->values, parts->per_row, s.norm}, *config);
  const int64_t tm = shape.tm;
  const uint32_t blocks = shape.row_blocks;
  const int64_t rows_per_workgroup = shape.rn;
  const bool load_ahead = shape.load_ahead;
  const uint32_t groups = shape.groups;
  const uint32_t wg = shape.wg;
  const bool subgroups = c.caps.subgroup_arithmetic;
  // x is a residual norm's normalised part (MatMulSpec::restate): the kernel reads the norm's inputs
  // and computes the norm as a prologue of its own (RestatedXGlsl; one block of rows, so that
  // workgroup (0, 0) writes every row's sum).
  const bool restated = s.restate >= 0;
  if (restated && (parts->values % 4 != 0 || blocks != 1)) {
    return absl::InternalError("a residual norm computed in x needs parts of whole vectors of four and one block of rows");
  }
  if (s.norm_out && blocks != 1) {
    return absl::InternalError("a plain norm's row written by its reader needs one block of rows");
  }
  const bool norm = s.norm || restated;
  const std::string x_decl = absl::StrCat(
      PartXGlsl(*parts, 2),
      restated ? "" : "void load_x(uint t, uint p, out float v[PV]) { load_part_x((x_row0() + t) * K, p, v); }\n");
  const std::string restated_decl =
      !restated ? ""
                : absl::StrCat(RestatedXGlsl(c, s, /*held=*/false),
                               "void load_x(uint t, uint p, out float v[PV]) {\n"
                               "  [[unroll]] for (uint i = 0u; i < PV; i += 4u) {\n"
                               "    vec4 q = x_value4(t, 0u, w_part_k(p, i), 0u);\n"
                               "    v[i] = q.x; v[i + 1u] = q.y; v[i + 2u] = q.z; v[i + 3u] = q.w;\n"
                               "  }\n}\n"
                               "vec4 norm_weight4(uint k) { return x_weight4(k, 0u); }\n"
                               "float norm_scale(float sum_sq) { return x_scale(sum_sq); }\n");
  // `void scale_by_norm_weight(uint p, inout float v[PV])`, for a norm prologue: the weight is read
  // in 4-value loads wherever x is.
  const std::string norm_decl =
      !norm ? ""
      : parts->values % 4 == 0
          ? "void scale_by_norm_weight(uint p, inout float v[PV]) {\n"
            "  [[unroll]] for (uint i = 0u; i < PV; i += 4u) {\n"
            "    vec4 g = norm_weight4(w_part_k(p, i));\n"
            "    v[i] *= g.x; v[i + 1u] *= g.y; v[i + 2u] *= g.z; v[i + 3u] *= g.w;\n"
            "  }\n}\n"
          : "void scale_by_norm_weight(uint p, inout float v[PV]) {\n"
            "  [[unroll]] for (uint i = 0u; i < PV; ++i) v[i] *= norm_weight(w_part_k(p, i));\n}\n";
  Kernel k;
  k.config = shape;
  k.variant = absl::StrCat("gemv.", graph::Name(s.w_dtype), ".t", tm, "x", rows_per_workgroup, ".wg", wg,
                           subgroups ? ".sg" : "", s.variant_suffix, restated ? "+residual_norm_x" : "");
  k.glsl = absl::StrCat(ShaderHeader(wg),
                        subgroups ? "#extension GL_KHR_shader_subgroup_basic : enable\n"
                                    "#extension GL_KHR_shader_subgroup_arithmetic : enable\n"
                                  : "",
                        s.io_glsl, parts->glsl, x_decl, restated ? "" : norm_decl,
                        Fill(R"(
#define NORM {{NORM}}
#define LOAD_AHEAD {{LOAD_AHEAD}}
#define NORM_OUT {{WRITES_NORM}}
const uint WG = {{WG}}u, TM = {{TM}}u, RN = {{RN}}u, PARTS = {{PARTS}}u;
const uint RUN = PV / RUNS, ITERS = (PARTS + WG - 1u) / WG;
const uint OUTS = TM * RN * G + (NORM == 1 ? TM : 0u);  // dot products, then sums of x²
)",
                             {{"NORM", norm ? "1" : "0"},
                              {"WRITES_NORM", s.norm_out ? "1" : "0"},
                              {"LOAD_AHEAD", load_ahead ? "1" : "0"},
                              {"WG", absl::StrCat(wg)},
                              {"TM", absl::StrCat(tm)},
                              {"RN", absl::StrCat(rows_per_workgroup)},
                              {"PARTS", absl::StrCat(parts->per_row)}}),
                        restated_decl, restated ? norm_decl : "", DotsReduceGlsl(subgroups), Fill(R"(
// Part p of every weight row of the workgroup (rows past N read row N - 1).
void load_rows(uint col0, uint p, out WPart wp[RN * G]) {
  [[unroll]] for (uint r = 0u; r < RN; ++r) {
    [[unroll]] for (uint g = 0u; g < G; ++g) wp[r * G + g] = w_load(min(col0 + r, N - 1u) + g * N, p);
  }
}

void main() {
  uint lid = gl_LocalInvocationID.x;
  uint col0 = (gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x) * RN;
{{ROW_BLOCK}}  float acc[OUTS];
  [[unroll]] for (uint o = 0u; o < OUTS; ++o) acc[o] = 0.0;

#if NORM_OUT
  float held[ITERS][PV];  // row 0's x times the norm's weight, each iteration's part
#endif
#if LOAD_AHEAD
  // The parts of the first iteration; each iteration then issues the next one's loads before it
  // computes, so a warp keeps loads in flight while it does arithmetic.
  WPart next[RN * G];
  load_rows(col0, min(lid, PARTS - 1u), next);
#endif
  // A constant trip count, unrolled, keeps the parts in registers.
  [[unroll]] for (uint it = 0u; it < ITERS; ++it) {
    // Past the last part (when WG does not divide PARTS), read the last part again with x = 0.
    uint p = min(lid + it * WG, PARTS - 1u);
    bool live = lid + it * WG < PARTS;
#if LOAD_AHEAD
    WPart wp[RN * G] = next;
    if (it + 1u < ITERS) load_rows(col0, min(lid + (it + 1u) * WG, PARTS - 1u), next);
#endif
    float xv[TM][PV], xrun[TM][RUNS];
    [[unroll]] for (uint t = 0u; t < TM; ++t) {
      if (t < m && live) {
        load_x(t0 + t, p, xv[t]);
      } else {
        [[unroll]] for (uint i = 0u; i < PV; ++i) xv[t][i] = 0.0;
      }
#if NORM
      [[unroll]] for (uint i = 0u; i < PV; ++i) acc[TM * RN * G + t] += xv[t][i] * xv[t][i];
      scale_by_norm_weight(p, xv[t]);
#endif
#if NORM_OUT
      if (t == 0u) held[it] = xv[0];
#endif
      [[unroll]] for (uint r = 0u; r < RUNS; ++r) {
        float sum = 0.0;
        [[unroll]] for (uint i = 0u; i < RUN; ++i) sum += xv[t][r * RUN + i];
        xrun[t][r] = sum;
      }
    }
    [[unroll]] for (uint r = 0u; r < RN; ++r) {
      if (col0 + r < N) {
        [[unroll]] for (uint g = 0u; g < G; ++g) {
          [[unroll]] for (uint t = 0u; t < TM; ++t) acc[(t * RN + r) * G + g] += w_dot(
#if LOAD_AHEAD
            wp[r * G + g],
#else
            w_load(col0 + r + g * N, p),
#endif
            p, xv[t], xrun[t]);
        }
      }
    }
  }
  wg_reduce(acc);
{{NORM_OUT}}  // Invocation t·RN + r writes column col0 + r of row t: the epilogues run side by side. The
  // selects with constant indices keep acc in registers.
  [[unroll]] for (uint t = 0u; t < TM; ++t) {
#if NORM
    float scale = norm_scale(acc[TM * RN * G + t]);
#else
    float scale = 1.0;
#endif
    [[unroll]] for (uint r = 0u; r < RN; ++r) {
      if (lid == t * RN + r && t < m && col0 + r < N) {
        store(t0 + t, col0 + r, acc[(t * RN + r) * G] * scale, acc[(t * RN + r) * G + G - 1u] * scale);
      }
    }
  }
}
)",
                                     {{"ROW_BLOCK", GemvRowBlockGlsl(blocks, s.rows_expr, /*interleaved=*/false)},
                                      {"NORM_OUT", s.norm_out ? kNormRowOut : ""}}));
  k.groups = WideGrid(groups);
  k.groups[2] = blocks;
  return k;
}

}  // namespace doppler::codegen
