// How a weight's bytes lie in device memory, where that differs from its storage format (GGUF's
// block layouts, which the interpreter and the loaders read).
//
// Q6_K blocks are 210 bytes and Q8_0 blocks 34, so their fields fall on no common boundary: every
// other block starts 2 bytes off a 32-bit word, and none of their quants can be read as 16-byte
// vectors. On the device each row of these formats is split by field ("split rows"): first the
// quants of all its blocks (Q6_K's ql and qh, 192 bytes a block; Q8_0's 32), then Q6_K's int8
// scales (16 bytes a block), then the blocks' f16 d, then padding to a multiple of 16 bytes. Every
// block's quants and scales are then whole 16-byte vectors, with no more bytes than stored but for
// the row's padding.
//
// On the H100 the Q6_K quants read as 16-byte vectors took Llama-3.2-1B's Q6_K down projections
// from 11.8 to 11.0 µs even with blocks padded to 224 bytes (LM heads grew with their bytes: the
// 1B's 86.9 -> 92.2 µs), which split rows do without. (Before, blocks were padded to whole words:
// 212 and 36 bytes.) Every other type lies as stored.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "graph/dtype.h"

namespace doppler::codegen {

// Where one row of k values of `dtype` lies on the device.
struct DeviceRow {
  int64_t bytes = 0;      // the row's bytes (a multiple of 16 for split rows)
  bool split = false;     // split by field (Q6_K, Q8_0)
  int64_t scales_at = 0;  // split rows: the first block's scales (Q6_K), from the row's start
  int64_t d_at = 0;       // split rows: the first block's f16 d
};
DeviceRow DeviceRowOf(graph::DType dtype, int64_t k);

// Bytes of `n` values of `dtype` on the device, in rows of `k` (n and k multiples of the block size
// for block formats).
size_t DeviceByteSize(graph::DType dtype, int64_t n, int64_t k);

// A row's geometry as template values for GLSL decoders (codegen/glsl_common.h Fill):
// {{ROW_BYTES}}, {{SC_AT}} and {{D_AT}} (0 where the row is not split).
std::vector<std::pair<std::string, std::string>> DeviceRowValues(graph::DType dtype, int64_t k);

// A [rows, k] weight's bytes as stored (graph::ByteSize(dtype, rows * k) of them) laid out for the
// device.
std::vector<uint8_t> ToDeviceLayout(graph::DType dtype, int64_t k, std::vector<uint8_t> stored);

}  // namespace doppler::codegen
