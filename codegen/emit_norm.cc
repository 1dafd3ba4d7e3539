// RMSNorm: one workgroup per group of a row (the whole row, or e.g. one head); the sum of squares
// is reduced in shared memory. With a norm prologue (attr norm_eps; its weight is input 3, binding
// 5) the residual form first normalises x by its own weight: s = norm(x) · (w' + offset) + r.
// Each invocation loads its values of the group once, all before the first is used (a constant,
// unrolled count), and keeps them for the output: a row is small, and a loop that waits on one
// load per trip is what such a kernel's time would be made of. With residual = 1 (inputs x, w, r)
// the row is s = x + r, and the value is split "D,D": s goes to part 0, norm(s) * (w + offset) to
// part 1 (graph/layout.h).
#include "absl/strings/str_cat.h"
#include "codegen/emitters.h"
#include "codegen/glsl_common.h"
#include "graph/layout.h"

namespace doppler::codegen {
namespace {
// Values per invocation: the workgroup is the narrowest power of two from 64 to 1024 (or the
// device's limit) that keeps a group within kMaxItems values per invocation.
constexpr int64_t kMaxItems = 8;
uint32_t WorkgroupFor(int64_t dim, uint32_t max_invocations) {
  uint32_t wg = 64;
  while (wg < 1024 && wg * 2 <= max_invocations && wg * kMaxItems < dim) wg *= 2;
  return wg;
}

// What an RMSNorm node normalises: rows of `width` values, in groups of `dim`.
struct NormShape {
  bool residual, prologue;
  int64_t width, dim, rows;
};
NormShape ShapeOf(const EmitContext& c) {
  NormShape n;
  n.residual = c.node.attrs.Int("residual") != 0;
  n.prologue = c.node.attrs.Has("norm_eps");
  n.width = n.residual ? c.input(0).type.shape[1].value : c.node.type.shape[1].value;
  n.dim = c.node.attrs.Has("group") ? c.node.attrs.Int("group") : n.width;
  n.rows = c.rows(c.node);
  return n;
}

}  // namespace

std::string RmsNormRowGlsl(const EmitContext& c, const NormRowIo& io, uint32_t wg) {
  const graph::Node& w = c.input(1);
  const auto [residual, prologue, width, dim, rows] = ShapeOf(c);
  // Where the input row is read and the sum and normalised values are written (in floats).
  const std::string x = absl::StrCat(io.x, "[base + i]");
  std::string load_x = x, sum_index, out_index = "base + i";
  if (residual) {
    const std::vector<graph::PartRange> layout = graph::SplitLayout({width, width}, rows, graph::DType::kF32);
    if (!prologue) load_x = absl::StrCat("(", x, " + nr[base + i])");
    sum_index = absl::StrCat(layout[0].offset / sizeof(float), "u + base + i");
    out_index = absl::StrCat(layout[1].offset / sizeof(float), "u + base + i");
  }
  return absl::StrCat(
      FloatBuffer(io.out, "ny", graph::DType::kF32, false), FloatBuffer(io.w, "nw", w.type.dtype, true),
      residual ? FloatBuffer(io.r, "nr", graph::DType::kF32, true) : "",
      prologue ? FloatBuffer(io.wp, "nwp", c.input(3).type.dtype, true) : "",
      Fill(R"(
// Group `group` of row `row`, by the whole workgroup.
void norm_row(uint row, uint group) {
  uint base = row * {{WIDTH}}u + group * {{D}}u;
  const uint ITEMS = ({{D}}u + {{WG}}u - 1u) / {{WG}}u;
  // Every load of the row (x, and the weights and residual used after the reductions) is issued
  // here, in one round: on the H100 a Gemma-3-1B post-norm + residual + pre-norm row waited on
  // three rounds of loads otherwise.
  float v[ITEMS], wv[ITEMS];
#if {{PROLOGUE}}
  float rv[ITEMS], wpv[ITEMS];
#endif
  float ss = 0.0;
  [[unroll]] for (uint it = 0u; it < ITEMS; ++it) {
    uint i = min(gl_LocalInvocationID.x + it * {{WG}}u, {{D}}u - 1u);
    bool live = gl_LocalInvocationID.x + it * {{WG}}u < {{D}}u;
    float s = {{LOAD_X}};
    s = live ? s : 0.0;
    wv[it] = load_nw(i) + {{OFFSET}};
#if {{PROLOGUE}}
    rv[it] = nr[base + i];
    wpv[it] = load_nwp(i) + {{PRE_OFFSET}};
#endif
    v[it] = s;
    ss += s * s;
  }
#if {{PROLOGUE}}
  float inv_x = inversesqrt(wg_sum(ss) / float({{D}}) + {{PRE_EPS}});
  ss = 0.0;
  [[unroll]] for (uint it = 0u; it < ITEMS; ++it) {
    if (gl_LocalInvocationID.x + it * {{WG}}u < {{D}}u) v[it] = v[it] * inv_x * wpv[it] + rv[it];
    ss += v[it] * v[it];
  }
#endif
  float inv = inversesqrt(wg_sum(ss) / float({{D}}) + {{EPS}});
  [[unroll]] for (uint it = 0u; it < ITEMS; ++it) {
    uint i = gl_LocalInvocationID.x + it * {{WG}}u;
    if (i < {{D}}u) {
{{WRITE_SUM}}      ny[{{OUT_INDEX}}] = v[it] * inv * wv[it];
    }
  }
}
)",
           {{"D", absl::StrCat(dim)},
            {"WIDTH", absl::StrCat(width)},
            {"WG", absl::StrCat(wg)},
            {"LOAD_X", load_x},
            {"WRITE_SUM", residual ? absl::StrCat("      ny[", sum_index, "] = v[it];\n") : ""},
            {"OUT_INDEX", out_index},
            {"EPS", FloatLiteral(c.node.attrs.Float("eps"))},
            {"OFFSET", FloatLiteral(c.node.attrs.Float("weight_offset"))},
            {"PROLOGUE", prologue ? "1" : "0"},
            {"PRE_EPS", prologue ? FloatLiteral(c.node.attrs.Float("norm_eps")) : "0.0"},
            {"PRE_OFFSET", prologue ? FloatLiteral(c.node.attrs.Float("norm_offset")) : "0.0"}}));
}

absl::StatusOr<Kernel> EmitRmsNorm(const EmitContext& c) {
  const graph::Node& w = c.input(1);
  const auto [residual, prologue, width, dim, rows] = ShapeOf(c);
  const uint32_t wg = WorkgroupFor(dim, c.caps.max_workgroup_invocations);
  Kernel k;
  k.family = "rms_norm";
  k.variant = dim == width ? absl::StrCat("row.", graph::Name(w.type.dtype))
                           : absl::StrCat("group", dim, ".", graph::Name(w.type.dtype));
  if (residual) absl::StrAppend(&k.variant, prologue ? "+rms_norm+residual" : "+residual");
  k.glsl = absl::StrCat(ShaderHeader(wg), FloatBuffer(2, "x", graph::DType::kF32, true),
                        WorkgroupReductions(wg, c.caps.subgroup_arithmetic),
                        RmsNormRowGlsl(c, NormRowIo{1, "x", 3, 4, 5}, wg),
                        Fill(R"(
void main() {
  uint row = gl_WorkGroupID.y;
  if (row >= {{ROWS}}) return;  // uniform across the workgroup
  norm_row(row, gl_WorkGroupID.x);
}
)",
                             {{"ROWS", RowsExpr(c.node.type.shape[0].tokens, rows)}}));
  k.args = {{c.node.id, true}};
  for (graph::ValueId in : c.node.inputs) k.args.push_back({in, false});
  k.groups = {static_cast<uint32_t>(width / dim), static_cast<uint32_t>(rows), 1};
  return k;
}

}  // namespace doppler::codegen
