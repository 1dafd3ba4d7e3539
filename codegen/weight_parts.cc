#include "codegen/weight_parts.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "codegen/device_layout.h"
#include "codegen/glsl_common.h"

namespace doppler::codegen {
namespace {

// `float unit_quant(uint v, int pos, int width)`: bits [pos, pos + width) of v as 1 + q / 2^width,
// exactly: the bits are moved to the top of the mantissa of 1.0 (a shift and a mask-or; no
// int-to-float conversion, which runs at a fraction of the float rate). A dot product then is
// Σ q·x = 2^width · (Σ unit·x − Σ x).
constexpr const char* kUnitQuant = R"(
float unit_quant(uint v, int pos, int width) {
  int sh = 23 - width - pos;
  uint bits = sh >= 0 ? v << uint(sh) : v >> uint(-sh);
  return uintBitsToFloat((bits & (((1u << uint(width)) - 1u) << uint(23 - width))) | 0x3F800000u);
}
)";

// `float byte_unit(uint v, int pos)`: byte [pos, pos + 8) of v, a value b < 128, as 0.5 + b / 256:
// the byte becomes bits 16-23 of a float whose top byte is 0x3F (one byte permute where the GPU
// has one). Σ b·x = 256 · (Σ unit·x − Σ x / 2). (Against unit_quant's shift, mask and or, Q4_K
// decode of Llama-3.1-8B on the H100: 209 -> 215 tok/s.)
constexpr const char* kByteUnit = R"(
float byte_unit(uint v, int pos) { return uintBitsToFloat((((v >> uint(pos)) << 16) & 0x00FF0000u) | 0x3F000000u); }
)";

// Q4_K and Q5_K: the 6-bit scales and mins of sub-blocks 2c and 2c + 1 (c = 0..3) from the 12
// scale bytes at block byte 4, held in three words s, as (scale 2c, scale 2c + 1, min 2c, min 2c + 1)
// (llama.cpp's get_scale_min_k4 layout: sub-blocks 0..3 keep 6 bits in bytes 0..3 (scales) and 4..7
// (mins); 4..7 their low 4 bits in the nibbles of bytes 8..11 and their top 2 bits in the top bits
// of bytes 0..7). Both sub-blocks' bytes are taken at once, and become floats through the mantissa
// of 2^23: int-to-float conversions run at a fraction of the float rate.
constexpr const char* kScalePairK4 = R"(
vec4 k4_scale_pair(uvec3 s, uint c) {
  uint sh = (c & 1u) * 16u;
  uint a = s.x >> sh, b = s.y >> sh, e = s.z >> sh;
  uint sc = c < 2u ? a & 0x3F3Fu : (e & 0x0F0Fu) | ((a >> 2) & 0x3030u);
  uint mn = c < 2u ? b & 0x3F3Fu : ((e >> 4) & 0x0F0Fu) | ((b >> 2) & 0x3030u);
  return uintBitsToFloat(uvec4(sc & 255u, sc >> 8, mn & 255u, mn >> 8) | 0x4B000000u) - 8388608.0;
}
)";

// Q4_K (144-byte blocks: f16 d, f16 dmin, scales[12], qs[128]) and Q5_K (176 bytes: the same
// header, qh[32], qs[128]), both whole 16-byte vectors. Part q (0..15) of a block takes words
// lq = q % 4 and lq + 4 of 32-byte chunk c = q / 4 of qs: their low nibbles are values
// 64c + 4·lq + 0..3 and 64c + 16 + 4·lq + 0..3 of sub-block 2c (run 0), their high nibbles the same
// offsets + 32 of sub-block 2c + 1 (run 1). So the four invocations on a chunk read x in runs of
// 64 contiguous bytes: whole 32-byte sectors (two words side by side would leave each invocation's
// x 16 bytes of every 32 apart, twice the sectors). The block header is one 16-byte load. Q5_K's
// fifth bit of value l of sub-block j is bit j of qh[l]. (Parts of 32 values measured slower on
// the H100: 654 against 772 tok/s for Llama-3.2-1B.)
// A Q4_K (9) or Q5_K (11) block's 16-byte vectors, and the first of its quants' (after the header
// and Q5_K's qh).
uint32_t KBlockVecs(bool five) { return five ? 11 : 9; }
uint32_t KQuantVec(bool five) { return five ? 3 : 1; }

std::string KQuant4or5(uint32_t binding, bool five) {
  return Fill(R"(
layout(std430, set = 0, binding = {{BINDING}}) readonly buffer Buf_w { uvec4 w4[]; };
const uint ROW_VECS = ROW_BYTES / 16u, PV = 16u, RUNS = 2u;
struct WPart { uvec4 head; uint qs[2];{{QH_FIELD}} };
uint w_part_k(uint p, uint i) {
  uint q = p & 15u;
  return (p >> 4) * 256u + 64u * (q >> 2) + 4u * (q & 3u) + (i & 3u) + 16u * (i >> 2);
}
WPart w_load(uint row, uint p) {
  uint b = row * ROW_VECS + (p >> 4) * {{BLOCK_VECS}}u;
  uint q = p & 15u, c = q >> 2, lq = q & 3u;
  WPart r;
  r.head = w4[b];
  r.qs[0] = w4[b + {{QS_VEC}}u + 2u * c][lq];
  r.qs[1] = w4[b + {{QS_VEC}}u + 2u * c + 1u][lq];
{{QH_LOAD}}  return r;
}
float w_dot(WPart w, uint p, float xv[PV], float xrun[RUNS]) {
  uint c = (p & 15u) >> 2;
  vec2 dm = unpackHalf2x16(w.head.x);
  vec4 sm = k4_scale_pair(w.head.yzw, c);
  float lo = 0.0, hi = 0.0;
  [[unroll]] for (uint i = 0u; i < 8u; ++i) {
    uint word = w.qs[i >> 2];
    int at = int(8u * (i & 3u));
{{QS_UNITS}}    lo += u_lo * xv[i];
    hi += u_hi * xv[i + 8u];
  }
{{RUN_DOTS}}  return dm.x * (sm.x * qx_lo + sm.y * qx_hi) - dm.y * (sm.z * xrun[0] + sm.w * xrun[1]);
}
)",
              {{"BINDING", absl::StrCat(binding)},
               {"BLOCK_VECS", absl::StrCat(KBlockVecs(five))},
               {"QS_VEC", absl::StrCat(KQuantVec(five))},
               {"QH_FIELD", five ? " uint qh[2];" : ""},
               {"QH_LOAD", five ? "  r.qh[0] = w4[b + 1u][lq]; r.qh[1] = w4[b + 2u][lq];\n" : ""},
               {"QS_UNITS",
                five ? "    uint h = w.qh[i >> 2] >> uint(at);\n"
                       "    float u_lo = unit_quant((((word >> uint(at)) & 15u) | (((h >> (2u * c)) & 1u) << 4)), 0, 5);\n"
                       "    float u_hi = unit_quant((((word >> uint(at + 4)) & 15u) | (((h >> (2u * c + 1u)) & 1u) << 4)), 0, 5);\n"
                     : "    float u_lo = byte_unit(word & 0x0F0F0F0Fu, at), u_hi = byte_unit((word >> 4) & 0x0F0F0F0Fu, at);\n"},
               {"RUN_DOTS", five ? "  float qx_lo = 32.0 * (lo - xrun[0]), qx_hi = 32.0 * (hi - xrun[1]);\n"
                                 : "  float qx_lo = 256.0 * (lo - 0.5 * xrun[0]), qx_hi = 256.0 * (hi - 0.5 * xrun[1]);\n"}});
}

// Against x in q8 blocks, where a value costs little, a part is a whole 32-byte chunk c of qs
// (two 16-byte loads): 64 values, x's blocks 2c (low nibbles) and 2c + 1 (high nibbles), whose
// scales are decoded once for all 64. x is staged in its own order.
std::string KQuant4or5Q8(bool five) {
  return Fill(R"(
const uint PV8 = 64u, RUNS8 = 2u;
struct WPart8 { uvec4 head; uvec4 qs[2];{{QH_FIELD}} };
WPart8 w_load8(uint row, uint p) {
  uint b = row * ROW_VECS + (p >> 2) * {{BLOCK_VECS}}u;
  uint c = p & 3u;
  WPart8 r;
  r.head = w4[b];
  r.qs[0] = w4[b + {{QS_VEC}}u + 2u * c];
  r.qs[1] = w4[b + {{QS_VEC}}u + 2u * c + 1u];
{{QH_LOAD}}  return r;
}
uint run_k(uint p, uint r) { return p * 64u + r * 32u; }
uint x_slot(uint k) { return k >> 2; }
float w_dot_q8(WPart8 w, uint p, uvec4 xw[PV8 / 16u], float xd[RUNS8], float xrun[RUNS8]) {
  uint c = p & 3u;
  vec2 dm = unpackHalf2x16(w.head.x);
  vec4 sm = k4_scale_pair(w.head.yzw, c);
  int lo = 0, hi = 0;
  [[unroll]] for (uint j = 0u; j < 8u; ++j) {
    uint q = w.qs[j >> 2][j & 3u];
    uint l4 = q & 0x0F0F0F0Fu, h4 = (q >> 4) & 0x0F0F0F0Fu;
{{FIFTH_BITS}}    lo += sdot4(l4, xw[j >> 2][j & 3u]);
    hi += sdot4(h4, xw[2u + (j >> 2)][j & 3u]);
  }
  return dm.x * (sm.x * xd[0] * i2f(lo) + sm.y * xd[1] * i2f(hi)) - dm.y * (sm.z * xrun[0] + sm.w * xrun[1]);
}
)",
              {{"BLOCK_VECS", absl::StrCat(KBlockVecs(five))},
               {"QS_VEC", absl::StrCat(KQuantVec(five))},
               {"QH_FIELD", five ? " uvec4 qh[2];" : ""},
               {"QH_LOAD", five ? "  r.qh[0] = w4[b + 1u];\n  r.qh[1] = w4[b + 2u];\n" : ""},
               {"FIFTH_BITS",
                five ? "    uint h = w.qh[j >> 2][j & 3u];\n"
                       "    l4 |= ((h >> (2u * c)) & 0x01010101u) << 4;\n"
                       "    h4 |= ((h >> (2u * c + 1u)) & 0x01010101u) << 4;\n"
                     : ""}});
}

// Q6_K (210-byte blocks: ql[128], qh[64], int8 scales[16], f16 d; on the device in split rows,
// codegen/device_layout.h). Value 128n + 32k + l (n half, k quarter, l 0..31) is the low (k < 2)
// or high nibble of ql[64n + 32(k & 1) + l], plus bits 2k, 2k + 1 of qh[32n + l] as bits 4-5, minus
// 32, times d · scales[(128n + 32k + l) / 16]. Part q (0..15) of a block is n = q / 8 and
// l = 4·(q % 8) + 0..3 for all four k (run k): three words of quants, the 8 scale bytes of half n
// (the part's four are every other one), and d. Run k's four 6-bit quants are assembled in the
// bytes of one word (mask, shift, or), then each becomes a float through byte_unit; the int8
// scales through the mantissa of 2^23.
constexpr const char* kQ6K = R"(
const uint PV = 16u, RUNS = 4u;
struct WPart { uint ql[2]; uint qh; uint sc[2]; float d; };
uint w_part_k(uint p, uint i) {
  uint q = p & 15u;
  return (p >> 4) * 256u + 128u * (q >> 3) + 32u * (i >> 2) + 4u * (q & 7u) + (i & 3u);
}
WPart w_load(uint row, uint p) {
  uint base = row * ROW_BYTES, b = p >> 4, qs = (base + b * 192u) >> 2, sc = (base + SC_AT + b * 16u) >> 2;
  uint q = p & 15u, n = q >> 3, lq = q & 7u;
  WPart r;
  r.ql[0] = w_word(qs + 16u * n + lq);
  r.ql[1] = w_word(qs + 16u * n + 8u + lq);
  r.qh = w_word(qs + 32u + 8u * n + lq);
  r.sc[0] = w_word(sc + 2u * n);
  r.sc[1] = w_word(sc + 2u * n + 1u);
  r.d = w_half(base + D_AT + b * 2u);
  return r;
}
// Run k's four 6-bit quants (0..63), one a byte.
uint q6_run(WPart w, uint k) {
  uint lo = (k < 2u ? w.ql[k & 1u] : w.ql[k & 1u] >> 4) & 0x0F0F0F0Fu;
  uint hi = (k < 2u ? w.qh << (4u - 2u * k) : w.qh >> (2u * k - 4u)) & 0x30303030u;
  return lo | hi;
}
// Run k's int8 scale: the part's scales are bytes odd, odd + 2, ... of the 8.
float q6_scale(WPart w, uint p, uint k) {
  uint odd = (p & 7u) >> 2;
  return uintBitsToFloat(((w.sc[k >> 1] >> (8u * (odd + 2u * (k & 1u)))) & 255u) ^ 0x4B000080u) - 8388736.0;
}
float w_dot(WPart w, uint p, float xv[PV], float xrun[RUNS]) {
  float total = 0.0;
  [[unroll]] for (uint k = 0u; k < 4u; ++k) {
    uint q6 = q6_run(w, k);
    float s = 0.0;
    [[unroll]] for (uint e = 0u; e < 4u; ++e) s += byte_unit(q6, int(8u * e)) * xv[4u * k + e];
    // Σ (q − 32)·x = 256 · (Σ unit·x − Σ x / 2) − 32 · Σ x
    total += q6_scale(w, p, k) * (256.0 * s - 160.0 * xrun[k]);
  }
  return w.d * total;
}
)";

// Q6_K against x in q8 blocks: a part is (half n, l in 16h .. 16h + 15) for all four quarters k:
// 64 values, four runs of 16 (run k, half of x's block 4n + k), read as 16 bytes of ql from each
// of its two 32-byte halves and 16 bytes of qh (three 16-byte loads, split rows keeping a block's
// quants in whole vectors), the half's 8 scale bytes and d (as words: a wider load than needed
// holds more registers while in flight). x is staged by part: run k's four words after one
// another.
constexpr const char* kQ6KQ8 = R"(
const uint PV8 = 64u, RUNS8 = 4u;
struct WPart8 { uvec4 ql[2]; uvec4 qh; uint sc[2]; float d; };
WPart8 w_load8(uint row, uint p) {
  uint base = row * ROW_BYTES, b = p >> 2, qs = (base + b * 192u) >> 4;  // in vectors
  uint n = (p >> 1) & 1u, h = p & 1u;
  WPart8 r;
  r.ql[0] = w4[qs + 4u * n + h];
  r.ql[1] = w4[qs + 4u * n + 2u + h];
  r.qh = w4[qs + 8u + 2u * n + h];
  uint sc = (base + SC_AT + b * 16u) >> 2;
  r.sc[0] = w_word(sc + 2u * n);
  r.sc[1] = w_word(sc + 2u * n + 1u);
  r.d = w_half(base + D_AT + b * 2u);
  return r;
}
uint run_k(uint p, uint r) { return (p >> 2) * 256u + ((p >> 1) & 1u) * 128u + r * 32u + (p & 1u) * 16u; }
uint x_slot(uint k) {
  uint v = k & 255u, l = v & 31u;
  return (((k >> 8) * 4u + (v >> 7) * 2u + (l >> 4)) * 4u + ((v >> 5) & 3u)) * 4u + ((l & 15u) >> 2);
}
float w_dot_q8(WPart8 w, uint p, uvec4 xw[PV8 / 16u], float xd[RUNS8], float xrun[RUNS8]) {
  uint h = p & 1u;
  float total = 0.0;
  [[unroll]] for (uint k = 0u; k < 4u; ++k) {
    int dot = 0;
    [[unroll]] for (uint j = 0u; j < 4u; ++j) {
      uint lo = (k < 2u ? w.ql[k & 1u][j] : w.ql[k & 1u][j] >> 4) & 0x0F0F0F0Fu;
      uint hi = ((w.qh[j] >> (2u * k)) & 0x03030303u) << 4;
      dot += sdot4(lo | hi, xw[k][j]);
    }
    // Scale byte 2k + h of the half's 8, an int8.
    float sc = uintBitsToFloat(((w.sc[k >> 1] >> (8u * (2u * (k & 1u) + h))) & 255u) ^ 0x4B000080u) - 8388736.0;
    total += sc * (xd[k] * i2f(dot) - 32.0 * xrun[k]);  // Σ (q − 32)·x
  }
  return w.d * total;
}
)";

// Q8_0 (34-byte blocks: f16 d, int8 qs[32]; on the device 36, the quants from byte 4): part q
// (0..3) of a block is values 4q + 0..3 and 16 + 4q + 0..3, so the invocations on a block read x
// in 64 contiguous bytes (as Q4_K's parts).
// The signed bytes are read with their sign bit flipped (q + 128, as an 8-bit unit). (A whole
// block per part, nine aligned words, measured slower on the H100: Gemma-3-1B 462 against 575.)
constexpr const char* kQ8_0 = R"(
const uint PV = 8u, RUNS = 1u;
struct WPart { uint q[2]; float d; };
uint w_part_k(uint p, uint i) { return (p >> 2) * 32u + 4u * (p & 3u) + (i & 3u) + 16u * (i >> 2); }
WPart w_load(uint row, uint p) {
  uint base = (row * ROW_BYTES + (p >> 2) * {{Q8_0_BLOCK}}u) >> 2;  // in words
  uint qs = base + {{Q8_0_QS}}u / 4u + (p & 3u);
  WPart r;
  r.q[0] = w[qs];
  r.q[1] = w[qs + 4u];
  r.d = unpackHalf2x16(w[base]).x;
  return r;
}
float w_dot(WPart w, uint p, float xv[PV], float xrun[RUNS]) {
  float s = 0.0;
  [[unroll]] for (uint i = 0u; i < 8u; ++i) s += unit_quant(w.q[i >> 2] ^ 0x80808080u, int(8u * (i & 3u)), 8) * xv[i];
  // Σ q·x = 256 · (Σ unit·x − Σ x) − 128 · Σ x
  return w.d * (256.0 * s - 384.0 * xrun[0]);
}
)";

// Q8_0 against x in q8 blocks: a part is a whole block (32 values, eight words of quants), a dot
// product of signed bytes per word; x is staged in its own order. (Against half blocks, on the H100:
// Llama-3.2-1B in Q8_0 1,001 -> 1,054 tok/s, Gemma-3-1B 775 -> 772.)
constexpr const char* kQ8_0Q8 = R"(
const uint PV8 = 32u, RUNS8 = 1u;
struct WPart8 { uint q[8]; float d; };
WPart8 w_load8(uint row, uint p) {
  uint base = (row * ROW_BYTES + p * {{Q8_0_BLOCK}}u) >> 2;  // in words
  WPart8 r;
  [[unroll]] for (uint i = 0u; i < 8u; ++i) r.q[i] = w[base + {{Q8_0_QS}}u / 4u + i];
  r.d = unpackHalf2x16(w[base]).x;
  return r;
}
uint run_k(uint p, uint r) { return p * 32u; }
uint x_slot(uint k) { return k >> 2; }
float w_dot_q8(WPart8 w, uint p, uvec4 xw[PV8 / 16u], float xd[RUNS8], float xrun[RUNS8]) {
  int s = 0;
  [[unroll]] for (uint i = 0u; i < 8u; ++i) s += sdot4(w.q[i], xw[i >> 2][i & 3u]);
  return w.d * xd[0] * i2f(s);
}
)";

// Q5_0 (22-byte blocks: f16 d, qh[4], qs[16]; on the device in split rows, codegen/device_layout.h):
// value j < 16 of a block is the low nibble of qs[j], value j + 16 its high nibble, with bit j of
// the word qh as the fifth bit, minus 16. Four values' fifth bits (bits at .. at + 3 of qh) become
// one bit a byte through one multiply (bit i of b moves to bit 8i: b · (1 + 2^7 + 2^14 + 2^21),
// whose terms do not overlap). q5_fifth makes them 16 in each byte whose bit is set (or-ed with
// four nibbles: four quants q, 0..31), q5_signed makes four q − 16 as signed bytes (the nibble where
// the bit is set, the nibble − 16 where it is not), for exact integer dot products.
constexpr const char* kQ5_0Bits = R"(
uint q5_bits(uint qh, uint at) { return ((qh >> at) & 15u) * 0x00204081u & 0x01010101u; }
uint q5_fifth(uint qh, uint at) { return q5_bits(qh, at) << 4; }
uint q5_signed(uint nibbles, uint qh, uint at) { return nibbles | ((q5_bits(qh, at) ^ 0x01010101u) * 0xF0u); }
)";

// Against x as floats: part q (0..3) of a block is values 4q + 0..3 and 16 + 4q + 0..3 (as Q8_0's
// parts): word q of the block's nibbles, its fifth bits and d. Each value becomes a float through
// byte_unit.
constexpr const char* kQ5_0 = R"(
const uint PV = 8u, RUNS = 1u;
struct WPart { uint q; uint h; float d; };
uint w_part_k(uint p, uint i) { return (p >> 2) * 32u + 4u * (p & 3u) + (i & 3u) + 16u * (i >> 2); }
WPart w_load(uint row, uint p) {
  uint base = row * ROW_BYTES, b = p >> 2;
  WPart r;
  r.q = w_word(((base + b * 16u) >> 2) + (p & 3u));
  r.h = w_word((base + SC_AT + b * 4u) >> 2);
  r.d = w_half(base + D_AT + b * 2u);
  return r;
}
float w_dot(WPart w, uint p, float xv[PV], float xrun[RUNS]) {
  uint at = 4u * (p & 3u);
  uint lo = (w.q & 0x0F0F0F0Fu) | q5_fifth(w.h, at), hi = ((w.q >> 4) & 0x0F0F0F0Fu) | q5_fifth(w.h, at + 16u);
  float s = 0.0;
  [[unroll]] for (uint i = 0u; i < 4u; ++i) s += byte_unit(lo, int(8u * i)) * xv[i] + byte_unit(hi, int(8u * i)) * xv[i + 4u];
  // Σ (q − 16)·x = 256 · (Σ unit·x − Σ x / 2) − 16 · Σ x
  return w.d * (256.0 * s - 144.0 * xrun[0]);
}
)";

// Q5_0 against x in q8 blocks: a part is a whole block (32 values): its nibbles in one 16-byte
// load, its fifth bits and d; x is staged in its own order.
constexpr const char* kQ5_0Q8 = R"(
const uint PV8 = 32u, RUNS8 = 1u;
struct WPart8 { uvec4 qs; uint qh; float d; };
WPart8 w_load8(uint row, uint p) {
  uint base = row * ROW_BYTES;
  WPart8 r;
  r.qs = w4[(base + p * 16u) >> 4];
  r.qh = w_word((base + SC_AT + p * 4u) >> 2);
  r.d = w_half(base + D_AT + p * 2u);
  return r;
}
uint run_k(uint p, uint r) { return p * 32u; }
uint x_slot(uint k) { return k >> 2; }
float w_dot_q8(WPart8 w, uint p, uvec4 xw[PV8 / 16u], float xd[RUNS8], float xrun[RUNS8]) {
  int s = 0;
  [[unroll]] for (uint j = 0u; j < 4u; ++j) {
    s += sdot4(q5_signed(w.qs[j] & 0x0F0F0F0Fu, w.qh, 4u * j), xw[0][j]);
    s += sdot4(q5_signed((w.qs[j] >> 4) & 0x0F0F0F0Fu, w.qh, 16u + 4u * j), xw[1][j]);
  }
  return w.d * xd[0] * i2f(s);
}
)";

// PV consecutive values a part, each read through `float load_w(uint i)` (element i of the
// row-major matrix): plain floats, and block formats value by value.
std::string ElementParts(int64_t values, int64_t k) {
  return absl::StrCat("const uint PV = ", values, "u, RUNS = 1u, K_W = ", k, "u;\n", R"(struct WPart { float v[PV]; };
uint w_part_k(uint p, uint i) { return p * PV + i; }
WPart w_load(uint row, uint p) {
  WPart w;
  [[unroll]] for (uint i = 0u; i < PV; ++i) w.v[i] = load_w(row * K_W + p * PV + i);
  return w;
}
float w_dot(WPart w, uint p, float xv[PV], float xrun[RUNS]) {
  float s = 0.0;
  [[unroll]] for (uint i = 0u; i < PV; ++i) s += w.v[i] * xv[i];
  return s;
}
)");
}

// Plain floats (f32, f16, bf16) PV to a part, PV a whole number of words: the part's raw words
// in the widest loads they fill (uvec4: eight f16 values one 16-byte load, against four word
// loads), decoded in w_dot, so a part held in flight takes a register a word.
std::string FloatWordParts(uint32_t binding, graph::DType dtype, int64_t values, int64_t k) {
  const int64_t words = dtype == graph::DType::kF32 ? values : values / 2;
  const int64_t width = std::min<int64_t>(words, 4);
  const char* vec = width == 4 ? "uvec4" : width == 2 ? "uvec2" : "uint";
  const char* value = dtype == graph::DType::kF32   ? "uintBitsToFloat(w.q[i])"
                      : dtype == graph::DType::kF16 ? "unpackHalf2x16(w.q[i >> 1])[i & 1u]"
                                                    : "uintBitsToFloat((i & 1u) == 0u ? w.q[i >> 1] << 16 : w.q[i >> 1] & 0xFFFF0000u)";
  return Fill(R"(
layout(std430, set = 0, binding = {{BINDING}}) readonly buffer Buf_w { {{VEC}} w_vec[]; };
const uint PV = {{PV}}u, RUNS = 1u, K_W = {{K}}u, WORDS = {{WORDS}}u, WIDTH = {{WIDTH}}u;
struct WPart { uint q[WORDS]; };
uint w_part_k(uint p, uint i) { return p * PV + i; }
WPart w_load(uint row, uint p) {
  WPart w;
  // Values per load: PV / (WORDS / WIDTH); a part starts at a multiple of PV, so loads align.
  uint at = (row * K_W + p * PV) / (PV * WIDTH / WORDS);
  [[unroll]] for (uint j = 0u; j < WORDS / WIDTH; ++j) {
{{SPLIT}}  }
  return w;
}
float w_dot(WPart w, uint p, float xv[PV], float xrun[RUNS]) {
  float s = 0.0;
  [[unroll]] for (uint i = 0u; i < PV; ++i) s += {{VALUE}} * xv[i];
  return s;
}
)",
              {{"BINDING", absl::StrCat(binding)},
               {"VEC", vec},
               {"PV", absl::StrCat(values)},
               {"K", absl::StrCat(k)},
               {"WORDS", absl::StrCat(words)},
               {"WIDTH", absl::StrCat(width)},
               {"SPLIT", width == 1 ? "    w.q[j] = w_vec[at + j];\n"
                                    : absl::StrCat("    ", vec, " v = w_vec[at + j];\n",
                                                   "    [[unroll]] for (uint c = 0u; c < WIDTH; ++c) w.q[j * WIDTH + c] = v[c];\n")},
               {"VALUE", value}});
}

// The IQ4 grid in shared memory, for the q8 kernel, once for each byte of a word: entry 16i + n
// holds value n in byte i, so that four nibbles (one a byte) become their four values in four loads
// and three ors, against iq4_bytes' select and shifts a value with the grid in registers. A load's
// 16 entries lie in 16 banks, so a subgroup's loads never conflict (a 256-entry table of nibble
// pairs would halve the loads, but random bytes over 32 banks conflict about 3-way, costing more
// than the loads it saves). W_SHARED_INIT makes the kernel call w_shared_init() before the barrier
// that follows its staging of x, before any w_dot_q8.
constexpr int64_t kIQ4SharedBytes = 64 * 4;
constexpr const char* kIQ4SharedGrid = R"(
#define W_SHARED_INIT 1
shared uint iq4_grid[64];
void w_shared_init() {
  for (uint i = gl_LocalInvocationID.x; i < 64u; i += gl_WorkGroupSize.x) {
    iq4_grid[i] = iq4_byte_at(i & 15u) << (8u * (i >> 4));
  }
}
// iq4_bytes' result from the grid in shared memory (after the mask, byte i of `nibbles` is its nibble).
uint iq4_bytes_shared(uint nibbles) {
  return iq4_grid[nibbles & 255u] | iq4_grid[16u + ((nibbles >> 8) & 255u)] | iq4_grid[32u + ((nibbles >> 16) & 255u)] |
         iq4_grid[48u + (nibbles >> 24)];
}
// iq4_word's result from the grid in shared memory.
uvec2 iq4_word_shared(uint q) { return uvec2(iq4_bytes_shared(q & 0x0F0F0F0Fu), iq4_bytes_shared((q >> 4) & 0x0F0F0F0Fu)); }
)";

// The IQ4 grid as a table of nibble pairs, for the q8 kernel (Q8PartForm::iq4_pairs = R): entry e
// (a byte of quants, nibbles lo and hi) holds grid[lo] | grid[hi] << 8 in both halves of a word, so
// that a byte's two values take one shared-memory load (against two from the nibble grids) and two
// bytes' entries make a word of a dot product in one and-or. Those values are x's j and j + 16 of
// its block, so x is staged in pairs (WeightParts::q8_x_pairs): word 2i of a part is values 2i,
// 16 + 2i, 2i + 1, 17 + 2i. A subgroup's loads of random entries of one table conflict about 3-way
// over 32 banks; in R replicas (entry e of replica r at word e·R + r, invocation i reading replica
// i % R) about 2-way for R = 16 and not at all for R = 32 (1 KiB a replica). Invocations fill the
// table four consecutive words at a time (one entry's replicas where R >= 4).
int64_t IQ4PairBytes(int64_t replicas) { return 1024 * replicas; }
std::string IQ4PairTable(int64_t replicas) {
  int shift = 0;
  while ((int64_t{1} << shift) < replicas) ++shift;
  return Fill(R"(
#define W_SHARED_INIT 1
const uint IQ4_R = {{R}}u, IQ4_RS = {{RS}}u;
shared uint iq4_pairs[256u * IQ4_R];
uint iq4_pair_value(uint e) {
  return (iq4_byte_at(e & 15u) | (iq4_byte_at(e >> 4) << 8)) * 0x10001u;
}
void w_shared_init() {
  for (uint i = 4u * gl_LocalInvocationID.x; i < 256u * IQ4_R; i += 4u * gl_WorkGroupSize.x) {
{{FILL}}  }
}
// The word of byte b of q's entry in this invocation's replica.
uint iq4_pair_at(uint q, uint b) {
  uint e = b == 0u ? q << IQ4_RS : q >> (8u * b - IQ4_RS);
  return (e & (255u << IQ4_RS)) | (gl_LocalInvocationID.x & (IQ4_R - 1u));
}
// The grid values of a word of quants in x's pair order: (lo 0, hi 0, lo 1, hi 1), (lo 2, hi 2, lo 3, hi 3).
uvec2 iq4_word_pairs(uint q) {
  uint a = iq4_pairs[iq4_pair_at(q, 0u)], b = iq4_pairs[iq4_pair_at(q, 1u)];
  uint c = iq4_pairs[iq4_pair_at(q, 2u)], d = iq4_pairs[iq4_pair_at(q, 3u)];
  return uvec2((a & 0xFFFFu) | (b & 0xFFFF0000u), (c & 0xFFFFu) | (d & 0xFFFF0000u));
}
// x in pairs: quad j (0..7) of a block is written by its invocation as word 2(j % 4) + j / 4 of
// the block's part, from its own values and the quad's 16 values away.
uint x_slot(uint k) {
  uint j = (k >> 2) & 7u;
  return (k >> 5) * 8u + 2u * (j & 3u) + (j >> 2);
}
uint x_pair_word(uint own, uint other, bool second) {
  uint a = second ? other >> 16 : own, b = second ? own >> 16 : other;
  return (a & 0xFFu) | ((b & 0xFFu) << 8) | ((a & 0xFF00u) << 8) | ((b & 0xFF00u) << 16);
}
)",
              {{"R", absl::StrCat(replicas)},
               {"RS", absl::StrCat(shift)},
               {"FILL", replicas >= 4 ? "    uint v = iq4_pair_value(i >> IQ4_RS);\n"
                                        "    [[unroll]] for (uint c = 0u; c < 4u; ++c) iq4_pairs[i + c] = v;\n"
                                      : "    [[unroll]] for (uint c = 0u; c < 4u; ++c) iq4_pairs[i + c] = iq4_pair_value((i + c) >> IQ4_RS);\n"}});
}
// The sums of a word j of a part's quants in x's pair order.
constexpr const char* kIQ4PairDots =
    "    s += sdot4(lo, xw[j >> 1][(2u * j) & 3u]) + sdot4(hi, xw[j >> 1][(2u * j + 1u) & 3u]);\n";
// The same for word j of sub-block i of a part of IQ4_XS (kIQ4XSPartsQ8), x in pairs or in its own
// order.
constexpr const char* kIQ4XSPairDots =
    "      s += sdot4(g.x, xw[2u * i + (j >> 1)][(2u * j) & 3u]) + sdot4(g.y, xw[2u * i + (j >> 1)][(2u * j + 1u) & 3u]);\n";
constexpr const char* kIQ4XSGridDots = "      s += sdot4(g.x, xw[2u * i][j]) + sdot4(g.y, xw[2u * i + 1u][j]);\n";

// Q4_0, Q4_1, Q5_1, IQ4_NL and MXFP4 (32-value blocks; on the device in split rows,
// codegen/device_layout.h: a block's 16 bytes of nibbles, then Q5_1's fifth bits (a word a block)
// or MXFP4's E8M0 scale (a byte a block), then its f16 d (Q4_1 and Q5_1: d and the min m, a word)).
// Value j < 16 of a block is the low nibble of byte j, value j + 16 its high nibble, Q5_1's with bit
// j of the fifth bits' word on top. A value is Q4_0's d·(q − 8), Q4_1's and Q5_1's d·q + m, IQ4_NL's
// d·kIQ4NLValues[q], MXFP4's 2^(e − 128)·kMXFP4Values[q].
struct SmallBlockForm {
  bool fifth;        // Q5_1
  bool min;          // Q4_1, Q5_1: d and m, a word
  const char* grid;  // IQ4_NL, MXFP4: the prefix of their grid's functions (iq4, mxfp4), else null
  bool e8m0;         // MXFP4: the scale is an E8M0 byte, not an f16 d
};
SmallBlockForm SmallBlockFormOf(graph::DType dtype) {
  const char* grid = dtype == graph::DType::kIQ4_NL ? "iq4" : dtype == graph::DType::kMXFP4 ? "mxfp4" : nullptr;
  return {dtype == graph::DType::kQ5_1, dtype == graph::DType::kQ4_1 || dtype == graph::DType::kQ5_1, grid,
          dtype == graph::DType::kMXFP4};
}

// The block's scale as `vec2 d`'s x (and Q4_1's and Q5_1's m as its y), block b of the row at `base`.
std::string SmallBlockScale(const SmallBlockForm& f, const std::string& b) {
  if (f.e8m0) return absl::StrCat("vec2(e8m0_half(w_byte(base + SC_AT + ", b, ")), 0.0)");
  if (f.min) return absl::StrCat("unpackHalf2x16(w_word((base + D_AT + ", b, " * 4u) >> 2))");
  return absl::StrCat("vec2(w_half(base + D_AT + ", b, " * 2u), 0.0)");
}

// The eight quants of word `q` at byte `at` of the block (lo: values at..at + 3, hi: 16 + at..) as
// bytes: unsigned q, or the grid's values as signed bytes.
// `lookup`: the function making a word of nibbles the grid's values (<grid>_word, or
// iq4_word_shared in the q8 kernel).
std::string SmallBlockBytes(const SmallBlockForm& f, const std::string& q, const std::string& h, const std::string& at,
                            const std::string& lookup, bool signed_q4 = false) {
  if (signed_q4) {
    // A nibble q with its top bit flipped, at the top of its byte: the signed byte 16·(q − 8).
    return absl::StrCat("    uint lo = ((", q, " << 4) & 0xF0F0F0F0u) ^ 0x80808080u, hi = (", q,
                        " & 0xF0F0F0F0u) ^ 0x80808080u;\n");
  }
  std::string lo = absl::StrCat("(", q, " & 0x0F0F0F0Fu)"), hi = absl::StrCat("((", q, " >> 4) & 0x0F0F0F0Fu)");
  if (f.fifth) {
    lo = absl::StrCat("(", lo, " | q5_fifth(", h, ", ", at, "))");
    hi = absl::StrCat("(", hi, " | q5_fifth(", h, ", 16u + ", at, "))");
  }
  if (f.grid) return absl::StrCat("    uvec2 g = ", lookup, "(", q, ");\n    uint lo = g.x, hi = g.y;\n");
  return absl::StrCat("    uint lo = ", lo, ", hi = ", hi, ";\n");
}

// A part's sums against x as floats: of its grid values as signed bytes, of its linear quants as
// bytes through byte_unit, and of MXFP4's values as floats straight from the nibbles' bits
// (mxfp4_pair, 2^-15 times the value: s is scaled back by 2^15, exactly).
constexpr const char* kGridBytesDots =
    "    [[unroll]] for (uint i = 0u; i < 4u; ++i) s += float(bitfieldExtract(int(lo), int(8u * i), 8)) * xv[i] + "
    "float(bitfieldExtract(int(hi), int(8u * i), 8)) * xv[i + 4u];\n";
constexpr const char* kUnitBytesDots =
    "    [[unroll]] for (uint i = 0u; i < 4u; ++i) s += byte_unit(lo, int(8u * i)) * xv[i] + byte_unit(hi, int(8u * i)) * xv[i + 4u];\n";
constexpr const char* kMxfp4PartDots = R"(    vec2 a = mxfp4_pair(q, 0u), b = mxfp4_pair(q, 8u), c = mxfp4_pair(q, 4u), e = mxfp4_pair(q, 12u);
    s = a.x * xv[0] + b.x * xv[1] + a.y * xv[2] + b.y * xv[3] + c.x * xv[4] + e.x * xv[5] + c.y * xv[6] + e.y * xv[7];
)";

// MXFP4's whole-block parts in packed f16 arithmetic. A pair of nibbles' f16 bits (mxfp4_pair's)
// is 2^-14 times their values, at most 6 · 2^-14; x's part, scaled by a power of two so that its
// largest magnitude lies in [2^14, 2^15), keeps 11 significant bits wherever it is within 2^-14 of
// that largest value, and every product stays under 12, so that the two accumulators of a part
// (8 fused multiply-adds each) stay under 96, far from f16's limit. Half the multiply-adds of the
// float form, and no conversion a value.
constexpr const char* kMxfp4HalfDots = R"(
struct XHalf { f16vec2 v[16]; float unscale; };
XHalf half_x(float xv[PV]) {
  float m = 0.0;
  [[unroll]] for (uint i = 0u; i < PV; ++i) m = max(m, abs(xv[i]));
  // s = 2^(141 - e) for m's biased exponent e (m · s lies in [2^14, 2^15)), as its biased exponent
  // bs, kept where both s and 2^15 / s are normal floats.
  int bs = clamp(268 - int(floatBitsToUint(m) >> 23), 15, 254);
  float s = uintBitsToFloat(uint(bs) << 23);
  XHalf r;
  // Pairs of word w: values 8w + (0, 2), (1, 3), (4, 6), (5, 7) of the part (mxfp4_pair's order).
  [[unroll]] for (uint w = 0u; w < 4u; ++w) {
    r.v[4u * w] = f16vec2(vec2(xv[8u * w], xv[8u * w + 2u]) * s);
    r.v[4u * w + 1u] = f16vec2(vec2(xv[8u * w + 1u], xv[8u * w + 3u]) * s);
    r.v[4u * w + 2u] = f16vec2(vec2(xv[8u * w + 4u], xv[8u * w + 6u]) * s);
    r.v[4u * w + 3u] = f16vec2(vec2(xv[8u * w + 5u], xv[8u * w + 7u]) * s);
  }
  // 2^15 / s: the nibbles' 2^-14 and the block scale's halving (e8m0_half), and s undone.
  r.unscale = uintBitsToFloat(uint(269 - bs) << 23);
  return r;
}
f16vec2 mxfp4_half_pair(uint q, uint shift) {
  uint n = q >> shift;
  return unpackFloat2x16(((n << 9) & 0x0E000E00u) | ((n << 12) & 0x80008000u));
}
float w_dot_half(WPart w, XHalf x) {
  f16vec2 a = f16vec2(0.0), b = f16vec2(0.0);
  [[unroll]] for (uint j = 0u; j < 4u; ++j) {
    uint q = w.q[j];
    a = fma(mxfp4_half_pair(q, 0u), x.v[4u * j], a);
    b = fma(mxfp4_half_pair(q, 8u), x.v[4u * j + 1u], b);
    a = fma(mxfp4_half_pair(q, 4u), x.v[4u * j + 2u], a);
    b = fma(mxfp4_half_pair(q, 12u), x.v[4u * j + 3u], b);
  }
  vec2 t = vec2(a) + vec2(b);
  return w.d.x * ((t.x + t.y) * x.unscale);
}
)";

// Against x as floats: a part is `values` values, 8 (a word of nibbles) or 32 (the whole block,
// its nibbles one 16-byte load). Word j of a block's nibbles holds values 4j + 0..3 (low nibbles)
// and 16 + 4j + 0..3 (high), so a part's values go by words: value i of a part is value
// 4(i / 8) + i % 4 + 16 · ((i / 4) % 2) of its words (a part of 8 is word p % 4 of block p / 4).
// Each word's sum (word_dot) takes its eight values of x; linear quants become floats through
// byte_unit (Σ q·x = 256 · (Σ unit·x − Σ x / 2)), IQ4_NL's grid values by sign extension, MXFP4's
// through f16 bits.
std::string SmallBlockParts(graph::DType dtype, int64_t values) {
  const SmallBlockForm f = SmallBlockFormOf(dtype);
  const char* result = f.e8m0 ? "  return w.d.x * (32768.0 * s);\n"
                       : f.grid ? "  return w.d.x * s;\n"
                       : f.min  ? "  return w.d.x * (256.0 * s - 128.0 * xrun[0]) + w.d.y * xrun[0];\n"
                                : "  return w.d.x * (256.0 * s - 136.0 * xrun[0]);  // Σ (q − 8)·x\n";
  const bool block = values == 32;
  return absl::StrCat("\nconst uint PV = ", values, "u, RUNS = 1u, PARTS_A_BLOCK = ", 32 / values, "u;\n", R"(
struct WPart { )", block ? "uvec4 q" : "uint q", R"(; uint h; vec2 d; };
uint w_part_k(uint p, uint i) {
  uint word = (p % PARTS_A_BLOCK) * (PV / 8u) + (i >> 3);
  return (p / PARTS_A_BLOCK) * 32u + 4u * word + (i & 3u) + 16u * ((i >> 2) & 1u);
}
WPart w_load(uint row, uint p) {
  uint base = row * ROW_BYTES, b = p / PARTS_A_BLOCK;
  WPart r;
  r.q = )", block ? "w4[(base + b * 16u) >> 4]" : "w_word(((base + b * 16u) >> 2) + (p & 3u))", R"(;
  r.h = )", f.fifth ? "w_word((base + SC_AT + b * 4u) >> 2)" : "0u", R"(;
  r.d = )", SmallBlockScale(f, "b"), R"(;
  return r;
}
// The sum of word q's values (at byte `at` of the block) against their x.
float word_dot(uint q, uint h, uint at, float xv[8]) {
  float s = 0.0;
)", f.e8m0 ? kMxfp4PartDots
           : absl::StrCat(SmallBlockBytes(f, "q", "h", "at", f.grid ? absl::StrCat(f.grid, "_word") : ""),
                          f.grid ? kGridBytesDots : kUnitBytesDots),
                      R"(  return s;
}
float w_dot(WPart w, uint p, float xv[PV], float xrun[RUNS]) {
)", block ? R"(  float s = 0.0;
  [[unroll]] for (uint j = 0u; j < 4u; ++j) {
    float xw[8];
    [[unroll]] for (uint i = 0u; i < 8u; ++i) xw[i] = xv[8u * j + i];
    s += word_dot(w.q[j], w.h, 4u * j, xw);
  }
)" : "  float s = word_dot(w.q, w.h, 4u * (p & 3u), xv);\n",
                      result, "}\n");
}

// Against x in q8 blocks: a part is a whole block (32 values, x's block): its nibbles in one 16-byte
// load, its fifth bits and d (and m); one dot product of bytes a word of quants. IQ4_NL's grid
// through the nibble grids or the table of nibble pairs (q8.iq4_pairs), Q4_0's quants unsigned or
// signed (q8.q4_0_signed: no sum of x).
std::string SmallBlockPartsQ8(graph::DType dtype, const Q8PartForm& q8) {
  const SmallBlockForm f = SmallBlockFormOf(dtype);
  const bool iq4 = dtype == graph::DType::kIQ4_NL;
  const bool pairs = iq4 && q8.iq4_pairs > 0;
  const bool signed_q4 = dtype == graph::DType::kQ4_0 && q8.q4_0_signed;
  if (dtype == graph::DType::kQ4_0 && q8.q4_0_part == 64) {
    // Two blocks a part: their d's are one word (a row's d's start on a word, and a part's first
    // block is even), read once for 64 values with the part's address.
    return absl::StrCat(R"(
const uint PV8 = 64u, RUNS8 = 2u;  // a run a block
struct WPart8 { uvec4 qs[2]; vec2 d; };
WPart8 w_load8(uint row, uint p) {
  uint base = row * ROW_BYTES;
  WPart8 r;
  r.qs[0] = w4[(base >> 4) + 2u * p];
  r.qs[1] = w4[(base >> 4) + 2u * p + 1u];
  r.d = unpackHalf2x16(w_word(((base + D_AT) >> 2) + p));
  return r;
}
uint run_k(uint p, uint r) { return p * 64u + r * 32u; }
uint x_slot(uint k) { return k >> 2; }
float w_dot_q8(WPart8 w, uint p, uvec4 xw[PV8 / 16u], float xd[RUNS8], float xrun[RUNS8]) {
  float total = 0.0;
  [[unroll]] for (uint i = 0u; i < 2u; ++i) {
    int s = 0;
    [[unroll]] for (uint j = 0u; j < 4u; ++j) {
)", SmallBlockBytes(f, "w.qs[i][j]", "0u", "4u * j", "", signed_q4), R"(    s += sdot4(lo, xw[2u * i][j]) + sdot4(hi, xw[2u * i + 1u][j]);
    }
)", signed_q4 ? "    total += w.d[i] * xd[i] * (0.0625 * i2f(s));  // the bytes are 16·(q − 8)\n"
              : "    total += w.d[i] * (xd[i] * i2f(s) - 8.0 * xrun[i]);  // Σ (q − 8)·x\n",
                        "  }\n  return total;\n}\n");
  }
  const char* result = f.grid ? "  return w.d.x * xd[0] * i2f(s);\n"
                       : f.min ? "  return w.d.x * xd[0] * i2f(s) + w.d.y * xrun[0];\n"
                       : signed_q4 ? "  return w.d.x * xd[0] * (0.0625 * i2f(s));  // the bytes are 16·(q − 8)\n"
                                   : "  return w.d.x * (xd[0] * i2f(s) - 8.0 * xrun[0]);  // Σ (q − 8)·x\n";
  // IQ4_NL's grid in shared memory (nibble grids or the table of pairs); MXFP4's, whose values need
  // fewer bits, from registers.
  return absl::StrCat(pairs ? IQ4PairTable(q8.iq4_pairs) : iq4 ? kIQ4SharedGrid : "", R"(
const uint PV8 = 32u, RUNS8 = 1u;
struct WPart8 { uvec4 qs; uint h; vec2 d; };
WPart8 w_load8(uint row, uint p) {
  uint base = row * ROW_BYTES;
  WPart8 r;
  r.qs = w4[(base + p * 16u) >> 4];
  r.h = )", f.fifth ? "w_word((base + SC_AT + p * 4u) >> 2)" : "0u", R"(;
  r.d = )", SmallBlockScale(f, "p"), R"(;
  return r;
}
uint run_k(uint p, uint r) { return p * 32u; }
)", pairs ? "" : "uint x_slot(uint k) { return k >> 2; }\n", R"(float w_dot_q8(WPart8 w, uint p, uvec4 xw[PV8 / 16u], float xd[RUNS8], float xrun[RUNS8]) {
  int s = 0;
  [[unroll]] for (uint j = 0u; j < 4u; ++j) {
)", SmallBlockBytes(f, "w.qs[j]", "w.h", "4u * j",
                      pairs ? "iq4_word_pairs" : iq4 ? "iq4_word_shared" : f.grid ? absl::StrCat(f.grid, "_word") : "",
                      signed_q4),
                      pairs ? kIQ4PairDots : "    s += sdot4(lo, xw[0][j]) + sdot4(hi, xw[1][j]);\n", "  }\n", result, "}\n");
}

// IQ4_XS (136-byte blocks: f16 d, u16 scales_h, scales_l[4], qs[128]; on the device in split rows:
// the 128 bytes of nibbles, then the 8-byte headers). Sub-block s (32 values) of a block lies as an
// IQ4_NL block, under the 6-bit scale ls = (nibble s % 2 of scales_l[s / 2]) | (bits 2s, 2s + 1 of
// scales_h) << 4, as d·(ls − 32). The header is two words: d | scales_h << 16, and scales_l.
constexpr const char* kIQ4XSScale = R"(
float iq4xs_scale(uint h0, uint hl, uint s) {
  uint ls = ((hl >> (4u * s)) & 15u) | (((h0 >> (16u + 2u * s)) & 3u) << 4);
  return unpackHalf2x16(h0).x * float(int(ls) - 32);
}
)";

// Against x as floats: part q (0..3) of sub-block s is values 4q + 0..3 and 16 + 4q + 0..3 of it (as
// IQ4_NL's parts): word q of its nibbles and the block's header.
constexpr const char* kIQ4XS = R"(
const uint PV = 8u, RUNS = 1u;
struct WPart { uint q; uint h0; uint hl; };
uint w_part_k(uint p, uint i) { return (p >> 2) * 32u + 4u * (p & 3u) + (i & 3u) + 16u * (i >> 2); }
WPart w_load(uint row, uint p) {
  uint base = row * ROW_BYTES, head = (base + SC_AT + (p >> 5) * 8u) >> 2;
  WPart r;
  r.q = w_word(((base + (p >> 2) * 16u) >> 2) + (p & 3u));
  r.h0 = w_word(head);
  r.hl = w_word(head + 1u);
  return r;
}
float w_dot(WPart w, uint p, float xv[PV], float xrun[RUNS]) {
  uvec2 g = iq4_word(w.q);
  float s = 0.0;
  [[unroll]] for (uint i = 0u; i < 4u; ++i) {
    s += float(bitfieldExtract(int(g.x), int(8u * i), 8)) * xv[i] + float(bitfieldExtract(int(g.y), int(8u * i), 8)) * xv[i + 4u];
  }
  return iq4xs_scale(w.h0, w.hl, (p >> 2) & 7u) * s;
}
)";

// Against x in q8 blocks: a part is a sub-block (32 values, x's block): its nibbles in one 16-byte
// load and the block's header (two words, shared by its 8 parts).
constexpr const char* kIQ4XSQ8 = R"(
const uint PV8 = 32u, RUNS8 = 1u;
struct WPart8 { uvec4 qs; uint h0; uint hl; };
WPart8 w_load8(uint row, uint p) {
  uint base = row * ROW_BYTES, head = (base + SC_AT + (p >> 3) * 8u) >> 2;
  WPart8 r;
  r.qs = w4[(base + p * 16u) >> 4];
  r.h0 = w_word(head);
  r.hl = w_word(head + 1u);
  return r;
}
uint run_k(uint p, uint r) { return p * 32u; }
uint x_slot(uint k) { return k >> 2; }
float w_dot_q8(WPart8 w, uint p, uvec4 xw[PV8 / 16u], float xd[RUNS8], float xrun[RUNS8]) {
  int s = 0;
  [[unroll]] for (uint j = 0u; j < 4u; ++j) {
    uvec2 g = iq4_word_shared(w.qs[j]);
    s += sdot4(g.x, xw[0][j]) + sdot4(g.y, xw[1][j]);
  }
  return iq4xs_scale(w.h0, w.hl, p & 7u) * xd[0] * i2f(s);
}
)";

// IQ4_XS's parts in two forms beside kIQ4XSQ8: of one sub-block (32 values) or two (64, half the
// parts: a header load and address for 64 values, and the two scales from one word each of the
// header), through the nibble grids (kIQ4SharedGrid, x in its own order) or the table of nibble
// pairs (IQ4PairTable, x in pairs); the header as one 8-byte load (a row's headers start on 8
// bytes), each sub-block's scale made a float through the mantissa of 2^23 (ls − 32 exactly, at
// the float rate) rather than converted.
constexpr const char* kIQ4XSPartsQ8 = R"(
layout(std430, set = 0, binding = {{BINDING}}) readonly buffer Buf_w2 { uvec2 w2[]; };
const uint PV8 = {{PV}}u, RUNS8 = PV8 / 32u;  // a run a sub-block
struct WPart8 { uvec4 qs[RUNS8]; uvec2 head; };
WPart8 w_load8(uint row, uint p) {
  uint base = row * ROW_BYTES;
  WPart8 r;
  [[unroll]] for (uint i = 0u; i < RUNS8; ++i) r.qs[i] = w4[(base >> 4) + p * RUNS8 + i];
  r.head = w2[((base + SC_AT) >> 3) + ((p * RUNS8) >> 3)];
  return r;
}
uint run_k(uint p, uint r) { return p * PV8 + r * 32u; }
{{X_SLOT}}float w_dot_q8(WPart8 w, uint p, uvec4 xw[PV8 / 16u], float xd[RUNS8], float xrun[RUNS8]) {
  float d = unpackHalf2x16(w.head.x).x, total = 0.0;
  [[unroll]] for (uint i = 0u; i < RUNS8; ++i) {
    int s = 0;
    [[unroll]] for (uint j = 0u; j < 4u; ++j) {
      uvec2 g = {{LOOKUP}}(w.qs[i][j]);
{{DOTS}}    }
    uint sb = (p * RUNS8 + i) & 7u, ls = ((w.head.y >> (4u * sb)) & 15u) | ((w.head.x >> (12u + 2u * sb)) & 0x30u);
    total += d * (uintBitsToFloat(ls | 0x4B000000u) - 8388640.0) * xd[i] * i2f(s);
  }
  return total;
}
)";

// Q2_K (84-byte blocks: scales[16], qs[64], f16 d, f16 dmin) and Q3_K (110: hmask[32], qs[64],
// scales[12], f16 d), on the device in split rows. Value 128n + 32j + 16h + i of a block (half n,
// quarter j) is bits 2j, 2j + 1 of qs[32n + 16h + i], Q3_K's with bit 4n + j of hmask[16h + i] as a
// third (q − 4 where it is clear), under scale 8n + 2j + h. Against x in q8 blocks a part is a half
// (128 values: 32 bytes of qs, Q3_K's 32 of hmask) in 8 runs of 16, run r = 2j + h under scale
// 8n + r, its x one 16-byte vector of the staging (x in its own order). Q2_K's scale bytes hold a
// 4-bit scale (low) and min (high): Σ = d·Σ sc·(Σ q·x) − dmin·Σ m·Σ x. Q3_K's 6-bit scales, offset by
// 32, keep their low 4 bits in the nibbles of bytes 0-7 (scale s < 8 the low nibble of byte s, s >= 8
// the high nibble of byte s − 8) and their top 2 bits as bits 2(s / 4) of byte 8 + s % 4; a quant
// with its third bit is q + 4 (0..7, an unsigned byte): Σ q·x = Σ (q + 4)·x − 4·Σ x.
constexpr const char* kQ2KQ8 = R"(
const uint PV8 = 128u, RUNS8 = 8u;
struct WPart8 { uvec4 qs[2]; uint sc[2]; vec2 dm; };
WPart8 w_load8(uint row, uint p) {
  uint base = row * ROW_BYTES, b = p >> 1;
  WPart8 r;
  r.qs[0] = w4[(base + p * 32u) >> 4];
  r.qs[1] = w4[((base + p * 32u) >> 4) + 1u];
  r.sc[0] = w_word((base + SC_AT + p * 8u) >> 2);
  r.sc[1] = w_word(((base + SC_AT + p * 8u) >> 2) + 1u);
  r.dm = unpackHalf2x16(w_word((base + D_AT + b * 4u) >> 2));
  return r;
}
uint run_k(uint p, uint r) { return p * 128u + r * 16u; }
uint x_slot(uint k) { return k >> 2; }
float w_dot_q8(WPart8 w, uint p, uvec4 xw[PV8 / 16u], float xd[RUNS8], float xrun[RUNS8]) {
  float sum_d = 0.0, sum_m = 0.0;
  [[unroll]] for (uint r = 0u; r < 8u; ++r) {
    int dot = 0;
    [[unroll]] for (uint i = 0u; i < 4u; ++i) dot += sdot4((w.qs[r & 1u][i] >> (2u * (r >> 1))) & 0x03030303u, xw[r][i]);
    uint sc = (w.sc[r >> 2] >> (8u * (r & 3u))) & 255u;
    sum_d += float(sc & 15u) * xd[r] * i2f(dot);
    sum_m += float(sc >> 4) * xrun[r];
  }
  return w.dm.x * sum_d - w.dm.y * sum_m;
}
)";

constexpr const char* kQ3KQ8 = R"(
const uint PV8 = 128u, RUNS8 = 8u;
struct WPart8 { uvec4 qs[2]; uvec4 hm[2]; uint sc[3]; float d; };
WPart8 w_load8(uint row, uint p) {
  uint base = row * ROW_BYTES, b = p >> 1, q = (base + b * 96u) >> 4, at = (base + SC_AT + b * 12u) >> 2;
  WPart8 r;
  r.hm[0] = w4[q];
  r.hm[1] = w4[q + 1u];
  r.qs[0] = w4[q + 2u + 2u * (p & 1u)];
  r.qs[1] = w4[q + 3u + 2u * (p & 1u)];
  r.sc[0] = w_word(at);
  r.sc[1] = w_word(at + 1u);
  r.sc[2] = w_word(at + 2u);
  r.d = w_half(base + D_AT + b * 2u);
  return r;
}
uint run_k(uint p, uint r) { return p * 128u + r * 16u; }
uint x_slot(uint k) { return k >> 2; }
float w_dot_q8(WPart8 w, uint p, uvec4 xw[PV8 / 16u], float xd[RUNS8], float xrun[RUNS8]) {
  uint n = p & 1u;
  float total = 0.0;
  [[unroll]] for (uint r = 0u; r < 8u; ++r) {
    uint j = r >> 1, h = r & 1u;
    int dot = 0;
    [[unroll]] for (uint i = 0u; i < 4u; ++i) {
      uint lo = (w.qs[h][i] >> (2u * j)) & 0x03030303u, third = ((w.hm[h][i] >> (4u * n + j)) & 0x01010101u) << 2;
      dot += sdot4(lo | third, xw[r][i]);
    }
    uint low = (w.sc[r >> 2] >> (8u * (r & 3u) + 4u * n)) & 15u;
    uint high = (w.sc[2] >> (8u * (r & 3u) + 2u * (2u * n + (r >> 2)))) & 3u;
    total += float(int(low | (high << 4)) - 32) * (xd[r] * i2f(dot) - 4.0 * xrun[r]);
  }
  return w.d * total;
}
)";

// A row's geometry on the device (codegen/device_layout.h) as the GLSL constants <prefix>ROW_BYTES,
// <prefix>SC_AT and <prefix>D_AT (the slices' are prefixed SLICE_, apart from the parts').
std::string RowConstants(const std::string& prefix, graph::DType dtype, int64_t k) {
  const DeviceRow row = DeviceRowOf(dtype, k);
  return absl::StrCat("const uint ", prefix, "ROW_BYTES = ", row.bytes, "u, ", prefix, "SC_AT = ", row.scales_at, "u, ", prefix,
                      "D_AT = ", row.d_at, "u;\n");
}

}  // namespace

absl::StatusOr<WeightParts> WeightPartDecoder(uint32_t binding, graph::DType dtype, int64_t k, const Q8PartForm& q8,
                                              const FloatPartForm& form) {
  WeightParts parts;
  const std::string row_size = RowConstants("", dtype, k);
  if (graph::IsFloat(dtype)) {
    // Plain floats: the widest run of 8 (up to form.float_values), 4, 2 or 1 consecutive values
    // that divides K, in whole words where the run fills them (every run but a single 16-bit value).
    parts.values = k % 8 == 0 && form.float_values >= 8 ? 8 : k % 4 == 0 ? 4 : k % 2 == 0 ? 2 : 1;
    parts.runs = 1;
    parts.glsl = dtype != graph::DType::kF32 && parts.values == 1
                     ? absl::StrCat(FloatBuffer(binding, "w", dtype, true), ElementParts(parts.values, k))
                     : FloatWordParts(binding, dtype, parts.values, k);
    parts.per_row = k / parts.values;
    parts.contiguous = true;
    return parts;
  }
  // The buffer with word, byte and f16 readers (w_word, w_byte, w_half), and for split rows
  // (codegen/device_layout.h) 16-byte vectors.
  const std::string decl = WeightRowsBuffer(binding, "w", dtype, k);
  switch (dtype) {
    case graph::DType::kQ8_0:
      parts.values = 8;
      parts.runs = 1;
      parts.glsl = absl::StrCat(decl, row_size, kUnitQuant, Fill(kQ8_0, DeviceRowValues(dtype, k)));
      parts.q8_glsl = Fill(kQ8_0Q8, DeviceRowValues(dtype, k));
      parts.q8_values = 32;
      break;
    case graph::DType::kQ4_K:
    case graph::DType::kQ5_K:
      parts.values = 16;
      parts.runs = 2;
      parts.glsl = absl::StrCat(row_size, kUnitQuant, kByteUnit, kScalePairK4, KQuant4or5(binding, dtype == graph::DType::kQ5_K));
      parts.q8_glsl = KQuant4or5Q8(dtype == graph::DType::kQ5_K);
      parts.q8_values = 64;
      break;
    case graph::DType::kQ6_K:
      parts.values = 16;
      parts.runs = 4;
      parts.glsl = absl::StrCat(decl, row_size, kByteUnit, kQ6K);
      parts.q8_glsl = kQ6KQ8;
      parts.q8_values = 64;
      break;
    case graph::DType::kQ5_0:
      parts.values = 8;
      parts.runs = 1;
      parts.glsl = absl::StrCat(decl, row_size, kByteUnit, kQ5_0Bits, kQ5_0);
      parts.q8_glsl = kQ5_0Q8;  // after parts.glsl, whose q5_ helpers it uses
      parts.q8_values = 32;
      break;
    case graph::DType::kQ4_0:
    case graph::DType::kQ4_1:
    case graph::DType::kQ5_1:
    case graph::DType::kIQ4_NL:
    case graph::DType::kMXFP4:
      if (form.small_block_values != 8 && form.small_block_values != 32) {
        return absl::InvalidArgumentError(
            absl::StrCat("parts of ", form.small_block_values, " values of ", graph::Name(dtype), ": 8 or 32"));
      }
      parts.values = form.small_block_values;
      parts.runs = 1;
      parts.contiguous = parts.values == 32;
      parts.glsl = absl::StrCat(decl, row_size, kByteUnit, kQ5_0Bits, SmallBlockParts(dtype, parts.values));
      parts.q8_glsl = SmallBlockPartsQ8(dtype, q8);
      parts.q8_values = dtype == graph::DType::kQ4_0 ? q8.q4_0_part : 32;
      if (form.half_dots && dtype == graph::DType::kMXFP4 && parts.values == 32) parts.half_glsl = kMxfp4HalfDots;
      if (dtype == graph::DType::kIQ4_NL) {
        parts.q8_shared_bytes = q8.iq4_pairs > 0 ? IQ4PairBytes(q8.iq4_pairs) : kIQ4SharedBytes;
        parts.q8_x_pairs = q8.iq4_pairs > 0;
      }
      break;
    case graph::DType::kIQ4_XS:
      parts.values = 8;
      parts.runs = 1;
      parts.glsl = absl::StrCat(decl, row_size, kIQ4XSScale, kIQ4XS);
      if (q8.iq4_pairs == 0 && q8.iq4_xs_part == 32) {
        parts.q8_glsl = absl::StrCat(kIQ4SharedGrid, kIQ4XSQ8);
      } else {
        const bool pairs = q8.iq4_pairs > 0;
        parts.q8_glsl = absl::StrCat(
            pairs ? IQ4PairTable(q8.iq4_pairs) : kIQ4SharedGrid,
            Fill(kIQ4XSPartsQ8, {{"BINDING", absl::StrCat(binding)},
                                 {"PV", absl::StrCat(q8.iq4_xs_part)},
                                 {"X_SLOT", pairs ? "" : "uint x_slot(uint k) { return k >> 2; }\n"},
                                 {"LOOKUP", pairs ? "iq4_word_pairs" : "iq4_word_shared"},
                                 {"DOTS", pairs ? kIQ4XSPairDots : kIQ4XSGridDots}}));
      }
      parts.q8_values = q8.iq4_xs_part;
      parts.q8_shared_bytes = q8.iq4_pairs > 0 ? IQ4PairBytes(q8.iq4_pairs) : kIQ4SharedBytes;
      parts.q8_x_pairs = q8.iq4_pairs > 0;
      break;
    case graph::DType::kQ2_K:
    case graph::DType::kQ3_K:
      // Against float x, decoded value by value (as below); against q8 x, parts of their own.
      parts.values = 8;
      parts.runs = 1;
      parts.glsl = absl::StrCat(decl, row_size, ElementParts(parts.values, k));
      parts.contiguous = true;
      parts.q8_glsl = dtype == graph::DType::kQ2_K ? kQ2KQ8 : kQ3KQ8;
      parts.q8_values = 128;
      break;
    default:
      return absl::InvalidArgumentError(absl::StrCat("no matrix-vector decoder for weights of type ", graph::Name(dtype)));
  }
  parts.per_row = k / parts.values;
  return parts;
}

std::string PartXGlsl(const WeightParts& parts, uint32_t binding, int64_t plane_parts) {
  if (parts.values % 4 != 0) {
    return absl::StrCat(FloatBuffer(binding, "x", graph::DType::kF32, true),
                        "void load_part_x(uint at, uint p, out float v[PV]) {\n"
                        "  [[unroll]] for (uint i = 0u; i < PV; ++i) v[i] = x[at + w_part_k(p, i)];\n}\n");
  }
  // In planes, vector v of part p is plane v's element p (codegen/plane_x.h; `at` starts a row).
  return absl::StrCat("layout(std430, set = 0, binding = ", binding, ") readonly buffer Buf_x { vec4 x4[]; };\n",
                      plane_parts > 0 ? absl::StrCat("const uint X_PLANE = ", plane_parts, "u;\n") : "",
                      R"(void load_part_x(uint at, uint p, out float v[PV]) {
  [[unroll]] for (uint i = 0u; i < PV; i += 4u) {
    vec4 q = x4[)",
                      plane_parts > 0 ? "(at >> 2) + ((w_part_k(p, i) - p * PV) >> 2) * X_PLANE + p" : "(at + w_part_k(p, i)) >> 2",
                      R"(];
    v[i] = q.x; v[i + 1u] = q.y; v[i + 2u] = q.z; v[i + 3u] = q.w;
  }
}
)");
}

}  // namespace doppler::codegen

namespace doppler::codegen {
namespace {

// Values of a slice's words: the f16 or byte at byte address b of the row's words, given the word
// that holds it.
constexpr const char* kSliceFields = R"(
float slice_half(uint word, uint b) { return unpackHalf2x16((word >> ((b & 2u) << 3)) & 65535u).x; }
uint slice_byte(uint word, uint b) { return (word >> ((b & 3u) << 3)) & 255u; }
)";

// w_slice8 as the decode of the loads: the kernels that read ahead call the two apart.
constexpr const char* kSliceOfParts = R"(
void w_slice8(uint row, uint k, out float v[8]) { w_slice_decode(w_slice_load(row, k), row, k, v); }
)";

// A slice as f16 pairs in the staged order (weight_parts.h), from its floats: the formats without
// a decoding of their own into f16.
constexpr const char* kSliceHalvesOfFloats = R"(
uvec4 w_slice_halves(WSlice s, uint row, uint k) {
  float v[8];
  w_slice_decode(s, row, k, v);
  return uvec4(packHalf2x16(vec2(v[0], v[2])), packHalf2x16(vec2(v[1], v[3])), packHalf2x16(vec2(v[4], v[6])),
               packHalf2x16(vec2(v[5], v[7])));
}
)";

// Bytes 0 and 2 (pair 0) or 1 and 3 (pair 1) of a word of quants q < 1024 as the f16 pair
// 1024 + q: the quants become the low mantissa bits of 1024 (f16 bits 0x6400), two at a time, with
// no conversion; subtracting 1024 (or 1024 + the format's offset) then is exact.
constexpr const char* kQuantPairs = R"(
f16vec2 quant_pair(uint q, uint pair, uint mask) { return unpackFloat2x16(((q >> (8u * pair)) & mask) | 0x64006400u); }
)";

}  // namespace

bool SliceWordsPairSubBlocks(graph::DType dtype) {
  return dtype == graph::DType::kQ4_K || dtype == graph::DType::kQ5_K || dtype == graph::DType::kQ6_K;
}

std::string WeightSlices(uint32_t binding, graph::DType dtype, int64_t k, bool halves) {
  const std::string row_bytes = RowConstants("SLICE_", dtype, k);
  const std::string words = WeightRowsBuffer(binding, "w", dtype, k);
  std::string parts;
  std::string halves_glsl = kSliceHalvesOfFloats;  // the format's own decoding into f16 pairs, where it has one
  // Where SliceWordsPairSubBlocks: the slice 32 values on from an even sub-block's, from its words.
  std::string pair_glsl;
  switch (dtype) {
    case graph::DType::kQ8_0:
      parts = absl::StrCat(words, row_bytes, Fill(R"(
struct WSlice { uint d; uint q[2]; };
uint q8_0_slice_base(uint row, uint k) { return row * SLICE_ROW_BYTES + (k >> 5) * {{Q8_0_BLOCK}}u; }
WSlice w_slice_load(uint row, uint k) {
  uint base = q8_0_slice_base(row, k), qs = (base + {{Q8_0_QS}}u + (k & 31u)) >> 2;
  return WSlice(w_word(base >> 2), uint[2](w[qs], w[qs + 1u]));
}
void w_slice_decode(WSlice s, uint row, uint k, out float v[8]) {
  float d = slice_half(s.d, q8_0_slice_base(row, k));
  // Each byte with its sign bit flipped is q + 128, made a float through the mantissa of 2^23.
  [[unroll]] for (uint i = 0u; i < 8u; ++i) v[i] = d * (uintBitsToFloat(((s.q[i >> 2] >> (8u * (i & 3u))) & 255u) ^ 0x4B000080u) - 8388736.0);
}
)",
                                                  DeviceRowValues(dtype, k)));
      halves_glsl = R"(
uvec4 w_slice_halves(WSlice s, uint row, uint k) {
  f16vec2 d = f16vec2(slice_half(s.d, q8_0_slice_base(row, k)));
  uvec4 r;
  // A byte with its sign bit flipped is q + 128.
  [[unroll]] for (uint p = 0u; p < 4u; ++p) r[p] = packFloat2x16((quant_pair(s.q[p >> 1] ^ 0x80808080u, p & 1u, 0x00FF00FFu) - f16vec2(1152.0)) * d);
  return r;
}
)";
      break;
    case graph::DType::kQ4_K:
    case graph::DType::kQ5_K: {
      // In 16-byte vectors: the header (d, dmin, 12 scale bytes) is vector 0 of a block; Q5_K's
      // qh[32] vectors 1-2; the quants follow. The slice's 8 quant bytes (its 8 high bits) are
      // one 8-byte load (l is a multiple of 8).
      const bool five = dtype == graph::DType::kQ5_K;
      parts = absl::StrCat(
          Fill(R"(
layout(std430, set = 0, binding = {{BINDING}}) readonly buffer Buf_w { uvec4 w4[]; };
layout(std430, set = 0, binding = {{BINDING}}) readonly buffer Buf_w2 { uvec2 w2[]; };
)",
               {{"BINDING", absl::StrCat(binding)}}),
          row_bytes, Fill(R"(
// Sub-block j's 6-bit scale and min as the word scale | min << 16, from bytes j % 4 of the scale
// words (y: bytes 0-3, z: 4-7, w: 8-11): for j < 4, the low 6 bits of y's and z's; else the
// nibbles of w's and the top 2 bits of y's and z's.
uint k4_scale_min(uvec4 head, uint j) {
  uint at = 8u * (j & 3u);
  uint yz = ((head.y >> at) & 255u) | (((head.z >> at) & 255u) << 16), wb = (head.w >> at) & 255u;
  return j < 4u ? yz & 0x003F003Fu : (wb & 15u) | ((wb & 0xF0u) << 12) | (((yz >> 6) & 0x00030003u) << 4);
}
struct WSlice { uvec4 head; uvec2 q;{{QH_FIELD}} };
WSlice w_slice_load(uint row, uint k) {
  uint base = (row * SLICE_ROW_BYTES) / 16u + (k >> 8) * {{BLOCK_VECS}}u;
  uint r = k & 255u, j = r >> 5, l = r & 31u;
  WSlice s;
  s.head = w4[base];
  s.q = w2[2u * (base + {{QS_VEC}}u + 2u * (j >> 1)) + (l >> 3)];
{{QH_LOAD}}  return s;
}
void w_slice_decode(WSlice s, uint row, uint k, out float v[8]) {
  uint j = (k & 255u) >> 5, sm = k4_scale_min(s.head, j);
  // The scale and min made floats through the mantissa of 2^23.
  vec2 dm = unpackHalf2x16(s.head.x) * (uintBitsToFloat(uvec2(sm & 65535u, sm >> 16) | 0x4B000000u) - 8388608.0);
  float d = dm.x, m = dm.y;
  uint shift = (j & 1u) * 4u;
  [[unroll]] for (uint i = 0u; i < 8u; ++i) {
    uint qv = (s.q[i >> 2] >> (8u * (i & 3u) + shift)) & 15u;
{{QH_BIT}}    v[i] = d * (uintBitsToFloat(qv | 0x4B000000u) - 8388608.0) - m;  // float(qv), at full rate
  }
}
)",
               {{"BLOCK_VECS", absl::StrCat(KBlockVecs(five))},
                {"QS_VEC", absl::StrCat(KQuantVec(five))},
                {"QH_FIELD", five ? " uvec2 h;" : ""},
                {"QH_LOAD", five ? "  s.h = w2[2u * (base + 1u) + (l >> 3)];\n" : ""},
                {"QH_BIT", five ? "    qv |= ((s.h[i >> 2] >> (8u * (i & 3u) + j)) & 1u) << 4;\n" : ""}}));
      halves_glsl = Fill(R"(
uvec4 w_slice_halves(WSlice s, uint row, uint k) {
  uint j = (k & 255u) >> 5;
  // (d, dmin) times (scale, min) as f16 pairs, in one rounding each as the f32 products would be.
  f16vec2 dm = unpackFloat2x16(s.head.x) * (unpackFloat2x16(k4_scale_min(s.head, j) | 0x64006400u) - f16vec2(1024.0));
  f16vec2 d = dm.xx, m = dm.yy;
  uint shift = (j & 1u) * 4u;
  uvec4 r;
  [[unroll]] for (uint p = 0u; p < 4u; ++p) {
    uint q = s.q[p >> 1] >> shift;
{{QH_PAIR}}    r[p] = packFloat2x16(fma(quant_pair(q, p & 1u, {{MASK}}) - f16vec2(1024.0), d, -m));
  }
  return r;
}
)",
               {// Q5_K: the fifth bits (bit j of each qh byte) moved to bit 4 of the quants' bytes.
                {"QH_PAIR", five ? "    q = (q & 0x0F0F0F0Fu) | (((s.h[p >> 1] >> j) & 0x01010101u) << 4);\n" : ""},
                {"MASK", five ? "0x001F001Fu" : "0x000F000Fu"}});
      // The odd sub-block's quants are the other nibbles of the same bytes (Q5_K's fifth bits
      // another bit of the same qh bytes), under the same header.
      pair_glsl = "WSlice w_slice_pair(WSlice even, uint row, uint k) { return even; }\n";
      break;
    }
    case graph::DType::kQ6_K:
      parts = absl::StrCat(words, row_bytes, R"(
struct WSlice { uint d, sc; uint ql[2], qh[2]; };
WSlice w_slice_load(uint row, uint k) {
  uint base = row * SLICE_ROW_BYTES, b = k >> 8, qs = base + b * 192u;
  uint r = k & 255u, n = r >> 7, kq = (r >> 5) & 3u, l = r & 31u;
  uint lo_at = (qs + 64u * n + 32u * (kq & 1u) + l) >> 2, hi_at = (qs + 128u + 32u * n + l) >> 2;
  return WSlice(w_word((base + SLICE_D_AT + b * 2u) >> 2), w_word((base + SLICE_SC_AT + b * 16u + (r >> 4)) >> 2),
                uint[2](w_word(lo_at), w_word(lo_at + 1u)), uint[2](w_word(hi_at), w_word(hi_at + 1u)));
}
void w_slice_decode(WSlice s, uint row, uint k, out float v[8]) {
  uint base = row * SLICE_ROW_BYTES, b = k >> 8, r = k & 255u, kq = (r >> 5) & 3u;
  float d = slice_half(s.d, base + SLICE_D_AT + b * 2u) *
            float(bitfieldExtract(int(slice_byte(s.sc, base + SLICE_SC_AT + b * 16u + (r >> 4))), 0, 8));
  [[unroll]] for (uint i = 0u; i < 8u; ++i) {
    uint lo = (s.ql[i >> 2] >> (8u * (i & 3u) + (kq < 2u ? 0u : 4u))) & 15u;
    uint hi = (s.qh[i >> 2] >> (8u * (i & 3u) + 2u * kq)) & 3u;
    v[i] = d * (uintBitsToFloat(lo | (hi << 4) | 0x4B000000u) - 8388640.0);  // q − 32, at full rate
  }
}
)");
      halves_glsl = R"(
uvec4 w_slice_halves(WSlice s, uint row, uint k) {
  uint base = row * SLICE_ROW_BYTES, b = k >> 8, r = k & 255u, kq = (r >> 5) & 3u;
  f16vec2 d = f16vec2(slice_half(s.d, base + SLICE_D_AT + b * 2u) *
                      float(bitfieldExtract(int(slice_byte(s.sc, base + SLICE_SC_AT + b * 16u + (r >> 4))), 0, 8)));
  uvec4 h;
  [[unroll]] for (uint p = 0u; p < 4u; ++p) {
    // Each byte's 6-bit quant: its nibble of ql, its two bits of qh above it.
    uint q = ((s.ql[p >> 1] >> (kq < 2u ? 0u : 4u)) & 0x0F0F0F0Fu) | (((s.qh[p >> 1] >> (2u * kq)) & 0x03030303u) << 4);
    h[p] = packFloat2x16((quant_pair(q, p & 1u, 0x003F003Fu) - f16vec2(1056.0)) * d);  // q − 32
  }
  return h;
}
)";
      // The odd sub-block's low bits are the next 32 bytes of ql; its d, its scale (bytes r / 16 of
      // a 64-aligned pair of sub-blocks lie in one word: the scales are 16-byte vectors) and its
      // high bits (other bits of the same qh bytes) are the even one's.
      pair_glsl = R"(
WSlice w_slice_pair(WSlice even, uint row, uint k) {
  uint base = row * SLICE_ROW_BYTES, b = k >> 8, r = k & 255u, kq = (r >> 5) & 3u;
  uint lo_at = (base + b * 192u + 64u * (r >> 7) + 32u * (kq & 1u) + (r & 31u)) >> 2;
  WSlice s = even;
  s.ql = uint[2](w_word(lo_at), w_word(lo_at + 1u));
  return s;
}
)";
      break;
    case graph::DType::kQ5_0:
      parts = absl::StrCat(words, row_bytes, R"(
struct WSlice { uint d, qh; uint q[2]; };
WSlice w_slice_load(uint row, uint k) {
  uint base = row * SLICE_ROW_BYTES, b = k >> 5, at = (base + b * 16u + (k & 15u)) >> 2;
  return WSlice(w_word((base + SLICE_D_AT + b * 2u) >> 2), w_word((base + SLICE_SC_AT + b * 4u) >> 2),
                uint[2](w_word(at), w_word(at + 1u)));
}
void w_slice_decode(WSlice s, uint row, uint k, out float v[8]) {
  uint b = k >> 5, r = k & 31u, shift = (r >> 4) * 4u;
  float d = slice_half(s.d, row * SLICE_ROW_BYTES + SLICE_D_AT + b * 2u);
  [[unroll]] for (uint i = 0u; i < 8u; ++i) {
    uint nib = (s.q[i >> 2] >> (8u * (i & 3u) + shift)) & 15u;
    v[i] = d * (uintBitsToFloat(nib | (((s.qh >> (r + i)) & 1u) << 4) | 0x4B000000u) - 8388624.0);  // q − 16, at full rate
  }
}
)");
      break;
    case graph::DType::kQ4_0:
    case graph::DType::kQ4_1:
    case graph::DType::kQ5_1:
    case graph::DType::kIQ4_NL:
    case graph::DType::kIQ4_XS:
    case graph::DType::kMXFP4: {
      // Split rows: the slice's 8 nibbles are the low (values 0-15 of a 32-value group) or high
      // nibbles of two words; the group's d (and m), Q5_1's fifth bits, IQ4_XS's header, MXFP4's
      // scale byte, each in the word that holds it.
      const SmallBlockForm f = SmallBlockFormOf(dtype);
      const bool xs = dtype == graph::DType::kIQ4_XS;
      const char* grid = xs ? "iq4" : f.grid;
      // The scale's byte address (xs: its two words' first word).
      const char* sc_at = xs ? "(base + SLICE_SC_AT + (k >> 8) * 8u) >> 2"
                          : f.e8m0 ? "base + SLICE_SC_AT + g"
                          : f.min  ? "base + SLICE_D_AT + g * 4u"
                                   : "base + SLICE_D_AT + g * 2u";
      std::string fields = "uint q[2]; uint sc;", load = xs ? absl::StrCat("  s.sc = w_word(", sc_at, ");\n  s.sc1 = w_word((", sc_at, ") + 1u);\n")
                                                            : absl::StrCat("  s.sc = w_word((", sc_at, ") >> 2);\n");
      if (xs) absl::StrAppend(&fields, " uint sc1;");
      if (f.fifth) {
        absl::StrAppend(&fields, " uint qh;");
        absl::StrAppend(&load, "  s.qh = w_word((base + SLICE_SC_AT + g * 4u) >> 2);\n");
      }
      std::string head;
      if (xs) {
        head = "  float d = iq4xs_scale(s.sc, s.sc1, g & 7u);\n";
      } else if (f.e8m0) {
        head = absl::StrCat("  float d = e8m0_half(slice_byte(s.sc, ", sc_at, "));\n");
      } else if (f.min) {
        head = "  vec2 dm = unpackHalf2x16(s.sc);\n";
      } else {
        head = absl::StrCat("  float d = slice_half(s.sc, ", sc_at, ");\n");
      }
      // The grid's values four at a time from registers (<grid>_bytes), not by indexing an array;
      // MXFP4's two at a time as floats from their f16 bits (mxfp4_pair).
      if (f.e8m0) {
        absl::StrAppend(&head, "  vec2 pv[4] = vec2[4](mxfp4_pair(s.q[0], shift), mxfp4_pair(s.q[0], shift + 8u), "
                               "mxfp4_pair(s.q[1], shift), mxfp4_pair(s.q[1], shift + 8u));\n");
      } else if (grid != nullptr) {
        absl::StrAppend(&head, "  uint gv[2] = uint[2](", grid, "_bytes((s.q[0] >> shift) & 0x0F0F0F0Fu), ", grid,
                        "_bytes((s.q[1] >> shift) & 0x0F0F0F0Fu));\n");
      }
      const char* nib = "    uint nib = (s.q[i >> 2] >> (8u * (i & 3u) + shift)) & 15u;\n";
      std::string value;
      if (f.e8m0) {
        // Value i of the slice is pair 2(i / 4) + i % 2's component (i / 2) % 2, 2^-15 times itself.
        value = "    v[i] = d * (32768.0 * pv[2u * (i >> 2) + (i & 1u)][(i >> 1) & 1u]);\n";
      } else if (grid != nullptr) {
        value = "    v[i] = d * float(bitfieldExtract(int(gv[i >> 2]), int(8u * (i & 3u)), 8));\n";
      } else if (f.min) {
        value = absl::StrCat(nib, f.fifth ? "    nib |= ((s.qh >> (r + i)) & 1u) << 4;\n" : "",
                             "    v[i] = dm.x * (uintBitsToFloat(nib | 0x4B000000u) - 8388608.0) + dm.y;  // float(q), at full rate\n");
      } else {
        value = absl::StrCat(nib, "    v[i] = d * (uintBitsToFloat(nib | 0x4B000000u) - 8388616.0);  // q − 8, at full rate\n");
      }
      parts = absl::StrCat(words, row_bytes, xs ? kIQ4XSScale : "", "\nstruct WSlice { ", fields, R"( };
WSlice w_slice_load(uint row, uint k) {
  uint base = row * SLICE_ROW_BYTES, g = k >> 5, at = (base + g * 16u + (k & 15u)) >> 2;
  WSlice s;
  s.q = uint[2](w_word(at), w_word(at + 1u));
)", load, R"(  return s;
}
void w_slice_decode(WSlice s, uint row, uint k, out float v[8]) {
  uint base = row * SLICE_ROW_BYTES, g = k >> 5, r = k & 31u, shift = (r >> 4) * 4u;
)", head, R"(  [[unroll]] for (uint i = 0u; i < 8u; ++i) {
)", value, "  }\n}\n");
      break;
    }
    default:
      // Plain floats (and Q2_K, Q3_K value by value) convert as they load.
      parts = absl::StrCat(words, row_bytes, R"(
struct WSlice { float v[8]; };
WSlice w_slice_load(uint row, uint k) {
  WSlice s;
  [[unroll]] for (uint i = 0u; i < 8u; ++i) s.v[i] = k + i < )", k, R"(u ? load_w(row * )", k, R"(u + k + i) : 0.0;
  return s;
}
void w_slice_decode(WSlice s, uint row, uint k, out float v[8]) { v = s.v; }
)");
  }
  return halves ? absl::StrCat(kSliceFields, kQuantPairs, parts, kSliceOfParts, halves_glsl, pair_glsl)
                : absl::StrCat(kSliceFields, parts, kSliceOfParts);
}
}  // namespace doppler::codegen
