// Checks a matmul node and builds what its variants share, then renders the variant
// tuning::ChooseMatMulVariant picks (codegen/tuning/matmul.h).
// The epilogue chain is a parameter of the one kernel family: its steps become GLSL statements in
// `store`.
#include <algorithm>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "codegen/glsl_common.h"
#include "codegen/half_x.h"
#include "codegen/plane_x.h"
#include "codegen/in_matmul.h"
#include "codegen/matmul.h"
#include "codegen/tuning/matmul.h"
#include "graph/layout.h"
#include "graph/matmul_inputs.h"

namespace doppler::codegen {
namespace {

// `uint out_index(uint t, uint col)`: where column col of row t lives in y. A split value keeps
// each part as its own [rows_bucket, w_i] block at graph::SplitLayout's offsets.
std::string OutputIndex(const std::vector<int64_t>& widths, int64_t rows_bucket, int64_t n) {
  if (widths.empty()) return absl::StrCat("uint out_index(uint t, uint col) { return t * ", n, "u + col; }\n");
  const std::vector<graph::PartRange> layout = graph::SplitLayout(widths, rows_bucket, graph::DType::kF32);
  std::string body;
  int64_t start = 0;
  for (size_t i = 0; i < widths.size(); ++i) {
    const std::string ret = absl::StrCat("return ", layout[i].offset / sizeof(float), "u + t * ", widths[i],
                                         "u + (col - ", start, "u);");
    start += widths[i];
    absl::StrAppend(&body, i + 1 < widths.size() ? absl::StrCat("  if (col < ", start, "u) ", ret) : "  " + ret, "\n");
  }
  return absl::StrCat("uint out_index(uint t, uint col) {\n", body, "}\n");
}

const char* ActivationFunction(graph::EpilogueStep s) {
  using graph::EpilogueStep;
  return s == EpilogueStep::kSiluMul || s == EpilogueStep::kSilu ? "act_silu" : "act_gelu_tanh";
}

// The output columns of the matmuls without gates that read x (input 0 of `node`) through a norm
// prologue of the same weight, `node` among them: nothing orders them, so they share a level.
int64_t NormalisedSiblingColumns(const graph::Graph& g, const graph::Node& node) {
  const graph::MatMulInputs mine = graph::MatMulInputsOf(node);
  int64_t n = 0;
  for (graph::ValueId u : g.Users(mine.x)) {
    const graph::Node& other = g.node(u);
    if (other.kind != graph::OpKind::kMatMul) continue;
    const graph::MatMulInputs theirs = graph::MatMulInputsOf(other);
    if (theirs.x != mine.x || theirs.x_norm != mine.x_norm || graph::IsGated(theirs.epilogue)) continue;
    n += g.node(theirs.w).type.shape[0].value;
  }
  return n;
}

}  // namespace

uint32_t RowTiles(const MatMulSpec& s, int64_t bm) {
  if (s.groups == 0) return CeilDiv(s.m, bm);
  // Each group's last tile may be partial: at most (m + groups·(bm − 1)) / bm tiles, and no group
  // has more than ceil(group_rows / bm).
  return static_cast<uint32_t>(std::min<int64_t>(s.groups * CeilDiv(s.group_rows, bm), (s.m + s.groups * (bm - 1)) / bm));
}

int64_t TileShapeRows(const MatMulSpec& s) { return s.groups == 0 ? s.m : CeilDiv(s.m, s.groups); }

std::string TileXGlsl(int64_t k, const std::string& index, bool norm, bool half) {
  const bool quads = k % 4 == 0;
  const graph::DType dtype = half ? graph::DType::kF16 : graph::DType::kF32;
  return absl::StrCat(
      quads ? FloatQuadBuffer(2, "x", dtype, true) : FloatBuffer(2, "x", dtype, true),
      "\nfloat x_load(uint t, uint k, uint m) { return t < m && k < K ? load_x(", index, ") : 0.0; }\n",
      "vec4 x_load4(uint t, uint k, uint m) {\n",
      quads ? absl::StrCat("  return t < m && k < K ? load4_x(", index, ") : vec4(0.0);\n")
            : "  return vec4(x_load(t, k, m), x_load(t, k + 1u, m), x_load(t, k + 2u, m), x_load(t, k + 3u, m));\n",
      "}\n",
      half ? absl::StrCat("#define XVEC4 f16vec4\nf16vec4 x_fetch4(uint t, uint k, uint m) {\n  uvec2 q = t < m && k < K ? x4[(",
                          index, ") >> 2] : uvec2(0u);\n  return f16vec4(unpackFloat2x16(q.x), unpackFloat2x16(q.y));\n}\n")
           : "#define XVEC4 vec4\n#define x_fetch4 x_load4\n",
      "vec4 x_normed4(vec4 v, uint k, inout float sum_sq) {\n",
      !norm   ? ""
      : quads ? "  sum_sq += dot(v, v);\n  if (k < K) v *= norm_weight4(k);\n"
              : "  sum_sq += dot(v, v);\n  [[unroll]] for (uint i = 0u; i < 4u; ++i) if (k + i < K) v[i] *= norm_weight(k + i);\n",
      "  return v;\n}\n",
      "vec4 staged_x4(uint t, uint k, uint m, inout float sum_sq) { return x_normed4(x_load4(t, k, m), k, sum_sq); }\n");
}

absl::StatusOr<Kernel> EmitMatMul(const EmitContext& c) {
  using graph::EpilogueStep;
  const graph::Node& x = c.input(0);
  const graph::Node& w = c.input(1);
  absl::StatusOr<InMatMulRules> rules = InMatMulRulesFromTune();
  if (!rules.ok()) return rules.status();
  const int64_t w_rows = w.type.shape[0].value;
  MatMulSpec s;
  s.k = w.type.shape[1].value;
  s.m = c.rows(x);
  s.w_dtype = w.type.dtype;
  if (w_rows * s.k >= (int64_t{1} << 32)) {
    return absl::InvalidArgumentError(absl::StrCat("matmul '", c.node.label, "': weight ", graph::ToString(w.type),
                                                   " has more than 2^32 elements"));
  }
  absl::StatusOr<std::vector<EpilogueStep>> steps = graph::ParseEpilogue(c.node.attrs.Str("epilogue"));
  if (!steps.ok()) return absl::InvalidArgumentError(absl::StrCat("matmul '", c.node.label, "': ", steps.status().message()));
  s.gates = graph::IsGated(*steps) ? 2 : 1;
  // The matmul kernels take a gated step first, of act(gate) * up (clamped_swiglu and biases before
  // the gate are the expert kernels').
  for (size_t i = 0; i < steps->size(); ++i) {
    if ((*steps)[i] == EpilogueStep::kClampedSwiglu || (graph::IsGatedStep((*steps)[i]) && i > 0)) {
      return absl::InvalidArgumentError(absl::StrCat("matmul '", c.node.label, "': no kernel for epilogue '",
                                                     c.node.attrs.Str("epilogue"), "'"));
    }
  }
  s.n = w_rows / s.gates;
  // With a norm prologue, input 2 is the norm's weight and the epilogue's inputs follow it. Where
  // x is a plain norm the kernel computes (codegen/in_matmul.h), the norm node holds the weight,
  // bound after the matmul's inputs, and the kernel reads the norm's input as x.
  // Where it is the norm's first reader and the others read its row, it also writes the row.
  const bool prologue = c.node.attrs.Has("norm_eps");
  const bool plain_norm_out = x.kind == graph::OpKind::kRmsNorm && PlainNormInFloatReader(c.g, x, c.tokens, *rules) &&
                              c.g.Users(x.id).front() == c.node.id;
  const graph::Node* plain_norm =
      x.kind == graph::OpKind::kRmsNorm && (PlainNormInX(c.g, x, c.tokens, *rules) || plain_norm_out) ? &x : nullptr;
  s.norm = prologue || plain_norm != nullptr;
  s.norm_out = plain_norm_out;
  s.level_n = prologue && s.gates == 1 ? NormalisedSiblingColumns(c.g, c.node) : s.n;
  const int first_extra = prologue ? 3 : 2;
  if (static_cast<int>(c.node.inputs.size()) != first_extra + graph::ExtraInputs(*steps)) {
    return absl::InvalidArgumentError(absl::StrCat("matmul '", c.node.label, "': epilogue '",
                                                   c.node.attrs.Str("epilogue"), "' does not match its inputs"));
  }
  const std::vector<int64_t> widths = graph::SplitWidths(c.node);
  s.rows_expr = RowsExpr(x.type.shape[0].tokens, s.m);
  // x's first row in its buffer (x_row0()): where the last row is read here (codegen/in_matmul.h),
  // x is bound to the last_row's input and the row is its row T - 1.
  const bool last_row = LastRowInX(c.g, x, *rules);
  const graph::ValueId x_value = last_row ? x.inputs[0] : x.id;
  const std::string x_row0 =
      last_row ? absl::StrCat("(", RowsExpr(c.g.node(x_value).type.shape[0].tokens, c.rows(c.g.node(x_value))), " - 1u)")
               : "0u";
  if (last_row) s.variant_suffix = "+last_row";
  s.x_whole = !last_row;

  // The extra inputs' buffers, and the chain as statements on v.
  std::string extras, chain;
  int extra = 0;
  for (EpilogueStep step : *steps) {
    switch (step) {
      case EpilogueStep::kSiluMul:
      case EpilogueStep::kGeluTanhMul:
        absl::StrAppend(&chain, "  v = ", ActivationFunction(step), "(v) * up;\n");
        break;
      case EpilogueStep::kClampedSwiglu:  // refused above
        break;
      case EpilogueStep::kSilu:
      case EpilogueStep::kGeluTanh:
        absl::StrAppend(&chain, "  v = ", ActivationFunction(step), "(v);\n");
        break;
      case EpilogueStep::kBias:
      case EpilogueStep::kAdd: {
        const std::string name = absl::StrCat("e", extra);
        const graph::DType dtype = c.input(first_extra + extra).type.dtype;
        absl::StrAppend(&extras, FloatBuffer(static_cast<uint32_t>(first_extra + 2 + extra), name, dtype, true));
        absl::StrAppend(&chain, "  v += load_", name, step == EpilogueStep::kBias ? "(col);\n" : "(tok * N + col);\n");
        ++extra;
        break;
      }
    }
    absl::StrAppend(&s.variant_suffix, "+", graph::EpilogueStepName(step));
  }
  if (!widths.empty()) absl::StrAppend(&s.variant_suffix, "+split", widths.size());
  // A plain norm's weight, a residual norm the kernel computes as it reads x, and a row-wide op it
  // computes once it has written y (codegen/in_matmul.h): each one's inputs (and value) after the
  // matmul's, in that order.
  uint32_t next_binding = static_cast<uint32_t>(c.node.inputs.size() + 2);
  if (s.norm) {
    s.variant_suffix = (plain_norm != nullptr ? "+plain_norm_x" : "+rms_norm") + s.variant_suffix;
    const uint32_t binding = plain_norm != nullptr ? next_binding++ : 4;
    // With K a multiple of 4 the weight is also read four values at a time (norm_weight4).
    const graph::DType gamma = c.g.node(plain_norm != nullptr ? plain_norm->inputs[1] : c.node.inputs[2]).type.dtype;
    const double eps = plain_norm != nullptr ? plain_norm->attrs.Float("eps") : c.node.attrs.Float("norm_eps");
    const std::string offset =
        FloatLiteral(plain_norm != nullptr ? plain_norm->attrs.Float("weight_offset") : c.node.attrs.Float("norm_offset"));
    absl::StrAppend(&extras,
                    s.k % 4 == 0 ? FloatQuadBuffer(binding, "gamma", gamma, true) : FloatBuffer(binding, "gamma", gamma, true),
                    "float norm_scale(float sum_sq) { return inversesqrt(sum_sq / float(K) + ", FloatLiteral(eps), "); }\n",
                    "float norm_weight(uint k) { return load_gamma(k) + ", offset, "; }\n",
                    s.k % 4 == 0 ? absl::StrCat("vec4 norm_weight4(uint k) { return load4_gamma(k) + ", offset, "; }\n") : "");
    if (s.norm_out) {
      // The row in planes where its expert products read it so (codegen/plane_x.h).
      const PlaneX planes = PlaneXOf(c.g, x, c.tokens, *rules);
      absl::StrAppend(&extras, planes.planes() ? PlaneIndexGlsl("xn_at", planes) : "",
                      OutputBuffer(next_binding++, "xn", HalfX(c.g, x, c.caps, c.tokens, *rules),
                                   planes.planes() ? "xn_at" : ""));
      absl::StrAppend(&s.variant_suffix, "+norm_out", planes.planes() ? ".xn_planes" : "");
    }
  }
  if (x.kind == graph::OpKind::kPart && NormInX(c.g, c.g.node(x.inputs[0]), c.tokens, *rules)) {
    s.restate = x.inputs[0];
    s.restate_writes = graph::MatmulsOfNormedPart(c.g, s.restate).front() == c.node.id;
    s.restate_binding = next_binding;
    next_binding += static_cast<uint32_t>(c.g.node(s.restate).inputs.size() + (s.restate_writes ? 1 : 0));
  }
  for (graph::ValueId u : c.g.Users(c.node.id)) {
    if (TailInMatMul(c.g, c.g.node(u), c.tokens, *rules)) s.tail = u;
  }
  if (s.tail >= 0) {
    s.tail_binding = next_binding;
    next_binding += static_cast<uint32_t>(c.g.node(s.tail).inputs.size());
  }
  s.scratch_binding = next_binding;
  s.io_glsl = absl::StrCat("uint x_row0() { return ", x_row0, "; }\n",
                           s.tail >= 0 ? FloatBuffer(1, "y", graph::DType::kF32, false, /*coherent=*/true)
                                       : OutputBuffer(1, "y", HalfX(c.g, c.node, c.caps, c.tokens, *rules)),
                           "const uint K = ", s.k, "u, N = ", s.n,
                           "u, G = ", s.gates, "u;\n", extras, ActivationGlsl(), OutputIndex(widths, c.rows(c.node), s.n),
                           "float store(uint tok, uint col, float v, float up) {\n", chain,
                           s.tail >= 0 ? "  y[out_index(tok, col)] = v;\n" : "  store_y(out_index(tok, col), v);\n", "  return v;\n}\n");
  s.tile_rows_glsl = absl::StrCat("bool tile_rows(uint bm, out uint tok0, out uint m) {\n  tok0 = gl_WorkGroupID.y * bm;\n  m = ",
                                  s.rows_expr, ";\n  return tok0 < m;\n}\nuint w_row0() { return 0u; }\n");


  s.x_q8 = c.node.attrs.Has("x_quant");
  if (s.x_q8) {
    if (s.m > kGemvMaxBucket) {
      return absl::InvalidArgumentError(absl::StrCat("matmul '", c.node.label, "': x_quant is taken by the matrix-vector "
                                                     "kernel only, for at most ", kGemvMaxBucket, " rows, not ", s.m));
    }
    if (!c.caps.integer_dot_product) {
      return absl::FailedPreconditionError(absl::StrCat("matmul '", c.node.label, "': x_quant needs a device with "
                                                        "integer dot products (shaderIntegerDotProduct)"));
    }
    absl::StrAppend(&s.variant_suffix, "+x_q8");
  }
  s.tile_x_glsl = TileXGlsl(s.k, "(x_row0() + t) * K + k", s.norm, HalfX(c.g, x, c.caps, c.tokens, *rules));

  absl::StatusOr<tuning::MatMulVariant> variant = tuning::ChooseMatMulVariant(
      c.caps, {.rows = s.m,
               .n = s.n,
               .gates = s.gates,
               .w_dtype = s.w_dtype,
               .x_q8 = s.x_q8,
               .row_per_sequence = c.g.paging().row_per_sequence,
               .norm = s.norm});
  if (!variant.ok()) return variant.status();
  if (s.norm_out && *variant != tuning::MatMulVariant::kGemv) {
    return absl::InternalError(absl::StrCat("matmul '", c.node.label, "': only the float matrix-vector kernel writes a plain norm"));
  }
  absl::StatusOr<Kernel> k = [&] {
    switch (*variant) {
      case tuning::MatMulVariant::kGemvQ8:
        return EmitGemvQ8(c, s);
      case tuning::MatMulVariant::kCoopRows:
        return EmitCoopRows(c, s);
      case tuning::MatMulVariant::kGemv:
        return EmitGemv(c, s);
      case tuning::MatMulVariant::kCoop:
        return EmitCoopGemm(c, s);
      case tuning::MatMulVariant::kGemm:
        break;
    }
    return EmitGemm(c, s);
  }();
  if (!k.ok()) return absl::InvalidArgumentError(absl::StrCat("matmul '", c.node.label, "': ", k.status().message()));
  k->family = "matmul";
  k->args = {{c.node.id, true}};
  // A kernel computing the residual norm whose part x is reads x from the norm's inputs instead:
  // binding 2 then holds the norm's first input (read anyway), so that no consumer of the norm reads
  // the value another one writes, and they all share a barrier level.
  const graph::ValueId x_arg = s.restate >= 0          ? c.g.node(s.restate).inputs[0]
                              : plain_norm != nullptr ? plain_norm->inputs[0]
                                                      : x_value;
  for (graph::ValueId in : c.node.inputs) k->args.push_back({in == x.id ? x_arg : in, false});
  if (plain_norm != nullptr) k->args.push_back({plain_norm->inputs[1], false});
  if (s.norm_out) k->args.push_back({plain_norm->id, true});
  if (s.restate >= 0) {
    const graph::Node& norm = c.g.node(s.restate);
    for (graph::ValueId in : norm.inputs) k->args.push_back({in, false});
    if (s.restate_writes) k->args.push_back({norm.id, true});
  }
  if (s.tail >= 0) {
    const graph::Node& tail = c.g.node(s.tail);
    k->args.push_back({tail.id, true});
    for (size_t i = 1; i < tail.inputs.size(); ++i) k->args.push_back({tail.inputs[i], false});
  }
  return k;
}

}  // namespace doppler::codegen
