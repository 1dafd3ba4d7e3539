// How a weight's bytes lie in device memory, where that differs from its storage format (GGUF's
// block layouts, which the interpreter and the loaders read).
//
// Q6_K blocks are 210 bytes, so their fields fall on no common boundary: every other block starts
// 2 bytes off a 32-bit word, and none of their quants can be read as 16-byte vectors. On the device
// each Q6_K row is split by field ("split rows"): first the quants of all its blocks (ql and qh,
// 192 bytes a block), then their int8 scales (16 bytes a block), then their f16 d, then padding to
// a multiple of 16 bytes. Every block's quants and scales are whole 16-byte vectors, with no more
// bytes than stored but for the row's padding. On the H100, against blocks padded to 212 bytes
// (read in words): Llama-3.2-1B's decode 1,468 -> 1,499 tok/s (its Q6_K down projections 11.7 ->
// 10.4 µs, its LM head 86.7 -> 85.5); Llama-3.1-8B's Q6_K down projections 26.5 -> 25.6 µs, but
// the level of its Q6_K v projections (beside q and k) 6.1 -> 6.9 µs, its decode 382 -> 381.
//
// Q5_0 blocks (22 bytes: f16 d, 32 fifth bits, 16 bytes of nibbles) lie in split rows too: the
// nibbles (16 bytes a block, one 16-byte vector), then the fifth bits (a word a block, in the
// scales' place), then the f16 d.
//
// The other blocks whose size is no multiple of 16 bytes lie in split rows as well, so that their
// quants are whole 16-byte vectors and every field starts on a word: Q4_0 and IQ4_NL (18 bytes: f16
// d, 16 bytes of nibbles), Q4_1 (20: f16 d and m, one word on the device), Q5_1 (24: d and m, the
// fifth bits in the scales' place, the nibbles), Q2_K (84: 16 scale bytes, 64 bytes of 2-bit quants,
// f16 d and dmin as one word), Q3_K (110: 32 bytes of high bits and 64 of low bits as its quants,
// 12 scale bytes, f16 d), IQ4_XS (136: its 8-byte header, f16 d and the 6-bit scales, as its
// scales, no d of its own; 128 bytes of nibbles) and MXFP4 (17: its E8M0 scale byte as its scales,
// no d; 16 bytes of nibbles).
//
// Q8_0 blocks (34 bytes) get 2 bytes of padding after their f16 scale (36 bytes: d, padding, the
// 32 quants), so that every field starts on a word: Llama-3.2-1B in Q8_0 928 -> 987 tok/s. Split
// rows made it faster still (1,143 -> 1,192) but Gemma-3-1B's Q8_0 matrices (rows of 1,152 values)
// slower (its LM head 126.5 -> 137.8 µs, decode 946 -> 934), whatever the rows' alignment (16 to
// 256 bytes). Every other type lies as stored.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "graph/dtype.h"

namespace doppler::codegen {

// A Q8_0 block on the device, and where its quants start.
inline constexpr int64_t kQ8_0DeviceBlock = 36, kQ8_0DeviceQuantOffset = 4;

// Where one row of k values of `dtype` lies on the device.
struct DeviceRow {
  int64_t bytes = 0;      // the row's bytes (a multiple of 16 for split rows)
  bool split = false;     // split by field (every block format but Q8_0, Q4_K and Q5_K)
  int64_t scales_at = 0;  // split rows: the first block's scales (Q5_0, Q5_1: fifth bits; MXFP4: E8M0 bytes), from the row's start
  int64_t d_at = 0;       // split rows: the first block's f16 d (Q4_1, Q5_1, Q2_K: f16 d and min, a word)
};
DeviceRow DeviceRowOf(graph::DType dtype, int64_t k);

// Bytes of `n` values of `dtype` on the device, in rows of `k` (n and k multiples of the block size
// for block formats).
size_t DeviceByteSize(graph::DType dtype, int64_t n, int64_t k);

// A row's geometry as template values for GLSL decoders (codegen/glsl_common.h Fill):
// {{ROW_BYTES}}, {{SC_AT}} and {{D_AT}} (0 where the row is not split), {{Q8_0_BLOCK}} and
// {{Q8_0_QS}}.
std::vector<std::pair<std::string, std::string>> DeviceRowValues(graph::DType dtype, int64_t k);

// A [rows, k] weight's bytes as stored (graph::ByteSize(dtype, rows * k) of them) laid out for the
// device.
std::vector<uint8_t> ToDeviceLayout(graph::DType dtype, int64_t k, std::vector<uint8_t> stored);

}  // namespace doppler::codegen
