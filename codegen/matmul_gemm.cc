// The tiled variant (many rows of x, as in prefill): a workgroup of 16 × 16 invocations computes a
// 64-row × 64-column tile of y. For each 16-wide slice of K it stages x's rows and the weight
// rows (decoded to float, G per column) in shared memory; each invocation then accumulates a
// 4 × 4 block of the tile (times G) from vec4 reads of the staged slices, so every staged value
// is used 64 times from shared memory. With a norm prologue, x is multiplied by the norm weight
// as it is staged, and each row's sum of squares, gathered by the invocations that staged it,
// scales the row's results.
#include "absl/strings/str_cat.h"
#include "codegen/glsl_common.h"
#include "codegen/matmul.h"

namespace doppler::codegen {

absl::StatusOr<Kernel> EmitGemm(const EmitContext& c, const MatMulSpec& s) {
  Kernel k;
  k.variant = absl::StrCat("gemm.", graph::Name(s.w_dtype), ".tile64x64", s.variant_suffix);
  k.glsl = absl::StrCat(ShaderHeader(256), s.io_glsl, s.tile_x_glsl,
                        FloatBuffer(3, "w", s.w_dtype, true), Fill(R"(
#define NORM {{NORM}}
const uint BM = 64u, BN = 64u, BK = 16u;
shared vec4 xs[BK][BM / 4u + 1u];     // xs[kk][i] = x rows 4i..4i+3 at column k0 + kk (padded: fewer bank conflicts)
shared vec4 ws[G][BK][BN / 4u + 1u];  // the same for weight rows (gate and up)
#if NORM
shared float sum_sq_part[BM][17];  // [row][kk]: x² summed by the invocation staging column kk
#endif

void main() {
  uint lid = gl_LocalInvocationID.x;
  uint tm = lid / 16u, tn = lid % 16u;  // this invocation's rows 4tm.., columns 4tn..
  uint tok0 = gl_WorkGroupID.y * BM, col0 = gl_WorkGroupID.x * BN;
  uint m = {{ROWS}};
  if (tok0 >= m) return;  // uniform across the workgroup

  vec4 acc[G][4];  // acc[g][i][j]: row 4tm + i, column 4tn + j
  [[unroll]] for (uint g = 0u; g < G; ++g)
    [[unroll]] for (uint i = 0u; i < 4u; ++i) acc[g][i] = vec4(0.0);

  // Staging: invocation lid loads column kk = lid % 16 of rows lid / 16 + 16j, j = 0..3.
  uint kk = lid % 16u, r0 = lid / 16u;
  float sum_sq[4] = float[4](0.0, 0.0, 0.0, 0.0);
  for (uint k0 = 0u; k0 < K; k0 += BK) {
    uint kc = k0 + kk;
    [[unroll]] for (uint j = 0u; j < 4u; ++j) {
      uint r = r0 + 16u * j;
      uint t = tok0 + r;
      xs[kk][r / 4u][r % 4u] = staged_x(t, kc, m, sum_sq[j]);
      [[unroll]] for (uint g = 0u; g < G; ++g) {
        uint col = col0 + r;
        ws[g][kk][r / 4u][r % 4u] = col < N && kc < K ? load_w((col + g * N) * K + kc) : 0.0;
      }
    }
    barrier();
    [[unroll]] for (uint q = 0u; q < BK; ++q) {
      vec4 a = xs[q][tm];
      [[unroll]] for (uint g = 0u; g < G; ++g) {
        vec4 b = ws[g][q][tn];
        acc[g][0] += a.x * b;
        acc[g][1] += a.y * b;
        acc[g][2] += a.z * b;
        acc[g][3] += a.w * b;
      }
    }
    barrier();
  }
  float scale[4] = float[4](1.0, 1.0, 1.0, 1.0);
#if NORM
  [[unroll]] for (uint j = 0u; j < 4u; ++j) sum_sq_part[r0 + 16u * j][kk] = sum_sq[j];
  barrier();
  [[unroll]] for (uint i = 0u; i < 4u; ++i) {
    float total = 0.0;
    for (uint q = 0u; q < 16u; ++q) total += sum_sq_part[4u * tm + i][q];
    scale[i] = norm_scale(total);
  }
#endif
  [[unroll]] for (uint i = 0u; i < 4u; ++i) {
    uint t = tok0 + 4u * tm + i;
    [[unroll]] for (uint j = 0u; j < 4u; ++j) {
      uint col = col0 + 4u * tn + j;
      if (t < m && col < N) store(t, col, acc[0][i][j] * scale[i], G == 2u ? acc[G - 1u][i][j] * scale[i] : 0.0);
    }
  }
}
)",
                                                                                        {{"ROWS", s.rows_expr}, {"NORM", s.norm ? "1" : "0"}}));
  k.groups = {CeilDiv(s.n, 64), CeilDiv(s.m, 64), 1};
  return k;
}

}  // namespace doppler::codegen
