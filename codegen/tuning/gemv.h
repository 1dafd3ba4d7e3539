// The matrix-vector matmuls' choices (codegen/matmul_gemv.cc and matmul_gemv_q8.cc render them).
#pragma once

#include <cstdint>

#include "absl/status/statusor.h"
#include "graph/dtype.h"

namespace doppler::codegen::tuning {

// Rows of x a matrix-vector workgroup takes at most: the largest bucket those kernels take
// (codegen/matmul.h: kGemvMaxBucket), as one block of rows.
inline constexpr int64_t kGemvRowsLimit = 16;

// The most values a part of float weights takes in the float matrix-vector kernel for m rows of x
// (codegen/weight_parts.h FloatPartForm::float_values), or DOPPLER_TUNE's gemv.float_part (4 or 8).
// 16-bit weights at one row: 4, so that neighbouring invocations' 16-byte loads of x neighbour
// each other (a subgroup's load reads 4 cache lines, where parts of 8 touched 8, half of each)
// and the weights come in 8-byte loads. On the H200, GPT-OSS-20B's decode took 436.2 / 438.1
// tok/s with parts of 8 and 448.4 / 448.0 with 4 (its LM head 340.8 -> 307.8 us): bench/RESULTS.md,
// "float parts of four values"; its q+k+v, normalising x as it reads it, 13.6 us with 4 against
// 14.0 with 8 ("thirty-third session"). Else 8: where the kernel computes a residual norm of x as
// it reads it (three loads of x a vector), GPT-OSS-20B's q+k+v (before its residual add joined the
// route sum) took 16.0 us with 8 against 16.9 with 4;
// f32 weights (parts of 8 are two 16-byte loads each), Qwen3-30B-A3B's router (one round of its
// workgroups' parts of 8) 4.05 against 4.21, its decode 468 tok/s against 464; more rows of x,
// whose parts' weights serve every row, 16-row prefill steps 936 tok/s against 927.
absl::StatusOr<int64_t> GemvFloatPart(int64_t m, graph::DType w_dtype, bool restated);

struct GemvConfig {
  // Rows of x a workgroup takes (TM): a bucket of m rows is ceil(m / rows) blocks of rows, and each
  // block's workgroups read the weights again.
  int64_t rows = 1;
  // The q8 kernel with teams of subgroups: the most workgroups a block of rows takes (each stages
  // x); 0: the kernel's rule. DOPPLER_TUNE's gemv_q8.workgroups (1 .. 65,535).
  int64_t workgroups = 0;
  // The q8 kernel's lookup of IQ4_NL's and IQ4_XS's grid values: 0, the grid in shared memory once
  // for each byte of a word (a load a value); R (1, 2, 4, 8, 16 or 32), a table of nibble pairs (a
  // load for the two values of a byte of quants, x staged to match), in R replicas that spread a
  // subgroup's loads over the banks (R KiB of shared memory). DOPPLER_TUNE's gemv_q8.iq4_pairs.
  int64_t iq4_pairs = 0;
  // The q8 kernel's Q4_0 quants: 1, as the signed bytes 16·(q − 8) (no sum of x a part); 0, as
  // unsigned bytes q, less 8 · the sum of x. DOPPLER_TUNE's gemv_q8.q4_0_signed.
  int64_t q4_0_signed = 0;
  // The q8 kernel's IQ4_XS parts: 32 values (a sub-block) or 64 (two, under one header load and
  // address). DOPPLER_TUNE's gemv_q8.iq4_xs_part.
  int64_t iq4_xs_part = 32;
  // The q8 kernel's Q4_0 parts: 32 values (a block) or 64 (two, their d's one word), the latter only
  // for rows of a multiple of 64 values (others keep 32). DOPPLER_TUNE's gemv_q8.q4_0_part.
  int64_t q4_0_part = 32;
  // The q8 kernel's iterations whose weight parts a lane keeps in flight (the shape's depth, and
  // its flat list's); 0: the shape's rule. DOPPLER_TUNE's gemv_q8.depth (1 .. 8).
  int64_t depth = 0;
  // The float kernel's output columns a workgroup (RN) and its invocations; 0: the shape's rules.
  // DOPPLER_TUNE's gemv.cols (1, 2, 4, 8 or 16) and gemv.wg (32 .. 1024, powers of two).
  int64_t cols = 0;
  int64_t wg = 0;
};

// What the q8 kernel's decoding choices depend on beside the shape: the weights' type, and whether
// a block's eight staging invocations exchange values through subgroup shuffles (x staged in pairs
// needs them).
struct GemvQ8Weights {
  graph::DType dtype = graph::DType::kF32;
  bool shuffles = false;
};

// The float kernel's config for m rows whose weight parts have `part_values` values (PV): all of
// them where each invocation's x values for them (rows · PV floats) fit the register budget, or
// DOPPLER_TUNE's gemv.rows (1 .. kGemvRowsLimit; at most m are used).
absl::StatusOr<GemvConfig> ChooseGemv(int64_t m, int64_t part_values);

// The q8 kernel's config for m rows of k values: all of them where their q8 staging (9/8 bytes a
// value) fits kOneSegmentBytes of shared memory, else the fewest blocks whose rows do, each of
// about as many rows; or DOPPLER_TUNE's gemv_q8.rows. For `weights`' type its decoding: IQ4's
// table of nibble pairs in 16 replicas where the device shuffles and the table fits kOneSegmentBytes
// beside the rows' staging, else the nibble grids; IQ4_XS's parts of 32 values; Q4_0's quants
// signed. An override of gemv_q8.iq4_pairs above 0 for IQ4 weights on a device that does not
// shuffle is an error.
absl::StatusOr<GemvConfig> ChooseGemvQ8(int64_t m, int64_t k, const GemvQ8Weights& weights = {});
// Staged in one segment, x serves every row group a workgroup takes; staged in segments, it is
// staged again for every row group, so a workgroup takes one, and the dispatch stages x once per
// few weight rows (bench/RESULTS.md, "Matrix-vector kernels for up to 16 rows"). 36 KiB: eight rows
// of 4,096 values, with the reductions' shared memory, in NVIDIA's 48 KiB.
inline constexpr int64_t kOneSegmentBytes = 36 * 1024;

}  // namespace doppler::codegen::tuning
