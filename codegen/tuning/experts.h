// The expert products' choices (codegen/emit_experts.cc renders them): from how many rows of x a
// product groups its rows by expert, and the shape of the matrix-vector kernel below that.
#pragma once

#include <cstdint>

#include "absl/status/statusor.h"
#include "codegen/target_caps.h"
#include "codegen/tuning/tuning.h"
#include "graph/dtype.h"

namespace doppler::codegen::tuning {

// Rows of x from which an expert product groups its rows (a token's slot each) by expert and
// runs each group as a tiled product, reading an expert's weights once a tile of its rows, instead
// of a matrix-vector pass a row that reads them once a row. Prefill chunks and large mixed steps
// take it; decode steps, whose rows mostly choose different experts, keep the matrix-vector
// kernel, which also sums a token's slots as it goes (codegen/in_matmul.h). 64 is where the dense
// products take their tiles too (kCoopMinRows). Measured (prefill of 512 tokens on the H200:
// gpt-oss-20b 431 → 2,490 tok/s, qwen3-30b-a3b 1,153 → 6,498): bench/RESULTS.md, "issue 32:
// expert products grouped by expert".
inline constexpr int64_t kExpertsGroupedFrom = 64;

// kExpertsGroupedFrom, or DOPPLER_TUNE's experts.grouped_from (at least 1).
absl::StatusOr<int64_t> ExpertsGroupedFrom();

// The most expert weight values a token's product reads (its slots times an expert's rows times K)
// for which the readers of a plain norm compute it as they load x (codegen/in_matmul.h's plain norm
// in x), each of the product's workgroups then loading the norm's weight beside x. On the H200,
// Qwen3-30B-A3B's gated product (8 slots of 1,536 rows of 2,048: 25.2 M) took 1.1 µs a layer more
// and its output projection lost the norm's tail (3.0 µs); GPT-OSS-20B's (4 slots of 5,760 rows of
// 2,880: 66.4 M) took 10.7 µs more, against the norm's level of 3.7; and at 16 rows Qwen3-30B-A3B's
// step took 15.08 ms against 14.71, hence one row only (bench/RESULTS.md, "a plain norm in its
// readers"). Past the bound the router writes the norm's row, each of its workgroups a share, which
// costs it less than the expert products' loads of the weight: Qwen3-30B-A3B tg64 446.8 against
// 438.3 with the readers computing it, GPT-OSS-20B 417.4 against 414.4 with the router's workgroup
// 0 writing the whole row (bench/RESULTS.md, "the norm's row a share a workgroup"). Hence 0: the
// router writes it wherever it is the norm's first reader.
inline constexpr int64_t kPlainNormInExpertsUpTo = 0;
// kPlainNormInExpertsUpTo, or DOPPLER_TUNE's experts.norm_upto (at least 0).
absl::StatusOr<int64_t> PlainNormInExpertsUpTo();

// The matrix-vector kernel's shape: a workgroup computes `cols` output columns of a token's slot
// (or of its slots' weighted sum), its invocations taking the rows' parts (of every slot, where
// summing) as one list of items and reducing the columns' sums over the workgroup once. The most
// columns, up to kExpertGemvMaxCols, that keep kExpertGemvMinInvocations invocations in the
// dispatch: the columns of a workgroup share each load of x (a summed product's x is every slot's,
// read again by each workgroup), but each column a workgroup takes costs the dispatch invocations,
// and with too few the loads in flight cannot keep the memory busy. Teams of a subgroup each, a
// workgroup of several, reducing with subgroup adds, were slower at every shape measured
// (gpt-oss-20b tg32 215.8 tok/s against 64.5–185.7): bench/RESULTS.md, "The expert matrix-vector
// kernel's teams"; the list and the columns' rule took qwen3-30b-a3b's decode from 259 to 344
// tok/s: "the expert matrix-vector kernel's list of slot parts".
struct ExpertGemvConfig {
  int64_t cols = 4;  // output columns a workgroup computes: 1, 2, 4, 8 or 16
};
inline constexpr int64_t kExpertGemvMaxCols = 4;
// With decoders that no longer bound the kernel, 4 columns beat 2 on the H200 at 184K invocations
// (gpt-oss-20b's down product: 25.0 -> 18.7 us a layer) and 1 at 64K (qwen3-30b-a3b's: 12.1 ->
// 11.4): bench/RESULTS.md, "MXFP4 decoded through f16 bits".
inline constexpr int64_t kExpertGemvMinInvocations = int64_t{1} << 15;
// The widest workgroup.
inline constexpr int64_t kExpertGemvMaxWorkgroup = 256;

// The workgroup for a list of `items` and `cols` columns: as many invocations as the list has
// items, up to kExpertGemvMaxWorkgroup (half as many where that leaves fewer idle in the last
// round, tuning::HalfWorkgroupIdlesLess), and one a column at least (each writes one); whole
// subgroups where the device reduces with subgroup arithmetic, else a power of two (the reduction's
// tree in shared memory).
uint32_t ExpertGemvWorkgroup(const TargetCaps& caps, int64_t items, int64_t cols);

// The shape for a dispatch of `column_workgroups` workgroups at one column each (tokens × slot
// groups × columns) over lists of `items`, with DOPPLER_TUNE's experts.cols in place of the
// choice's. A workgroup computing several column blocks in turn (its x loaded once for them),
// with or without each step's loads issued ahead of the previous step's dot products, lost at
// every width measured on the H200 (gpt-oss-20b tg64 401.9 tok/s against 399.8 with loads ahead,
// 358.7, 313.4 and 274.2 with 2, 4 and 8 blocks): bench/RESULTS.md, "the expert kernel's loop".
absl::StatusOr<ExpertGemvConfig> ChooseExpertGemv(const TargetCaps& caps, int64_t items, int64_t column_workgroups);

// Whether a decode step's expert products of `dtype` weights round x through q8 blocks and take
// integer dot products (attr x_quant, as the dense products' matrix-vector kernel does;
// runtime/decode_activations.h), for x rows of `x_width` values (a token's, or its slots' side by
// side): where the device's shared memory holds such a row as q8 (9/8 bytes a value, the
// matrix-vector kernel staging it whole) in half of it, leaving kExpertGemvSharedBesidesX at least
// to the kernel's reductions and ranking; but MXFP4, whose values decode through f16 bits for less
// than the q8 decoder's grid lookups and every workgroup's staging of x cost. On the H200,
// Qwen3-30B-A3B (Q4_K_M) decoded at 434.7 tok/s against 398.0 with exact x, GPT-OSS-20B (MXFP4
// experts) at 256.5 against 413.3 (bench/RESULTS.md, "expert products on q8 activations"). DOPPLER_TUNE's experts.q8=0 keeps every
// expert product on exact x, =1 takes q8 for MXFP4 too.
absl::StatusOr<bool> ExpertsTakeQ8(const TargetCaps& caps, graph::DType dtype, int64_t x_width);
// What the matrix-vector kernel's shared memory holds besides x: its reductions (up to
// kExpertGemvMaxCols columns of gate and up and a norm's squares for kExpertGemvMaxWorkgroup
// invocations, 9 KiB), a ranking's (up to 2 KiB and the chosen experts), the blocks' scales where no
// subgroup shuffles (2 KiB) and the q8 decoders' tables.
inline constexpr int64_t kExpertGemvSharedBesidesX = 16 * 1024;
// The fewest invocations a workgroup of the matrix-vector kernel has where it stages x as q8: 8 (a
// block's staging invocations), or DOPPLER_TUNE's experts.q8_wg (8, 32, 64, 128 or 256), more of
// them staging x sooner, idle past the items.
absl::StatusOr<int64_t> ExpertGemvQ8LeastWorkgroup();
// The shared memory a row of `values` of x staged as q8 takes: a byte a quant, a float a block.
int64_t Q8StagedBytes(int64_t values);

// The values a part of the 32-value small-block formats (MXFP4: gpt-oss's experts) takes against
// float x in the matrix-vector kernel (codegen/weight_parts.h FloatPartForm): kExpertGemvBlockPart,
// or DOPPLER_TUNE's experts.part (8 or 32).
absl::StatusOr<int64_t> ExpertGemvBlockPart();
// The whole block, its nibbles one 16-byte load and its scale one byte load, against a word and
// the scale's byte for every 8 values: gpt-oss-20b's down product 17.9 -> 16.0 us a layer on the
// H200, its decode 394.5 -> 402.2 tok/s (bench/RESULTS.md, "float weights in 16-byte loads").
inline constexpr int64_t kExpertGemvBlockPart = 32;

// Whether MXFP4's whole-block parts take x as f16 pairs and multiply in packed f16
// (codegen/weight_parts.h: FloatPartForm::half_dots): the choice (value 1) wherever the device has
// f16 arithmetic, DOPPLER_TUNE's experts.half (0 or 1) in place of it. The pairs halve the
// conversions and multiply-adds a weight value, which bound the MXFP4 kernels as much as their loads
// do: gpt-oss-20b's decode 457.4 -> 489.2 tok/s on the H200, its gated level 26.3 -> 22.5 us a
// layer and its down product 14.9 -> 13.2, the 16-token prefill 912 -> 1,012 (bench/RESULTS.md,
// "thirty-fourth session"). x is scaled into [2^14, 2^15) a part and the pairs are summed in f16
// over a part: the results lie within about 1e-3 of the largest rather than f32's rounding (the
// gpt_oss fixture's logits with published MXFP4 experts 1.6e-3 of the row's largest from the
// dequantized model's after a prefill on the H200, 2.6e-3 on lavapipe).
absl::StatusOr<DeviceChoice> ExpertGemvHalfDots(const TargetCaps& caps);

}  // namespace doppler::codegen::tuning
