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
#include <set>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "codegen/known_targets.h"
#include "tests/support/process_replay.h"
#include "tests/support/replay_models.h"

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

// The model's lines: each plan the engine would build (tests/support/replay_models.h) on each
// target. A model the engine does not build yet (a new architecture, rope type) is one line saying
// why.
absl::StatusOr<std::string> ModelLines(test::ReplayModel m) {
  absl::StatusOr<test::ModelGraphs> graphs = test::BuildModelGraphs(m);
  if (!graphs.ok()) return graphs.status();
  if (!graphs->not_built.empty()) return graphs->not_built;
  std::string out;
  for (const Target& t : Targets()) {
    absl::StatusOr<std::vector<test::ReplayPlan>> plans = test::ReplayPlans(m, *graphs, t.caps);
    if (!plans.ok()) return plans.status();
    for (const test::ReplayPlan& plan : *plans) {
      absl::StatusOr<std::string> lines =
          test::ReplayLines(absl::StrCat(m.name, " ", t.name, " ", plan.name, ":T=", plan.tokens), plan.graph, t.caps,
                            plan.tokens);
      if (!lines.ok()) return absl::Status(lines.status().code(), absl::StrCat(m.name, ": ", lines.status().message()));
      out += *lines;
    }
  }
  return out;
}

TEST(ProcessReplay, KernelsMatchTheGoldenFile) {
  unsetenv("DOPPLER_TUNE");  // the file records the choices codegen/tuning/ makes
  std::string now;
  for (const test::ReplayModel& m : test::ReplayModels()) {
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
  const std::vector<std::string> a = absl::StrSplit(want.str(), '\n'), b = absl::StrSplit(now, '\n');
  // A model the file records that this run did not find (a fixture missing) is named as such.
  auto models = [](const std::vector<std::string>& lines) {
    std::set<std::string> names;
    for (const std::string& l : lines) {
      if (!l.empty()) names.insert(l.substr(0, l.find(' ')));
    }
    return names;
  };
  const std::set<std::string> recorded = models(a), found = models(b);
  for (const std::string& m : recorded) {
    EXPECT_TRUE(found.count(m) > 0) << m << " is in " << golden << " but was not found (is its fixture there?)";
  }
  // The first lines that differ, so that a failure says which kernels moved.
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
