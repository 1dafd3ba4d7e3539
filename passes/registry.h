// The table of passes (internal to passes/): each pass file defines a factory listed here.
#pragma once

#include <memory>
#include <vector>

#include "passes/pass.h"

namespace doppler::passes {

struct PassEntry {
  const char* name;
  std::unique_ptr<Pass> (*make)();
};

const std::vector<PassEntry>& Registry();

std::unique_ptr<Pass> MakeFuseQkv();
std::unique_ptr<Pass> MakeFuseGateUp();
std::unique_ptr<Pass> MakeFuseRouteSumResidual();
std::unique_ptr<Pass> MakeFuseResidualRmsNorm();
std::unique_ptr<Pass> MakeFuseMatmulEpilogue();
std::unique_ptr<Pass> MakeFuseNormMatmul();
std::unique_ptr<Pass> MakeFuseRope();
std::unique_ptr<Pass> MakeFuseHeadNorm();
std::unique_ptr<Pass> MakeFuseKvAppend();
std::unique_ptr<Pass> MakeQ8Activations();
std::unique_ptr<Pass> MakeFuseEmbeddingScale();
std::unique_ptr<Pass> MakeDce();

}  // namespace doppler::passes
