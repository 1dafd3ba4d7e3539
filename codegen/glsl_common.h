// Pieces of GLSL shared by the emitters: the shader header, typed buffer declarations with a
// load function per element type, and workgroup reductions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "graph/dtype.h"

namespace doppler::codegen {

// "#version 460", extensions, the workgroup size and the step-parameter block (binding 0).
std::string ShaderHeader(uint32_t workgroup_size);

// Declares buffer `name` at `binding` holding elements of `dtype`, and a function
// `float load_<name>(uint i)` returning element i as float. f16/bf16 are packed two per uint,
// so no 16-bit storage feature is needed; block formats are WeightRowsBuffer's. `readonly` adds the
// qualifier.
// `coherent` adds that qualifier (for values other workgroups of the dispatch read).
std::string FloatBuffer(uint32_t binding, const std::string& name, graph::DType dtype, bool readonly,
                        bool coherent = false);
// A buffer of floats a kernel writes, `void store_<name>(uint i, float v)` storing element i: as
// f32, or with `half` as f16 one value at a time (16-bit storage, TargetCaps::storage_16bit: for
// values stored as f16, codegen/half_x.h). With `index`, element i at `uint index(uint i)`, which
// the caller defines (for values stored in planes, codegen/plane_x.h).
std::string OutputBuffer(uint32_t binding, const std::string& name, bool half, const std::string& index = "");

// A readonly [rows, k] weight at `binding` in any type, as it lies on the device
// (codegen/device_layout.h), with `float load_<name>(uint i)`: element i, row-major. Block formats
// also get `uint <name>_word(uint i)`, `<name>_byte(uint b)` and `float <name>_half(uint b)` (word,
// byte and f16 at a byte offset of the buffer), and split rows (Q6_K, Q5_0) the buffer as 16-byte
// vectors, `uvec4 <name>4[]`. Plain types are FloatBuffer's.
std::string WeightRowsBuffer(uint32_t binding, const std::string& name, graph::DType dtype, int64_t k);

// The grid IQ4_NL's and IQ4_XS's nibbles index (graph::kIQ4NLValues) as `const uvec4 IQ4NL_BYTES`
// (value n in byte n % 4 of word n / 4), `uint iq4_byte_at(uint n)` and `int iq4_value(uint n)`:
// value n as an unsigned byte and as an int, `uint iq4_bytes(uint)`: four nibbles (one a byte) as
// their four values (signed bytes), for integer dot products, and `uvec2 iq4_word(uint)`: a word
// of nibbles as the values of its low and of its high nibbles (declared once however often
// included).
std::string Iq4NlValuesGlsl();
// The same for MXFP4's grid (graph::kMXFP4Values: MXFP4_BYTES, mxfp4_byte_at, mxfp4_value,
// mxfp4_bytes, mxfp4_word), with `float e8m0_half(uint e)`: a block's scale byte as the grid's
// multiplier, 2^(e - 128), and `vec2 mxfp4_pair(uint q, uint shift)`: the values of the nibbles at
// bits shift and 16 + shift of q as floats, 2^-15 times the grid's.
std::string Mxfp4ValuesGlsl();

// FloatBuffer for a float buffer whose length is a multiple of 4, declared in 4-element vectors
// (vec4, or uvec2 for f16/bf16) so that it also has `vec4 load4_<name>(uint i)`: elements i..i+3
// (i a multiple of 4) in one 16- or 8-byte load.
std::string FloatQuadBuffer(uint32_t binding, const std::string& name, graph::DType dtype, bool readonly);
// For a FloatQuadBuffer `name`, its load4 apart from its conversion, for a kernel that holds many
// quads a while: `RAW4_<name> raw4_<name>(uint i)` (the quad as stored: a vec4, or a uvec2 of
// 16-bit pairs, half the registers) and `vec4 unraw4_<name>(RAW4_<name> q)`.
std::string FloatQuadRaw(const std::string& name, graph::DType dtype);

// Declares an int buffer `name` at `binding`.
std::string IntBuffer(uint32_t binding, const std::string& name, bool readonly);

// Reductions over the workgroup: `float wg_sum(float)` and `float wg_max(float)`. Every invocation
// of the workgroup must call them (they contain barriers). With subgroup arithmetic, each
// subgroup reduces its own values first and shared memory takes one value per subgroup (two
// barriers instead of a tree's log2 of the workgroup); without, a shared-memory tree.
std::string WorkgroupReductions(uint32_t workgroup_size, bool subgroup_arithmetic);

// The first maximum over the workgroup (graph's argmax: the larger value, on ties the lower index),
// for kernels with `const uint WG, NONE = 0xFFFFFFFFu` declared: `bool earlier_max(float v, uint i,
// float best, uint best_i)` (whether value v at index i comes before (best, best_i); index NONE is
// no value) and `uint first_max(inout float best, uint best_i)`: the workgroup's index, and its
// value in best, in invocation 0 (every invocation must call it; it contains barriers, and a caller
// that calls it again must pass a barrier first). With subgroup arithmetic, subgroupMax then subgroupMin over the indices holding
// it reduce each subgroup, and the first subgroup reduces the subgroups'; else a shared-memory tree.
std::string FirstMaxReductionGlsl(bool subgroup_arithmetic);

// `bool last_arrival()`: whether this workgroup is the last of `arrivals` (a GLSL expression) to
// arrive at `counter` (a uint of a coherent buffer, zero before the first arrives); the last one's
// reads of what the others wrote to coherent buffers before arriving then see it (it should set
// the counter back to zero when it is done, for the next dispatch). Every invocation must call it,
// uniformly (it passes barriers); a workgroup calls it once.
std::string LastArrivalGlsl(const std::string& counter, const std::string& arrivals);

// Replaces every "{{KEY}}" in `tmpl` by its value.
std::string Fill(const std::string& tmpl, const std::vector<std::pair<std::string, std::string>>& values);

// Rows of a [rows, cols] value as a GLSL expression: "step.n_tokens" when rows is T.
std::string RowsExpr(bool rows_are_tokens, int64_t static_rows);

}  // namespace doppler::codegen

namespace doppler::codegen {
// A float constant as a GLSL literal that round-trips exactly to the same float32.
std::string FloatLiteral(double v);

// `float act_silu(float)` and `float act_gelu_tanh(float)`: graph::Activate's formulas, the one
// GLSL copy every kernel uses (elementwise ops, matmul epilogues).
std::string ActivationGlsl();
// `float act_clamped_swiglu(float gate, float up)`: graph::ClampedSwiglu with these constants.
std::string ClampedSwigluGlsl(double alpha, double limit);
}  // namespace doppler::codegen

namespace doppler::codegen {
// `float <fn>(uint t, uint e)`: element e of row t of a [T, width] value read by `load` (a GLSL
// function float(uint index)), rotated by rotary position embedding at row t's position
// (`row_position(t)`: the kernel declares codegen::StepRowsGlsl first), with the cos/sin table
// `table` ([positions, head_dim/2, 2], f32) — graph::Rope's formula.
// neox rotates (j, j + head_dim/2) of each head; interleaved rotates (2j, 2j + 1).
std::string RopeFunction(const std::string& fn, const std::string& load, const std::string& table, int64_t width,
                         int64_t head_dim, bool neox);

// A head norm prologue's loader for RopeFunction: the norm weight `weight` (head_dim values of
// `dtype`) at `binding`, and `float <fn>(uint i)`: src[i] times its head dimension's weight plus
// `offset` (the head's 1 / rms is applied by the caller, after the rotation).
std::string HeadNormLoad(uint32_t binding, graph::DType dtype, const std::string& src, int64_t head_dim, double offset,
                         const std::string& weight = "nw", const std::string& fn = "load_normed");
}  // namespace doppler::codegen
