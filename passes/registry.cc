#include "passes/registry.h"

namespace doppler::passes {

const std::vector<PassEntry>& Registry() {
  static const std::vector<PassEntry> entries = {
      {"fuse-gate-up", MakeFuseGateUp},
      {"fuse-qkv", MakeFuseQkv},
      {"fuse-matmul-epilogue", MakeFuseMatmulEpilogue},
      {"fuse-residual-rmsnorm", MakeFuseResidualRmsNorm},
      {"fuse-norm-matmul", MakeFuseNormMatmul},
      {"fuse-rope", MakeFuseRope},
      {"fuse-head-norm", MakeFuseHeadNorm},
      {"fuse-kv-append", MakeFuseKvAppend},
      {"fuse-residual-norm-matmul", MakeFuseResidualNormMatmul},
      {"fuse-last-row-matmul", MakeFuseLastRowMatmul},
      {"fuse-embedding-scale", MakeFuseEmbeddingScale},
      {"fuse-matmul-tail", MakeFuseMatmulTail},
      {"q8-activations", MakeQ8Activations},
      {"dce", MakeDce},
  };
  return entries;
}

// Order matters: gate+up first (otherwise fuse-qkv would take the MLP's two projections as a
// plain pair); then projections of one input; then epilogues, which take a matmul's residual add
// before the norm fusion can; then the remaining residual+norm pairs; then plain norms into the
// matmuls that read them (after the merges above, which take plain matmuls only); rotary
// embeddings into the cache writes and attention that read them, and then the per-head norms
// before them; then the cache writes, with those prologues, into the attention that reads them;
// residual norms (Gemma 3's) into the matmuls that read their normalised sums, the last row into
// the LM head that reads it (once the final norm is the head's), and row-wide ops (the LM head's
// argmax, those norms again) into the matmuls they read, for the plans whose kernels take neither;
// the embeddings' scale into their gather (independent of the rest); dce last.
std::vector<std::string> DefaultPipeline() {
  return {"fuse-gate-up",   "fuse-qkv",       "fuse-matmul-epilogue",      "fuse-residual-rmsnorm", "fuse-norm-matmul",
          "fuse-rope",      "fuse-head-norm", "fuse-kv-append", "fuse-residual-norm-matmul", "fuse-last-row-matmul",
          "fuse-matmul-tail", "fuse-embedding-scale", "dce"};
}

}  // namespace doppler::passes
