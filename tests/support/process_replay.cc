#include "tests/support/process_replay.h"

#include <cinttypes>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "codegen/lowering.h"
#include "codegen/spirv_cache.h"

namespace doppler::test {

std::string StableHash(const std::string& text) {
  char out[17];
  std::snprintf(out, sizeof(out), "%016" PRIx64, codegen::Fnv1a64(text));
  return out;
}

absl::StatusOr<std::string> ReplayLines(const std::string& prefix, const graph::Graph& g, const codegen::TargetCaps& caps,
                                        int64_t tokens) {
  absl::StatusOr<std::vector<codegen::Dispatch>> dispatches = codegen::Lower(g, caps, tokens);
  if (!dispatches.ok()) return dispatches.status();
  std::string out;
  for (const codegen::Dispatch& d : *dispatches) {
    const graph::Node& n = g.node(d.node);
    const codegen::Kernel& k = d.kernel;
    std::string access;
    for (const codegen::KernelArg& a : k.args) access += a.written ? 'w' : 'r';
    absl::StrAppend(&out, prefix, " ", graph::OpName(n.kind), " ", n.label, " ", k.family, ".", k.variant, " wg=",
                    k.groups[0], "x", k.groups[1], "x", k.groups[2], " args=", access, " scratch=", k.scratch_bytes,
                    " params=[", absl::StrJoin(k.params, ","), "] glsl=", StableHash(k.glsl), "\n");
  }
  return out;
}

}  // namespace doppler::test
