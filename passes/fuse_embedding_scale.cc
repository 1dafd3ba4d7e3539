// fuse-embedding-scale: a scale read only from an embedding gather (Gemma 3's embeddings times
// sqrt(hidden)) becomes the gather's own factor, so the step has one level fewer.
//
//   before:  e = embedding(table, ids)   s = scale(e) {factor}
//   after:   s = embedding(table, ids) {scale = factor}
#include "passes/registry.h"
#include "passes/rewrite.h"

namespace doppler::passes {
namespace {

class FuseEmbeddingScale : public Pass {
 public:
  const char* name() const override { return "fuse-embedding-scale"; }

  absl::StatusOr<bool> Run(Graph& g) const override {
    bool changed = false;
    UseLists uses(g);
    const int original = g.size();
    for (ValueId id = 0; id < original; ++id) {
      const Node gather = g.node(id);
      if (gather.kind != OpKind::kEmbedding || gather.attrs.Has("scale")) continue;
      const ValueId user = uses.SoleUser(g, id);
      if (user < 0 || g.node(user).kind != OpKind::kScale) continue;
      graph::Attrs attrs = gather.attrs;
      attrs.Set("scale", g.node(user).attrs.Float("factor"));
      absl::StatusOr<ValueId> scaled = uses.AddNode(g, OpKind::kEmbedding, gather.inputs, attrs, gather.label);
      if (!scaled.ok()) return scaled.status();
      NoteFused(g, *scaled, {user});
      uses.ReplaceAllUses(g, user, *scaled);
      changed = true;
    }
    if (changed) g = WithoutDeadNodes(g);
    return changed;
  }
};

}  // namespace

std::unique_ptr<Pass> MakeFuseEmbeddingScale() { return std::make_unique<FuseEmbeddingScale>(); }

}  // namespace doppler::passes
