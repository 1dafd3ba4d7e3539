#include "backend_vk/pipeline_cache.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "codegen/shader_compiler.h"

namespace doppler::vk {

absl::StatusOr<const ComputePipeline*> PipelineCache::Get(const std::string& glsl, const std::string& name) {
  auto it = pipelines_.find(glsl);
  if (it != pipelines_.end()) return it->second.get();
  absl::StatusOr<codegen::CompiledShader> shader = codegen::CompileComputeShader(glsl);
  if (!shader.ok()) {
    return absl::Status(shader.status().code(), absl::StrCat("kernel ", name, ": ", shader.status().message()));
  }
  absl::StatusOr<std::unique_ptr<ComputePipeline>> pipeline = ctx_.CreatePipeline(*shader, name);
  if (!pipeline.ok()) return pipeline.status();
  const ComputePipeline* p = pipeline->get();
  pipelines_.emplace(glsl, *std::move(pipeline));
  return p;
}

}  // namespace doppler::vk
