#include "passes/registry.h"

namespace doppler::passes {

const std::vector<PassEntry>& Registry() {
  static const std::vector<PassEntry> entries = {
      {"fuse-gate-up", MakeFuseGateUp},
      {"fuse-qkv", MakeFuseQkv},
      {"fuse-matmul-epilogue", MakeFuseMatmulEpilogue},
      {"fuse-route-sum-residual", MakeFuseRouteSumResidual},
      {"fuse-residual-rmsnorm", MakeFuseResidualRmsNorm},
      {"fuse-norm-matmul", MakeFuseNormMatmul},
      {"fuse-rope", MakeFuseRope},
      {"fuse-head-norm", MakeFuseHeadNorm},
      {"fuse-kv-append", MakeFuseKvAppend},
      {"fuse-embedding-scale", MakeFuseEmbeddingScale},
      {"q8-activations", MakeQ8Activations},
      {"dce", MakeDce},
  };
  return entries;
}

// Order matters: gate+up first (otherwise fuse-qkv would take the MLP's two projections as a
// plain pair); then projections of one input; then epilogues, which take a matmul's residual add
// before the norm fusion can, and the route sums, which take a mixture of experts' residual add
// likewise; then the remaining residual+norm pairs; then plain norms into the matmuls that read
// them (after the merges above, which take plain matmuls only); rotary embeddings into the cache
// writes and attention that read them, and then the per-head norms before them; then the cache
// writes, with those prologues, into the attention that reads them; the embeddings' scale into
// their gather (independent of the rest); dce last. (Which nodes a matmul's kernel computes besides
// its own, with no dispatch of theirs, lowering decides for each plan: codegen/in_matmul.h.)
std::vector<std::string> DefaultPipeline() {
  return {"fuse-gate-up",          "fuse-qkv",         "fuse-matmul-epilogue", "fuse-route-sum-residual",
          "fuse-residual-rmsnorm", "fuse-norm-matmul", "fuse-rope",            "fuse-head-norm",
          "fuse-kv-append",        "fuse-embedding-scale", "dce"};
}

}  // namespace doppler::passes
