// The tiled variant (many rows of x, as in prefill, on devices without cooperative-matrix units
// and for buckets of 17 to 63 rows): a workgroup of 256 invocations computes a 64-row × BN-column
// tile of y. For each 32-wide slice of K (16 where shared memory is small) it stages x's rows and
// the weight rows (an invocation decoding a run of 8 values of a row with w_slice8, G per column)
// in shared memory as floats. Each invocation then accumulates a 4 × 4 block of the tile (times
// G) from vec4 reads of the staged slices, over every KG-th column of the slice: narrow tiles
// (BN < 64) split each slice among KG = 64 / BN groups of invocations, whose sums are added in
// shared memory at the end, so that every tile width does 16 products per pair of vec4 reads.
// The next slice is read into registers before the current one's products, so that its loads are
// in flight while they run. With a norm prologue, x is multiplied by the norm weight as it is
// staged, and each row's sum of squares, gathered by the invocations that stage the row, scales
// the row's results.
#include "absl/strings/str_cat.h"
#include "codegen/glsl_common.h"
#include "codegen/matmul.h"
#include "codegen/tuning/gemm.h"
#include "codegen/weight_parts.h"

namespace doppler::codegen {

absl::StatusOr<Kernel> EmitGemm(const EmitContext& c, const MatMulSpec& s) {
  // The tile's width and K-slice: codegen/tuning/gemm.h.
  absl::StatusOr<tuning::GemmConfig> config = tuning::ChooseGemm(c.caps, TileShapeRows(s), s.n, s.gates);
  if (!config.ok()) return config.status();
  const int64_t bn = config->bn, bk = config->bk;
  Kernel k;
  k.config = *config;
  k.variant = absl::StrCat("gemm.", graph::Name(s.w_dtype), ".tile64x", bn, ".k", bk, s.variant_suffix);
  k.glsl = absl::StrCat(ShaderHeader(256), s.tile_rows_glsl, s.io_glsl, s.tile_x_glsl, WeightSlices(3, s.w_dtype, s.k), Fill(R"(
#define NORM {{NORM}}
#define KG {{KG}}  // groups of invocations sharing the tile, each taking every KG-th column of a slice
const uint BM = 64u, BN = {{BN}}u, BK = {{BK}}u;
// Runs of 8 values a row of a slice has: x row r's run q is staged by invocation RPR·r + q, weight
// row r's (of each gate) by the same invocation where r < BN.
const uint RPR = BK / 8u;
shared vec4 xs[BK][BM / 4u + 1u];     // xs[kk][i] = x rows 4i..4i+3 at column k0 + kk (padded: fewer bank conflicts)
shared vec4 ws[G][BK][BN / 4u + 1u];  // the same for weight rows (gate and up)
#if KG > 1
shared vec4 partial[G][BM][BN / 4u];  // a group's sums, added into group 0's
#endif
#if NORM
shared float sum_sq_part[BM][RPR];  // [row][q]: x² summed by the invocation staging run q of the row
#endif

// Values k .. k + 7 of row t of x (0 past row m or column K).
void load_x8(uint t, uint k, uint m, inout float sum_sq, out float v[8]) {
  [[unroll]] for (uint h = 0u; h < 2u; ++h) {
    vec4 q = staged_x4(t, k + 4u * h, m, sum_sq);
    v[4u * h] = q.x; v[4u * h + 1u] = q.y; v[4u * h + 2u] = q.z; v[4u * h + 3u] = q.w;
  }
}

void main() {
  uint lid = gl_LocalInvocationID.x;
  // This invocation's rows 4tm.., columns 4tn.. of the tile, and its group kg (columns kg + KG·i
  // of each slice).
  uint tn = lid % (BN / 4u), tm = (lid / (BN / 4u)) % 16u, kg = lid / (4u * BN);
  uint tok0, m, col0 = gl_WorkGroupID.x * BN;
  if (!tile_rows(BM, tok0, m)) return;  // uniform across the workgroup

  vec4 acc[G][4];  // acc[g][i][j]: row 4tm + i, column 4tn + j
  [[unroll]] for (uint g = 0u; g < G; ++g)
    [[unroll]] for (uint i = 0u; i < 4u; ++i) acc[g][i] = vec4(0.0);

  uint q = lid % RPR, r = lid / RPR;
  bool stages_x = r < BM, stages_w = r < BN, live = col0 + r < N;
  uint w_row = w_row0() + min(col0 + r, N - 1u);  // the weight row this invocation stages
  float sum_sq = 0.0;
  float xv[8], wv[G][8];
  if (stages_x) load_x8(tok0 + r, 8u * q, m, sum_sq, xv);
  if (stages_w) {
    [[unroll]] for (uint g = 0u; g < G; ++g) w_slice8(w_row + g * N, 8u * q, wv[g]);
  }
  for (uint k0 = 0u; k0 < K; k0 += BK) {
    barrier();  // the previous round's products have read xs and ws
    if (stages_x) {
      [[unroll]] for (uint e = 0u; e < 8u; ++e) xs[8u * q + e][r / 4u][r % 4u] = xv[e];
    }
    if (stages_w) {
      [[unroll]] for (uint e = 0u; e < 8u; ++e) {
        [[unroll]] for (uint g = 0u; g < G; ++g) ws[g][8u * q + e][r / 4u][r % 4u] = live ? wv[g][e] : 0.0;
      }
    }
    barrier();
    // The next slice, read while this one's products run (the last round reads its own again, and
    // counts nothing).
    bool more = k0 + BK < K;
    uint next = more ? k0 + BK : k0;
    if (stages_x) {
      float s = 0.0;
      load_x8(tok0 + r, next + 8u * q, m, s, xv);
      sum_sq += more ? s : 0.0;
    }
    if (stages_w) {
      [[unroll]] for (uint g = 0u; g < G; ++g) w_slice8(w_row + g * N, next + 8u * q, wv[g]);
    }
    [[unroll]] for (uint i = 0u; i < BK / KG; ++i) {
      uint kk = kg + KG * i;
      vec4 a = xs[kk][tm];
      [[unroll]] for (uint g = 0u; g < G; ++g) {
        vec4 b = ws[g][kk][tn];
        acc[g][0] += a.x * b;
        acc[g][1] += a.y * b;
        acc[g][2] += a.z * b;
        acc[g][3] += a.w * b;
      }
    }
  }
#if KG > 1
  // Groups 1 .. KG - 1 add their sums into group 0's, one at a time.
  for (uint from = 1u; from < KG; ++from) {
    if (kg == from) {
      [[unroll]] for (uint g = 0u; g < G; ++g)
        [[unroll]] for (uint i = 0u; i < 4u; ++i) partial[g][4u * tm + i][tn] = acc[g][i];
    }
    barrier();
    if (kg == 0u) {
      [[unroll]] for (uint g = 0u; g < G; ++g)
        [[unroll]] for (uint i = 0u; i < 4u; ++i) acc[g][i] += partial[g][4u * tm + i][tn];
    }
    barrier();
  }
#endif
  float scale[4] = float[4](1.0, 1.0, 1.0, 1.0);
#if NORM
  if (stages_x) sum_sq_part[r][q] = sum_sq;
  barrier();
  [[unroll]] for (uint i = 0u; i < 4u; ++i) {
    float total = 0.0;
    [[unroll]] for (uint p = 0u; p < RPR; ++p) total += sum_sq_part[4u * tm + i][p];
    scale[i] = norm_scale(total);
  }
#endif
  if (kg != 0u) return;
  [[unroll]] for (uint i = 0u; i < 4u; ++i) {
    uint t = tok0 + 4u * tm + i;
    [[unroll]] for (uint j = 0u; j < 4u; ++j) {
      uint c = col0 + 4u * tn + j;
      if (t < m && c < N) store(t, c, acc[0][i][j] * scale[i], acc[G - 1u][i][j] * scale[i]);
    }
  }
}
)",
                                                                                                  {{"NORM", s.norm ? "1" : "0"},
                                                                                                   {"BN", absl::StrCat(bn)},
                                                                                                   {"BK", absl::StrCat(bk)},
                                                                                                   {"KG", absl::StrCat(64 / bn)}}));
  k.groups = {CeilDiv(s.n, bn), RowTiles(s, 64), 1};
  return k;
}

}  // namespace doppler::codegen
