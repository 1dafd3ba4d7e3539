// Process replay: which kernels every fixture model gets, as text, so that a change that should
// not change kernels proves it by leaving tests/golden/process_replay.txt alone, and a change that
// should shows in that file's diff which kernels moved (tests/process_replay_test.cc).
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "codegen/kernel.h"
#include "graph/graph.h"

namespace doppler::test {

// The 64-bit FNV-1a hash of `text` (codegen::Fnv1a64), as 16 hex digits: stable across runs and machines.
std::string StableHash(const std::string& text);

// One line per dispatch of a plan of `g` for a bucket of `tokens` on `caps`, in recording order:
//   <prefix> <op> <label> <family>.<variant> wg=XxYxZ args=<r|w per binding> scratch=N params=[..] glsl=<hash>
absl::StatusOr<std::string> ReplayLines(const std::string& prefix, const graph::Graph& g, const codegen::TargetCaps& caps,
                                        int64_t tokens);

}  // namespace doppler::test
