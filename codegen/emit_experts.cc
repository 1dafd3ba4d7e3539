// The expert matrix product of the mixtures of experts (the router's kernels are
// codegen/emit_router.cc).
//
// It reads the expert ids from a device buffer written by top_k in the same step, so a decode
// step routes with no readback and the command buffer replays as recorded. expert_matmul reads
// only the chosen experts' rows. For a few rows (decode), a workgroup computes a few output
// columns (tuning::ExpertGemvConfig) of one token's slot (or, computing the route_sum, of one
// token's slots together), its invocations taking the rows' parts (codegen/weight_parts.h: a few
// values under one block scale, in whole-word loads; of every slot, where summing) in turn and
// reducing the column sums over the workgroup once. For many rows
// (prefill, from tuning::ExpertsGroupedFrom rows), the rows are grouped by expert and each group
// is a tiled product (the matmul family's tiled variants over one expert's matrix), so that an
// expert's weights are read once a tile of its rows rather than once a row. The epilogue's bias
// steps read the chosen expert's row of the biases.
#include <algorithm>
#include <optional>

#include "absl/strings/str_cat.h"
#include "codegen/emitters.h"
#include "codegen/expert_ranking.h"
#include "codegen/glsl_common.h"
#include "codegen/in_matmul.h"
#include "codegen/matmul.h"
#include "codegen/plane_x.h"
#include "codegen/q8_x.h"
#include "codegen/tuning/experts.h"
#include "codegen/weight_parts.h"
#include "graph/epilogue.h"

namespace doppler::codegen {
namespace {

// An expert product's epilogue chain as GLSL statements on a column's value g (and u, its up value,
// where gated) that define `float v`, for expert e at column bcol; bias steps before the gated one
// add to both halves, later ones to v, each reading its expert's row of its input (node input i at
// binding i + `binding_shift`).
struct ExpertEpilogue {
  std::string buffers;     // the biases' buffers, the clamped SwiGLU's function
  std::string statements;  // uses g, u, e, bcol; defines v
  std::string variant;     // "+bias+clamped_swiglu" ...
  bool gated = false;
};

absl::StatusOr<ExpertEpilogue> ExpertEpilogueGlsl(const EmitContext& c, uint32_t binding_shift) {
  absl::StatusOr<std::vector<graph::EpilogueStep>> steps = graph::ParseEpilogue(c.node.attrs.Str("epilogue"));
  if (!steps.ok()) return steps.status();
  ExpertEpilogue out;
  out.gated = graph::IsGated(*steps);
  if (!out.gated) out.statements = "float v = g;\n";
  bool gated_yet = !out.gated;
  size_t input = 3;  // the first bias, after x, w and ids
  for (graph::EpilogueStep s : *steps) {
    switch (s) {
      case graph::EpilogueStep::kSiluMul:
        absl::StrAppend(&out.statements, "float v = act_silu(g) * u;\n");
        break;
      case graph::EpilogueStep::kGeluTanhMul:
        absl::StrAppend(&out.statements, "float v = act_gelu_tanh(g) * u;\n");
        break;
      case graph::EpilogueStep::kClampedSwiglu:
        absl::StrAppend(&out.statements, "float v = act_clamped_swiglu(g, u);\n");
        absl::StrAppend(&out.buffers, ClampedSwigluGlsl(c.node.attrs.Float("alpha"), c.node.attrs.Float("limit")));
        break;
      case graph::EpilogueStep::kSilu:
        absl::StrAppend(&out.statements, "v = act_silu(v);\n");
        break;
      case graph::EpilogueStep::kGeluTanh:
        absl::StrAppend(&out.statements, "v = act_gelu_tanh(v);\n");
        break;
      case graph::EpilogueStep::kBias: {
        const std::string name = absl::StrCat("b", input);
        absl::StrAppend(&out.buffers, FloatBuffer(static_cast<uint32_t>(input + binding_shift), name,
                                                  c.input(static_cast<int>(input)).type.dtype, true));
        ++input;
        if (!gated_yet) {
          absl::StrAppend(&out.statements, "g += load_", name, "(e * 2u * COLS + bcol);\nu += load_", name,
                          "(e * 2u * COLS + COLS + bcol);\n");
        } else {
          absl::StrAppend(&out.statements, "v += load_", name, "(e * COLS + bcol);\n");
        }
        break;
      }
      default:
        return absl::InvalidArgumentError(absl::StrCat("expert_matmul '", c.node.label, "': no kernel for epilogue step ",
                                                       graph::EpilogueStepName(s)));
    }
    gated_yet = gated_yet || graph::IsGatedStep(s);
    if (s == graph::EpilogueStep::kBias || s == graph::EpilogueStep::kClampedSwiglu) {
      absl::StrAppend(&out.variant, "+", graph::EpilogueStepName(s));
    }
  }
  return out;
}

// The route_sum this product's kernel computes, if any (codegen/in_matmul.h).
const graph::Node* RouteSumInProduct(const EmitContext& c, const InMatMulRules& rules) {
  for (graph::ValueId u : c.g.Users(c.node.id)) {
    if (RouteSumInExperts(c.g, c.g.node(u), c.tokens, rules)) return &c.g.node(u);
  }
  return nullptr;
}

// A column's value from its reduced dot products (acc), as `float total`: a slot's epilogue, or
// where weighted, the epilogue's value at 0 for each slot, weighted, beside the weighted dots.
constexpr const char* kSlotColumn = R"(    uint e = slot_expert(t, group);
    float g = acc[c * G], u = acc[c * G + G - 1u];
    {{EPILOGUE}}
    float total = v;
)";
constexpr const char* kWeightedColumn = R"(    float total = acc[c];
    for (uint j = 0u; j < S; ++j) {
      uint e = slot_expert(t, j);
      float g = 0.0;
      {{EPILOGUE}}
      total += rw[t * S + j] * v;
    }
)";

// A plain norm's weight at `binding` and eps, for rows of `kdim` values and parts of `part_values`:
// `float norm_scale(float sum_sq)` (1 / rms) and `void load_norm_weight(uint p, out float g[PV])`
// (part p's weights, in 4-value loads where the part's values come in fours).
std::string NormWeightGlsl(const EmitContext& c, const graph::Node& norm, uint32_t binding, int64_t kdim,
                           int64_t part_values) {
  const graph::DType dtype = c.g.node(norm.inputs[1]).type.dtype;
  const std::string offset = FloatLiteral(norm.attrs.Float("weight_offset"));
  const bool quads = kdim % 4 == 0 && part_values % 4 == 0;
  return absl::StrCat(
      quads ? FloatQuadBuffer(binding, "gamma", dtype, true) : FloatBuffer(binding, "gamma", dtype, true),
      "float norm_scale(float sum_sq) { return inversesqrt(sum_sq / float(", kdim, ") + ",
      FloatLiteral(norm.attrs.Float("eps")), "); }\n",
      quads ? absl::StrCat("vec4 norm_weight4(uint k) { return load4_gamma(k) + ", offset,
                           "; }\n"
                           "void load_norm_weight(uint p, out float g[PV]) {\n"
                           "  [[unroll]] for (uint i = 0u; i < PV; i += 4u) {\n"
                           "    vec4 v = norm_weight4(w_part_k(p, i));\n"
                           "    g[i] = v.x; g[i + 1u] = v.y; g[i + 2u] = v.z; g[i + 3u] = v.w;\n"
                           "  }\n}\n")
            : absl::StrCat("void load_norm_weight(uint p, out float g[PV]) {\n"
                           "  [[unroll]] for (uint i = 0u; i < PV; ++i) g[i] = load_gamma(w_part_k(p, i)) + ",
                           offset, ";\n}\n"));
}

// An item of the matrix-vector pass against float x: its rows' parts, then x's part (every row of x,
// and every slot's part of one, starts a multiple of PV values in), its dot products added to acc.
constexpr const char* kFloatItem = R"(    uint xo = t * XROW + (SLOT_X ? j * KD : 0u);
    // Every row's part is loaded before the first is used, so the loads are in flight together.
    WPart wp[NDOTS];
    [[unroll]] for (uint c = 0u; c < C; ++c) {
      uint col = min(blk * C + c, COLS - 1u);
      [[unroll]] for (uint g = 0u; g < G; ++g) wp[c * G + g] = w_load(e * N + g * COLS + col, p);
    }
    float xv[PV], xrun[RUNS];
    load_part_x(xo, p, xv);
#if X_NORM
    float gv[PV];  // loaded beside x, before x is used
    load_norm_weight(p, gv);
#endif
    if (!live) {
      [[unroll]] for (uint v = 0u; v < PV; ++v) xv[v] = 0.0;
    }
#if X_NORM
    if (!WEIGHTED || j == 0u) {
      [[unroll]] for (uint v = 0u; v < PV; ++v) acc[NDOTS] += xv[v] * xv[v];
    }
    [[unroll]] for (uint v = 0u; v < PV; ++v) xv[v] *= gv[v];
#endif
    [[unroll]] for (uint r = 0u; r < RUNS; ++r) {
      float sum = 0.0;
      [[unroll]] for (uint v = 0u; v < PV / RUNS; ++v) sum += xv[r * (PV / RUNS) + v];
      xrun[r] = sum;
    }
    float slot_weight = {{SLOT_WEIGHT}};
{{DOTS}})";

// The same against x staged as q8: its rows' q8 parts, x's part from the staged row (a slot's own
// where the kernel sums a per-slot x), integer dot products.
constexpr const char* kQ8Item = R"(    WPart8 wp[NDOTS];
    [[unroll]] for (uint c = 0u; c < C; ++c) {
      uint col = min(blk * C + c, COLS - 1u);
      [[unroll]] for (uint g = 0u; g < G; ++g) wp[c * G + g] = w_load8(e * N + g * COLS + col, p);
    }
    uvec4 xw[XV];
    float xdr[RUNS8], xrun[RUNS8];
    part_x(WEIGHTED && SLOT_X ? j : 0u, 0u, p, p, live, xw, xdr, xrun);
    float slot_weight = {{SLOT_WEIGHT}};
    [[unroll]] for (uint o = 0u; o < NDOTS; ++o) acc[o] += slot_weight * w_dot_q8(wp[o], p, xw, xdr, xrun);
)";

// x rounded through q8 blocks (attr x_quant, codegen/q8_x.h), staged whole in shared memory by every
// workgroup before its items read it: TM rows (every slot's where the kernel sums a per-slot x, else
// the workgroup's token's or slot's), one segment of K each.
constexpr const char* kStagedQ8X = R"(
#define SHUFFLE_BLOCKS {{SHUFFLE_BLOCKS}}
const uint TM = {{TM}}u, SEG = KD, SEG_PARTS = PARTS, SEG_BLOCKS = KD / 32u;
const uint RUN8 = PV8 / RUNS8, XW = PV8 / 4u, XV = PV8 / 16u;
shared uvec4 xq[TM * SEG_PARTS * XV];  // x's quants, in planes (xq_vec)
shared float xd[TM * SEG_BLOCKS];  // x's block scales
{{Q8_STAGING}}{{PART_X}}
// Stages token tok's rows (`group`: the slot whose row a per-slot x gives a workgroup of one slot),
// each invocation taking four values at a time, eight neighbouring invocations a block, the loads
// of STAGE_BATCH steps issued together; returns the squares of the values it read (before the norm's
// weight, where the kernel computes the norm: its x is a token's one row). Ends in a barrier.
const uint QUADS = KD / 4u, STEPS = (TM * QUADS + WG - 1u) / WG, STAGE_BATCH = 4u;
float stage_x(uint tok, uint group) {
  uint lid = gl_LocalInvocationID.x;
  float sum_sq = 0.0;
#ifdef W_SHARED_INIT
  w_shared_init();  // the weight decoder's tables (WeightParts::q8_glsl), read after the barrier below
#endif
  [[unroll]] for (uint s0 = 0u; s0 < STEPS; s0 += STAGE_BATCH) {
    vec4 vb[STAGE_BATCH];
    [[unroll]] for (uint b = 0u; b < STAGE_BATCH; ++b) {
      uint at = (s0 + b) * WG + lid, row = min(at / QUADS, TM - 1u);
      bool in_rows = s0 + b < STEPS && at < TM * QUADS;
      uint xo = tok * XROW + (SLOT_X ? (WEIGHTED ? row : group) * KD : 0u);
      vb[b] = in_rows ? x4[xo / 4u + at % QUADS] : vec4(0.0);
    }
    [[unroll]] for (uint b = 0u; b < STAGE_BATCH; ++b) {
      uint step = s0 + b, at = step * WG + lid, t = at / QUADS, q = at % QUADS;
      if (step >= STEPS) break;  // uniform
      bool live = at < TM * QUADS;  // alike for a block's eight invocations
      vec4 v = vb[b];
#if X_NORM
      sum_sq += dot(v, v);
      if (live) v *= norm_weight4(4u * q);
#endif
      vec4 a = abs(v);
      float amax = block_max(max(max(a.x, a.y), max(a.z, a.w)), step & 1u);
{{STORE_X}}    }
  }
  barrier();
  return sum_sq;
}
)";

// The matrix-vector pass a row: workgroup i is (token, slot group, column block); `weighted`: the
// kernel computes the route_sum, a token's slots one group, weighted (the route weights at binding
// 5) and summed in the workgroup; else each slot is its own group. The workgroup's invocations take
// the items of one list, a slot's part of the rows each (every slot's parts where summing, the
// group's one slot's else), and accumulate their dot products (weighted, where summing) before the
// workgroup reduces them once. A summed product's epilogue is affine (RouteSumInExperts asks for
// bias steps only), so the weighted sum of the slots' values is the weighted sum of their dot
// products plus the weighted sum of the epilogue's value at 0; a route sum's residual (at
// `residual_binding`, 0 for none) is added to it last.
//
// Where x is a plain norm the kernel computes (`plain_norm`, codegen/in_matmul.h), x is bound to the
// norm's input and the norm's weight to `norm_binding`: each invocation sums its part's squares (a
// token's once, where summing its slots) and multiplies the part by the weight as it loads it, and
// the workgroup reduces the sum beside the dot products and scales them by 1 / rms before the
// epilogue.
//
// Where the product ranks its experts (`ranks`, codegen/in_matmul.h's top_k in its readers), binding
// 4 is the router's logits rather than the ids, and each workgroup ranks its token's row before it
// loads a weight.
//
// Where x is rounded through q8 blocks (attr x_quant), each workgroup first stages its rows of x as
// q8 in shared memory (kStagedQ8X: the norm's squares and weight taken as it stages, where the
// kernel computes the norm), and its items take the q8 decoder's parts and integer dot products.
//
// Where x lies in planes (codegen/plane_x.h), its parts load from their planes; where this product's
// y does, it stores its columns there.
absl::StatusOr<Kernel> EmitExpertGemv(const EmitContext& c, const InMatMulRules& rules, const ExpertEpilogue& epilogue,
                                      bool weighted, int64_t experts, int64_t slots, int64_t kdim, int64_t rows,
                                      int64_t cols, bool per_slot_x, const graph::Node* plain_norm,
                                      uint32_t norm_binding, bool ranks, uint32_t residual_binding) {
  const graph::Node& x = c.input(0);
  const graph::Node& w = c.input(1);
  const bool gated = epilogue.gated;
  const bool q8 = c.node.attrs.Has("x_quant");
  absl::StatusOr<tuning::DeviceChoice> half_dots = tuning::ExpertGemvHalfDots(c.caps);
  if (!half_dots.ok()) return half_dots.status();
  absl::StatusOr<WeightParts> parts = ExpertGemvParts(w.type.dtype, kdim, q8, half_dots->value == 1);
  if (!parts.ok()) return parts.status();
  const PlaneX x_planes = PlaneXOf(c.g, x, c.tokens, rules), y_planes = PlaneXOf(c.g, c.node, c.tokens, rules);
  if (q8 && parts->q8_glsl.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("expert_matmul '", c.node.label,
                                                   "': x_quant needs block-quantized weights with integer quants, not ",
                                                   graph::Name(w.type.dtype)));
  }
  if (q8 && !c.caps.integer_dot_product) {
    return absl::FailedPreconditionError(absl::StrCat("expert_matmul '", c.node.label,
                                                      "': x_quant needs a device with integer dot products"));
  }
  const bool half = !q8 && !parts->half_glsl.empty();
  if (half && !c.caps.float16_arithmetic) {
    return absl::FailedPreconditionError(absl::StrCat("expert_matmul '", c.node.label,
                                                      "': experts.half needs f16 arithmetic (shaderFloat16), which "
                                                      "the device does not have"));
  }
  const int64_t part_values = q8 ? parts->q8_values : parts->values;
  const int64_t parts_per_row = kdim / part_values;
  const int64_t groups_per_token = weighted ? 1 : slots, items = (weighted ? slots : 1) * parts_per_row;
  const int64_t bucket_rows = c.rows(x);
  const bool subgroups = c.caps.subgroup_arithmetic;
  absl::StatusOr<tuning::ExpertGemvConfig> config =
      tuning::ChooseExpertGemv(c.caps, items, bucket_rows * groups_per_token * cols);
  if (!config.ok()) return config.status();
  const int64_t blocks = (cols + config->cols - 1) / config->cols;
  // A workgroup that ranks its experts holds them all (codegen/expert_ranking.h); one that stages x
  // as q8 takes a block of 32 values in eight invocations.
  absl::StatusOr<int64_t> q8_least = tuning::ExpertGemvQ8LeastWorkgroup();
  if (!q8_least.ok()) return q8_least.status();
  const int64_t least = std::max<int64_t>(
      ranks ? std::max<int64_t>(config->cols, CeilDiv(experts, kLogitsAnInvocationRanks)) : config->cols,
      q8 ? *q8_least : 1);
  uint32_t wg = tuning::ExpertGemvWorkgroup(c.caps, items, least);
  if (q8) {
    const uint32_t unit = std::max<uint32_t>(8, subgroups ? c.caps.subgroup_size : 1);
    wg = (wg + unit - 1) / unit * unit;
  }
  std::optional<ExpertRanking> ranking;
  if (ranks) {
    absl::StatusOr<ExpertRanking> r = ChooseExpertRanking(c.caps, wg, experts, slots);
    if (!r.ok()) return absl::InvalidArgumentError(absl::StrCat("expert_matmul '", c.node.label, "': ", r.status().message()));
    ranking = *r;
  }
  // x staged as q8 (codegen/q8_x.h): every slot's row where the kernel sums a per-slot x, else one;
  // a block's eight staging invocations share a subgroup where subgroups have at least 8.
  const int64_t staged_rows = weighted && per_slot_x ? slots : 1;
  const bool shuffle_blocks = c.caps.subgroup_shuffle && c.caps.min_subgroup_size >= 8;
  const int64_t staging_bytes =
      q8 ? staged_rows * tuning::Q8StagedBytes(kdim) + parts->q8_shared_bytes + (shuffle_blocks ? 0 : 8 * int64_t{wg}) : 0;
  // The reduction's shared floats: a column's (and its up row's) sum an invocation, and the norm's;
  // and the ranking's.
  const int64_t shared_bytes = 4 * (config->cols * (gated ? 2 : 1) + (plain_norm != nullptr ? 1 : 0)) * int64_t{wg} +
                               (ranking ? ranking->shared_bytes : 0) + staging_bytes;
  if (shared_bytes > int64_t{c.caps.max_shared_memory}) {
    return absl::InvalidArgumentError(absl::StrCat("expert_matmul '", c.node.label, "': ", config->cols,
                                                   " columns a workgroup of ", wg, q8 ? " staging x as q8" : "", " take ",
                                                   shared_bytes, " bytes of shared memory; the device has ",
                                                   c.caps.max_shared_memory));
  }
  Kernel k;
  k.config = *config;
  k.variant = absl::StrCat("gemv.", graph::Name(w.type.dtype), gated ? ".gated" : "", weighted ? ".sum" : "",
                           per_slot_x ? ".slot_x" : "", plain_norm != nullptr ? "+plain_norm_x" : "",
                           ranks ? "+top_k" : "", epilogue.variant,
                           !q8 && parts->values == 32 ? ".block" : "",
                           half ? ".half" : "", q8 ? "+x_q8" : "", x_planes.planes() ? ".x_planes" : "",
                           y_planes.planes() ? ".y_planes" : "", ".wg", wg,
                           config->cols != tuning::ExpertGemvConfig{}.cols ? absl::StrCat(".c", config->cols) : "");
  k.glsl = absl::StrCat(
      ShaderHeader(wg),
      subgroups ? "#extension GL_KHR_shader_subgroup_basic : enable\n"
                  "#extension GL_KHR_shader_subgroup_arithmetic : enable\n"
                : "",
      q8 && shuffle_blocks ? "#extension GL_KHR_shader_subgroup_shuffle : enable\n" : "",
      q8 ? Q8DotGlsl() : "",
      half ? "#extension GL_EXT_shader_explicit_arithmetic_types_float16 : enable\n" : "",
      FloatBuffer(1, "y", graph::DType::kF32, false),
      parts->glsl, q8 ? parts->q8_glsl : parts->half_glsl,
      q8 ? "layout(std430, set = 0, binding = 2) readonly buffer Buf_x { vec4 x4[]; };\n"
         : PartXGlsl(*parts, 2, x_planes.planes() ? kdim / x_planes.part_values : 0),
      y_planes.planes() ? PlaneIndexGlsl("y_at", y_planes) : "",
      ranks ? FloatBuffer(4, "logits", c.g.node(c.input(2).inputs[0]).type.dtype, true) : IntBuffer(4, "ids", true),
      weighted ? FloatBuffer(5, "rw", graph::DType::kF32, true) : "", ActivationGlsl(),
      epilogue.buffers, plain_norm != nullptr ? NormWeightGlsl(c, *plain_norm, norm_binding, kdim, parts->values) : "",
      residual_binding > 0 ? FloatBuffer(residual_binding, "resid", graph::DType::kF32, true) : "",
      Fill(R"(
const uint WG = {{WG}}u, E = {{E}}u, S = {{S}}u, N = {{N}}u, KD = {{KD}}u, COLS = {{COLS}}u, C = {{C}}u;
const uint BLOCKS = {{BLOCKS}}u, GROUPS = {{GROUPS}}u, XROW = {{XROW}}u, PARTS = {{PARTS}}u;
const bool GATED = {{GATED}}, WEIGHTED = {{WEIGHTED}}, SLOT_X = {{SLOT_X}};
#define X_NORM {{X_NORM}}
// The list of items, a slot's part each: every slot's parts where summing, else the group's slot's.
// The sums: a column's dot products (NDOTS), then with a norm x's sum of squares.
const uint G = GATED ? 2u : 1u, NDOTS = C * G, OUTS = NDOTS + X_NORM, ITEMS = (WEIGHTED ? S : 1u) * PARTS;
const uint ITERS = (ITEMS + WG - 1u) / WG;
)",
           {{"WG", absl::StrCat(wg)},
            {"E", absl::StrCat(experts)},
            {"S", absl::StrCat(slots)},
            {"N", absl::StrCat(rows)},
            {"KD", absl::StrCat(kdim)},
            {"COLS", absl::StrCat(cols)},
            {"C", absl::StrCat(config->cols)},
            {"BLOCKS", absl::StrCat(blocks)},
            {"GROUPS", absl::StrCat(groups_per_token)},
            {"XROW", absl::StrCat(x.type.shape[1].value)},
            {"PARTS", absl::StrCat(parts_per_row)},
            {"GATED", gated ? "true" : "false"},
            {"WEIGHTED", weighted ? "true" : "false"},
            {"SLOT_X", per_slot_x ? "true" : "false"},
            {"X_NORM", plain_norm != nullptr ? "1" : "0"}}),
      q8 ? Fill(kStagedQ8X, {{"SHUFFLE_BLOCKS", shuffle_blocks ? "1" : "0"},
                             {"TM", absl::StrCat(staged_rows)},
                             {"Q8_STAGING", Q8StagingGlsl()},
                             {"PART_X", Q8PartXGlsl()},
                             {"STORE_X", Q8StoreGlsl(false)}})
         : "",
      ranking ? absl::StrCat("float logit(uint row, uint e) { return load_logits(row * E + e); }\n",
                             RankExpertsGlsl(c.caps, *ranking, experts, slots))
              : "",
      DotsReduceGlsl(subgroups),
      Fill(R"(
// An id out of range reads the last expert rather than past the weight.
uint slot_expert(uint t, uint j) { return min({{ID}}, E - 1u); }

void main() {
  uint i = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
  uint blk = i % BLOCKS, group = (i / BLOCKS) % GROUPS, t = i / (BLOCKS * GROUPS);
  if (t >= {{ROWS}}) return;  // uniform across the workgroup
{{STAGE}}{{RANK}}  uint lid = gl_LocalInvocationID.x;
  float acc[OUTS];
  [[unroll]] for (uint o = 0u; o < OUTS; ++o) acc[o] = 0.0;
{{STAGED_SQ}}  [[unroll]] for (uint it = 0u; it < ITERS; ++it) {
    // Past the last item (when WG does not divide ITEMS), read the last one again with x = 0.
    uint item = min(lid + it * WG, ITEMS - 1u);
    bool live = lid + it * WG < ITEMS;
    uint p = item % PARTS, j = WEIGHTED ? item / PARTS : group;
    uint e = slot_expert(t, j);
{{ITEM}}  }
  wg_reduce(acc);
#if X_NORM
  float inv_rms = norm_scale(acc[NDOTS]);
  [[unroll]] for (uint o = 0u; o < NDOTS; ++o) acc[o] *= inv_rms;
#endif
  // Invocation c writes column c of the block: the selects with constant indices keep acc in
  // registers.
  [[unroll]] for (uint c = 0u; c < C; ++c) {
    uint bcol = blk * C + c;
    if (lid != c || bcol >= COLS) continue;
{{COLUMN}}{{RESIDUAL}}    y[{{Y_AT}}] = total;
  }
}
)",
           {{"COLUMN", Fill(weighted ? kWeightedColumn : kSlotColumn, {{"EPILOGUE", epilogue.statements}})},
            {"RESIDUAL", residual_binding > 0 ? "    total += resid[t * COLS + bcol];\n" : ""},
            {"ID", ranks ? "ranked[j]" : "uint(ids[t * S + j])"},
            {"Y_AT", y_planes.planes() ? "y_at((t * GROUPS + group) * COLS + bcol)" : "(t * GROUPS + group) * COLS + bcol"},
            {"STAGE", q8 ? "  float staged_sq = stage_x(t, group);  // read by the parts below\n" : ""},
            {"RANK", ranks ? "  rank_experts(t);  // its experts in ranked, which slot_expert reads\n" : ""},
            {"STAGED_SQ", q8 && plain_norm != nullptr ? "  acc[NDOTS] = staged_sq;\n" : ""},
            {"ITEM", Fill(q8 ? kQ8Item : kFloatItem,
                          {{"SLOT_WEIGHT", weighted ? "rw[t * S + j]" : "1.0"},
                           {"DOTS", half ? "    XHalf xh = half_x(xv);\n"
                                           "    [[unroll]] for (uint o = 0u; o < NDOTS; ++o) acc[o] += slot_weight * "
                                           "w_dot_half(wp[o], xh);\n"
                                         : "    [[unroll]] for (uint o = 0u; o < NDOTS; ++o) acc[o] += slot_weight * "
                                           "w_dot(wp[o], p, xv, xrun);\n"}})},
            {"ROWS", RowsExpr(x.type.shape[0].tokens, bucket_rows)}}));
  k.groups = WideGrid(static_cast<uint32_t>(bucket_rows * groups_per_token * blocks));
  return k;
}

// Rows grouped by expert: row r = t·S + j is token t's slot j. A workgroup finds its tile as the
// gl_WorkGroupID.y-th of the experts' tiles of bm rows, in expert order, by counting every
// expert's rows; then lists the tile's rows in row order, from the ranks of its expert's rows
// (RANKERS invocations count them in contiguous runs of rows, then each lists its run's rows whose
// rank falls in the tile), so that every workgroup of an expert splits its rows alike. MAX_TILE is
// the most rows a tiled variant's tile has (CoopConfig's bm, at most 256).
constexpr const char* kGroupedRows = R"(
const uint E = {{E}}u, S = {{S}}u, MAX_TILE = 256u, RANKERS = 64u;
shared uint expert_rows[E];
shared uint ranked[RANKERS];
shared uint tile_row[MAX_TILE];
shared uint tile_e, tile_first;
// An id out of range reads the last expert rather than past the weight.
uint row_expert(uint r) { return min(uint(ids[r]), E - 1u); }
bool tile_rows(uint bm, out uint tok0, out uint m) {
  uint lid = gl_LocalInvocationID.x, wg = gl_WorkGroupSize.x, rows = ({{ROWS}}) * S;
  for (uint e = lid; e < E; e += wg) expert_rows[e] = 0u;
  barrier();
  for (uint r = lid; r < rows; r += wg) atomicAdd(expert_rows[row_expert(r)], 1u);
  barrier();
  if (lid == 0u) {
    uint y = gl_WorkGroupID.y, e = 0u;
    for (; e < E; ++e) {
      uint tiles = (expert_rows[e] + bm - 1u) / bm;
      if (y < tiles) break;
      y -= tiles;
    }
    tile_e = e;
    tile_first = y * bm;
  }
  barrier();
  uint e = tile_e, first = tile_first;
  if (e >= E) return false;
  tok0 = 0u;
  m = min(bm, expert_rows[e] - first);
  uint rankers = min(RANKERS, wg), run = (rows + rankers - 1u) / rankers;
  uint lo = min(lid * run, rows), hi = min(lo + run, rows);
  if (lid < rankers) {
    uint own = 0u;
    for (uint r = lo; r < hi; ++r) own += row_expert(r) == e ? 1u : 0u;
    ranked[lid] = own;
  }
  barrier();
  if (lid < rankers) {
    uint rank = 0u;
    for (uint i = 0u; i < lid; ++i) rank += ranked[i];
    for (uint r = lo; r < hi && rank < first + m; ++r) {
      if (row_expert(r) != e) continue;
      if (rank >= first) tile_row[rank - first] = r;
      ++rank;
    }
  }
  barrier();
  return true;
}
uint w_row0() { return tile_e * {{EXPERT_ROWS}}u; }
)";

// Shared memory kGroupedRows declares for E experts.
int64_t GroupedRowsSharedBytes(int64_t experts) { return 4 * experts + 4 * 64 + 4 * 256 + 8; }

// The grouped product: the matmul family's tiled variant (cooperative-matrix or float tiles) over
// tiles of one expert's rows, each row's result stored in its slot.
absl::StatusOr<Kernel> EmitGroupedExperts(const EmitContext& c, const ExpertEpilogue& epilogue, int64_t experts,
                                          int64_t slots, int64_t kdim, int64_t cols, bool per_slot_x) {
  const graph::Node& x = c.input(0);
  const graph::Node& w = c.input(1);
  const int64_t tokens = c.rows(x);
  MatMulSpec s;
  s.m = tokens * slots;
  s.groups = experts;
  s.group_rows = tokens;
  s.k = kdim;
  s.n = cols;
  s.gates = epilogue.gated ? 2 : 1;
  s.w_dtype = w.type.dtype;
  s.rows_expr = RowsExpr(x.type.shape[0].tokens, tokens);
  s.variant_suffix = absl::StrCat(epilogue.gated ? ".gated" : "", per_slot_x ? ".slot_x" : "", epilogue.variant);
  s.io_glsl = absl::StrCat(
      FloatBuffer(1, "y", graph::DType::kF32, false),
      Fill(R"(
const uint K = {{K}}u, N = {{N}}u, COLS = N, G = {{G}}u, XW = {{XW}}u;
const bool SLOT_X = {{SLOT_X}};
// Where value k of tile row t's x lies: its token's row, or the slot's part of it.
uint x_at(uint t, uint k) {
  uint r = tile_row[t];
  return (r / S) * XW + (SLOT_X ? (r % S) * K : 0u) + k;
}
)",
           {{"K", absl::StrCat(kdim)},
            {"N", absl::StrCat(cols)},
            {"G", absl::StrCat(s.gates)},
            {"XW", absl::StrCat(x.type.shape[1].value)},
            {"SLOT_X", per_slot_x ? "true" : "false"}}),
      ActivationGlsl(), epilogue.buffers,
      "float store(uint tok, uint col, float g, float u) {\n  uint e = tile_e, bcol = col;\n", epilogue.statements,
      "  y[tile_row[tok] * N + col] = v;\n  return v;\n}\n");
  s.tile_rows_glsl = absl::StrCat(IntBuffer(4, "ids", true), Fill(kGroupedRows, {{"E", absl::StrCat(experts)},
                                                                                 {"S", absl::StrCat(slots)},
                                                                                 {"EXPERT_ROWS", absl::StrCat(s.gates * cols)},
                                                                                 {"ROWS", s.rows_expr}}));
  s.tile_x_glsl = TileXGlsl(kdim, "x_at(t, k)", false);
  // The tile's shape is chosen for the shared memory the grouping leaves.
  const int64_t grouping_bytes = GroupedRowsSharedBytes(experts);
  if (grouping_bytes > int64_t{c.caps.max_shared_memory} / 2) {
    return absl::InvalidArgumentError(absl::StrCat("expert_matmul '", c.node.label, "': grouping the rows of ", experts,
                                                   " experts takes ", grouping_bytes, " bytes of shared memory; the device has ",
                                                   c.caps.max_shared_memory));
  }
  TargetCaps caps = c.caps;
  caps.max_shared_memory -= static_cast<uint32_t>(grouping_bytes);
  const EmitContext tiles{c.g, c.node, caps, c.tokens};
  const bool coop = caps.coop_matrix_nv && s.w_dtype != graph::DType::kF32;
  absl::StatusOr<Kernel> k = coop ? EmitCoopGemm(tiles, s) : EmitGemm(tiles, s);
  if (!k.ok()) return absl::InvalidArgumentError(absl::StrCat("expert_matmul '", c.node.label, "': ", k.status().message()));
  k->variant = "grouped." + k->variant;
  return k;
}

}  // namespace

absl::StatusOr<WeightParts> ExpertGemvParts(graph::DType dtype, int64_t kdim, bool q8, bool half_dots) {
  absl::StatusOr<int64_t> block_part = tuning::ExpertGemvBlockPart();
  if (!block_part.ok()) return block_part.status();
  return WeightPartDecoder(3, dtype, kdim, {}, FloatPartForm{*block_part, half_dots && !q8});
}

// A matrix-vector pass a row (workgroup i is (token, slot group, column block): where the kernel
// computes the route_sum a token's slots are one group, weighted and summed in the workgroup; else
// each slot is its own), or where the rows are grouped by expert, the tiled products above. Each
// column needs one dot product, or two where gated (the expert's gate row c and up row N/2 + c).
absl::StatusOr<Kernel> EmitExpertMatMul(const EmitContext& c) {
  const graph::Node& x = c.input(0);
  const graph::Node& w = c.input(1);
  const int64_t experts = c.node.attrs.Int("experts");
  const int64_t slots = c.input(2).type.shape[1].value;
  const int64_t rows = w.type.shape[0].value / experts, kdim = w.type.shape[1].value;
  const bool per_slot_x = x.type.shape[1].value != kdim;
  absl::StatusOr<InMatMulRules> rules = InMatMulRulesFromTune();
  if (!rules.ok()) return rules.status();
  const graph::Node* sum = RouteSumInProduct(c, *rules);
  const bool weighted = sum != nullptr;
  // x a plain norm this kernel computes: x is bound to the norm's input, its weight after the rest.
  const graph::Node* plain_norm =
      x.kind == graph::OpKind::kRmsNorm && PlainNormInX(c.g, x, c.tokens, *rules) ? &x : nullptr;
  const uint32_t norm_binding = static_cast<uint32_t>(c.node.inputs.size() + (weighted ? 3 : 2));
  // A route sum's residual, where it has one, after the rest.
  const bool residual = weighted && sum->inputs.size() > 2;
  const uint32_t residual_binding = residual ? norm_binding + (plain_norm != nullptr ? 1 : 0) : 0;
  // An expert product that ranks its experts reads the router's logits in place of the ids.
  const bool ranks = RanksItsExperts(c.g, c.node, c.tokens, *rules);
  // Bindings: y, x, w, ids, then the route weights where the kernel sums, then the biases.
  absl::StatusOr<ExpertEpilogue> epilogue = ExpertEpilogueGlsl(c, weighted ? 3 : 2);
  if (!epilogue.ok()) return epilogue.status();
  const bool gated = epilogue->gated;
  const int64_t cols = gated ? rows / 2 : rows;
  Kernel k;
  if (ExpertsGrouped(c.node, c.tokens, *rules)) {
    absl::StatusOr<Kernel> grouped = EmitGroupedExperts(c, *epilogue, experts, slots, kdim, cols, per_slot_x);
    if (!grouped.ok()) return grouped.status();
    k = *std::move(grouped);
  } else {
    absl::StatusOr<Kernel> gemv = EmitExpertGemv(c, *rules, *epilogue, weighted, experts, slots, kdim, rows, cols,
                                                 per_slot_x, plain_norm, norm_binding, ranks, residual_binding);
    if (!gemv.ok()) return gemv.status();
    k = *std::move(gemv);
  }
  k.family = "expert_matmul";
  k.args = {{weighted ? sum->id : c.node.id, true}};
  for (size_t i = 0; i < c.node.inputs.size(); ++i) {
    graph::ValueId v = c.node.inputs[i];
    if (i == 0 && plain_norm != nullptr) v = plain_norm->inputs[0];
    if (i == 2 && ranks) v = c.input(2).inputs[0];
    k.args.push_back({v, false});
    if (i == 2 && weighted) k.args.push_back({sum->inputs[1], false});
  }
  if (plain_norm != nullptr) k.args.push_back({plain_norm->inputs[1], false});
  if (residual) k.args.push_back({sum->inputs[2], false});
  return k;
}

}  // namespace doppler::codegen
