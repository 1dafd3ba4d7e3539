// The cooperative-matrix variant for a few rows of x (at most kCoopRowsMaxRows: FM fragments of 16
// rows of x, rows from m on counting as zero), for batched decode, where each weight is used by so few rows that the kernel
// must stream the weights at the memory's bandwidth (codegen/tuning/coop_rows.h chooses its shape).
// A workgroup of SUBGROUPS subgroups computes BN columns of y; its subgroups form
// SUBGROUPS / KSPLIT column groups of F fragments (16 columns, G weight rows each), and the KSPLIT
// subgroups of a group take every KSPLIT-th BK-wide slice of K between them (of the workgroup's
// share of K, where KGROUPS workgroups split it too: subgroup kc of workgroup kq takes slices
// KSPLIT · kq + kc, each KGROUPS · KSPLIT-th from there). Each subgroup stages
// its slice of x (16 · FM rows) and of its weight rows (decoded eight values at a time into f16
// pairs, K in w_slice_halves' staged order for both, each weight
// value by exactly one subgroup) in a shared-memory region of its own as f16, so that the K loop
// waits only on subgroup barriers, and multiplies 16 × 16 × 16 fragments into f32 accumulators,
// each fragment of x feeding G · F products and each of the weights FM. Small workgroups of few registers keep many of them
// resident a multiprocessor, their weight loads in flight together. At the end the K split's
// partial fragments are summed through shared memory, a fragment at a time, each invocation then
// applying the epilogue to single values; or, where workgroups split K, writing them to the
// dispatch's scratch, whence the last of a block's workgroups to finish adds them up in their order
// and applies the epilogue. Where the config reads ahead, a subgroup loads its next slice's words
// into registers, undecoded, before the current one's products are issued, so that the loads'
// latency is spent multiplying (nothing waits on them until the slice is staged).
//
// With a norm prologue, x is multiplied by the norm weight as it is staged, and each row's sum of
// squares, gathered by the lanes that stage the row in each subgroup of the K split, scales the
// row's results.
//
// Where the config says so (x_direct), x is not staged: each subgroup reads its slice of x from
// x's buffer straight into f32 fragments (read ahead with the weights) and converts them to f16;
// the weights are then staged in K's own order, and times a norm prologue's weight, and the rows'
// sums of squares come from the fragments' squares, summed through the region at the end. With
// x8, x's rows (at most 8) are the columns of 16 × 8 fragments (K × rows), staged or read, and each
// product is transposed: a 16 × 16 fragment of weight rows times x, into 16 × 8 results (weight
// rows × rows of x).
//
// With w_direct (a device whose fragments keep the mma layout: backend_vk/coop_layout.h) nothing
// is staged: the products are transposed (x's fragments 16 × 8 with x8, else 16 × 16), each lane
// decodes the weight values its fragments' elements hold and reads x's likewise, with K in an
// order of the kernel's own within each 32 values (the same for both operands) that makes a
// lane's elements one w_slice of each of its two weight rows and one 4-value load of each of its
// rows of x. Shared memory then serves the K split's sums only.
#include "absl/strings/str_cat.h"
#include "codegen/glsl_common.h"
#include "codegen/matmul.h"
#include "codegen/tuning/coop_rows.h"
#include "codegen/weight_parts.h"

namespace doppler::codegen {
namespace {

// The K loop of w_direct (nothing staged): declarations, fetch, decode, k_loop and rows_squares.
constexpr const char* kDirectGlsl = R"(// Lane 4·g8 + t4 holds element e of a 16 × C fragment at row g8 + 8·⌊e / (C/4)⌋, column
// 2·t4 + e % 2 + 8·(⌊e/2⌋ % (C/8)) (the mma layout). Within each 32 values of K both operands take
// K in this order: x's row of K r < 8 at step s (of two, 16 values each) is value 4r + 2s, and row
// r + 8 the next, so that a lane's x elements at both steps are one 4-value load (values 4·g8 ..)
// of each of its rows of x, and its weight elements the 8 values 8·t4 .. of each of its two weight
// rows (g8 and g8 + 8), one w_slice each, whose f16 pairs (0, 2), (1, 3), (4, 6), (5, 7) give the
// elements' pairs (0, 4) and (1, 5) at step 0, (2, 6) and (3, 7) at step 1.
const uint REGION = G * 128u;  // a result fragment a gate, for the K split's sums
shared uvec2 stage[SUBGROUPS * REGION];
const uint RUNS = BK / 32u;        // 32 values of K a round
const uint XL = FRAG_ROWS / 4u;    // rows of x a lane holds in a fragment: x_row(i, q), q < XL
uint g8, t4;
WSlice wv[G][F][2][RUNS];          // run t4 of the lane's weight rows g8 and g8 + 8 of each fragment
XVEC4 xq[RUNS][FM][XL];            // x's 4 values at 4·g8 of its rows, as stored
#if NORM
vec4 nq[RUNS];                     // the norm weight there
float sum_sq[FM][XL];
#endif
fcoopmatNV<16, gl_ScopeSubgroup, 16, 16> wf[G][F][RUNS][2];  // the round's weight fragments
XFRAG(16) xf[RUNS][2][FM];                                     // and x's
uint w_row(uint g, uint j, uint h) { return min(col0 + cc * F * 16u + 16u * j + g8 + 8u * h, N - 1u) + g * N; }
uint x_row(uint i, uint q) { return FRAG_ROWS * i + 2u * t4 + (q & 1u) + 8u * (q >> 1); }

// Loads the round at kb into registers, as read (past K: the first round again, never decoded).
// Where a weight format pairs 32-value sub-blocks in shared words (RUN_PAIRS), an odd run's slices
// take the even run's (w_slice_pair), loading only the words they do not share (kb is a multiple
// of 64 wherever a round has two runs or more).
void fetch(uint kb) {
  uint at = kb < K ? kb : 0u;
  [[unroll]] for (uint r = 0u; r < RUNS; ++r) {
    uint kx = at + 32u * r + 4u * g8;
    [[unroll]] for (uint i = 0u; i < FM; ++i)
      [[unroll]] for (uint q = 0u; q < XL; ++q) xq[r][i][q] = x_fetch4(x_row(i, q), kx, m);
#if NORM
    nq[r] = kx < K ? norm_weight4(kx) : vec4(0.0);
#endif
    [[unroll]] for (uint g = 0u; g < G; ++g)
      [[unroll]] for (uint j = 0u; j < F; ++j)
        [[unroll]] for (uint h = 0u; h < 2u; ++h) {
          uint row = w_row(g, j, h), k = slice_k(at + 32u * r + 8u * t4);
#if RUN_PAIRS
          wv[g][j][h][r] = (r & 1u) == 1u ? w_slice_pair(wv[g][j][h][r - 1u], row, k) : w_slice_load(row, k);
#else
          wv[g][j][h][r] = w_slice_load(row, k);
#endif
        }
  }
}

// Decodes the registers, the round at kb, into the fragments (x times the norm weight, its squares
// summed; a weight run past K as zeros).
void decode(uint kb) {
  [[unroll]] for (uint r = 0u; r < RUNS; ++r) {
    [[unroll]] for (uint i = 0u; i < FM; ++i) {
      [[unroll]] for (uint q = 0u; q < XL; ++q) {
        XVEC4 v = xq[r][i][q];
#if NORM
        sum_sq[i][q] += dot(v, v);
        v *= nq[r];
#endif
        [[unroll]] for (uint s = 0u; s < 2u; ++s) {
          xf[r][s][i][q] = float16_t(v[2u * s]);            // row of K g8
          xf[r][s][i][XL + q] = float16_t(v[2u * s + 1u]);  // g8 + 8
        }
      }
    }
    uint k = kb + 32u * r + 8u * t4;
    [[unroll]] for (uint g = 0u; g < G; ++g) {
      [[unroll]] for (uint j = 0u; j < F; ++j) {
        uvec4 h0 = k < K ? w_slice_halves(wv[g][j][0][r], w_row(g, j, 0u), slice_k(k)) : uvec4(0u);
        uvec4 h1 = k < K ? w_slice_halves(wv[g][j][1][r], w_row(g, j, 1u), slice_k(k)) : uvec4(0u);
        // Step 0 takes the pairs' low halves, step 1 their high ones.
        uvec4 lo = uvec4((h0.x & 0xFFFFu) | (h0.z << 16), (h0.y & 0xFFFFu) | (h0.w << 16), (h1.x & 0xFFFFu) | (h1.z << 16),
                         (h1.y & 0xFFFFu) | (h1.w << 16));
        uvec4 hi = uvec4((h0.x >> 16) | (h0.z & 0xFFFF0000u), (h0.y >> 16) | (h0.w & 0xFFFF0000u), (h1.x >> 16) | (h1.z & 0xFFFF0000u),
                         (h1.y >> 16) | (h1.w & 0xFFFF0000u));
        [[unroll]] for (uint e = 0u; e < 4u; ++e) {
          f16vec2 p0 = unpackFloat2x16(lo[e]), p1 = unpackFloat2x16(hi[e]);
          wf[g][j][r][0][2u * e] = p0.x;
          wf[g][j][r][0][2u * e + 1u] = p0.y;
          wf[g][j][r][1][2u * e] = p1.x;
          wf[g][j][r][1][2u * e + 1u] = p1.y;
        }
      }
    }
  }
}

// The subgroup's share of K, into acc.
void k_loop() {
  g8 = lane >> 2;
  t4 = lane & 3u;
#if NORM
  [[unroll]] for (uint i = 0u; i < FM; ++i)
    [[unroll]] for (uint q = 0u; q < XL; ++q) sum_sq[i][q] = 0.0;
#endif
#if PREFETCH
  fetch(kfirst);
#endif
  for (uint kb = kfirst; kb < K; kb += KSTEP) {
#if PREFETCH
    decode(kb);
    fetch(kb + KSTEP);  // in flight while this round's products run
#else
    fetch(kb);
    decode(kb);
#endif
    [[unroll]] for (uint r = 0u; r < RUNS; ++r)
      [[unroll]] for (uint s = 0u; s < 2u; ++s)
        [[unroll]] for (uint g = 0u; g < G; ++g)
          [[unroll]] for (uint j = 0u; j < F; ++j)
            [[unroll]] for (uint i = 0u; i < FM; ++i) acc[g][i][j] = coopMatMulAddNV(wf[g][j][r][s], xf[r][s][i], acc[g][i][j]);
  }
}

#if NORM
// Each row of x's sum of squares over the subgroup's share of K (the lanes of a t4 hold a row's
// values between them), into row_part.
void rows_squares() {
  [[unroll]] for (uint i = 0u; i < FM; ++i) {
    [[unroll]] for (uint q = 0u; q < XL; ++q) {
      float total = sum_sq[i][q];
      [[unroll]] for (uint o = 4u; o < 32u; o <<= 1) total += subgroupShuffleXor(total, o);
      if (g8 == 0u) row_part[sg * XROWS + x_row(i, q)] = total;
    }
  }
}
#endif)";

}  // namespace

absl::StatusOr<Kernel> EmitCoopRows(const EmitContext& c, const MatMulSpec& s) {
  absl::StatusOr<tuning::CoopRowsConfig> config =
      tuning::ChooseCoopRows(c.caps, s.m, s.k, s.n, s.gates, s.x_whole, s.norm, s.w_dtype);
  if (!config.ok()) return config.status();
  if (s.tail >= 0 || s.restate >= 0) {
    return absl::InvalidArgumentError("the cooperative-matrix rows variant computes no row-wide op beside its product");
  }
  const tuning::CoopRowsConfig& t = *config;
  const int64_t blocks = CeilDiv(s.n, tuning::CoopRowsColumns(t));  // of columns
  Kernel k;
  const bool run_pairs = t.run_pairs && SliceWordsPairSubBlocks(s.w_dtype);
  k.variant = absl::StrCat("coop_rows.", graph::Name(s.w_dtype), ".sg", t.subgroups, ".ks", t.ksplit, ".f", t.frags,
                           ".k", t.bk, t.kgroups > 1 ? absl::StrCat(".kg", t.kgroups) : "", t.prefetch ? ".pf" : "",
                           t.x_frags > 1 ? absl::StrCat(".x", t.x_frags) : "", t.x8 ? ".x8" : "", t.x_direct ? ".xd" : "",
                           t.w_direct ? ".wd" : "", run_pairs ? ".rp" : "", s.variant_suffix);
  k.glsl = absl::StrCat(CoopMatMulHeader(static_cast<uint32_t>(32 * t.subgroups)), s.io_glsl, s.tile_x_glsl,
                        WeightSlices(3, s.w_dtype, s.k, /*halves=*/true), CoopStagingGlsl(), "\n",
                        Fill(R"(
#define NORM {{NORM}}
#define PREFETCH {{PREFETCH}}
#define X_DIRECT {{X_DIRECT}}
#define X8 {{X8}}
#define W_DIRECT {{W_DIRECT}}
#define RUN_PAIRS {{RUN_PAIRS}}
// The products transposed (weight rows × x): results stored as rows of x.
#define TRANSPOSED (X8 == 1 || W_DIRECT == 1)
const uint SUBGROUPS = {{SUBGROUPS}}u, KSPLIT = {{KSPLIT}}u, F = {{F}}u, BK = {{BK}}u;
#define KGROUPS {{KGROUPS}}
// A subgroup's rounds of K: every KSTEP-th BK values from kfirst, the workgroup's KGROUPS-th share
// of K split again among its KSPLIT subgroups of a column group.
const uint KSTEP = KGROUPS * KSPLIT * BK;
const uint STRIDE = BK + 8u;  // padded rows: 16 bytes apart in banks
const uint BN = (SUBGROUPS / KSPLIT) * F * 16u;  // the workgroup's columns
const uint WSL = F * 16u * BK / 8u / 32u;  // weight slices of 8 values a lane stages, a gate
const uint FM = {{FM}}u;  // x's fragments
#if X8
// x's fragments are K × 8 (its rows as columns); the products' results weight rows × rows of x.
#define XFRAG(bits) fcoopmatNV<bits, gl_ScopeSubgroup, 16, 8>
const uint FRAG_ROWS = 8u;
#else
// (Transposed with w_direct: x's fragments K × 16, its rows as columns.)
#define XFRAG(bits) fcoopmatNV<bits, gl_ScopeSubgroup, 16, 16>
const uint FRAG_ROWS = 16u;
#endif
const uint XROWS = FRAG_ROWS * FM, RESULT_FLOATS = 16u * FRAG_ROWS;  // x's rows; a result fragment's values
uint m, lane, sg, kc, cc, block, kq, col0, kfirst, base;
XFRAG(32) acc[G][FM][F];  // the subgroup's partial results: weight rows × rows of x where TRANSPOSED
shared float row_part[SUBGROUPS * XROWS];  // each subgroup's sums of squares of the rows' values
#if KGROUPS > 1
// The dispatch's scratch: a counter a block of columns (its workgroups that finished; the last one
// sets it back to zero), each workgroup's rows' sums of squares and its sums, each gate's rows of N.
const uint BLOCKS = {{BLOCKS}}u, BUCKET = {{BUCKET}}u;
layout(std430, set = 0, binding = {{SCRATCH}}) coherent buffer Buf_split { uint done[BLOCKS]; float sq[KGROUPS * BUCKET]; float part[]; } split;
uint split_at(uint q, uint g, uint r, uint col) { return ((q * G + g) * BUCKET + r) * N + col; }
{{LAST_ARRIVAL}}
#endif
#if W_DIRECT
{{DIRECT}}
#else
#if X_DIRECT
// x is read from its buffer straight into f32 fragments, which hold the bucket's rows (rows from m
// on, whatever they hold, reach only results never stored), with K in its own order: the weights
// are staged in it too, and times the norm weight (the rows' scale comes from the fragments'
// squares).
const uint XWORDS = 0u;
layout(std430, set = 0, binding = 2) readonly buffer Buf_xf { float x_floats[]; };  // x's binding, value by value
#else
// x: lane l stages values 4·(l % LPR).. of rows RPI·q + l / LPR, q < XI.
const uint LPR = BK / 4u, RPI = 32u / LPR, XI = XROWS / RPI;
// Of those, the ones that hold rows below the bucket's (the step's rows never exceed it); the
// rest hold rows past m only, zeroed once and never staged.
const uint XLIVE = min(XI, ({{BUCKET}}u + RPI - 1u) / RPI);
const uint XWORDS = XROWS * STRIDE / 4u;
#endif
// A subgroup's region: its XROWS rows of x where it stages them, then its weight rows (each gate's
// F · 16 in turn), as f16 bits four to a uvec2. After the K loop its start holds the subgroup's G
// partial result fragments.
const uint REGION = XWORDS + G * F * 16u * STRIDE / 4u;
shared uvec2 stage[SUBGROUPS * REGION];

// Slice sl (= l + 32·u for lane l) of gate g's weight rows: values 8·(sl % (BK / 8)).. of the
// subgroup's weight row sl / (BK / 8).
uint w_slice_row(uint g, uint sl) { return min(col0 + cc * F * 16u + sl / (BK / 8u), N - 1u) + g * N; }

#if X_DIRECT
XFRAG(32) xv[BK / 16u][FM];  // the slice's x, as read
XFRAG(16) xh[BK / 16u][FM];  // as f16, for the products
#if NORM
XFRAG(32) squares[FM];  // x's squares over the subgroup's slices
vec4 nv[2];  // the norm weight at the lane's 8 values of the slice (those of each of its slices)
#endif
// Four values from the staged order (0, 2, 1, 3) back to theirs.
uvec2 natural_halves(uvec2 h) { return uvec2((h.x & 0xFFFFu) | (h.y << 16), (h.x >> 16) | (h.y & 0xFFFF0000u)); }
#else
float sum_sq[XI];
vec4 xv[XLIVE];
uint x_row(uint q) { return RPI * q + lane / LPR; }
#endif

// Loads the slice at kb of x and of the subgroup's weight rows into registers, as read (past K:
// the first slice again, never staged).
WSlice wv[G][WSL];
void fetch(uint kb) {
  uint at = kb < K ? kb : 0u;
#if X_DIRECT
  // A fragment past K (K not a multiple of BK) is read at K − 16 instead, and multiplies zeros.
#if X8
  // Column r of the K × 8 fragment is row r of x: column-major with the row's stride.
  [[unroll]] for (uint f = 0u; f < BK / 16u; ++f) coopMatLoadNV(xv[f][0], x_floats, min(at + 16u * f, K - 16u), K, true);
#else
  [[unroll]] for (uint f = 0u; f < BK / 16u; ++f)
    [[unroll]] for (uint i = 0u; i < FM; ++i) coopMatLoadNV(xv[f][i], x_floats, 16u * i * K + min(at + 16u * f, K - 16u), K, false);
#endif
#if NORM
  uint kn = min(at + 8u * (lane % (BK / 8u)), K - 8u);
  nv[0] = norm_weight4(kn);
  nv[1] = norm_weight4(kn + 4u);
#endif
#else
  [[unroll]] for (uint q = 0u; q < XLIVE; ++q) xv[q] = x_load4(x_row(q), at + 4u * (lane % LPR), m);
#endif
  [[unroll]] for (uint g = 0u; g < G; ++g) {
    [[unroll]] for (uint u = 0u; u < WSL; ++u) {
      uint sl = lane + 32u * u;
      wv[g][u] = w_slice_load(w_slice_row(g, sl), slice_k(at + 8u * (sl % (BK / 8u))));
    }
  }
}

// Decodes the registers, the slice at kb, into the subgroup's region as f16 (x read into fragments:
// into f16 fragments, its squares summed).
void stage_slice(uint kb) {
#if X_DIRECT
  [[unroll]] for (uint f = 0u; f < BK / 16u; ++f) {
    [[unroll]] for (uint i = 0u; i < FM; ++i) {
      xh[f][i] = XFRAG(16)(xv[f][i]);
#if NORM
      if (kb + 16u * f < K) {
        for (int e = 0; e < squares[i].length(); ++e) squares[i][e] += xv[f][i][e] * xv[f][i][e];
      }
#endif
    }
  }
#else
  [[unroll]] for (uint q = 0u; q < XLIVE; ++q) {
    vec4 v = x_normed4(xv[q], kb + 4u * (lane % LPR), sum_sq[q]);
    stage[base + (x_row(q) * STRIDE + 4u * (lane % LPR)) / 4u] = x_halves(v);
  }
#endif
  [[unroll]] for (uint g = 0u; g < G; ++g) {
    [[unroll]] for (uint u = 0u; u < WSL; ++u) {
      uint sl = lane + 32u * u, wr = sl / (BK / 8u), e0 = 8u * (sl % (BK / 8u));
      bool live = col0 + cc * F * 16u + wr < N && kb + e0 < K;  // a slice past K (K not a multiple of BK) adds nothing
      uint at = base + XWORDS + ((g * F * 16u + wr) * STRIDE + e0) / 4u;
      uvec4 h = live ? w_slice_halves(wv[g][u], w_slice_row(g, sl), slice_k(kb + e0)) : uvec4(0u);
#if X_DIRECT
      h = uvec4(natural_halves(h.xy), natural_halves(h.zw));
#if NORM
      h = uvec4(packFloat2x16(unpackFloat2x16(h.x) * f16vec2(nv[0].xy)), packFloat2x16(unpackFloat2x16(h.y) * f16vec2(nv[0].zw)),
                packFloat2x16(unpackFloat2x16(h.z) * f16vec2(nv[1].xy)), packFloat2x16(unpackFloat2x16(h.w) * f16vec2(nv[1].zw)));
#endif
#endif
      stage[at] = h.xy;
      stage[at + 1u] = h.zw;
    }
  }
}

// The subgroup's share of K, into acc.
void k_loop() {
#if X_DIRECT
#if NORM
  [[unroll]] for (uint i = 0u; i < FM; ++i) squares[i] = XFRAG(32)(0.0);
#endif
#else
  [[unroll]] for (uint q = 0u; q < XI; ++q) {
    sum_sq[q] = 0.0;
    if (q >= XLIVE) stage[base + (x_row(q) * STRIDE + 4u * (lane % LPR)) / 4u] = uvec2(0u);
  }
#endif

#if PREFETCH
  fetch(kfirst);
#endif
  for (uint kb = kfirst; kb < K; kb += KSTEP) {
    subgroupMemoryBarrierShared();
    subgroupBarrier();  // the previous round's products have read the region
#if PREFETCH
    stage_slice(kb);
    subgroupMemoryBarrierShared();
    subgroupBarrier();
    fetch(kb + KSTEP);  // in flight while this slice's products run
#else
    fetch(kb);
    stage_slice(kb);
    subgroupMemoryBarrierShared();
    subgroupBarrier();
#endif
    [[unroll]] for (uint ks = 0u; ks < BK; ks += 16u) {
      XFRAG(16) a[FM];
      [[unroll]] for (uint i = 0u; i < FM; ++i) {
#if X_DIRECT
        a[i] = xh[ks / 16u][i];
#elif X8
        // Column r of the K × 8 fragment is staged row r of x: column-major with the row's stride.
        coopMatLoadNV(a[i], stage, base + ks / 4u, STRIDE / 4u, true);
#else
        coopMatLoadNV(a[i], stage, base + (16u * i * STRIDE + ks) / 4u, STRIDE / 4u, false);
#endif
      }
      [[unroll]] for (uint g = 0u; g < G; ++g) {
        [[unroll]] for (uint j = 0u; j < F; ++j) {
          fcoopmatNV<16, gl_ScopeSubgroup, 16, 16> w;
#if X8
          // Weight rows are the rows of the 16 x K operand: row-major with the row's stride.
          coopMatLoadNV(w, stage, base + XWORDS + ((g * F + j) * 16u * STRIDE + ks) / 4u, STRIDE / 4u, false);
          acc[g][0][j] = coopMatMulAddNV(w, a[0], acc[g][0][j]);
#else
          // Weight rows are columns of the K x N operand: column-major with the row's stride.
          coopMatLoadNV(w, stage, base + XWORDS + ((g * F + j) * 16u * STRIDE + ks) / 4u, STRIDE / 4u, true);
          [[unroll]] for (uint i = 0u; i < FM; ++i) acc[g][i][j] = coopMatMulAddNV(a[i], w, acc[g][i][j]);
#endif
        }
      }
    }
  }
}

#if NORM
// Each row of x's sum of squares over the subgroup's share of K, into row_part.
void rows_squares() {
#if X_DIRECT
  // Each row's squares, summed over K's 16 values in the fragment through the subgroup's region
  // (a row of x is a row of the fragment, or with X8 a column, stored as a row): the subgroup's
  // share of the row's.
  [[unroll]] for (uint i = 0u; i < FM; ++i) {
    subgroupMemoryBarrierShared();
    subgroupBarrier();  // the products, or the previous fragment's sums, have read the region
    coopMatStoreNV(squares[i], stage, base, 8u, X8 == 1);
    subgroupMemoryBarrierShared();
    subgroupBarrier();
    if (lane < FRAG_ROWS) {
      float total = 0.0;
      [[unroll]] for (uint c = 0u; c < 8u; ++c) {
        uvec2 pair = stage[base + 8u * lane + c];
        total += uintBitsToFloat(pair.x) + uintBitsToFloat(pair.y);
      }
      row_part[sg * XROWS + 16u * i + lane] = total;
    }
  }
#else
  // Each row was staged by LPR neighbouring lanes: their sums are the subgroup's share of the row's.
  [[unroll]] for (uint q = 0u; q < XI; ++q) {
    float total = sum_sq[q];
    [[unroll]] for (uint o = 1u; o < LPR; o <<= 1) total += subgroupShuffleXor(total, o);
    if (lane % LPR == 0u) row_part[sg * XROWS + x_row(q)] = total;
  }
#endif
}
#endif
#endif

void main() {
  lane = gl_SubgroupInvocationID;
  sg = gl_SubgroupID;
  kc = sg % KSPLIT;  // this subgroup's share of the workgroup's K
  cc = sg / KSPLIT;  // its column group
  block = gl_WorkGroupID.x / KGROUPS;  // the workgroup's columns
  kq = gl_WorkGroupID.x % KGROUPS;     // and its share of K
  col0 = block * BN;
  kfirst = (kq * KSPLIT + kc) * BK;
  m = {{ROWS}};
  base = sg * REGION;

  [[unroll]] for (uint g = 0u; g < G; ++g)
    [[unroll]] for (uint i = 0u; i < FM; ++i)
      [[unroll]] for (uint j = 0u; j < F; ++j) acc[g][i][j] = XFRAG(32)(0.0);
  k_loop();
#if NORM
  rows_squares();
#endif
  // Fragment (i, j) of each gate: every subgroup stores its partial ones at the start of its region
  // (at most 256 floats, 128 words, row by row of x: transposed, a fragment's columns are stored
  // as rows); the group's KSPLIT subgroups then sum them, lane l of its subgroup kc taking elements
  // 32·kc + l + 32·KSPLIT·q.
  const uint group0 = cc * KSPLIT;
  [[unroll]] for (uint f = 0u; f < FM * F; ++f) {
    const uint i = f / F, j = f % F;
    barrier();  // every subgroup has left its K loop, or the previous fragment's sums are read
    [[unroll]] for (uint g = 0u; g < G; ++g) coopMatStoreNV(acc[g][i][j], stage, base + 128u * g, 8u, TRANSPOSED);
    barrier();
    [[unroll]] for (uint q = 0u; q < (RESULT_FLOATS / 32u + KSPLIT - 1u) / KSPLIT; ++q) {
      uint e = 32u * kc + lane + 32u * KSPLIT * q;
      if (e >= RESULT_FLOATS) break;
      float v[G];
      [[unroll]] for (uint g = 0u; g < G; ++g) {
        v[g] = 0.0;
        [[unroll]] for (uint p = 0u; p < KSPLIT; ++p) {
          uvec2 pair = stage[(group0 + p) * REGION + 128u * g + e / 2u];
          v[g] += uintBitsToFloat((e & 1u) == 0u ? pair.x : pair.y);
        }
      }
      uint r = 16u * i + e / 16u, col = col0 + cc * F * 16u + 16u * j + e % 16u;
#if NORM
      float total = 0.0;
      [[unroll]] for (uint p = 0u; p < KSPLIT; ++p) total += row_part[(group0 + p) * XROWS + r];
#endif
#if KGROUPS > 1
      // The workgroup's sums, and each row's sum of squares once, for the block's last workgroup.
      if (r < m && col < N) {
        [[unroll]] for (uint g = 0u; g < G; ++g) split.part[split_at(kq, g, r, col)] = v[g];
#if NORM
        if (cc == 0u && j == 0u && e % 16u == 0u) split.sq[kq * BUCKET + r] = total;
#endif
      }
#else
#if NORM
      float scale = norm_scale(total);
#else
      float scale = 1.0;
#endif
      if (r < m && col < N) store(r, col, v[0] * scale, v[G - 1u] * scale);
#endif
    }
  }
#if KGROUPS > 1
  // The block's last workgroup to finish adds up the workgroups' sums, in their order, and stores
  // them.
  if (last_arrival()) {  // uniform
    for (uint e = gl_LocalInvocationIndex; e < m * BN; e += SUBGROUPS * 32u) {
      uint r = e / BN, col = col0 + e % BN;
      if (col >= N) continue;
      float v[G];
      [[unroll]] for (uint g = 0u; g < G; ++g) {
        v[g] = 0.0;
        [[unroll]] for (uint p = 0u; p < KGROUPS; ++p) v[g] += split.part[split_at(p, g, r, col)];
      }
#if NORM
      float total = 0.0;
      [[unroll]] for (uint p = 0u; p < KGROUPS; ++p) total += split.sq[p * BUCKET + r];
      float scale = norm_scale(total);
#else
      float scale = 1.0;
#endif
      store(r, col, v[0] * scale, v[G - 1u] * scale);
    }
    if (gl_LocalInvocationIndex == 0u) split.done[block] = 0u;
  }
#endif
}
)",
                             {{"ROWS", s.rows_expr},
                              {"BUCKET", absl::StrCat(s.m)},
                              {"NORM", s.norm ? "1" : "0"},
                              {"FM", absl::StrCat(t.x_frags)},
                              {"PREFETCH", t.prefetch ? "1" : "0"},
                              {"X_DIRECT", t.x_direct ? "1" : "0"},
                              {"X8", t.x8 ? "1" : "0"},
                              {"W_DIRECT", t.w_direct ? "1" : "0"},
                              {"DIRECT", t.w_direct ? kDirectGlsl : ""},
                              {"RUN_PAIRS", run_pairs ? "1" : "0"},
                              {"SUBGROUPS", absl::StrCat(t.subgroups)},
                              {"KSPLIT", absl::StrCat(t.ksplit)},
                              {"F", absl::StrCat(t.frags)},
                              {"BK", absl::StrCat(t.bk)},
                              {"KGROUPS", absl::StrCat(t.kgroups)},
                              {"SCRATCH", absl::StrCat(s.scratch_binding)},
                              {"BLOCKS", absl::StrCat(blocks)},
                              {"LAST_ARRIVAL", t.kgroups > 1 ? LastArrivalGlsl("split.done[block]", "KGROUPS") : ""}}));
  k.groups = {static_cast<uint32_t>(blocks * t.kgroups), 1, 1};
  k.scratch_bytes = static_cast<uint64_t>(tuning::CoopRowsScratchBytes(t, s.m, s.n, s.gates));
  k.config = t;
  return k;
}

}  // namespace doppler::codegen
