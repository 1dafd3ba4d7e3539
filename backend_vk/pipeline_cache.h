// Pipelines by generated source: identical kernels (the same op and shapes in every layer) share
// one compiled shader and one VkPipeline across all plans of a model.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "backend_vk/context.h"
#include "backend_vk/pipeline.h"

namespace doppler::vk {

class PipelineCache {
 public:
  explicit PipelineCache(Context& ctx) : ctx_(ctx) {}

  // The pipeline for `glsl`, compiling it (through the on-disk SPIR-V cache) on first use.
  absl::StatusOr<const ComputePipeline*> Get(const std::string& glsl, const std::string& name);
  size_t size() const { return pipelines_.size(); }

 private:
  Context& ctx_;
  std::map<std::string, std::unique_ptr<ComputePipeline>> pipelines_;
};

}  // namespace doppler::vk
