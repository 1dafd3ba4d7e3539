// top_k's ranking of a row of router logits, as GLSL that the router's kernels and the expert
// products that rank their own experts (codegen/in_matmul.h: top_k in its readers) share, so that
// the ranking has one meaning on the device, as it has one in the interpreter.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "codegen/target_caps.h"

namespace doppler::codegen {

// Each invocation that holds logits marks those it has chosen in the bits of a word.
inline constexpr int64_t kLogitsAnInvocationRanks = 32;

// How a workgroup ranks: the invocations that hold the logits, and the shared memory it takes.
struct ExpertRanking {
  bool one_subgroup = false;  // the first subgroup alone, each choice a subgroup reduction
  uint32_t holders = 0;       // invocations holding logits (the smallest subgroup, or the workgroup)
  int64_t shared_bytes = 0;
};

// The ranking of `experts` logits, `k` of them chosen, in a workgroup of `workgroup` invocations:
// with subgroup arithmetic, by its first subgroup alone where that holds them (32 an invocation at
// most); else by every invocation, each choice a reduction over the workgroup
// (FirstMaxReductionGlsl). An error where the workgroup cannot hold them.
absl::StatusOr<ExpertRanking> ChooseExpertRanking(const TargetCaps& caps, uint32_t workgroup, int64_t experts,
                                                  int64_t k);

// GLSL defining `shared uint ranked[k]` and `void rank_experts(uint row)`, for a kernel with
// `const uint WG` and `float logit(uint row, uint e)` declared before it. Every invocation of the
// workgroup calls it, in uniform control flow; it leaves in ranked the experts of the row's k
// largest logits, the larger first and on ties the lower index (the interpreter's top_k), and ends
// in a barrier.
std::string RankExpertsGlsl(const TargetCaps& caps, const ExpertRanking& ranking, int64_t experts, int64_t k);

}  // namespace doppler::codegen
