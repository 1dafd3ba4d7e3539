// Elementwise ops on [rows, cols] f32 values: add, mul, silu. One invocation per element.
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "codegen/emitters.h"
#include "codegen/glsl_common.h"

namespace doppler::codegen {
namespace {
constexpr uint32_t kWorkgroup = 64;

// The value of element i, as GLSL over the input buffers a (and b).
std::string Expression(graph::OpKind kind) {
  switch (kind) {
    case graph::OpKind::kAdd:
      return "a[i] + b[i]";
    case graph::OpKind::kMul:
      return "a[i] * b[i]";
    case graph::OpKind::kSilu:
      return "a[i] / (1.0 + exp(-a[i]))";
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
  Kernel k;
  k.family = "elementwise";
  k.variant = std::string(graph::OpName(c.node.kind));
  k.glsl = absl::StrCat(ShaderHeader(kWorkgroup), FloatBuffer(1, "y", graph::DType::kF32, false),
                        FloatBuffer(2, "a", graph::DType::kF32, true),
                        binary ? FloatBuffer(3, "b", graph::DType::kF32, true) : "", Fill(R"(
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
                                                                                           {"EXPR", Expression(c.node.kind)}}));
  k.args = {{c.node.id, true}};
  for (graph::ValueId in : c.node.inputs) k.args.push_back({in, false});
  k.groups = {CeilDiv(cols, kWorkgroup), static_cast<uint32_t>(c.rows(c.node)), 1};
  return k;
}

}  // namespace doppler::codegen
