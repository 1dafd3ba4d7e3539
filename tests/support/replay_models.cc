#include "tests/support/replay_models.h"

#include <algorithm>
#include <filesystem>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "codegen/tuning/coop_rows.h"
#include "passes/pass.h"
#include "tests/support/fixtures.h"

namespace doppler::test {
namespace {

namespace fs = std::filesystem;

// Synthetic models keep this many layers (enough for Gemma 3's global layer): every layer's
// kernels are alike, and the golden file stays short.
constexpr int kSyntheticLayers = 6;

ModelGraphs NotBuilt(const ReplayModel& m, const absl::Status& s) {
  ModelGraphs out;
  out.not_built = absl::StrCat(m.name, " not built: ",
                               absl::StrReplaceAll(s.message(), {{FixturesDir().string() + "/", ""}}), "\n");
  return out;
}

}  // namespace

std::vector<ReplayModel> ReplayModels() {
  std::vector<ReplayModel> models;
  const fs::path fixtures = FixturesDir();
  std::vector<fs::path> hf;
  for (const fs::directory_entry& e : fs::directory_iterator(fixtures / "hf")) {
    if (fs::exists(e.path() / "config.json")) hf.push_back(e.path());
  }
  std::sort(hf.begin(), hf.end());
  for (const fs::path& p : hf) models.push_back({absl::StrCat("hf/", p.filename().string()), {.model_path = p}});
  models.push_back({"stories260K/hf", {.model_path = fixtures / "stories260K" / "hf"}});
  for (const char* f : {"llama_q-Q4_K_M.gguf", "llama_q-Q8_0.gguf"}) {
    models.push_back({absl::StrCat("gguf/", f), {.model_path = fixtures / "gguf" / f}});
  }
  for (const char* f : {"default-f16.gguf", "default-q8_0.gguf"}) {
    models.push_back({absl::StrCat("default/", f), {.model_path = fs::path(DOPPLER_SOURCE_DIR) / "default_model" / f}});
  }
  for (const char* s : {"llama-3.2-1b", "gemma-3-1b", "llama-3.1-8b"}) {
    models.push_back({absl::StrCat("synthetic/", s, ".q4_k_m"), {.synthetic = s, .quant = quant::QuantScheme::kQ4_K_M}});
  }
  return models;
}

absl::StatusOr<ModelGraphs> BuildModelGraphs(ReplayModel& m) {
  absl::StatusOr<runtime::OpenedModel> opened = runtime::OpenModel(m.options);
  if (!opened.ok()) return NotBuilt(m, opened.status());
  if (!m.options.synthetic.empty()) {
    opened->config.num_layers = std::min(opened->config.num_layers, kSyntheticLayers);
    if (!opened->config.layer_types.empty()) opened->config.layer_types.resize(static_cast<size_t>(opened->config.num_layers));
  }
  absl::StatusOr<graph::Graph> g = runtime::StepGraph(opened->config, opened->build, runtime::SamplingOptions{}, "default");
  if (!g.ok()) return NotBuilt(m, g.status());
  // The batched engine's decode plans: a row per sequence over a paged cache (runtime/batch_engine.h).
  models::BuildOptions paged = opened->build;
  paged.paging = {16, (paged.context + 15) / 16, true};
  paged.kv_pages = 2 * paged.paging.table_pages;
  paged.logits_all_tokens = true;
  absl::StatusOr<graph::Graph> batched = runtime::StepGraph(opened->config, paged, runtime::SamplingOptions{}, "default");
  if (!batched.ok()) return NotBuilt(m, batched.status());
  return ModelGraphs{"", *std::move(g), *std::move(batched)};
}

absl::StatusOr<std::vector<ReplayPlan>> ReplayPlans(const ReplayModel& m, const ModelGraphs& graphs,
                                                    const codegen::TargetCaps& caps) {
  absl::StatusOr<std::unique_ptr<passes::Pass>> q8 = passes::MakePass("q8-activations");
  if (!q8.ok()) return q8.status();
  graph::Graph decode = graphs.step, batched_q8 = graphs.batched;
  if (caps.integer_dot_product) {
    if (absl::StatusOr<bool> changed = (*q8)->Run(decode); !changed.ok()) return changed.status();
    if (absl::StatusOr<bool> changed = (*q8)->Run(batched_q8); !changed.ok()) return changed.status();
  }
  const int64_t chunk = std::min<int64_t>(32, m.options.prefill_chunk);
  // 8 rows take the graph without x_quant where the cooperative-matrix variant for few rows takes
  // them, as the batched engine's decode_graph(8) does.
  absl::StatusOr<codegen::tuning::DeviceChoice> coop_rows_from = codegen::tuning::CoopRowsFrom(caps);
  if (!coop_rows_from.ok()) return coop_rows_from.status();
  const bool coop_rows8 = codegen::tuning::CoopRowsTakeBatchedDecode(8, coop_rows_from->value);
  std::vector<ReplayPlan> plans;
  plans.push_back({"decode", std::move(decode), 1});
  plans.push_back({"chunk", graphs.step, chunk});
  plans.push_back({"prefill", graphs.step, m.options.prefill_chunk});
  plans.push_back({"batch_decode", coop_rows8 ? graphs.batched : std::move(batched_q8), 8});
  plans.push_back({"batch_decode", graphs.batched, 32});
  return plans;
}

}  // namespace doppler::test
