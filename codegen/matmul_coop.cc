// The tiled variant on NVIDIA's cooperative-matrix units (VK_NV_cooperative_matrix): a workgroup
// computes a BM-row × 64-column tile of y (BM = 128 with eight subgroups, or 64 with four where
// the grid of 128-row tiles would be small), each subgroup a 32 × 32 block of it. For each BK-wide
// slice of K (64 where shared memory has room, else 32) it stages x's rows and the weight rows
// (decoded eight values at a time, G per column) in shared memory as f16, so each weight is
// decoded once per BM rows of x; each subgroup then multiplies 16 × 16 × 16 fragments into f32
// accumulators. The next slice is read into registers before the current one's products are
// issued, so that its loads are in flight while they run. The results go through shared memory
// once more, a fragment at a time, so that each invocation applies the epilogue to single values.
// Products are of f16-rounded x and weights, summed in f32.
//
// With a norm prologue, x is multiplied by the norm weight as it is staged, and each row's sum of
// squares, gathered by the lanes that stage the row, scales the row's results.
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

// Shared memory of a workgroup: x and weight slices as padded f16 rows, a result fragment per
// subgroup, and the rows' norm scales.
int64_t SharedBytes(int64_t bm, int64_t bk, int64_t gates) {
  const int64_t stride = bk + 8;
  return 2 * (bm + gates * 64) * stride + 4 * (bm / 16) * 256 + 4 * bm;
}
}  // namespace

absl::StatusOr<Kernel> EmitCoopGemm(const EmitContext& c, const MatMulSpec& s) {
  const int64_t bm = int64_t{CeilDiv(s.n, 64)} * CeilDiv(s.m, 128) >= kMinTallTiles ? 128 : 64;
  const int64_t subgroups = bm / 16;  // 32 x 32 of the tile each, as bm / 32 (rows) x 2 (columns)
  // K-slices of 64 where they fit: each round of staging, barriers and products waits on the
  // latency of its loads, which longer slices halve. On the H100 (prefill of 512 tokens, x staged
  // in 16-byte loads), Llama-3.2-1B's gate and up projections took 413 µs with slices of 32 and 342
  // with 64; its q/k/v 116 and 111 µs.
  const int64_t bk = SharedBytes(bm, 64, s.gates) <= c.caps.max_shared_memory ? 64 : 32;
  Kernel k;
  k.variant = absl::StrCat("coop.", graph::Name(s.w_dtype), ".tile", bm, "x64.k", bk, s.variant_suffix);
  k.glsl = absl::StrCat(ShaderHeader(static_cast<uint32_t>(32 * subgroups)),
                        "#extension GL_NV_cooperative_matrix : enable\n"
                        "#extension GL_KHR_memory_scope_semantics : enable\n"
                        "#extension GL_EXT_shader_explicit_arithmetic_types_float16 : enable\n"
                        "#extension GL_KHR_shader_subgroup_basic : enable\n"
                        "#extension GL_KHR_shader_subgroup_arithmetic : enable\n"
                        "#extension GL_KHR_shader_subgroup_shuffle : enable\n",
                        s.io_glsl, s.tile_x_glsl, WeightSlices(3, s.w_dtype, s.k),
                        Fill(R"(
#define NORM {{NORM}}
const uint BM = {{BM}}u, BN = 64u, BK = {{BK}}u, STRIDE = BK + 8u;  // padded rows: 16 bytes apart in banks
const uint SUBGROUPS = {{SUBGROUPS}}u, WG = 32u * SUBGROUPS;  // of 32 (NVIDIA's fixed size)
const uint WSL = BN * BK / 8u / WG;  // weight slices of 8 values each invocation stages
// x: lane l of subgroup sg stages values 4·(l % LPR).. of rows sg + SUBGROUPS·(RPI·q + l / LPR),
// q < XI (16 rows a subgroup), so a load instruction reads RPI rows' BK consecutive values, in one
// 16-byte load per lane where K is a multiple of 4. (On the H100, against one value per lane and
// 16 loads for 16 rows: Llama-3.2-1B pp512 32,048 -> 36,208 tok/s.)
const uint LPR = BK / 4u, RPI = 32u / LPR, XI = 16u / RPI;
// x row tok0 + r at column k0 + kk as f16 bits, four to a uvec2 (element kk / 4 of row r).
shared uvec2 xs4[BM * STRIDE / 4u];
// The same for weight rows (gate block, then up block): a decoded slice of 8 is two 8-byte stores.
shared uvec2 ws4[G * BN * STRIDE / 4u];
shared float outs[SUBGROUPS * 256u];  // per subgroup, one 16 x 16 result fragment
shared float row_scale[BM];
// Where a slice at column k is read: past K (the last round of a K that is no multiple of BK), the
// row's last slice where K is a multiple of 8 (block formats: so the read stays within the row's
// blocks; the staging counts it as zeros); float rows bounds-check their own.
uint slice_k(uint k) { return K % 8u == 0u ? min(k, K - 8u) : k; }

void main() {
  uint lid = gl_LocalInvocationID.x;
  uint sg = gl_SubgroupID, lane = gl_SubgroupInvocationID;
  uint tok0 = gl_WorkGroupID.y * BM, col0 = gl_WorkGroupID.x * BN;
  uint m = {{ROWS}};
  if (tok0 >= m) return;  // uniform across the workgroup
  uint wm = sg >> 1, wn = sg & 1u;  // this subgroup's 32 x 32 of the tile

  fcoopmatNV<32, gl_ScopeSubgroup, 16, 16> acc[G][2][2];
  [[unroll]] for (uint g = 0u; g < G; ++g)
    [[unroll]] for (uint i = 0u; i < 2u; ++i)
      [[unroll]] for (uint j = 0u; j < 2u; ++j) acc[g][i][j] = fcoopmatNV<32, gl_ScopeSubgroup, 16, 16>(0.0);

  // Weights: invocation lid decodes values 8·(sl % (BK / 8)).. of row sl / (BK / 8) of the slice
  // at once, for slices sl = lid + WG·u (WSL each).
  float sum_sq[XI];
  [[unroll]] for (uint q = 0u; q < XI; ++q) sum_sq[q] = 0.0;
  uint kk = 4u * (lane % LPR);
  vec4 xv[XI];
  float wv[G][WSL][8];
  [[unroll]] for (uint q = 0u; q < XI; ++q) xv[q] = staged_x4(tok0 + sg + SUBGROUPS * (RPI * q + lane / LPR), kk, m, sum_sq[q]);
  [[unroll]] for (uint g = 0u; g < G; ++g) {
    [[unroll]] for (uint u = 0u; u < WSL; ++u) {
      uint sl = lid + WG * u;
      w_slice8(min(col0 + sl / (BK / 8u), N - 1u) + g * N, slice_k(8u * (sl % (BK / 8u))), wv[g][u]);
    }
  }
  for (uint k0 = 0u; k0 < K; k0 += BK) {
    barrier();  // the previous round's products have read xs4 and ws4
    [[unroll]] for (uint q = 0u; q < XI; ++q) {
      xs4[((sg + SUBGROUPS * (RPI * q + lane / LPR)) * STRIDE + kk) / 4u] = uvec2(packHalf2x16(xv[q].xy), packHalf2x16(xv[q].zw));
    }
    [[unroll]] for (uint g = 0u; g < G; ++g) {
      [[unroll]] for (uint u = 0u; u < WSL; ++u) {
        uint sl = lid + WG * u, wr = sl / (BK / 8u), e0 = 8u * (sl % (BK / 8u));
        bool live = col0 + wr < N && k0 + e0 < K;  // a slice past K (K not a multiple of BK) adds nothing
        uint at = ((g * BN + wr) * STRIDE + e0) / 4u;
        [[unroll]] for (uint h = 0u; h < 2u; ++h) {
          vec4 v = live ? vec4(wv[g][u][4u * h], wv[g][u][4u * h + 1u], wv[g][u][4u * h + 2u], wv[g][u][4u * h + 3u])
                        : vec4(0.0);
          ws4[at + h] = uvec2(packHalf2x16(v.xy), packHalf2x16(v.zw));
        }
      }
    }
    barrier();
    // The next slice, read while this one's products run (the last round reads its own again, and
    // counts nothing).
    bool more = k0 + BK < K;
    uint next = more ? k0 + BK : k0;
    [[unroll]] for (uint q = 0u; q < XI; ++q) {
      float s = 0.0;
      xv[q] = staged_x4(tok0 + sg + SUBGROUPS * (RPI * q + lane / LPR), next + kk, m, s);
      sum_sq[q] += more ? s : 0.0;
    }
    [[unroll]] for (uint g = 0u; g < G; ++g) {
      [[unroll]] for (uint u = 0u; u < WSL; ++u) {
        uint sl = lid + WG * u;
        w_slice8(min(col0 + sl / (BK / 8u), N - 1u) + g * N, slice_k(next + 8u * (sl % (BK / 8u))), wv[g][u]);
      }
    }
    [[unroll]] for (uint ks = 0u; ks < BK; ks += 16u) {
      fcoopmatNV<16, gl_ScopeSubgroup, 16, 16> a[2];
      [[unroll]] for (uint i = 0u; i < 2u; ++i) coopMatLoadNV(a[i], xs4, ((wm * 32u + 16u * i) * STRIDE + ks) / 4u, STRIDE / 4u, false);
      [[unroll]] for (uint g = 0u; g < G; ++g) {
        [[unroll]] for (uint j = 0u; j < 2u; ++j) {
          fcoopmatNV<16, gl_ScopeSubgroup, 16, 16> b;
          // Weight rows are columns of the K x N operand: column-major with the row's stride.
          coopMatLoadNV(b, ws4, ((g * BN + wn * 32u + 16u * j) * STRIDE + ks) / 4u, STRIDE / 4u, true);
          [[unroll]] for (uint i = 0u; i < 2u; ++i) acc[g][i][j] = coopMatMulAddNV(a[i], b, acc[g][i][j]);
        }
      }
    }
  }
#if NORM
  // Each row was staged by LPR neighbouring lanes of one subgroup: their sums are the row's.
  [[unroll]] for (uint q = 0u; q < XI; ++q) {
    float total = sum_sq[q];
    [[unroll]] for (uint o = 1u; o < LPR; o <<= 1) total += subgroupShuffleXor(total, o);
    if (lane % LPR == 0u) row_scale[sg + SUBGROUPS * (RPI * q + lane / LPR)] = norm_scale(total);
  }
  barrier();
#endif
  [[unroll]] for (uint i = 0u; i < 2u; ++i) {
    [[unroll]] for (uint j = 0u; j < 2u; ++j) {
      // Fragment (i, j) of each gate in turn, through the subgroup's slot: lane l takes elements
      // l + 32·q.
      float vals[G][8];
      [[unroll]] for (uint g = 0u; g < G; ++g) {
        coopMatStoreNV(acc[g][i][j], outs, sg * 256u, 16u, false);
        subgroupMemoryBarrierShared();
        subgroupBarrier();
        [[unroll]] for (uint q = 0u; q < 8u; ++q) vals[g][q] = outs[sg * 256u + lane + 32u * q];
        subgroupMemoryBarrierShared();
        subgroupBarrier();
      }
      [[unroll]] for (uint q = 0u; q < 8u; ++q) {
        uint e = lane + 32u * q;
        uint r = wm * 32u + 16u * i + e / 16u;
        uint t = tok0 + r, col = col0 + wn * 32u + 16u * j + e % 16u;
#if NORM
        float scale = row_scale[r];
#else
        float scale = 1.0;
#endif
        if (t < m && col < N) store(t, col, vals[0][q] * scale, vals[G - 1u][q] * scale);
      }
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
