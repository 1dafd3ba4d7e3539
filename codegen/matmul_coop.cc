// The tiled variant on NVIDIA's cooperative-matrix units (VK_NV_cooperative_matrix): a workgroup
// computes a BM-row × 64-column tile of y (BM = 128 with eight subgroups, or 64 with four where
// the grid of 128-row tiles would be small), each subgroup a 32 × 32 block of it. For each
// BK-wide slice of K (64 where shared memory has room, else 32) it stages x's rows and the weight rows (decoded eight values at a time, G per
// column) in shared memory as f16, so each weight is decoded once per BM rows of x (each slice
// read into registers while the previous one's products run); each subgroup then multiplies
// 16 × 16 × 16 fragments into f32 accumulators. The results go through shared memory once more so
// that each invocation applies the epilogue to single values.
// Products are of f16-rounded x and weights, summed in f32.
//
// With a norm prologue, x is multiplied by the norm weight as it is staged, and each row's sum of
// squares, gathered by the subgroup that stages the row, scales the row's results.
#include "absl/strings/str_cat.h"
#include "codegen/glsl_common.h"
#include "codegen/matmul.h"
#include "codegen/weight_parts.h"

namespace doppler::codegen {

namespace {
// Tiles of 128 rows where the grid has at least this many of them (about one per multiprocessor of
// a large GPU); 64 otherwise, with half the subgroups, so that narrow matrices (a value
// projection, 512 columns) still fill it. On the H100, Llama-3.2-1B's v projection (32 tall
// tiles) took 85 µs with tall tiles and 71 µs with short ones, its output and down projections
// (128) 81 and 285 µs with tall ones, 88 and 310 µs with short ones.
constexpr int64_t kMinTallTiles = 128;
// K-slices of 64 (where they fit in shared memory) for grids of at most this many subgroups (about
// 8 per multiprocessor of a large GPU), 32 for larger ones. A small grid is bound by the latency of
// each round of staging, barriers and products, which longer slices halve; a large one has other
// workgroups to hide it and loses occupancy to the larger slices. On the H100 (prefill of 512
// tokens): Llama-3.2-1B's Q4_K output and down projections (1,024 subgroups) 157 -> 138 µs on
// average, its Q6_K down projections 303 -> 264 µs, Gemma-3-1B's (576) 97 -> 90 and 252 -> 224 µs; with 64 for larger grids too,
// Llama-3.2-1B's q/k projection (1,280) 134 -> 143 µs and Llama-3.1-8B's output projection
// (2,048) 414 -> 445 µs.
constexpr int64_t kMaxSubgroupsForLongSlices = 1024;

// Shared memory of a workgroup: x and weight slices as padded f16 rows, a result fragment per
// subgroup and gate, and the rows' norm scales.
int64_t SharedBytes(int64_t bm, int64_t bk, int64_t gates) {
  const int64_t stride = bk + 8;
  return 2 * (bm + gates * 64) * stride + 4 * (bm / 16) * gates * 256 + 4 * bm;
}
}  // namespace

absl::StatusOr<Kernel> EmitCoopGemm(const EmitContext& c, const MatMulSpec& s) {
  const int64_t bm = int64_t{CeilDiv(s.n, 64)} * CeilDiv(s.m, 128) >= kMinTallTiles ? 128 : 64;
  const int64_t subgroups = bm / 16;  // 32 x 32 of the tile each, as bm / 32 (rows) x 2 (columns)
  const int64_t grid_subgroups = int64_t{CeilDiv(s.n, 64)} * CeilDiv(s.m, bm) * subgroups;
  const int64_t bk =
      grid_subgroups <= kMaxSubgroupsForLongSlices && SharedBytes(bm, 64, s.gates) <= c.caps.max_shared_memory ? 64
                                                                                                                : 32;
  Kernel k;
  k.variant = absl::StrCat("coop.", graph::Name(s.w_dtype), ".tile", bm, "x64.k", bk, s.variant_suffix);
  k.glsl = absl::StrCat(ShaderHeader(static_cast<uint32_t>(32 * subgroups)),
                        "#extension GL_NV_cooperative_matrix : enable\n"
                        "#extension GL_KHR_memory_scope_semantics : enable\n"
                        "#extension GL_EXT_shader_explicit_arithmetic_types_float16 : enable\n"
                        "#extension GL_KHR_shader_subgroup_basic : enable\n"
                        "#extension GL_KHR_shader_subgroup_arithmetic : enable\n",
                        s.io_glsl, s.tile_x_glsl, FloatBuffer(3, "w", s.w_dtype, true),
                        WeightSlices(s.w_dtype, s.k),
                        Fill(R"(
#define NORM {{NORM}}
const uint BM = {{BM}}u, BN = 64u, BK = {{BK}}u, STRIDE = BK + 8u;  // padded rows: 16 bytes apart in banks
const uint XV = BK / 32u;  // x values per row each lane stages
const uint SUBGROUPS = {{SUBGROUPS}}u, WG = 32u * SUBGROUPS;  // of 32 (NVIDIA's fixed size)
const uint WSL = BN * BK / 8u / WG;  // weight slices of 8 values each invocation stages
shared float16_t xs[BM * STRIDE];      // xs[r * STRIDE + kk]: x row tok0 + r at column k0 + kk
// The same for weight rows (gate block, then up block), as f16 bits four to a uvec2: a decoded
// slice of 8 is two 8-byte stores.
shared uvec2 ws4[G * BN * STRIDE / 4u];
shared float outs[SUBGROUPS * G * 256u];  // per subgroup, one 16 x 16 result fragment per gate
shared float row_scale[BM];

void main() {
  uint lid = gl_LocalInvocationID.x;
  uint sg = gl_SubgroupID;
  uint tok0 = gl_WorkGroupID.y * BM, col0 = gl_WorkGroupID.x * BN;
  uint m = {{ROWS}};
  if (tok0 >= m) return;  // uniform across the workgroup
  uint wm = sg >> 1, wn = sg & 1u;  // this subgroup's 32 x 32 of the tile

  fcoopmatNV<32, gl_ScopeSubgroup, 16, 16> acc[G][2][2];
  [[unroll]] for (uint g = 0u; g < G; ++g)
    [[unroll]] for (uint i = 0u; i < 2u; ++i)
      [[unroll]] for (uint j = 0u; j < 2u; ++j) acc[g][i][j] = fcoopmatNV<32, gl_ScopeSubgroup, 16, 16>(0.0);

  // Staging: row r of a slice of x is staged by subgroup r % SUBGROUPS, lane l taking its columns
  // XV·l.. (so a subgroup reads a row's BK consecutive values, and its lanes' sums of squares are
  // the row's). Weights: invocation lid decodes values 8·(sl % (BK / 8)).. of row sl / (BK / 8) of
  // the slice at once, for slices sl = lid + WG·u (BM / SUBGROUPS = 16 rows of x and WSL slices
  // each). A slice is read into
  // registers right after the previous one's products are issued, so its loads are in flight while
  // they run, and goes to shared memory at the top of the next round.
  float sum_sq[16];
  [[unroll]] for (uint q = 0u; q < 16u; ++q) sum_sq[q] = 0.0;
  uint kk = XV * gl_SubgroupInvocationID;
  float xv[16][XV], wv[G][WSL][8];
  for (uint k0 = 0u; k0 < K; k0 += BK) {
    if (k0 == 0u) {  // the first slice (later ones were read during the previous round)
      [[unroll]] for (uint q = 0u; q < 16u; ++q) {
        [[unroll]] for (uint v = 0u; v < XV; ++v) xv[q][v] = staged_x(tok0 + sg + SUBGROUPS * q, kk + v, m, sum_sq[q]);
      }
      [[unroll]] for (uint g = 0u; g < G; ++g) {
        [[unroll]] for (uint u = 0u; u < WSL; ++u) {
          uint sl = lid + WG * u;
          w_slice8(min(col0 + sl / (BK / 8u), N - 1u) + g * N, 8u * (sl % (BK / 8u)), wv[g][u]);
        }
      }
    }
    barrier();  // the previous round's products have read xs and ws
    [[unroll]] for (uint q = 0u; q < 16u; ++q) {
      [[unroll]] for (uint v = 0u; v < XV; ++v) xs[(sg + SUBGROUPS * q) * STRIDE + kk + v] = float16_t(xv[q][v]);
    }
    [[unroll]] for (uint g = 0u; g < G; ++g) {
      [[unroll]] for (uint u = 0u; u < WSL; ++u) {
        uint sl = lid + WG * u, wr = sl / (BK / 8u), e0 = 8u * (sl % (BK / 8u));
        bool live = col0 + wr < N;
        uint at = ((g * BN + wr) * STRIDE + e0) / 4u;
        [[unroll]] for (uint h = 0u; h < 2u; ++h) {
          vec4 v = live ? vec4(wv[g][u][4u * h], wv[g][u][4u * h + 1u], wv[g][u][4u * h + 2u], wv[g][u][4u * h + 3u])
                        : vec4(0.0);
          ws4[at + h] = uvec2(packHalf2x16(v.xy), packHalf2x16(v.zw));
        }
      }
    }
    barrier();
    [[unroll]] for (uint ks = 0u; ks < BK; ks += 16u) {
      fcoopmatNV<16, gl_ScopeSubgroup, 16, 16> a[2];
      [[unroll]] for (uint i = 0u; i < 2u; ++i) coopMatLoadNV(a[i], xs, (wm * 32u + 16u * i) * STRIDE + ks, STRIDE, false);
      [[unroll]] for (uint g = 0u; g < G; ++g) {
        [[unroll]] for (uint j = 0u; j < 2u; ++j) {
          fcoopmatNV<16, gl_ScopeSubgroup, 16, 16> b;
          // Weight rows are columns of the K x N operand: column-major with the row's stride.
          coopMatLoadNV(b, ws4, ((g * BN + wn * 32u + 16u * j) * STRIDE + ks) / 4u, STRIDE / 4u, true);
          [[unroll]] for (uint i = 0u; i < 2u; ++i) acc[g][i][j] = coopMatMulAddNV(a[i], b, acc[g][i][j]);
        }
      }
    }
    // The next slice (the last round reads its own again, and counts nothing).
    bool more = k0 + BK < K;
    uint next = more ? k0 + BK : k0;
    [[unroll]] for (uint q = 0u; q < 16u; ++q) {
      float s = 0.0;
      [[unroll]] for (uint v = 0u; v < XV; ++v) xv[q][v] = staged_x(tok0 + sg + SUBGROUPS * q, next + kk + v, m, s);
      sum_sq[q] += more ? s : 0.0;
    }
    [[unroll]] for (uint g = 0u; g < G; ++g) {
      [[unroll]] for (uint u = 0u; u < WSL; ++u) {
        uint sl = lid + WG * u;
        w_slice8(min(col0 + sl / (BK / 8u), N - 1u) + g * N, next + 8u * (sl % (BK / 8u)), wv[g][u]);
      }
    }
  }
#if NORM
  // Rows sg + SUBGROUPS·q were staged by this subgroup's 32 lanes: their sums are a subgroup's.
  [[unroll]] for (uint q = 0u; q < 16u; ++q) {
    float total = subgroupAdd(sum_sq[q]);
    if (gl_SubgroupInvocationID == 0u) row_scale[sg + SUBGROUPS * q] = norm_scale(total);
  }
  barrier();
#endif
  [[unroll]] for (uint i = 0u; i < 2u; ++i) {
    [[unroll]] for (uint j = 0u; j < 2u; ++j) {
      [[unroll]] for (uint g = 0u; g < G; ++g) coopMatStoreNV(acc[g][i][j], outs, (sg * G + g) * 256u, 16u, false);
      subgroupMemoryBarrierShared();
      subgroupBarrier();
      [[unroll]] for (uint q = 0u; q < 8u; ++q) {
        uint e = gl_SubgroupInvocationID + 32u * q;
        uint r = wm * 32u + 16u * i + e / 16u;
        uint t = tok0 + r, col = col0 + wn * 32u + 16u * j + e % 16u;
#if NORM
        float scale = row_scale[r];
#else
        float scale = 1.0;
#endif
        if (t < m && col < N) store(t, col, outs[sg * G * 256u + e] * scale, outs[(sg * G + G - 1u) * 256u + e] * scale);
      }
      subgroupMemoryBarrierShared();
      subgroupBarrier();
    }
  }
}
)",
                             {{"ROWS", s.rows_expr},
                              {"NORM", s.norm ? "1" : "0"},
                              {"BM", absl::StrCat(bm)},
                              {"BK", absl::StrCat(bk)},
                              {"SUBGROUPS", absl::StrCat(subgroups)}}));
  k.groups = {CeilDiv(s.n, 64), CeilDiv(s.m, bm), 1};
  return k;
}

}  // namespace doppler::codegen
