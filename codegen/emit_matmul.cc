// y[T, N] = x[T, K] · w[N, K]ᵀ with f32 accumulation.
//
// A workgroup computes a tile of `tile_tokens` tokens × `tile_rows` weight rows; its invocations
// split K, each keeping tile_tokens × tile_rows partial sums, which a shared-memory tree then
// reduces. Decode (one token) uses a 1 × 4 tile so every weight row is read once per token.
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "codegen/emitters.h"
#include "codegen/glsl_common.h"

namespace doppler::codegen {
namespace {
constexpr uint32_t kWorkgroup = 64;
constexpr int64_t kTileRows = 4;
constexpr int64_t kMaxTileTokens = 8;
}  // namespace

absl::StatusOr<Kernel> EmitMatMul(const EmitContext& c) {
  const graph::Node& x = c.input(0);
  const graph::Node& w = c.input(1);
  const int64_t n = w.type.shape[0].value, kdim = w.type.shape[1].value;
  const int64_t m = c.rows(x);
  if (graph::IsBlockFormat(w.type.dtype)) {
    return absl::UnimplementedError(absl::StrCat("matmul '", c.node.label, "': weights in ",
                                                 graph::Name(w.type.dtype), " have no kernel yet"));
  }
  if (n * kdim >= (int64_t{1} << 32)) {
    return absl::InvalidArgumentError(absl::StrCat("matmul '", c.node.label, "': weight ", graph::ToString(w.type),
                                                   " has more than 2^32 elements"));
  }
  const int64_t tile_tokens = std::min(m, kMaxTileTokens);
  Kernel k;
  k.family = "matmul";
  k.variant = absl::StrCat(tile_tokens == 1 ? "gemv" : "gemm", ".", graph::Name(w.type.dtype), ".t", tile_tokens,
                           "x", kTileRows);
  k.glsl = absl::StrCat(ShaderHeader(kWorkgroup), FloatBuffer(1, "y", graph::DType::kF32, false),
                        FloatBuffer(2, "x", graph::DType::kF32, true), FloatBuffer(3, "w", w.type.dtype, true),
                        Fill(R"(
const uint WG = {{WG}}u, TM = {{TM}}u, RN = {{RN}}u, K = {{K}}u, N = {{N}}u;
shared float partial[TM * RN * WG];

void main() {
  uint lid = gl_LocalInvocationID.x;
  uint row0 = gl_WorkGroupID.x * RN;
  uint tok0 = gl_WorkGroupID.y * TM;
  uint m = {{ROWS}};
  if (tok0 >= m) return;  // uniform across the workgroup

  float acc[TM][RN];
  [[unroll]] for (uint t = 0; t < TM; ++t)
    [[unroll]] for (uint r = 0; r < RN; ++r) acc[t][r] = 0.0;

  for (uint kk = lid; kk < K; kk += WG) {
    float xv[TM];
    [[unroll]] for (uint t = 0; t < TM; ++t) xv[t] = tok0 + t < m ? x[(tok0 + t) * K + kk] : 0.0;
    [[unroll]] for (uint r = 0; r < RN; ++r) {
      if (row0 + r < N) {
        float wv = load_w((row0 + r) * K + kk);
        [[unroll]] for (uint t = 0; t < TM; ++t) acc[t][r] += xv[t] * wv;
      }
    }
  }
  [[unroll]] for (uint t = 0; t < TM; ++t)
    [[unroll]] for (uint r = 0; r < RN; ++r) partial[(t * RN + r) * WG + lid] = acc[t][r];
  barrier();
  [[unroll]] for (uint s = WG / 2u; s > 0u; s >>= 1) {
    if (lid < s) {
      [[unroll]] for (uint o = 0; o < TM * RN; ++o) partial[o * WG + lid] += partial[o * WG + lid + s];
    }
    barrier();
  }
  if (lid < TM * RN) {
    uint t = lid / RN, r = lid % RN;
    if (tok0 + t < m && row0 + r < N) y[(tok0 + t) * N + row0 + r] = partial[lid * WG];
  }
}
)",
                             {{"WG", absl::StrCat(kWorkgroup)},
                              {"TM", absl::StrCat(tile_tokens)},
                              {"RN", absl::StrCat(kTileRows)},
                              {"K", absl::StrCat(kdim)},
                              {"N", absl::StrCat(n)},
                              {"ROWS", RowsExpr(x.type.shape[0].tokens, m)}}));
  k.args = {{c.node.id, true}, {c.node.inputs[0], false}, {c.node.inputs[1], false}};
  k.groups = {CeilDiv(n, kTileRows), CeilDiv(m, tile_tokens), 1};
  return k;
}

}  // namespace doppler::codegen
