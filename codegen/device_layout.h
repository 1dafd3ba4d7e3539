// How a weight's bytes lie in device memory, where that differs from its storage format (GGUF's
// block layouts, which the interpreter and the loaders read).
//
// Q6_K blocks are 210 bytes and Q8_0 blocks 34, so every other block of a row starts 2 bytes off a
// 32-bit word, and each of its 32-bit reads would take two loads and a funnel shift. On the device
// each Q6_K block is followed by 2 bytes of padding (212 bytes), and each Q8_0 block has 2 bytes of
// padding after its f16 scale (36 bytes: d, padding, the 32 quants), so that every field of every
// block starts on a word and the kernels read it in single 32-bit loads. On the H100 the Q6_K
// padding took Llama-3.2-1B's Q6_K down projections from 124 to 109 µs a step (1,020 -> 1,046
// tok/s) and Llama-3.1-8B's decode from 229.5 to 240.7 tok/s, for 1% more bytes; the Q8_0 padding
// (6% more bytes) Llama-3.2-1B in Q8_0 from 928 to 987 tok/s (pp512 34,300 -> 37,700) and
// Gemma-3-1B's mostly Q8_0 Q4_K_M from 679 to 687. Every other type lies as stored.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "graph/dtype.h"

namespace doppler::codegen {

// Bytes of one block of `dtype` on the device (of one element for non-block types).
int64_t DeviceBlockBytes(graph::DType dtype);
// Where a Q8_0 block's quants start on the device.
inline constexpr int64_t kQ8_0DeviceQuantOffset = 4;

// Bytes of `n` values of `dtype` on the device (n a multiple of the block size for block formats).
size_t DeviceByteSize(graph::DType dtype, int64_t n);

// The device's block geometry as template values for GLSL decoders (codegen/glsl_common.h Fill):
// {{Q6K_BLOCK}} and {{Q8_0_BLOCK}} (bytes per block), {{Q8_0_QS}} (where a Q8_0 block's quants start).
std::vector<std::pair<std::string, std::string>> DeviceLayoutValues();

// A weight's bytes as stored (graph::ByteSize(dtype, n) of them) laid out for the device.
std::vector<uint8_t> ToDeviceLayout(graph::DType dtype, std::vector<uint8_t> stored);

}  // namespace doppler::codegen
