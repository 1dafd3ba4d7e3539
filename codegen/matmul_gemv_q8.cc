// The matrix-vector variant for x rounded through q8 blocks (attr x_quant = "q8",
// graph/activation_quant.h), with integer dot products: each part's 8-bit (or narrower) weight
// quants are multiplied with x's 8-bit quants four at a time, instead of decoding every weight to
// a float and reading x as floats.
//
// A workgroup first stages x (one row per TM, or a segment of it where K is too long for shared
// memory) as q8: eight invocations take a block of 32 values, find its scale and write its quants
// where the parts that read them find them as vectors (x_slot), so a part's x is a few 16-byte
// shared-memory loads. Since staging reads all of x, a workgroup then takes many rows: its
// invocations form teams (one or more whole subgroups where the device has subgroup arithmetic
// and a fixed subgroup size, else the whole workgroup), and each team computes RN output columns
// (G weight rows each) at a time, its invocations splitting K by the q8 decoder's parts
// (WeightParts::q8_glsl: wider than the float decoder's, so a part's scales are decoded for more
// values), keeping the parts of the next DEPTH iterations in flight, and reducing the team's sums
// at the end of each group of rows. Where a row's parts would leave lanes idle in its last
// iteration, a team takes its rows' parts as one list (flat), each lane adding its product to its
// part's row. A row-wide op reading the rows (MatMulSpec::tail) is finished
// by the last workgroup to get to the end; a residual norm whose normalised sum is x
// (MatMulSpec::restate) is computed by every workgroup as it stages x (RestatedXGlsl).
#include <algorithm>
#include <limits>

#include "absl/strings/str_cat.h"
#include "codegen/glsl_common.h"
#include "codegen/matmul.h"
#include "codegen/q8_x.h"
#include "codegen/tuning/gemv.h"
#include "codegen/tuning/gemv_shape.h"
#include "codegen/weight_parts.h"
#include "graph/activation_quant.h"

namespace doppler::codegen {

// `vec4 x_value4(uint row, uint t, uint k, uint step)`: x[row, k .. k + 3] (t: the row within
// the block, step: stage_x's step); with a norm before the products, `vec4 x_weight4(uint k, uint
// step)` and `float x_scale(float sum_sq)` (1 / rms of a row from its sum of squares), and X_NORM
// 1. Where x is a residual norm's normalised sum (MatMulSpec::restate), x_value4 is the norm's sum
// s = x' + r (x' normalised by its own weight first where the norm has a prologue), which workgroup
// 0 of the norm's first consumer (MatMulSpec::restate_writes) also writes to part 0 of the norm's
// value (through a `restrict` buffer, so that the stores do not hold back later loads); the norm's
// weight and eps are x_weight4's and x_scale's.
// `restate_rows` runs first. Where an invocation's share of the rows is at most a few vectors
// (`held`), it loads all of them (x', r and the weights) in one round, finds each row's 1 / rms of
// x' and keeps s in registers; else it finds the 1 / rms, and x_value4 loads x' again, and r.
std::string RestatedXGlsl(const EmitContext& c, const MatMulSpec& s, bool held) {
  if (s.restate < 0) {
    return absl::StrCat("vec4 x_value4(uint row, uint t, uint k, uint step) { return x4[((x_row0() + row) * K + k) / 4u]; }\n",
                        s.norm ? "#define X_NORM 1\nvec4 x_weight4(uint k, uint step) { return norm_weight4(k); }\n"
                                 "float x_scale(float sum_sq) { return norm_scale(sum_sq); }\n"
                               : "#define X_NORM 0\n");
  }
  const graph::Node& norm = c.g.node(s.restate);
  const bool prologue = norm.attrs.Has("norm_eps");
  const uint32_t b = s.restate_binding;
  const uint32_t inputs = static_cast<uint32_t>(norm.inputs.size());
  return absl::StrCat(
      "#define X_NORM 1\n#define RESTATE_PROLOGUE ", prologue ? 1 : 0, "\n#define RESTATE_HELD ", held ? 1 : 0, "\n",
      FloatQuadBuffer(b, "ry", graph::DType::kF32, true),
      FloatQuadBuffer(b + 1, "rw", c.g.node(norm.inputs[1]).type.dtype, true),
      FloatQuadBuffer(b + 2, "rr", graph::DType::kF32, true),
      prologue ? FloatQuadBuffer(b + 3, "rwp", c.g.node(norm.inputs[3]).type.dtype, true) : "",
      // Where another consumer of the norm writes its value, this kernel has no binding for it.
      s.restate_writes ? absl::StrCat("#define WRITES_SUM 1\nlayout(std430, set = 0, binding = ", b + inputs,
                                      ") restrict writeonly buffer Buf_rs { vec4 rs4[]; };\n")
                       : "#define WRITES_SUM 0\n",
      Fill(R"(
bool writes_sum() { return gl_WorkGroupID.x == 0u && gl_WorkGroupID.y == 0u; }
#if RESTATE_HELD
vec4 held_s[TM][STEPS], held_w[STEPS];  // x is one segment: stage_x's steps
void restate_rows(uint t0, uint m) {
  vec4 y[TM][STEPS], r[TM][STEPS], wp[STEPS];
  [[unroll]] for (uint step = 0u; step < STEPS; ++step) {
    uint k = 4u * (step * WG + gl_LocalInvocationID.x);
    bool in_row = k < K;
    held_w[step] = in_row ? load4_rw(k) + {{OFFSET}} : vec4(0.0);
#if RESTATE_PROLOGUE
    wp[step] = in_row ? load4_rwp(k) + {{PRE_OFFSET}} : vec4(0.0);
#endif
    [[unroll]] for (uint t = 0u; t < TM; ++t) {
      bool live = in_row && t < m;
      y[t][step] = live ? load4_ry((t0 + t) * K + k) : vec4(0.0);
      r[t][step] = live ? load4_rr((t0 + t) * K + k) : vec4(0.0);
    }
  }
  [[unroll]] for (uint t = 0u; t < TM; ++t) {
#if RESTATE_PROLOGUE
    float ss = 0.0;
    [[unroll]] for (uint step = 0u; step < STEPS; ++step) ss += dot(y[t][step], y[t][step]);
    float inv = inversesqrt(wg_sum(ss) / float(K) + {{PRE_EPS}});
#endif
    [[unroll]] for (uint step = 0u; step < STEPS; ++step) {
#if RESTATE_PROLOGUE
      held_s[t][step] = y[t][step] * inv * wp[step] + r[t][step];
#else
      held_s[t][step] = y[t][step] + r[t][step];
#endif
      uint k = 4u * (step * WG + gl_LocalInvocationID.x);
#if WRITES_SUM
      if (writes_sum() && t < m && k < K) rs4[((t0 + t) * K + k) / 4u] = held_s[t][step];  // part 0: [rows, K] first
#endif
    }
  }
}
vec4 x_value4(uint row, uint t, uint k, uint step) { return held_s[t][step]; }
vec4 x_weight4(uint k, uint step) { return held_w[step]; }
#else
float restate_inv[TM];  // each row's 1 / rms of x'
void restate_rows(uint t0, uint m) {
#if RESTATE_PROLOGUE
  [[unroll]] for (uint t = 0u; t < TM; ++t) {
    float ss = 0.0;
    for (uint k = gl_LocalInvocationID.x * 4u; t < m && k < K; k += WG * 4u) {
      vec4 v = load4_ry((t0 + t) * K + k);
      ss += dot(v, v);
    }
    restate_inv[t] = inversesqrt(wg_sum(ss) / float(K) + {{PRE_EPS}});
  }
#endif
}
vec4 x_value4(uint row, uint t, uint k, uint step) {
  vec4 x = load4_ry(row * K + k);
#if RESTATE_PROLOGUE
  x *= restate_inv[t] * (load4_rwp(k) + {{PRE_OFFSET}});
#endif
  vec4 s = x + load4_rr(row * K + k);
#if WRITES_SUM
  if (writes_sum()) rs4[(row * K + k) / 4u] = s;  // part 0: [rows, K] first
#endif
  return s;
}
vec4 x_weight4(uint k, uint step) { return load4_rw(k) + {{OFFSET}}; }
#endif
float x_scale(float sum_sq) { return inversesqrt(sum_sq / float(K) + {{EPS}}); }
)",
           {{"PRE_EPS", prologue ? FloatLiteral(norm.attrs.Float("norm_eps")) : "0.0"},
            {"PRE_OFFSET", prologue ? FloatLiteral(norm.attrs.Float("norm_offset")) : "0.0"},
            {"OFFSET", FloatLiteral(norm.attrs.Float("weight_offset"))},
            {"EPS", FloatLiteral(norm.attrs.Float("eps"))}}));
}

absl::StatusOr<Kernel> EmitGemvQ8(const EmitContext& c, const MatMulSpec& s) {
  // A block's 8 invocations share a subgroup where subgroups have at least 8 (of consecutive
  // invocations, as the teams take them).
  const bool shuffle_blocks = c.caps.subgroup_shuffle && c.caps.min_subgroup_size >= 8;
  absl::StatusOr<tuning::GemvConfig> config = tuning::ChooseGemvQ8(s.m, s.k, {s.w_dtype, shuffle_blocks});
  if (!config.ok()) return config.status();
  absl::StatusOr<WeightParts> parts =
      WeightPartDecoder(3, s.w_dtype, s.k, {config->iq4_pairs, config->q4_0_signed != 0, config->iq4_xs_part, config->q4_0_part});
  if (!parts.ok()) return parts.status();
  if (parts->q8_glsl.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("x_quant needs block-quantized weights with integer quants, not ", graph::Name(s.w_dtype)));
  }
  if (parts->q8_x_pairs && !shuffle_blocks) return absl::InternalError("x_quant: x staged in pairs needs subgroup shuffles");
  const graph::Node* tail = s.tail >= 0 ? &c.g.node(s.tail) : nullptr;
  const bool argmax = tail != nullptr && tail->kind == graph::OpKind::kArgmax;
  const bool norm_tail = tail != nullptr && tail->kind == graph::OpKind::kRmsNorm;
  const bool subgroups = c.caps.subgroup_arithmetic;
  absl::StatusOr<tuning::GemvQ8Shape> shape = tuning::ChooseGemvQ8Shape(
      c.caps, {s.m, s.k, s.n, s.gates, s.w_dtype, parts->q8_values, s.k / parts->q8_values, s.norm},
      {parts->q8_shared_bytes, argmax, shuffle_blocks, s.restate >= 0}, *config);
  if (!shape.ok()) return shape.status();
  const int64_t tm = shape->tm, rn = shape->rn;
  const uint32_t wg = shape->wg, team = shape->team, row_blocks = shape->row_blocks, workgroups = shape->workgroups;
  const bool flat = shape->flat;

  const std::vector<std::pair<std::string, std::string>> constants = {
      {"FLAT", flat ? "1" : "0"},
      {"FITERS", absl::StrCat(shape->flat_iters)},
      {"FDEPTH", absl::StrCat(shape->flat_depth)},
      {"ARGMAX", argmax ? "1" : "0"},
      {"NORM_TAIL", norm_tail ? "1" : "0"},
      {"SHUFFLE_BLOCKS", shuffle_blocks ? "1" : "0"},
      {"WORKGROUPS", absl::StrCat(workgroups)},
      {"SUBGROUP_TEAMS", shape->subgroup_teams ? "1" : "0"},
      {"SUBS", absl::StrCat(shape->subs)},
      {"WG", absl::StrCat(wg)},
      {"TEAM", absl::StrCat(team)},
      {"TM", absl::StrCat(tm)},
      {"RN", absl::StrCat(rn)},
      {"PARTS", absl::StrCat(s.k / parts->q8_values)},
      {"SEG", absl::StrCat(shape->seg)},
      {"SEGMENTS", absl::StrCat(shape->segments)},
      {"STEPS", absl::StrCat(shape->steps)},
      {"BATCH", absl::StrCat(shape->batch)},
      {"ITERS", absl::StrCat(shape->iters)},
      {"DEPTH", absl::StrCat(shape->depth)},
      {"RG", absl::StrCat(shape->row_groups)},
      {"RG_PER_TEAM", absl::StrCat(shape->rg_per_team)},
};
  Kernel k;
  k.config = *shape;
  // The decoding choices that apply to the type: IQ4's pair table and IQ4_XS's parts of 64 values,
  // Q4_0's signed quants and parts of 64 values.
  const bool iq4 = s.w_dtype == graph::DType::kIQ4_NL || s.w_dtype == graph::DType::kIQ4_XS;
  const std::string decoding =
      absl::StrCat(iq4 && config->iq4_pairs > 0 ? absl::StrCat(".pairs", config->iq4_pairs) : "",
                   s.w_dtype == graph::DType::kIQ4_XS && config->iq4_xs_part != 32 ? absl::StrCat(".part", config->iq4_xs_part) : "",
                   s.w_dtype == graph::DType::kQ4_0 && config->q4_0_signed != 0 ? ".signed" : "",
                   s.w_dtype == graph::DType::kQ4_0 && config->q4_0_part != 32 ? absl::StrCat(".part", config->q4_0_part) : "");
  k.variant = absl::StrCat("gemv_q8.", graph::Name(s.w_dtype), decoding, ".t", tm, "x", rn, ".wg", wg, ".team", team, ".rg",
                           shape->rg_per_team, flat ? ".flat" : "", ".d", flat ? shape->flat_depth : shape->depth,
                           shape->segments > 1 ? absl::StrCat(".seg", shape->segments) : "",
                           row_blocks > 1 ? absl::StrCat(".blocks", row_blocks) : "", s.variant_suffix,
                           argmax ? "+argmax" : norm_tail ? "+rms_norm_tail" : "", s.restate >= 0 ? "+residual_norm_x" : "");
  k.glsl = absl::StrCat(
      ShaderHeader(wg),
      subgroups ? "#extension GL_KHR_shader_subgroup_basic : enable\n"
                  "#extension GL_KHR_shader_subgroup_arithmetic : enable\n"
                : "",
      shuffle_blocks ? "#extension GL_KHR_shader_subgroup_shuffle : enable\n" : "",
      Q8DotGlsl(),
      s.io_glsl, parts->glsl, parts->q8_glsl,
      "layout(std430, set = 0, binding = 2) readonly buffer Buf_x { vec4 x4[]; };\n",
      Fill(R"(
#define ARGMAX {{ARGMAX}}
#define SHUFFLE_BLOCKS {{SHUFFLE_BLOCKS}}
#define NORM_TAIL {{NORM_TAIL}}
#define SUBGROUP_TEAMS {{SUBGROUP_TEAMS}}
#define SUBS {{SUBS}}
const uint WG = {{WG}}u, TEAM = {{TEAM}}u, TEAMS = WG / TEAM, TM = {{TM}}u, RN = {{RN}}u, PARTS = {{PARTS}}u;
const uint SEG = {{SEG}}u, SEGMENTS = {{SEGMENTS}}u, SEG_PARTS = SEG / PV8, SEG_BLOCKS = SEG / 32u;
const uint STEPS = {{STEPS}}u;  // stage_x's steps of four values an invocation over a segment
const uint BATCH = {{BATCH}}u;  // steps whose loads stage_x issues together
const uint ITERS = {{ITERS}}u, DEPTH = {{DEPTH}}u, RG = {{RG}}u, RG_PER_TEAM = {{RG_PER_TEAM}}u;
#define FLAT {{FLAT}}
const uint FITERS = {{FITERS}}u, FDEPTH = {{FDEPTH}}u;  // FLAT's iterations, and those in flight
const uint RUN8 = PV8 / RUNS8, XW = PV8 / 4u, XV = PV8 / 16u, OUTS = TM * RN * G;
shared uvec4 xq[TM * SEG_PARTS * XV];  // x's quants, in planes (xq_vec)
shared float xd[TM * SEG_BLOCKS];  // x's block scales
const uint NONE = 0xFFFFFFFFu, WORKGROUPS = {{WORKGROUPS}}u;
)",
           constants),
      WorkgroupReductions(wg, subgroups), DotsReduceGlsl(subgroups),
      RestatedXGlsl(c, s, shape->hold_restated),
      tail == nullptr ? ""
                      : absl::StrCat(Fill(R"(
// The dispatch's scratch: done counts the workgroups that finished (the last one resets it); an
// argmax tail keeps each workgroup's first maximum of row t in part[wgi * TM + t] (value bits,
// column).
layout(std430, set = 0, binding = {{SCRATCH}}) coherent buffer Buf_scratch { uint done; uint pad[3]; uvec2 part[]; } tail;
)",
                                          {{"SCRATCH", absl::StrCat(s.scratch_binding)}}),
                                     LastArrivalGlsl("tail.done", "WORKGROUPS")),
      argmax ? absl::StrCat(FirstMaxReductionGlsl(subgroups),
                            Fill("layout(std430, set = 0, binding = {{IDS}}) buffer Buf_ids { int ids[]; };\n",
                                 {{"IDS", absl::StrCat(s.tail_binding)}}))
             : "",
      norm_tail ? RmsNormRowGlsl(EmitContext{c.g, *tail, c.caps, c.tokens},
                                 NormRowIo{s.tail_binding, "y", s.tail_binding + 1, s.tail_binding + 2, s.tail_binding + 3},
                                 wg)
                : "",
      Q8StagingGlsl(), Q8PartXGlsl(), Fill(R"(
// Stages segment `seg` of x's rows t0.. (m of them) as q8 (graph/activation_quant.h), each
// invocation taking four values at a time and eight neighbouring invocations a block; adds the
// squares of the values it read to sum_sq. On the H100, an invocation taking a whole block kept 8
// (with a norm 16) vectors in registers: with a residual norm computed here (80 registers a lane)
// Gemma-3-1B's gate+up kernel ran in two waves of workgroups.
void stage_x(uint seg, uint t0, uint m, inout float sum_sq[TM]) {
  const uint QUADS = SEG / 4u;
  uint lid = gl_LocalInvocationID.x;
  [[unroll]] for (uint t = 0u; t < TM; ++t) {
    [[unroll]] for (uint s0 = 0u; s0 < STEPS; s0 += BATCH) {
      // The batch's loads first, so that they are in flight together.
      vec4 vb[BATCH], wb[BATCH];
      [[unroll]] for (uint j = 0u; j < BATCH; ++j) {
        uint step = min(s0 + j, STEPS - 1u), q = step * WG + lid, k = seg * SEG + 4u * q;
        bool live = s0 + j < STEPS && t < m && q < QUADS && k < K;
        vb[j] = live ? x_value4(t0 + t, t, k, step) : vec4(0.0);
#if X_NORM
        wb[j] = live ? x_weight4(k, step) : vec4(0.0);
#endif
      }
      [[unroll]] for (uint j = 0u; j < BATCH; ++j) {
        uint step = s0 + j, q = step * WG + lid, k = seg * SEG + 4u * q;
        if (step >= STEPS) break;  // uniform
        bool live = t < m && q < QUADS && k < K;  // alike for a block's eight invocations
        vec4 v = vb[j];
#if X_NORM
        sum_sq[t] += dot(v, v);
        v *= wb[j];
#endif
        vec4 a = abs(v);
        float amax = block_max(max(max(a.x, a.y), max(a.z, a.w)), (t * STEPS + step) & 1u);
{{STORE_X}}      }
    }
  }
}

// Part p of the weight rows of output columns col0 .. col0 + RN - 1 (rows past N read row N - 1).
void load_rows(uint col0, uint p, out WPart8 wp[RN * G]) {
  [[unroll]] for (uint r = 0u; r < RN; ++r) {
    [[unroll]] for (uint g = 0u; g < G; ++g) wp[r * G + g] = w_load8(min(col0 + r, N - 1u) + g * N, p);
  }
}

// Stages segment `seg` of x (the residual norm first where this kernel computes it: x is then one
// segment), after every part of the segment before has been read.
void stage_segment(uint seg, uint t0, uint m, inout float sum_sq[TM]) {
  if (seg > 0u) barrier();
#ifdef W_SHARED_INIT
  if (seg == 0u) w_shared_init();  // the weight decoder's tables (WeightParts::q8_glsl), read after the barrier below
#endif
#ifdef RESTATE_PROLOGUE
  restate_rows(t0, m);
#endif
  stage_x(seg, t0, m, sum_sq);
  barrier();
}

#if FLAT
// Slot s of the team's R · PARTS parts is part s % PARTS of its row o = s / PARTS (o = r · G + g:
// gate g of output column col0 + r), so that no lane idles in a row's last iteration.
const uint R = RN * G, SLOTS = R * PARTS;
WPart8 load_slot(uint col0, uint s) {
  uint sc = min(s, SLOTS - 1u), o = sc / PARTS;
  return w_load8(min(col0 + o / G, N - 1u) + (o % G) * N, sc % PARTS);
}
#endif

void main() {
  uint lid = gl_LocalInvocationID.x, team = lid / TEAM, lane = lid % TEAM;
  uint wgi = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
{{ROW_BLOCK}}  float sum_sq[TM], scale[TM];
  [[unroll]] for (uint t = 0u; t < TM; ++t) { sum_sq[t] = 0.0; scale[t] = 1.0; }
#if ARGMAX
  float arg_best[TM];  // the first maximum of the columns this invocation wrote, per row
  uint arg_at[TM];
  [[unroll]] for (uint t = 0u; t < TM; ++t) { arg_best[t] = uintBitsToFloat(0xFF800000u); arg_at[t] = NONE; }
#endif
  // Team `team` of this workgroup takes row groups (i · WORKGROUPS + wgi) · TEAMS + team, i <
  // RG_PER_TEAM: at each i the dispatch's workgroups read one contiguous stretch of the matrix.
  // On the H100 that made the LM heads faster than each workgroup reading its own stretch in turn
  // (Llama-3.2-1B's 90.0 -> 86.7 µs, Gemma-3-1B's 133.2 -> 126.7, Llama-3.1-8B's 175.5 -> 164.6),
  // and Gemma-3-1B's gate+up (two row groups a team) 11.4 -> 10.6; but Llama-3.2-1B's Q8_0 head
  // (two row groups a team, 4,008 workgroups, not all resident at once) 112.0 -> 118.1. Each lane
  // keeps the parts of its next DEPTH iterations in flight.
#if !FLAT
  WPart8 ring[DEPTH][RN * G];
#endif
  for (uint i = 0u; i < RG_PER_TEAM; ++i) {  // uniform
    uint col0 = ((i * WORKGROUPS + wgi) * TEAMS + team) * RN;
    float acc[OUTS];
    [[unroll]] for (uint o = 0u; o < OUTS; ++o) acc[o] = 0.0;
#if FLAT
    WPart8 fring[FDEPTH];
    [[unroll]] for (uint d = 0u; d < FDEPTH; ++d) fring[d] = load_slot(col0, lane + d * TEAM);
    if (i == 0u) stage_segment(0u, t0, m, sum_sq);
    [[unroll]] for (uint it = 0u; it < FITERS; ++it) {
      uint s = lane + it * TEAM, sc = min(s, SLOTS - 1u), o = sc / PARTS, p = sc % PARTS;
      WPart8 wp = fring[it % FDEPTH];
      if (it + FDEPTH < FITERS) fring[it % FDEPTH] = load_slot(col0, s + FDEPTH * TEAM);
      // The rows this iteration's slots fall in (constants once the loop is unrolled).
      uint o_lo = it * TEAM / PARTS, o_hi = (it * TEAM + TEAM - 1u) / PARTS;
      [[unroll]] for (uint t = 0u; t < TM; ++t) {
        uvec4 xw[XV];
        float xdr[RUNS8], xrun[RUNS8];
        part_x(t, 0u, p, p, t < m, xw, xdr, xrun);
        float v = s < SLOTS ? w_dot_q8(wp, p, xw, xdr, xrun) : 0.0;
        [[unroll]] for (uint oo = 0u; oo < R; ++oo) {
          if (oo >= o_lo && oo <= o_hi) acc[t * R + oo] += o == oo ? v : 0.0;
        }
      }
    }
#else
    for (uint seg = 0u; seg < SEGMENTS; ++seg) {  // uniform
      [[unroll]] for (uint d = 0u; d < DEPTH; ++d) {
        load_rows(col0, min(seg * SEG_PARTS + lane + d * TEAM, PARTS - 1u), ring[d]);
      }
      if (i == 0u) stage_segment(seg, t0, m, sum_sq);  // where there are segments, a team takes one row group
      [[unroll]] for (uint it = 0u; it < ITERS; ++it) {
        uint sp = min(lane + it * TEAM, SEG_PARTS - 1u);  // the part within the segment
        uint p = min(seg * SEG_PARTS + sp, PARTS - 1u);
        bool live = lane + it * TEAM < SEG_PARTS && seg * SEG_PARTS + lane + it * TEAM < PARTS;
        WPart8 wp[RN * G] = ring[it % DEPTH];
        if (it + DEPTH < ITERS) load_rows(col0, min(seg * SEG_PARTS + lane + (it + DEPTH) * TEAM, PARTS - 1u), ring[it % DEPTH]);
        [[unroll]] for (uint t = 0u; t < TM; ++t) {
          uvec4 xw[XV];
          float xdr[RUNS8], xrun[RUNS8];
          part_x(t, seg, sp, p, live && t < m, xw, xdr, xrun);
          [[unroll]] for (uint r = 0u; r < RN; ++r) {
            [[unroll]] for (uint g = 0u; g < G; ++g) acc[(t * RN + r) * G + g] += w_dot_q8(wp[r * G + g], p, xw, xdr, xrun);
          }
        }
      }
    }
#endif  // FLAT
#if X_NORM
    if (i == 0u) {  // uniform; sum_sq is complete once every segment has been staged
      [[unroll]] for (uint t = 0u; t < TM; ++t) scale[t] = x_scale(wg_sum(sum_sq[t]));
    }
#endif
#if SUBGROUP_TEAMS
    [[unroll]] for (uint o = 0u; o < OUTS; ++o) acc[o] = subgroupAdd(acc[o]);
#if SUBS > 1
    // The team's subgroups' sums, through shared memory.
    if (i > 0u) barrier();  // the last group's reads of red are done
    if (subgroupElect()) {
      [[unroll]] for (uint o = 0u; o < OUTS; ++o) red[o][gl_SubgroupID] = acc[o];
    }
    barrier();
    [[unroll]] for (uint o = 0u; o < OUTS; ++o) {
      float sum = 0.0;
      [[unroll]] for (uint j = 0u; j < SUBS; ++j) sum += red[o][team * SUBS + j];
      acc[o] = sum;
    }
#endif
#else
    if (i > 0u) barrier();  // the last group's reads of red are done
    wg_reduce(acc);
#endif
    // Lane t·RN + r writes column col0 + r of row t; the selects with constant indices keep acc in
    // registers.
    [[unroll]] for (uint t = 0u; t < TM; ++t) {
      [[unroll]] for (uint r = 0u; r < RN; ++r) {
        if (lane == t * RN + r && t < m && col0 + r < N) {
          float v = store(t0 + t, col0 + r, acc[(t * RN + r) * G] * scale[t], acc[(t * RN + r) * G + G - 1u] * scale[t]);
#if ARGMAX
          if (earlier_max(v, col0 + r, arg_best[t], arg_at[t])) { arg_best[t] = v; arg_at[t] = col0 + r; }
#endif
        }
      }
    }
  }
#if ARGMAX
  // The workgroup's first maximum of each row, then the last workgroup to finish takes the first
  // of them all.
  [[unroll]] for (uint t = 0u; t < TM; ++t) {
    barrier();  // the last reduction's reads of shared memory are done
    float best = arg_best[t];
    uint at = first_max(best, arg_at[t]);
    if (gl_LocalInvocationID.x == 0u) tail.part[wgi * TM + t] = uvec2(floatBitsToUint(best), at);
  }
  if (last_arrival()) {  // uniform
    [[unroll]] for (uint t = 0u; t < TM; ++t) {
      float best = uintBitsToFloat(0xFF800000u);
      uint at = NONE;
      for (uint w = gl_LocalInvocationID.x; w < WORKGROUPS; w += WG) {
        uvec2 p = tail.part[w * TM + t];
        if (earlier_max(uintBitsToFloat(p.x), p.y, best, at)) { best = uintBitsToFloat(p.x); at = p.y; }
      }
      barrier();
      at = first_max(best, at);
      if (gl_LocalInvocationID.x == 0u && t < m) ids[t0 + t] = int(min(at, N - 1u));
    }
    if (gl_LocalInvocationID.x == 0u) tail.done = 0u;
  }
#endif
#if NORM_TAIL
  // The last workgroup to finish normalises the rows all of them wrote.
  if (last_arrival()) {  // uniform
    for (uint t = 0u; t < m; ++t) norm_row(t0 + t, 0u);
    if (gl_LocalInvocationID.x == 0u) tail.done = 0u;
  }
#endif
}
)",
           {{"ROW_BLOCK", GemvRowBlockGlsl(row_blocks, s.rows_expr, /*interleaved=*/true)},
            {"STORE_X", Q8StoreGlsl(parts->q8_x_pairs)}}));
  // Blocks of rows interleaved in the grid: the workgroups of every block that read a stretch of
  // the matrix run side by side, so that the stretch is read from memory about once.
  k.groups = WideGrid(workgroups * row_blocks);
  if (tail != nullptr) k.scratch_bytes = 16 + (argmax ? 8 * uint64_t{workgroups} * static_cast<uint64_t>(tm) : 0);
  return k;
}

}  // namespace doppler::codegen
