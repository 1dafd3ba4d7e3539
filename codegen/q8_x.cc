#include "codegen/q8_x.h"

namespace doppler::codegen {

std::string Q8DotGlsl() {
  return R"(#extension GL_EXT_spirv_intrinsics : require
// OpSDot on 4 x 8-bit packed vectors (SPV_KHR_integer_dot_product; glslang has no GLSL name for it).
spirv_instruction(extensions = ["SPV_KHR_integer_dot_product"], capabilities = [6019, 6018], id = 4450)
int sdot4_packed(uint a, uint b, spirv_literal int packed_vector_format);
int sdot4(uint a, uint b) { return sdot4_packed(a, b, 0); }
// An int of magnitude below 2^22 as a float, at the float rate (int-to-float conversions run at a
// fraction of it).
float i2f(int v) { return intBitsToFloat(v + 0x4B400000) - 12582912.0; }
)";
}

std::string Q8StagingGlsl() {
  return R"(
// Four values times id, rounded to integers as bytes: adding 1.5 · 2^23 rounds to the nearest
// integer (ties to even) and leaves it, two's complement, in the low byte of the mantissa.
uint pack_q8(vec4 v, float id) {
  precise vec4 scaled = v * id;
  uvec4 u = floatBitsToUint(scaled + 12582912.0) & 255u;
  return u.x | (u.y << 8) | (u.z << 16) | (u.w << 24);
}
float q8_scale(float amax) { return amax * uintBitsToFloat(0x3C010204u); }  // 1/127 in f32
// 1 / d, then a Newton step: within an ulp of the correctly rounded quotient that
// graph::RoundThroughQ8 divides (a GPU's division may be a few ulps off).
float q8_inverse(float d) {
  float id = d > 0.0 ? 1.0 / d : 0.0;
  return fma(fma(-d, id, 1.0), id, id);
}
// A block's largest |value| goes through subgroup shuffles where the device has them (so that no
// barrier keeps a step's loads from being issued with the others'), else through xam.
#if SHUFFLE_BLOCKS
float block_max(float a, uint par) {
  a = max(a, subgroupShuffleXor(a, 1u));
  a = max(a, subgroupShuffleXor(a, 2u));
  return max(a, subgroupShuffleXor(a, 4u));
}
#else
shared float xam[2][WG];  // each invocation's largest |value| of its four, by step parity
float block_max(float a, uint par) {  // a step's reads of xam end before the next step's barrier
  xam[par][gl_LocalInvocationID.x] = a;
  barrier();
  float amax = 0.0;
  [[unroll]] for (uint j = 0u; j < 8u; ++j) amax = max(amax, xam[par][(gl_LocalInvocationID.x & ~7u) + j]);
  return amax;
}
#endif
)";
}

std::string Q8StoreGlsl(bool pairs) {
  return pairs ? R"(        float d = q8_scale(amax), id = q8_inverse(d);
        uint own = pack_q8(v, id), other = subgroupShuffleXor(own, 4u);
        if (live) {
          if ((q & 7u) == 0u) xd[t * SEG_BLOCKS + q / 8u] = d;
          uint slot = x_slot(4u * q);
          xq[xq_vec(t, slot / XW, (slot % XW) / 4u)][slot % 4u] = x_pair_word(own, other, (q & 4u) != 0u);
        }
)"
               : R"(        if (live) {
          float d = q8_scale(amax), id = q8_inverse(d);
          if ((q & 7u) == 0u) xd[t * SEG_BLOCKS + q / 8u] = d;
          uint slot = x_slot(4u * q);
          xq[xq_vec(t, slot / XW, (slot % XW) / 4u)][slot % 4u] = pack_q8(v, id);
        }
)";
}

std::string Q8PartXGlsl() {
  return R"(
// x's quants lie in planes, vector v of every part of row t together, so that the lanes of a
// subgroup, taking neighbouring parts, read neighbouring vectors (with a part's vectors side by
// side, a part of 4 vectors put 4 lanes of each 8 on the same banks).
uint xq_vec(uint t, uint part, uint v) { return (t * XV + v) * SEG_PARTS + part; }
void part_x(uint t, uint seg, uint sp, uint p, bool live, out uvec4 xw[XV], out float xdr[RUNS8], out float xrun[RUNS8]) {
  [[unroll]] for (uint v = 0u; v < XV; ++v) xw[v] = live ? xq[xq_vec(t, sp, v)] : uvec4(0u);
  [[unroll]] for (uint r = 0u; r < RUNS8; ++r) {
    xdr[r] = xd[t * SEG_BLOCKS + ((run_k(p, r) - seg * SEG) >> 5)];
    int q_sum = 0;
    [[unroll]] for (uint j = r * (RUN8 / 4u); j < (r + 1u) * (RUN8 / 4u); ++j) q_sum += sdot4(xw[j / 4u][j % 4u], 0x01010101u);
    xrun[r] = xdr[r] * i2f(q_sum);
  }
}
)";
}

}  // namespace doppler::codegen
