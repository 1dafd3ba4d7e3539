// GLSL shared by the matrix-vector kernels that round x through q8 blocks (attr x_quant,
// graph/activation_quant.h) as they stage it in shared memory and multiply its quants with the
// weights' (codegen/weight_parts.h: WeightParts::q8_glsl): the dense product's
// (codegen/matmul_gemv_q8.cc) and the expert product's (codegen/emit_experts.cc).
#pragma once

#include <string>

namespace doppler::codegen {

// `int sdot4(uint a, uint b)`: the dot product of four signed bytes; `float i2f(int v)`: an int of
// magnitude below 2^22 as a float. Needs GL_EXT_spirv_intrinsics (it enables it).
std::string Q8DotGlsl();

// For a kernel that defines `const uint WG` and SHUFFLE_BLOCKS (1 where a block's eight staging
// invocations share a subgroup with shuffles): `uint pack_q8(vec4 v, float id)` (four values times
// id as signed bytes), `float q8_scale(float amax)` and `float q8_inverse(float d)` (a block's scale
// from its largest |value|, and 1 / d as graph::RoundThroughQ8 divides), and `float block_max(float
// a, uint par)`: the largest of the eight values a block's invocations (eight neighbours) pass,
// through subgroup shuffles, else through shared memory by step parity `par` (then every invocation
// calls it, in uniform control flow).
std::string Q8StagingGlsl();

// The two below are for a kernel that defines PV8 and RUNS8 (the q8 decoder's), `const uint XV =
// PV8 / 16u, XW = PV8 / 4u, RUN8 = PV8 / RUNS8`, and stages x by segments of SEG values of K (the
// whole row, or a part of it: SEG_PARTS = SEG / PV8 parts and SEG_BLOCKS = SEG / 32 blocks) into
// `shared uvec4 xq[]` (x's quants: XV vectors a part, at xq_vec(t, part, v), which Q8PartXGlsl defines)
// and `shared float xd[]` (its block scales, row t's at t · SEG_BLOCKS).
//
// The statements that store an invocation's four quants `v` of quad q (values 4q..4q+3 of the
// segment) of row t, given its block's largest |value| `amax`, where `live` (the block's scale by
// the first of its eight invocations). With `pairs`, x staged in pairs (WeightParts::q8_x_pairs):
// every invocation packs its quants (a block past the rows has no values: 0) and exchanges them
// with the one 16 values away, so that every invocation runs them.
std::string Q8StoreGlsl(bool pairs);
// `void part_x(uint t, uint seg, uint sp, uint p, bool live, out uvec4 xw[XV], out float xdr[RUNS8],
// out float xrun[RUNS8])`: part p's x of row t (sp: the part within segment seg; zeros unless live),
// its quants, its runs' block scales and their sums of x, as w_dot_q8 takes them.
std::string Q8PartXGlsl();

}  // namespace doppler::codegen
