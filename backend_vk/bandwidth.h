// The device's memory bandwidth as a compute shader sees it: the yardstick for "% of the
// bandwidth floor" in doppler bench.
#pragma once

#include <cstddef>

#include "absl/status/statusor.h"
#include "backend_vk/context.h"
#include "backend_vk/pipeline_cache.h"

namespace doppler::vk {

struct Bandwidth {
  double bytes_per_second = 0;  // bytes read + bytes written, per second
  size_t buffer_bytes = 0;      // size of each of the two buffers copied between
};

// Copies one device-local buffer to another with a compute shader (16-byte loads and stores,
// ten copies back and forth), timed with GPU timestamps (wall clock where the device has none).
absl::StatusOr<Bandwidth> MeasureCopyBandwidth(Context& ctx, PipelineCache& pipelines);

}  // namespace doppler::vk
