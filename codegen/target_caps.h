// The target device as codegen sees it (filled from the device by backend_vk, or from
// codegen/known_targets.h for a known one).
#pragma once

#include <cstdint>

#include "codegen/device_class.h"

namespace doppler::codegen {

// What the target device offers that changes the generated code, and its class, which says which
// measurements a tuning choice for it stands on (codegen/tuning/tuning.h).
struct TargetCaps {
  DeviceClass device_class = DeviceClass::kGeneric;
  uint32_t subgroup_size = 32;
  uint32_t min_subgroup_size = 32;  // the smallest a shader may get (devices with varying sizes)
  uint32_t max_shared_memory = 16384;
  uint32_t max_workgroup_invocations = 128;
  bool subgroup_arithmetic = false;  // subgroupAdd etc. in compute shaders
  bool subgroup_shuffle = false;     // subgroupShuffleXor etc. in compute shaders
  // VK_NV_cooperative_matrix enabled with its 16 x 16 x 16 shape of f16 products summed in f32, f16
  // arithmetic, subgroup arithmetic and shuffles, and subgroups of 32
  bool coop_matrix_nv = false;
  // Its 16 x 8 x 16 shape too (f16 → f32), for products of 8 rows of x (coop_rows' x8)
  bool coop_matrix_nv_16x8 = false;
  // Its f16 fragments keep their elements where NVIDIA's mma instructions do (lane 4g + t: element
  // e of a 16 × C fragment at row g + 8·⌊e / (C/4)⌋, column 2t + e % 2 + 8·(⌊e/2⌋ % (C/8))), as
  // checked on the device (backend_vk/coop_layout.h), so that a kernel may fill a fragment element
  // by element (coop_rows' w_direct)
  bool coop_fragments_mma = false;
  // Its 16 × 16 f32 fragments keep their elements so too (lane 4g + t: element e at row
  // g + 8·⌊e / 4⌋, column 2t + e % 2 + 8·(⌊e/2⌋ % 2)), so that a kernel may rescale, mask and store
  // a product's sums knowing each one's row and column (the one-pass prefill attention)
  bool coop_accumulators_mma = false;
  // Dot products of packed 8-bit integers (SPV_KHR_integer_dot_product), for matmuls whose x is
  // rounded through q8 blocks (attr x_quant)
  bool integer_dot_product = false;
  // 16-bit float arithmetic in shaders (shaderFloat16), for the expert kernel's f16 pairs
  // (codegen/weight_parts.h: FloatPartForm::half_dots)
  bool float16_arithmetic = false;
  // 16-bit values written to storage buffers (storageBuffer16BitAccess), for values stored as f16
  // between kernels (codegen/half_x.h)
  bool storage_16bit = false;
};

}  // namespace doppler::codegen
