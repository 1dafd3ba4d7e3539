#include "models/architecture.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace doppler::models {

const std::vector<Architecture>& Architectures() {
  static const std::vector<Architecture> archs = {
      {"LlamaForCausalLM", BuildLlama},   {"MistralForCausalLM", BuildMistral}, {"Qwen2ForCausalLM", BuildQwen2},
      {"Qwen3ForCausalLM", BuildQwen3},   {"Phi3ForCausalLM", BuildPhi3},       {"Gemma3ForCausalLM", BuildGemma3},
      {"Qwen3MoeForCausalLM", BuildQwen3Moe}, {"MixtralForCausalLM", BuildMixtral}, {"GptOssForCausalLM", BuildGptOss},
  };
  return archs;
}

absl::StatusOr<graph::Graph> BuildModelGraph(const formats::ModelConfig& config, const BuildOptions& options) {
  if (options.context <= 0) return absl::InvalidArgumentError("context size must be positive");
  if (options.paging.paged() && (options.kv_pages <= 0 || options.paging.table_pages * options.paging.page_rows < options.context)) {
    return absl::InvalidArgumentError("a paged KV cache needs pages, and page tables that cover the context");
  }
  for (const Architecture& a : Architectures()) {
    if (config.architecture != a.hf_name) continue;
    absl::StatusOr<graph::Graph> g = a.build(config, options);
    if (g.ok()) g->set_paging(options.paging);
    return g;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      config.architecture.empty() ? std::string("the config names no architecture (key 'architectures')")
                                  : absl::StrCat("unsupported architecture '", config.architecture, "'"),
      "; supported: ",
      absl::StrJoin(Architectures(), ", ", [](std::string* out, const Architecture& a) { out->append(a.hf_name); })));
}

}  // namespace doppler::models
