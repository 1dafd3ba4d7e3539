#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "graph/verifier.h"
#include "passes/pass.h"
#include "passes/registry.h"

namespace doppler::passes {

std::vector<std::string> PassNames() {
  std::vector<std::string> names;
  for (const PassEntry& e : Registry()) names.push_back(e.name);
  return names;
}

absl::StatusOr<std::unique_ptr<Pass>> MakePass(const std::string& name) {
  for (const PassEntry& e : Registry()) {
    if (name == e.name) return e.make();
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown pass '", name, "'; passes: ", absl::StrJoin(PassNames(), ", ")));
}

absl::StatusOr<PassManager> PassManager::Parse(const std::string& pipeline) {
  PassManager pm;
  if (pipeline == "none") return pm;
  const std::vector<std::string> names =
      pipeline == "default" ? DefaultPipeline()
                            : std::vector<std::string>(absl::StrSplit(pipeline, ',', absl::SkipWhitespace()));
  for (const std::string& n : names) {
    absl::StatusOr<std::unique_ptr<Pass>> p = MakePass(n);
    if (!p.ok()) return p.status();
    pm.passes_.push_back(*std::move(p));
  }
  return pm;
}

absl::Status PassManager::Run(
    graph::Graph& g, const std::function<void(const std::string&, const graph::Graph&, bool)>& after) const {
  for (const std::shared_ptr<Pass>& p : passes_) {
    absl::StatusOr<bool> changed = p->Run(g);
    if (!changed.ok()) return absl::Status(changed.status().code(), absl::StrCat("pass ", p->name(), ": ", changed.status().message()));
    if (absl::Status s = graph::Verify(g); !s.ok()) {
      return absl::InternalError(absl::StrCat("the graph does not verify after pass ", p->name(), ": ", s.message()));
    }
    if (after) after(p->name(), g, *changed);
  }
  return absl::OkStatus();
}

std::vector<std::string> PassManager::names() const {
  std::vector<std::string> out;
  for (const std::shared_ptr<Pass>& p : passes_) out.push_back(p->name());
  return out;
}

}  // namespace doppler::passes
