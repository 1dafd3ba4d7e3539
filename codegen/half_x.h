// Values stored as f16 between two kernels. A value whose every reader rounds it to f16 before
// using it is written as f16 by the kernel that produces it, so that its readers read half the
// bytes: each workgroup of the coop_rows variant reads all its rows of x again from the L2 cache,
// 7 to 28 times the bytes of the weights it decodes (bench/RESULTS.md, "eleventh session"). No
// result changes: the value is rounded to f16 once, by its producer instead of by each reader.
// A fact of the step graph, the plan's bucket and the device, derived here on each lowering and
// stored nowhere (as codegen/in_matmul.h's): the producer's output and its readers' x consult it.
//
//  - Producers: a matmul without split outputs (its `store`, whatever its variant), an attention
//    (its output `o`, whatever its variant). Not a graph output (read back by the host).
//  - Readers: matmuls that read the value as x alone, without a norm prologue or x_quant, that
//    take the coop_rows variant at the bucket (its products multiply f16 fragments of x), K a
//    multiple of 4 (x read four values at a time).
//  - The device writes 16-bit values to storage buffers (TargetCaps::storage_16bit).
//
// DOPPLER_TUNE's matmul.half_x (1 or 0, InMatMulRules::half_x) turns the rule on or off.
#pragma once

#include <cstdint>

#include "codegen/in_matmul.h"
#include "codegen/target_caps.h"
#include "graph/graph.h"

namespace doppler::codegen {

// Whether `v` is stored as f16 in a plan of `tokens` on `caps`.
bool HalfX(const graph::Graph& g, const graph::Node& v, const TargetCaps& caps, int64_t tokens,
           const InMatMulRules& rules);

}  // namespace doppler::codegen
