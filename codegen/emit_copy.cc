// Data-movement kernels: embedding gather, last-row selection, KV-cache write.
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "codegen/emitters.h"
#include "codegen/glsl_common.h"
#include "codegen/step_rows.h"
#include "graph/cache_write_inputs.h"

namespace doppler::codegen {
namespace {
constexpr uint32_t kWorkgroup = 64;
}

absl::StatusOr<Kernel> EmitEmbedding(const EmitContext& c) {
  const graph::Node& table = c.input(0);
  const int64_t vocab = table.type.shape[0].value, dim = table.type.shape[1].value;
  Kernel k;
  k.family = "embedding";
  const bool scaled = c.node.attrs.Has("scale");  // fuse-embedding-scale
  k.variant = absl::StrCat("gather.", graph::Name(table.type.dtype), scaled ? "+scale" : "");
  k.glsl = absl::StrCat(ShaderHeader(kWorkgroup), FloatBuffer(1, "dst", graph::DType::kF32, false),
                        WeightRowsBuffer(2, "table", table.type.dtype, dim), IntBuffer(3, "ids", true),
                        Fill(R"(
void main() {
  uint t = gl_WorkGroupID.y;
  uint col = gl_GlobalInvocationID.x;
  if (t >= {{ROWS}} || col >= {{D}}u) return;
  // Ids are validated on the host or produced by argmax over this vocabulary; clamp anyway so a
  // bad id can never read outside the table.
  uint id = uint(clamp(ids[t], 0, {{V}} - 1));
  dst[t * {{D}}u + col] = load_table(id * {{D}}u + col){{SCALE}};
}
)",
                             {{"ROWS", RowsExpr(c.node.type.shape[0].tokens, c.rows(c.node))},
                              {"D", absl::StrCat(dim)},
                              {"V", absl::StrCat(vocab)},
                              {"SCALE", scaled ? absl::StrCat(" * ", FloatLiteral(c.node.attrs.Float("scale"))) : ""}}));
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

// Row t goes to the cache row of its position (codegen/step_rows.h: without pages row p % C of a
// cache of C rows, a ring; with pages, the row its sequence's page table gives). With a
// rope prologue (a table input), the values are rotated as they are written; with a head norm
// prologue (its weight after the table), each head is RMS-normalised before it is rotated: a
// workgroup then writes one head of one token, and reduces the head's squares in shared memory.
absl::StatusOr<Kernel> EmitCacheWrite(const EmitContext& c) {
  const graph::CacheWriteInputs in = graph::CacheWriteInputsOf(c.node);
  const graph::Node& state = c.g.node(in.cache);
  const int64_t width = state.type.shape[1].value, capacity = state.type.shape[0].value;
  const bool rope = in.rope.has_value(), norm = in.x_norm.has_value();
  const bool f16 = state.type.dtype == graph::DType::kF16;
  const int64_t per = f16 ? 2 : 1;  // values per invocation: an f16 cache is written a pair (one uint) at a time
  if (f16 && width % 2 != 0) return absl::InvalidArgumentError("cache_write: f16 cache rows must have an even width");
  const int64_t head_dim = rope ? c.node.attrs.Int("head_dim") : width;
  uint32_t wg = kWorkgroup;
  if (norm) {
    wg = 32;
    while (wg < head_dim / per && wg * 2 <= c.caps.max_workgroup_invocations) wg *= 2;
    if (wg < head_dim / per) return absl::InvalidArgumentError("cache_write: a head norm wider than a workgroup");
  }
  Kernel k;
  k.family = "cache_write";
  k.variant = f16 ? "f16" : "f32";
  k.args = {{in.cache, true}, {in.x, false}};
  // `float value(uint t, uint i)`: what goes to column i for token t (before the head's 1 / rms).
  std::string value = "float value(uint t, uint i) { return src[t * W + i]; }\n";
  if (rope) {
    if (norm) absl::StrAppend(&k.variant, "+rms_norm");
    k.variant += "+rope." + c.node.attrs.Str("style");
    k.args.push_back({*in.rope, false});
    value = FloatBuffer(3, "table", graph::DType::kF32, true);
    if (norm) {
      k.args.push_back({*in.x_norm, false});
      absl::StrAppend(&value,
                      HeadNormLoad(4, c.g.node(*in.x_norm).type.dtype, "src", head_dim, c.node.attrs.Float("norm_offset")),
                      WorkgroupReductions(wg, c.caps.subgroup_arithmetic));
    }
    absl::StrAppend(&value, RopeFunction("value", norm ? "load_normed" : "load_src", "table", width, head_dim,
                                         c.node.attrs.Str("style") == "neox"));
  }
  const std::string cache_decl =
      f16 ? "layout(std430, set = 0, binding = 1) buffer Buf_cache { uint cache[]; };\n"
          : FloatBuffer(1, "cache", graph::DType::kF32, false);
  k.glsl = absl::StrCat(ShaderHeader(wg), StepRowsGlsl(c.g.paging(), c.tokens), cache_decl, FloatBuffer(2, "src", graph::DType::kF32, true),
                        "const uint W = ", width, "u, C = ", capacity, "u, PER = ", per, "u, HD = ", head_dim, "u;\n",
                        value, Fill(R"(
void main() {
  uint t = gl_WorkGroupID.y;
  if (t >= step.n_tokens) return;  // uniform across the workgroup
#if {{NORM}}
  // Invocation j writes values PER·j.. of head gl_WorkGroupID.x.
  uint j = gl_LocalInvocationID.x;
  bool live = j < HD / PER;
  uint i = gl_WorkGroupID.x * (HD / PER) + min(j, HD / PER - 1u);
  float ss = 0.0;
  [[unroll]] for (uint e = 0u; e < PER; ++e) {
    float v = live ? src[t * W + PER * i + e] : 0.0;
    ss += v * v;
  }
  float s = inversesqrt(wg_sum(ss) / float(HD) + {{EPS}});
  if (!live) return;
#else
  uint i = gl_GlobalInvocationID.x;
  if (i >= W / PER) return;
  float s = 1.0;
#endif
  uint row = cache_row(t, row_position(t), C) * W / PER;
  cache[row + i] = {{STORE}};
}
)",
                                    {{"NORM", norm ? "1" : "0"},
                                     {"EPS", norm ? FloatLiteral(c.node.attrs.Float("norm_eps")) : "0.0"},
                                     {"STORE", f16 ? "packHalf2x16(vec2(value(t, 2u * i), value(t, 2u * i + 1u)) * s)"
                                                   : "value(t, i) * s"}}));
  k.groups = {norm ? static_cast<uint32_t>(width / head_dim) : CeilDiv(width / per, kWorkgroup),
              static_cast<uint32_t>(c.tokens), 1};
  return k;
}

}  // namespace doppler::codegen
