// The tiled variant on NVIDIA's cooperative-matrix units (VK_NV_cooperative_matrix): a workgroup
// computes a BM-row × BN-column tile of y, each of its subgroups an SM × SN block of it (the shape
// is codegen/tuning/coop.h's). For each BK-wide slice of K it stages x's rows and the weight rows
// (decoded eight values at a time straight into f16 pairs, G per column; K in the staged order of
// WeightSlices' w_slice_halves, x's too) in shared memory as f16, so each weight is
// decoded once per BM rows of x; each subgroup then multiplies 16 × 16 × 16 fragments into f32
// accumulators, each fragment of x it loads feeding SN / 16 products and each of the weights SM /
// 16. Where the config reads ahead, the next slice is read into registers before the current one's
// products are issued, so that its loads are in flight while they run; otherwise each slice is
// read as it is staged, with fewer registers, so that a multiprocessor holds more workgroups whose
// products run meanwhile. The results go through shared memory once more, a fragment at a time, so
// that each invocation applies the epilogue to single values. Products are of f16-rounded x and
// weights, summed in f32.
//
// With a norm prologue, x is multiplied by the norm weight as it is staged, and each row's sum of
// squares, gathered by the lanes that stage the row, scales the row's results.
#include "absl/strings/str_cat.h"
#include "codegen/glsl_common.h"
#include "codegen/matmul.h"
#include "codegen/tuning/coop.h"
#include "codegen/weight_parts.h"

namespace doppler::codegen {

std::string CoopMatMulHeader(uint32_t invocations) {
  return absl::StrCat(ShaderHeader(invocations),
                      "#extension GL_NV_cooperative_matrix : enable\n"
                      "#extension GL_KHR_memory_scope_semantics : enable\n"
                      "#extension GL_EXT_shader_explicit_arithmetic_types_float16 : enable\n"
                      "#extension GL_KHR_shader_subgroup_basic : enable\n"
                      "#extension GL_KHR_shader_subgroup_arithmetic : enable\n"
                      "#extension GL_KHR_shader_subgroup_shuffle : enable\n");
}

std::string CoopStagingGlsl() {
  return "// Where a slice at column k is read: the row's last slice where K is a multiple of 8 (block\n"
         "// formats: so that a read past K stays within the row's blocks; the staging counts it as zeros);\n"
         "// float rows bounds-check their own.\n"
         "uint slice_k(uint k) { return K % 8u == 0u ? min(k, K - 8u) : k; }\n"
         "// Four values of x as f16 in the staged order (w_slice_halves': 0, 2, 1, 3).\n"
         "uvec2 x_halves(vec4 v) { return uvec2(packHalf2x16(v.xz), packHalf2x16(v.yw)); }";
}

absl::StatusOr<Kernel> EmitCoopGemm(const EmitContext& c, const MatMulSpec& s) {
  absl::StatusOr<tuning::CoopConfig> config =
      tuning::ChooseCoop(c.caps, TileShapeRows(s), s.k, s.n, s.gates, s.norm, s.level_n);
  if (!config.ok()) return config.status();
  const tuning::CoopConfig& t = *config;
  const int64_t subgroups = tuning::CoopSubgroups(t);
  Kernel k;
  k.config = *config;
  k.variant = absl::StrCat("coop.", graph::Name(s.w_dtype), ".tile", t.bm, "x", t.bn, ".sg", t.sm, "x", t.sn, ".k",
                           t.bk, t.prefetch ? "" : ".pf0", s.variant_suffix);
  k.glsl = absl::StrCat(CoopMatMulHeader(static_cast<uint32_t>(32 * subgroups)), s.tile_rows_glsl, s.io_glsl, s.tile_x_glsl,
                        WeightSlices(3, s.w_dtype, s.k, /*halves=*/true),
                        Fill(R"(
#define NORM {{NORM}}
#define PREFETCH {{PREFETCH}}
const uint BM = {{BM}}u, BN = {{BN}}u, BK = {{BK}}u, STRIDE = BK + 8u;  // padded rows: 16 bytes apart in banks
const uint SM = {{SM}}u, SN = {{SN}}u, FM = SM / 16u, FN = SN / 16u;  // a subgroup's block, in fragments
const uint SUBGROUPS = (BM / SM) * (BN / SN), WG = 32u * SUBGROUPS;  // of 32 (NVIDIA's fixed size)
const uint WSL = BN * BK / 8u / WG;  // weight slices of 8 values each invocation stages
// x: lane l of subgroup sg stages values 4·(l % LPR).. of rows sg + SUBGROUPS·(RPI·q + l / LPR),
// q < XI, so a load instruction reads RPI rows' BK consecutive values, in one 16-byte load per
// lane where K is a multiple of 4. (On the H100, against one value per lane and 16 loads for 16
// rows: Llama-3.2-1B pp512 32,048 -> 36,208 tok/s.)
const uint LPR = BK / 4u, RPI = 32u / LPR, XI = BM / (SUBGROUPS * RPI);
// x rows tok0 + r at columns k0 + kk as f16 bits, four to a uvec2 (element kk / 4 of row r), then
// the weight rows (gate block, then up block) the same way; a decoded slice of 8 is two 8-byte
// stores. After the last round the epilogue reuses the start for result fragments. (One buffer:
// with two, one barrier a round, the 8B's gated prefill kernel went to 255 registers and took 1.4
// times as long; bench/RESULTS.md, "nineteenth session".)
const uint XWORDS = BM * STRIDE / 4u;
shared uvec2 stage[XWORDS + G * BN * STRIDE / 4u];
shared float row_scale[BM];

uint tok0, col0, m, lane, sg;
float sum_sq[XI];
vec4 xv[XI];
uvec4 wv[G][WSL];  // decoded slices as f16 pairs

uint x_row(uint q) { return sg + SUBGROUPS * (RPI * q + lane / LPR); }
{{SLICE_K}}

// Reads the slice at kb into registers (past K: the first slice again, counting nothing), x
// normalised and the weights decoded as they arrive, so that the next staging only stores: decoding
// there, between the round's barriers where no products run, made Llama-3.1-8B's 512-token
// prefill 19% slower (bench/RESULTS.md, "nineteenth session").
void fetch(uint kb) {
  bool counts = kb < K;
  uint at = counts ? kb : 0u;
  [[unroll]] for (uint q = 0u; q < XI; ++q) {
    float s = 0.0;
    xv[q] = staged_x4(tok0 + x_row(q), at + 4u * (lane % LPR), m, s);
    sum_sq[q] += counts ? s : 0.0;
  }
  // Invocation i decodes values 8·(sl % (BK / 8)).. of row sl / (BK / 8), for sl = i + WG·u.
  [[unroll]] for (uint g = 0u; g < G; ++g) {
    [[unroll]] for (uint u = 0u; u < WSL; ++u) {
      uint sl = gl_LocalInvocationID.x + WG * u;
      uint row = w_row0() + min(col0 + sl / (BK / 8u), N - 1u) + g * N, k = slice_k(at + 8u * (sl % (BK / 8u)));
      wv[g][u] = w_slice_halves(w_slice_load(row, k), row, k);
    }
  }
}

// Stores the registers, the slice at kb, into shared memory as f16.
void stage_slice(uint kb) {
  [[unroll]] for (uint q = 0u; q < XI; ++q) {
    stage[(x_row(q) * STRIDE + 4u * (lane % LPR)) / 4u] = x_halves(xv[q]);
  }
  [[unroll]] for (uint g = 0u; g < G; ++g) {
    [[unroll]] for (uint u = 0u; u < WSL; ++u) {
      uint sl = gl_LocalInvocationID.x + WG * u, wr = sl / (BK / 8u), e0 = 8u * (sl % (BK / 8u));
      bool live = col0 + wr < N && kb + e0 < K;  // a slice past K (K not a multiple of BK) adds nothing
      uint at = XWORDS + ((g * BN + wr) * STRIDE + e0) / 4u;
      uvec4 h = live ? wv[g][u] : uvec4(0u);
      stage[at] = h.xy;
      stage[at + 1u] = h.zw;
    }
  }
}

void main() {
  lane = gl_SubgroupInvocationID;
  sg = gl_SubgroupID;
  col0 = gl_WorkGroupID.x * BN;
  if (!tile_rows(BM, tok0, m)) return;  // uniform across the workgroup
  uint wm = sg / (BN / SN), wn = sg % (BN / SN);  // this subgroup's block of the tile

  fcoopmatNV<32, gl_ScopeSubgroup, 16, 16> acc[G][FM][FN];
  [[unroll]] for (uint g = 0u; g < G; ++g)
    [[unroll]] for (uint i = 0u; i < FM; ++i)
      [[unroll]] for (uint j = 0u; j < FN; ++j) acc[g][i][j] = fcoopmatNV<32, gl_ScopeSubgroup, 16, 16>(0.0);

  [[unroll]] for (uint q = 0u; q < XI; ++q) sum_sq[q] = 0.0;
#if PREFETCH
  fetch(0u);
#endif
  for (uint k0 = 0u; k0 < K; k0 += BK) {
#if PREFETCH
    barrier();  // the previous round's products have read the slice
    stage_slice(k0);
    barrier();
    fetch(k0 + BK);  // read while this slice's products run
#else
    barrier();
    fetch(k0);  // other workgroups' products run meanwhile
    stage_slice(k0);
    barrier();
#endif
    [[unroll]] for (uint ks = 0u; ks < BK; ks += 16u) {
      fcoopmatNV<16, gl_ScopeSubgroup, 16, 16> a[FM];
      [[unroll]] for (uint i = 0u; i < FM; ++i) {
        coopMatLoadNV(a[i], stage, ((wm * SM + 16u * i) * STRIDE + ks) / 4u, STRIDE / 4u, false);
      }
      [[unroll]] for (uint g = 0u; g < G; ++g) {
        [[unroll]] for (uint j = 0u; j < FN; ++j) {
          fcoopmatNV<16, gl_ScopeSubgroup, 16, 16> w;
          // Weight rows are columns of the K x N operand: column-major with the row's stride.
          coopMatLoadNV(w, stage, XWORDS + ((g * BN + wn * SN + 16u * j) * STRIDE + ks) / 4u, STRIDE / 4u, true);
          [[unroll]] for (uint i = 0u; i < FM; ++i) acc[g][i][j] = coopMatMulAddNV(a[i], w, acc[g][i][j]);
        }
      }
    }
  }
#if NORM
  // Each row was staged by LPR neighbouring lanes of one subgroup: their sums are the row's.
  [[unroll]] for (uint q = 0u; q < XI; ++q) {
    float total = sum_sq[q];
    [[unroll]] for (uint o = 1u; o < LPR; o <<= 1) total += subgroupShuffleXor(total, o);
    if (lane % LPR == 0u) row_scale[x_row(q)] = norm_scale(total);
  }
#endif
  barrier();  // every subgroup's products have read the slice; the row scales are written
  // Fragment (i, j) of each gate in turn, through the subgroup's 256 floats (128 words) at the start
  // of the staged slice: lane l takes elements l + 32·q.
  const uint slot = sg * 128u;
  [[unroll]] for (uint i = 0u; i < FM; ++i) {
    [[unroll]] for (uint j = 0u; j < FN; ++j) {
      float vals[G][8];
      [[unroll]] for (uint g = 0u; g < G; ++g) {
        coopMatStoreNV(acc[g][i][j], stage, slot, 8u, false);
        subgroupMemoryBarrierShared();
        subgroupBarrier();
        [[unroll]] for (uint q = 0u; q < 8u; ++q) {
          uvec2 pair = stage[slot + (lane + 32u * q) / 2u];
          vals[g][q] = uintBitsToFloat((lane & 1u) == 0u ? pair.x : pair.y);
        }
        subgroupMemoryBarrierShared();
        subgroupBarrier();
      }
      [[unroll]] for (uint q = 0u; q < 8u; ++q) {
        uint e = lane + 32u * q;
        uint r = wm * SM + 16u * i + e / 16u;
        uint t = tok0 + r, col = col0 + wn * SN + 16u * j + e % 16u;
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
                             {{"SLICE_K", CoopStagingGlsl()},
                              {"NORM", s.norm ? "1" : "0"},
                              {"PREFETCH", t.prefetch ? "1" : "0"},
                              {"BM", absl::StrCat(t.bm)},
                              {"BN", absl::StrCat(t.bn)},
                              {"BK", absl::StrCat(t.bk)},
                              {"SM", absl::StrCat(t.sm)},
                              {"SN", absl::StrCat(t.sn)}}));
  k.groups = {CeilDiv(s.n, t.bn), RowTiles(s, t.bm), 1};
  return k;
}

}  // namespace doppler::codegen
