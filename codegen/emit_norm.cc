// RMSNorm: one workgroup per group of a row (the whole row, or e.g. one head); the sum of squares
// is reduced in shared memory. With residual = 1 (inputs x, w, r) the row is s = x + r, and the
// value is split "D,D": s goes to part 0, norm(s) * (w + offset) to part 1 (graph/layout.h).
#include "absl/strings/str_cat.h"
#include "codegen/emitters.h"
#include "codegen/glsl_common.h"
#include "graph/layout.h"

namespace doppler::codegen {
namespace {
constexpr uint32_t kWorkgroup = 128;
}

absl::StatusOr<Kernel> EmitRmsNorm(const EmitContext& c) {
  const graph::Node& w = c.input(1);
  const bool residual = c.node.attrs.Int("residual") != 0;
  const int64_t width = residual ? c.input(0).type.shape[1].value : c.node.type.shape[1].value;
  const int64_t dim = c.node.attrs.Has("group") ? c.node.attrs.Int("group") : width;  // values per group
  const int64_t rows = c.rows(c.node);
  // Where the input row is read and the sum and normalised values are written (in floats).
  std::string load_x = "x[base + i]", sum_index, out_index = "base + i";
  if (residual) {
    const std::vector<graph::PartRange> layout = graph::SplitLayout({width, width}, rows, graph::DType::kF32);
    load_x = "(x[base + i] + r[base + i])";
    sum_index = absl::StrCat(layout[0].offset / sizeof(float), "u + base + i");
    out_index = absl::StrCat(layout[1].offset / sizeof(float), "u + base + i");
  }
  Kernel k;
  k.family = "rms_norm";
  k.variant = dim == width ? absl::StrCat("row.", graph::Name(w.type.dtype))
                           : absl::StrCat("group", dim, ".", graph::Name(w.type.dtype));
  if (residual) absl::StrAppend(&k.variant, "+residual");
  k.glsl = absl::StrCat(ShaderHeader(kWorkgroup), FloatBuffer(1, "y", graph::DType::kF32, false),
                        FloatBuffer(2, "x", graph::DType::kF32, true), FloatBuffer(3, "w", w.type.dtype, true),
                        residual ? FloatBuffer(4, "r", graph::DType::kF32, true) : "", WorkgroupReductions(kWorkgroup),
                        Fill(R"(
void main() {
  uint row = gl_WorkGroupID.y;
  if (row >= {{ROWS}}) return;  // uniform across the workgroup
  uint base = row * {{WIDTH}}u + gl_WorkGroupID.x * {{D}}u;
  float ss = 0.0;
  for (uint i = gl_LocalInvocationID.x; i < {{D}}u; i += {{WG}}u) {
    float s = {{LOAD_X}};
{{WRITE_SUM}}    ss += s * s;
  }
  float inv = inversesqrt(wg_sum(ss) / float({{D}}) + {{EPS}});
  for (uint i = gl_LocalInvocationID.x; i < {{D}}u; i += {{WG}}u) {
    y[{{OUT_INDEX}}] = {{LOAD_X}} * inv * (load_w(i) + {{OFFSET}});
  }
}
)",
                             {{"ROWS", RowsExpr(c.node.type.shape[0].tokens, rows)},
                              {"D", absl::StrCat(dim)},
                              {"WIDTH", absl::StrCat(width)},
                              {"WG", absl::StrCat(kWorkgroup)},
                              {"LOAD_X", load_x},
                              {"WRITE_SUM", residual ? absl::StrCat("    y[", sum_index, "] = s;\n") : ""},
                              {"OUT_INDEX", out_index},
                              {"EPS", FloatLiteral(c.node.attrs.Float("eps"))},
                              {"OFFSET", FloatLiteral(c.node.attrs.Float("weight_offset"))}}));
  k.args = {{c.node.id, true}};
  for (graph::ValueId in : c.node.inputs) k.args.push_back({in, false});
  k.groups = {static_cast<uint32_t>(width / dim), static_cast<uint32_t>(rows), 1};
  return k;
}

}  // namespace doppler::codegen
