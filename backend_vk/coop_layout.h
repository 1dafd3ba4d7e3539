// Where NVIDIA's cooperative-matrix fragments keep their elements, checked on the device.
//
// VK_NV_cooperative_matrix leaves a fragment's element order to the implementation. NVIDIA's keeps
// them where its mma instructions do; a kernel that knows that can fill a fragment element by
// element (decoding weights straight into it, codegen/matmul_coop_rows.cc's w_direct) instead of
// going through shared memory. The context checks the order once, on opening a device with the
// extension, by loading fragments of known values and reading their elements back, so that such
// kernels run only where the order is the one they assume (codegen/target_caps.h:
// coop_fragments_mma).
#pragma once

#include <span>

#include "absl/status/statusor.h"

namespace doppler::vk {

class Context;

// Whether lane 4g + t holds element e of a 16 × `cols` fragment (cols 8 or 16) at row
// g + 8·⌊e / (cols/4)⌋, column 2t + e % 2 + 8·(⌊e/2⌋ % (cols/8)). `elements`: lane l's element e
// at l · cols / 2 + e, each the index row · cols + column of the value it holds.
bool HoldsMmaLayout(std::span<const float> elements, int cols);

// Loads 16 × 16 f16 fragments (and 16 × 8 ones where `with_16x8`) of their own indices on `ctx`'s
// device and checks each with HoldsMmaLayout. The device must have VK_NV_cooperative_matrix's
// 16 × 16 × 16 f16 shape (and 16 × 8 × 16 for `with_16x8`).
absl::StatusOr<bool> CheckCoopFragmentLayout(Context& ctx, bool with_16x8);

// The same for a 16 × 16 fragment of f32 (the products' sums): whether a kernel may rescale,
// mask and store its elements knowing their rows and columns (codegen/target_caps.h:
// coop_accumulators_mma).
absl::StatusOr<bool> CheckCoopAccumulatorLayout(Context& ctx);

}  // namespace doppler::vk
