#include "codegen/expert_ranking.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "codegen/glsl_common.h"

namespace doppler::codegen {
absl::StatusOr<ExpertRanking> ChooseExpertRanking(const TargetCaps& caps, uint32_t workgroup, int64_t experts,
                                                  int64_t k) {
  ExpertRanking r;
  // The first subgroup's invocations: at least the smallest subgroup, or the whole workgroup.
  const uint32_t lanes = std::min(caps.min_subgroup_size, workgroup);
  r.one_subgroup = caps.subgroup_arithmetic && experts <= kLogitsAnInvocationRanks * lanes;
  r.holders = r.one_subgroup ? lanes : workgroup;
  if (experts > kLogitsAnInvocationRanks * r.holders) {
    return absl::InvalidArgumentError(absl::StrCat(experts, " experts are more than a workgroup of ", workgroup,
                                                   " invocations can rank"));
  }
  // ranked, and the workgroup's first maximum's values and indices.
  r.shared_bytes = 4 * k + (r.one_subgroup ? 0 : 8 * int64_t{workgroup});
  return r;
}

std::string RankExpertsGlsl(const TargetCaps& caps, const ExpertRanking& ranking, int64_t experts, int64_t k) {
  // The first subgroup: each lane holds its logits as order-preserving keys (integer reductions are
  // single instructions where floats' are not), and a round takes the subgroup's largest key, then
  // the lowest expert holding it, and sets the chosen one's key to 0 (none).
  constexpr const char* kOneSubgroup = R"(
#extension GL_KHR_shader_subgroup_basic : enable
#extension GL_KHR_shader_subgroup_arithmetic : enable
// A logit's key: a larger logit a larger key, -0 as +0, 0 for none.
uint rank_key(float v) {
  uint u = floatBitsToUint(v == 0.0 ? 0.0 : v);
  return (u & 0x80000000u) != 0u ? ~u : u | 0x80000000u;
}
void rank_experts(uint row) {
  if (gl_SubgroupID == 0u) {  // uniform in each subgroup
    uint lane = gl_SubgroupInvocationID, lanes = min(gl_SubgroupSize, WG);
    uint keys[RANK_PER];
    [[unroll]] for (uint i = 0u; i < RANK_PER; ++i) {
      uint e = lane + i * lanes;
      keys[i] = e < RANK_E ? rank_key(logit(row, e)) : 0u;
    }
    for (uint j = 0u; j < RANK_K; ++j) {
      uint best = 0u, best_i = NONE;
      [[unroll]] for (uint i = 0u; i < RANK_PER; ++i) {
        if (keys[i] > best) { best = keys[i]; best_i = lane + i * lanes; }
      }
      uint top = subgroupMax(best);
      uint chosen = subgroupMin(best == top && top != 0u ? best_i : NONE);
      if (lane == 0u) ranked[j] = chosen;
      [[unroll]] for (uint i = 0u; i < RANK_PER; ++i) {
        if (lane + i * lanes == chosen) keys[i] = 0u;
      }
    }
  }
  barrier();
}
)";
  // Every invocation holds logits; a round is the workgroup's first maximum of the holders' best
  // untaken ones, which its holder marks taken.
  constexpr const char* kWorkgroup = R"(
void rank_experts(uint row) {
  uint lid = gl_LocalInvocationID.x, taken = 0u;
  float v[RANK_PER];
  [[unroll]] for (uint i = 0u; i < RANK_PER; ++i) {
    uint e = lid + i * WG;
    v[i] = e < RANK_E ? logit(row, e) : 0.0;
  }
  for (uint j = 0u; j < RANK_K; ++j) {
    float best = uintBitsToFloat(0xFF800000u);  // -inf
    uint best_i = NONE;
    [[unroll]] for (uint i = 0u; i < RANK_PER; ++i) {
      uint e = lid + i * WG;
      if (e < RANK_E && (taken & (1u << i)) == 0u && (best_i == NONE || v[i] > best)) { best = v[i]; best_i = e; }
    }
    best_i = first_max(best, best_i);  // the workgroup's in invocation 0
    if (lid == 0u) ranked[j] = best_i;
    barrier();  // after every invocation's first_max, so that the next may run
    uint e = ranked[j];
    if (e != NONE && e % WG == lid) taken |= 1u << (e / WG);
  }
  barrier();
}
)";
  const int64_t per = (experts + ranking.holders - 1) / ranking.holders;
  return absl::StrCat("const uint RANK_E = ", experts, "u, RANK_K = ", k, "u, RANK_PER = ", per,
                      "u, NONE = 0xFFFFFFFFu;\nshared uint ranked[RANK_K];\n",
                      ranking.one_subgroup ? "" : FirstMaxReductionGlsl(caps.subgroup_arithmetic),
                      ranking.one_subgroup ? kOneSubgroup : kWorkgroup);
}

}  // namespace doppler::codegen
