// A kernel is the GLSL compute shader generated for one node, with how to bind and dispatch it.
//
// Binding convention, shared with the scheduler: binding 0 is the step block (token count and
// position of the step, and in a paged graph each row's position and the page tables:
// codegen/step_rows.h; written by the host before each submit), bindings
// 1..n are the node's values listed in `args`, in order, then the kernel's scratch and its params
// where it has them.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "codegen/target_caps.h"
#include "codegen/tuning/config.h"
#include "graph/graph.h"

namespace doppler::codegen {

struct KernelArg {
  graph::ValueId value;
  bool written;  // the kernel writes this buffer
};

struct Kernel {
  std::string family;   // e.g. "matmul"
  std::string variant;  // the specialisation chosen, e.g. "gemv.f16.rows4", printed in verbose mode and profiles
  std::string glsl;
  std::vector<KernelArg> args;
  std::array<uint32_t, 3> groups{1, 1, 1};  // workgroups dispatched for the plan's token bucket
  // The family's config the kernel was rendered from (std::monostate for the families with one
  // shape: codegen/tuning/config.h)
  tuning::KernelConfig config;
  // Bytes of device memory of the dispatch's own, at binding args.size() + 1, zero when the plan is
  // built and left by each dispatch as it found it (e.g. a counter its last workgroup resets).
  uint64_t scratch_bytes = 0;
  // Values the dispatch reads at run time from a storage buffer of its own (at ParamsBinding), so
  // that nodes whose kernels differ only in them share one pipeline: on the H100 a pipeline not run
  // for a few levels starts slow. (As a uniform block, pushed or bound, each dispatch cost about
  // 0.4 µs more there.)
  std::vector<uint32_t> params;
};

// The binding of a kernel's `params`: after its args and its scratch.
inline uint32_t ParamsBinding(size_t args, bool scratch) {
  return static_cast<uint32_t>(args + 1 + (scratch ? 1 : 0));
}

// The kernel for a compute node; `tokens` is the token bucket of the plan (the largest T a step
// may have). Source nodes (inputs, params, consts, states) have no kernel. Lowering
// (codegen/lowering.h) decides which nodes get one: not those a matmul's kernel computes
// (codegen/in_matmul.h), and for an appending attention that does not append itself, its two cache
// writes (graph::AppendedCacheWrites) and then the plain attention (graph::PlainAttention).
absl::StatusOr<Kernel> EmitKernel(const graph::Graph& g, const graph::Node& node, const TargetCaps& caps, int64_t tokens);

// Whether an appending attention's kernel writes the step's keys and values itself for a plan of
// `tokens`: the subgroups variant where no row reads another's new key, at one token (the decode
// step) or with a row per sequence (a batched decode step, unless rows share sequences), for heads
// it can write in pairs.
bool AttentionAppendsItself(const graph::Graph& g, const graph::Node& attention, const TargetCaps& caps,
                            int64_t tokens);

// The first words of the step block at binding 0, as the host writes them (a paged graph's block
// goes on: codegen/step_rows.h).
struct StepParams {
  uint32_t n_tokens;  // tokens in this step (<= the plan's bucket)
  uint32_t pos;       // absolute position of the step's first token
};

}  // namespace doppler::codegen
