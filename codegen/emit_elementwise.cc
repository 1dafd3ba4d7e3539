// Elementwise ops on [rows, cols] f32 values: add, mul (b of the same shape, or a [cols] vector
// broadcast over the rows), silu, gelu_tanh, scale, clamped_swiglu (of gate a and up b). One
// invocation per element.
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "codegen/emitters.h"
#include "codegen/glsl_common.h"

namespace doppler::codegen {
namespace {
constexpr uint32_t kWorkgroup = 64;

// The value of element i (in column col), as GLSL over the input buffers a (and b); `bi` indexes b.
std::string Expression(const graph::Node& n, const std::string& bi) {
  switch (n.kind) {
    case graph::OpKind::kAdd:
      return absl::StrCat("a[i] + b[", bi, "]");
    case graph::OpKind::kMul:
      return absl::StrCat("a[i] * b[", bi, "]");
    case graph::OpKind::kSilu:
      return "act_silu(a[i])";  // ActivationGlsl()
    case graph::OpKind::kGeluTanh:
      return "act_gelu_tanh(a[i])";
    case graph::OpKind::kScale:
      return absl::StrCat("a[i] * ", FloatLiteral(n.attrs.Float("factor")));
    case graph::OpKind::kClampedSwiglu:
      return "act_clamped_swiglu(a[i], b[i])";  // ClampedSwigluGlsl()
    default:
      return "";
  }
}
}  // namespace

absl::StatusOr<Kernel> EmitElementwise(const EmitContext& c) {
  const graph::Shape& shape = c.node.type.shape;
  if (shape.size() != 2) return absl::InvalidArgumentError("elementwise ops take [rows, cols] values");
  const int64_t cols = shape[1].value;
  const bool binary = c.node.inputs.size() == 2;
  const bool broadcast = binary && c.input(1).type.shape.size() == 1;  // b is a [cols] vector
  const std::string expr = Expression(c.node, broadcast ? "col" : "i");
  if (expr.empty()) return absl::InvalidArgumentError(absl::StrCat("no elementwise kernel for ", graph::OpName(c.node.kind)));
  Kernel k;
  k.family = "elementwise";
  k.variant = absl::StrCat(graph::OpName(c.node.kind), broadcast ? ".row_broadcast" : "");
  k.glsl = absl::StrCat(ShaderHeader(kWorkgroup), FloatBuffer(1, "y", graph::DType::kF32, false),
                        FloatBuffer(2, "a", graph::DType::kF32, true),
                        binary ? FloatBuffer(3, "b", graph::DType::kF32, true) : "", ActivationGlsl(),
                        c.node.kind == graph::OpKind::kClampedSwiglu
                            ? ClampedSwigluGlsl(c.node.attrs.Float("alpha"), c.node.attrs.Float("limit"))
                            : "",
                        Fill(R"(
void main() {
  uint col = gl_GlobalInvocationID.x;
  uint row = gl_WorkGroupID.y;
  if (row >= {{ROWS}} || col >= {{COLS}}u) return;
  uint i = row * {{COLS}}u + col;
  y[i] = {{EXPR}};
}
)",
                                                                                          {{"ROWS", RowsExpr(shape[0].tokens, c.rows(c.node))},
                                                                                           {"COLS", absl::StrCat(cols)},
                                                                                           {"EXPR", expr}}));
  k.args = {{c.node.id, true}};
  for (graph::ValueId in : c.node.inputs) k.args.push_back({in, false});
  k.groups = {CeilDiv(cols, kWorkgroup), static_cast<uint32_t>(c.rows(c.node)), 1};
  return k;
}

}  // namespace doppler::codegen
