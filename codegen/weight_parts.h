// A matrix-vector kernel reads each weight row in "parts": a fixed number of values one invocation
// takes together, chosen so that a part shares its block's scales and its quants come in a few
// wide loads (16 bytes where the block layout is 16-byte aligned). Consecutive invocations take
// consecutive parts, so a subgroup's loads are contiguous, and each block's scale fields are
// decoded once per part instead of once per value.
//
// Loading a part (w_load) is separate from using it (w_dot) so that a kernel can issue the loads
// of all its rows before the first is needed: a matrix-vector product is bound by how many bytes
// are in flight, and an invocation that waits on each load before issuing the next keeps a GPU's
// memory a fraction busy.
//
// A part is RUNS runs of equal length, each under one scale (and min): its dot product with x is
// Σ_runs (scale · Σ q·x − min · Σ x), so the per-value work is an integer-to-float step and one
// multiply-add. Quants become floats by moving their bits into the mantissa of a float of fixed
// exponent, q ↦ a + q·b, with a and b powers of two taken out of the run's sum with Σ x (exact, and
// full-rate, where int-to-float conversion instructions are not). Consecutive invocations' parts
// lie so that their x values fill whole 32-byte sectors.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "graph/dtype.h"

namespace doppler::codegen {

struct WeightParts {
  int64_t values = 0;   // values per part (PV)
  int64_t runs = 0;     // runs per part (RUNS), each PV / RUNS consecutive values of K
  int64_t per_row = 0;  // parts per weight row
  // Whether part p's values are columns p·PV .. p·PV + PV − 1 (in w_part_k's order): plain floats,
  // formats read value by value, the small-block formats' whole blocks (codegen/plane_x.h stores x
  // in planes for such parts).
  bool contiguous = false;
  // GLSL for the weight buffer at the given binding, `const uint PV, RUNS`, and
  //   uint w_part_k(uint p, uint i): the column (0..K) of value i of part p of a row; values
  //     4j..4j+3 are consecutive and 4-aligned whenever PV is a multiple of 4
  //   struct WPart: a part's raw words;  WPart w_load(uint row, uint p): part p of weight row `row`
  //   float w_dot(WPart w, uint p, float xv[PV], float xrun[RUNS]): Σ w·x over the part, given x
  //     at the part's columns and the sum of x over each run
  std::string glsl;
  // For x rounded through q8 blocks (graph/activation_quant.h; block formats only, else empty),
  // given `int sdot4(uint, uint)` (the dot product of four signed bytes) and `float i2f(int)`, a
  // decoder whose parts may be wider (q8_values each; with little work per value, a part's scales
  // are decoded for more of them):
  //   const uint PV8, RUNS8: values and runs per part (PV8 a multiple of 16: a part's x quants are
  //     PV8 / 16 uvec4s); RUN8 = PV8 / RUNS8 values of a run lie in one 32-value block of x
  //   struct WPart8, WPart8 w_load8(uint row, uint p): part p of weight row `row`
  //   uint run_k(uint p, uint r): the first column (of K) of run r of part p
  //   uint x_slot(uint k): where x's four quants k..k+3 (k a multiple of 4) go in a staging of x
  //     by parts: word x_slot % (PV8 / 4) of part x_slot / (PV8 / 4)
  //   float w_dot_q8(WPart8 w, uint p, uvec4 xw[PV8 / 16], float xd[RUNS8], float xrun[RUNS8]): Σ w·x
  //     over the part, given its x quants, each run's block scale and each run's Σ x
  //   optionally `#define W_SHARED_INIT` and void w_shared_init(): fills the decoder's tables in
  //     shared memory; every invocation calls it once, before a barrier and any w_dot_q8 (IQ4's grid)
  //   where q8_x_pairs, `uint x_pair_word(uint own, uint other, bool second)`: x's staging in pairs
  //     (below) from the quants of the four values k..k+3 an invocation packed (own, k a multiple
  //     of 4 in the first half of a 32-value block, or second) and its partner's 16 values away
  int64_t q8_values = 0;
  std::string q8_glsl;
  int64_t q8_shared_bytes = 0;  // the shared memory w_shared_init's tables take
  // x's quants staged in pairs: each invocation of a block's eight exchanges its four with the one
  // 16 values away (a subgroup shuffle) and stores x_pair_word's word at x_slot, so that values j
  // and j + 16 of a block lie side by side (IQ4's table of nibble pairs).
  bool q8_x_pairs = false;
  // Where FloatPartForm::half_dots applies (MXFP4 parts of a whole block), given the extension
  // GL_EXT_shader_explicit_arithmetic_types_float16: x's part as f16 pairs, and the part's dot
  // product in packed f16 multiply-adds (within about 1e-3 of the largest of a product's results,
  // as the f16 operands of the cooperative-matrix kernels):
  //   struct XHalf;  XHalf half_x(float xv[PV]): x's part scaled by a power of two that puts its
  //     largest magnitude in [2^14, 2^15), as f16 pairs
  //   float w_dot_half(WPart w, XHalf x): Σ w·x over the part
  std::string half_glsl;
};

// How the q8 decoders decode (codegen/tuning/gemv.h: GemvConfig's iq4_pairs, q4_0_signed,
// iq4_xs_part and q4_0_part).
struct Q8PartForm {
  int64_t iq4_pairs = 0;     // IQ4: 0, the nibble grids; R, the table of nibble pairs in R replicas
  bool q4_0_signed = false;  // Q4_0: quants as signed bytes 16·(q − 8)
  int64_t iq4_xs_part = 32;  // IQ4_XS: values a part, one sub-block (32) or two (64)
  int64_t q4_0_part = 32;    // Q4_0: values a part, one block (32) or two (64; K a multiple of 64)
};

// How the parts against float x are cut where a type leaves a choice: the values a part of the
// 32-value small-block formats (Q4_0, Q4_1, Q5_1, IQ4_NL, MXFP4) takes, 8 (a word of nibbles) or
// 32 (the whole block: its nibbles one 16-byte load, its scale loaded once).
struct FloatPartForm {
  int64_t small_block_values = 8;
  bool half_dots = false;  // WeightParts::half_glsl, for MXFP4 parts of a whole block
  // The most values a part of plain floats takes: 8 (f16's one 16-byte load) or 4.
  int64_t float_values = 8;
};

// The part decoder of a [rows, k] weight matrix stored as `dtype`.
absl::StatusOr<WeightParts> WeightPartDecoder(uint32_t binding, graph::DType dtype, int64_t k,
                                              const Q8PartForm& q8 = {}, const FloatPartForm& form = {});

// A float x at `binding` and `void load_part_x(uint at, uint p, out float v[PV])`: x's values at
// the columns (w_part_k) of part p of a row whose first value is x's element `at`, in 16-byte loads
// where the parts' runs of 4 values are 4-aligned (parts of a multiple of 4 values; `at` is then a
// multiple of 4, as a row of K values is), else value by value. Where x lies in planes of
// `plane_parts` parts a row (codegen/plane_x.h: contiguous parts of a multiple of 4 values), each
// 16-byte load reads its vector's plane.
std::string PartXGlsl(const WeightParts& parts, uint32_t binding, int64_t plane_parts = 0);

}  // namespace doppler::codegen

namespace doppler::codegen {
// The weight buffer at `binding` and `void w_slice8(uint row, uint k, out float v[8])`: values
// k..k+7 of weight row `row` (k a multiple of 8, and for block formats within one 32-value window,
// which K's block size guarantees), for kernels that stage weight tiles. Each slice decodes its
// block's scale fields once. w_slice8 is `w_slice_decode(w_slice_load(row, k), row, k, v)`:
// w_slice_load only loads (a `WSlice` of the words the slice needs), so that a kernel reading the
// next slice ahead keeps the loads in flight while it multiplies, and decodes them as it stages
// them. Q4_K and Q5_K, whose blocks are whole 16-byte vectors, are read in 16- and 8-byte loads
// (the block header, the slice's quants); other formats through WeightRowsBuffer(binding, "w",
// dtype, k) (plain floats bounds-checked against K and, like Q2_K and Q3_K, read value by value
// through its load_w, converted as they load).
// With `halves`, also `uvec4 w_slice_halves(WSlice s, uint row, uint k)`: the slice as four words
// of f16 pairs in the staged order, values (0, 2), (1, 3), (4, 6), (5, 7) (the pairs a word's bytes
// 0 and 2, 1 and 3 make: the cooperative-matrix kernels stage x in the same order within each
// run of four, which a dot product does not see). Q4_K, Q5_K, Q6_K and Q8_0 decode straight into
// f16 pairs (two values an instruction); other formats through their floats. Their kernels'
// headers enable 16-bit arithmetic.
std::string WeightSlices(uint32_t binding, graph::DType dtype, int64_t k, bool halves = false);

// Whether a slice of an odd 32-value sub-block shares words with the slice at the same place of
// the sub-block before it (Q4_K and Q5_K all of them: its quants are the other nibbles of the same
// bytes; Q6_K its d, scale and high bits), so that a kernel taking both loads those once: for
// these formats WeightSlices with `halves` also gives `WSlice w_slice_pair(WSlice even, uint row,
// uint k)`, the slice at k (an odd sub-block's) from the even one's, loading only the words it does
// not share.
bool SliceWordsPairSubBlocks(graph::DType dtype);
}  // namespace doppler::codegen
