// Data-movement kernels: embedding gather, last-row selection, KV-cache write.
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "codegen/emitters.h"
#include "codegen/glsl_common.h"

namespace doppler::codegen {
namespace {
constexpr uint32_t kWorkgroup = 64;
}

absl::StatusOr<Kernel> EmitEmbedding(const EmitContext& c) {
  const graph::Node& table = c.input(0);
  const int64_t vocab = table.type.shape[0].value, dim = table.type.shape[1].value;
  Kernel k;
  k.family = "embedding";
  k.variant = absl::StrCat("gather.", graph::Name(table.type.dtype));
  k.glsl = absl::StrCat(ShaderHeader(kWorkgroup), FloatBuffer(1, "dst", graph::DType::kF32, false),
                        FloatBuffer(2, "table", table.type.dtype, true), IntBuffer(3, "ids", true),
                        Fill(R"(
void main() {
  uint t = gl_WorkGroupID.y;
  uint col = gl_GlobalInvocationID.x;
  if (t >= {{ROWS}} || col >= {{D}}u) return;
  // Ids are validated on the host or produced by argmax over this vocabulary; clamp anyway so a
  // bad id can never read outside the table.
  uint id = uint(clamp(ids[t], 0, {{V}} - 1));
  dst[t * {{D}}u + col] = load_table(id * {{D}}u + col);
}
)",
                             {{"ROWS", RowsExpr(c.node.type.shape[0].tokens, c.rows(c.node))},
                              {"D", absl::StrCat(dim)},
                              {"V", absl::StrCat(vocab)}}));
  k.args = {{c.node.id, true}, {c.node.inputs[0], false}, {c.node.inputs[1], false}};
  k.groups = {CeilDiv(dim, kWorkgroup), static_cast<uint32_t>(c.rows(c.node)), 1};
  return k;
}

absl::StatusOr<Kernel> EmitLastRow(const EmitContext& c) {
  const graph::Node& x = c.input(0);
  const int64_t dim = x.type.shape[1].value;
  Kernel k;
  k.family = "last_row";
  k.variant = "copy";
  k.glsl = absl::StrCat(ShaderHeader(kWorkgroup), FloatBuffer(1, "dst", graph::DType::kF32, false),
                        FloatBuffer(2, "src", graph::DType::kF32, true), Fill(R"(
void main() {
  uint col = gl_GlobalInvocationID.x;
  if (col >= {{D}}u) return;
  dst[col] = src[({{ROWS}} - 1u) * {{D}}u + col];
}
)",
                                                                             {{"ROWS", RowsExpr(x.type.shape[0].tokens, c.rows(x))},
                                                                              {"D", absl::StrCat(dim)}}));
  k.args = {{c.node.id, true}, {c.node.inputs[0], false}};
  k.groups = {CeilDiv(dim, kWorkgroup), 1, 1};
  return k;
}

// Position p goes to row p % C of a cache of C rows (a ring, as the interpreter defines it). With a
// rope prologue (a table input), the values are rotated as they are written.
absl::StatusOr<Kernel> EmitCacheWrite(const EmitContext& c) {
  const graph::Node& state = c.input(0);
  const int64_t width = state.type.shape[1].value, capacity = state.type.shape[0].value;
  const bool rope = c.node.inputs.size() == 3;
  const bool f16 = state.type.dtype == graph::DType::kF16;
  if (f16 && width % 2 != 0) return absl::InvalidArgumentError("cache_write: f16 cache rows must have an even width");
  Kernel k;
  k.family = "cache_write";
  k.variant = f16 ? "f16" : "f32";
  k.args = {{c.node.inputs[0], true}, {c.node.inputs[1], false}};
  // `float value(uint t, uint i)`: what goes to column i for token t.
  std::string value = "float value(uint t, uint i) { return src[t * W + i]; }\n";
  if (rope) {
    k.variant += "+rope." + c.node.attrs.Str("style");
    k.args.push_back({c.node.inputs[2], false});
    value = absl::StrCat(FloatBuffer(3, "table", graph::DType::kF32, true),
                         RopeFunction("value", "load_src", "table", width, c.node.attrs.Int("head_dim"),
                                      c.node.attrs.Str("style") == "neox"));
  }
  // An f16 cache is written a pair of values (one uint) per invocation.
  const std::string cache_decl =
      f16 ? "layout(std430, set = 0, binding = 1) buffer Buf_cache { uint cache[]; };\n"
          : FloatBuffer(1, "cache", graph::DType::kF32, false);
  k.glsl = absl::StrCat(ShaderHeader(kWorkgroup), cache_decl, FloatBuffer(2, "src", graph::DType::kF32, true),
                        "const uint W = ", width, "u, C = ", capacity, "u, PER = ", f16 ? 2 : 1, "u;\n", value, R"(
void main() {
  uint i = gl_GlobalInvocationID.x;
  uint t = gl_WorkGroupID.y;
  if (t >= step.n_tokens || i >= W / PER) return;
  uint row = ((step.pos + t) % C) * W / PER;
  cache[row + i] = )",
                        f16 ? "packHalf2x16(vec2(value(t, 2u * i), value(t, 2u * i + 1u)));" : "value(t, i);", R"(
}
)");
  k.groups = {CeilDiv(width / (f16 ? 2 : 1), kWorkgroup), static_cast<uint32_t>(c.tokens), 1};
  return k;
}

}  // namespace doppler::codegen
