// A kernel's config: the family's struct it was rendered from, carried by the kernel
// (codegen::Kernel::config) so that lowering's list names it (`doppler graph --lowered`). The
// families with one shape (norms, elementwise ops, copies, rope, sampling, argmax, the router)
// carry none.
#pragma once

#include <string>
#include <variant>

#include "codegen/tuning/attention.h"
#include "codegen/tuning/coop.h"
#include "codegen/tuning/coop_rows.h"
#include "codegen/tuning/experts.h"
#include "codegen/tuning/gemm.h"
#include "codegen/tuning/gemv_shape.h"

namespace doppler::codegen::tuning {

using KernelConfig =
    std::variant<std::monostate, GemvShape, GemvQ8Shape, GemmConfig, CoopConfig, CoopRowsConfig, AttentionConfig,
                 ExpertGemvConfig>;

// The config's fields as `key=value` words (the names of the struct's fields), "-" for none.
std::string ConfigText(const KernelConfig& config);

}  // namespace doppler::codegen::tuning
