// dce: removes nodes that no output depends on (the fusion passes leave none; a hand-written
// pipeline or graph may).
#include "passes/registry.h"
#include "passes/rewrite.h"

namespace doppler::passes {
namespace {

class Dce : public Pass {
 public:
  const char* name() const override { return "dce"; }
  absl::StatusOr<bool> Run(Graph& g) const override {
    const int before = g.size();
    g = WithoutDeadNodes(g);
    return g.size() != before;
  }
};

}  // namespace

std::unique_ptr<Pass> MakeDce() { return std::make_unique<Dce>(); }

}  // namespace doppler::passes
