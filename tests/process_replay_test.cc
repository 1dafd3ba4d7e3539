// Process replay: the kernels (family.variant, workgroups, bindings, scratch, params and a hash of
// the GLSL) of every fixture model, the shipped default model and three synthetic models in
// published shapes, for an NVIDIA-like target and lavapipe's, at a decode step, a short prefill
// chunk and the engine's prefill bucket, compared with tests/golden/process_replay.txt.
//
// A change that should not change kernels leaves the file alone; a change that should rewrites it
// in the same commit (run this test with DOPPLER_UPDATE_GOLDEN=1), so its diff shows which kernels
// moved. No device is needed: the target's capabilities are written out here.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "codegen/known_targets.h"
#include "codegen/tuning/coop_rows.h"
#include "passes/pass.h"
#include "runtime/model_source.h"
#include "tests/support/fixtures.h"
#include "tests/support/process_replay.h"

namespace doppler {
namespace {

namespace fs = std::filesystem;

struct Target {
  const char* name;
  codegen::TargetCaps caps;
};

std::vector<Target> Targets() {
  return {{"nvidia", codegen::H100LikeCaps()}, {"lavapipe", codegen::LavapipeCaps()}};
}

struct Model {
  std::string name;  // as the golden file names it
  runtime::EngineOptions options;
};

std::vector<Model> Models() {
  std::vector<Model> models;
  const fs::path fixtures = test::FixturesDir();
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

// Synthetic models keep this many layers (enough for Gemma 3's global layer): every layer's
// kernels are alike, and the file stays short.
constexpr int kSyntheticLayers = 6;

// The model's lines: each plan the engine would build (decode with q8 activations where the target
// multiplies integers; prefill), a short prefill chunk, and the batched engine's decode plans of 8
// rows (q8 activations, as its buckets up to 16, but where the cooperative-matrix variant for few
// rows takes them) and 32, on each target.
// A model the engine does not build yet (a new architecture, rope type) is one line saying why, with
// the fixtures' folder left out so that the line is the same on every machine.
std::string NotBuilt(const Model& m, const absl::Status& s) {
  return absl::StrCat(m.name, " not built: ",
                      absl::StrReplaceAll(s.message(), {{test::FixturesDir().string() + "/", ""}}), "\n");
}

absl::StatusOr<std::string> ModelLines(Model m) {
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
  absl::StatusOr<std::unique_ptr<passes::Pass>> q8 = passes::MakePass("q8-activations");
  if (!q8.ok()) return q8.status();
  std::string out;
  for (const Target& t : Targets()) {
    graph::Graph decode = *g, batched_q8 = *batched;
    if (t.caps.integer_dot_product) {
      if (absl::StatusOr<bool> changed = (*q8)->Run(decode); !changed.ok()) return changed.status();
      if (absl::StatusOr<bool> changed = (*q8)->Run(batched_q8); !changed.ok()) return changed.status();
    }
    const int64_t chunk = std::min<int64_t>(32, m.options.prefill_chunk);
    // 8 rows take the graph without x_quant where the cooperative-matrix variant for few rows takes
    // them, as the batched engine's decode_graph(8) does.
    absl::StatusOr<int64_t> coop_rows_from = codegen::tuning::CoopRowsFrom(t.caps);
    if (!coop_rows_from.ok()) return coop_rows_from.status();
    const graph::Graph* batched8 = codegen::tuning::CoopRowsTakeBatchedDecode(8, *coop_rows_from) ? &*batched : &batched_q8;
    for (const auto& [plan, graph, tokens] : {std::tuple<const char*, const graph::Graph*, int64_t>{"decode", &decode, 1},
                                              {"chunk", &*g, chunk},
                                              {"prefill", &*g, m.options.prefill_chunk},
                                              {"batch_decode", batched8, 8},
                                              {"batch_decode", &*batched, 32}}) {
      absl::StatusOr<std::string> lines =
          test::ReplayLines(absl::StrCat(m.name, " ", t.name, " ", plan, ":T=", tokens), *graph, t.caps, tokens);
      if (!lines.ok()) return absl::Status(lines.status().code(), absl::StrCat(m.name, ": ", lines.status().message()));
      out += *lines;
    }
  }
  return out;
}

TEST(ProcessReplay, KernelsMatchTheGoldenFile) {
  unsetenv("DOPPLER_TUNE");  // the file records the choices codegen/tuning/ makes
  std::string now;
  for (const Model& m : Models()) {
    absl::StatusOr<std::string> lines = ModelLines(m);
    ASSERT_TRUE(lines.ok()) << lines.status();
    now += *lines;
  }
  const fs::path golden = fs::path(DOPPLER_SOURCE_DIR) / "tests" / "golden" / "process_replay.txt";
  if (const char* update = std::getenv("DOPPLER_UPDATE_GOLDEN"); update != nullptr && std::string(update) == "1") {
    std::ofstream(golden, std::ios::binary) << now;
    std::printf("wrote %s\n", golden.c_str());
  }
  std::ifstream in(golden, std::ios::binary);
  ASSERT_TRUE(in.good()) << golden << " is missing (DOPPLER_UPDATE_GOLDEN=1 writes it)";
  std::stringstream want;
  want << in.rdbuf();
  if (want.str() == now) return;
  // The first lines that differ, so that a failure says which kernels moved.
  const std::vector<std::string> a = absl::StrSplit(want.str(), '\n'), b = absl::StrSplit(now, '\n');
  int shown = 0;
  for (size_t i = 0; i < std::max(a.size(), b.size()) && shown < 10; ++i) {
    const std::string& was = i < a.size() ? a[i] : "(none)";
    const std::string& is = i < b.size() ? b[i] : "(none)";
    if (was == is) continue;
    ADD_FAILURE() << "line " << i + 1 << "\n golden: " << was << "\n now:    " << is;
    ++shown;
  }
  FAIL() << "the kernels differ from " << golden << " (" << a.size() << " lines golden, " << b.size()
         << " now); if the change is meant, rerun with DOPPLER_UPDATE_GOLDEN=1 and commit the file";
}

}  // namespace
}  // namespace doppler
