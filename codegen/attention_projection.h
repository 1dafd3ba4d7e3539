// The q/k/v projection inside the decode attention kernel (fuse-projection-attention): each
// workgroup of the appending subgroups variant (one per query head) computes its head's rows of the
// projection itself: the head's q rows, and the k and v rows of its kv head (every head of a group
// computes those, from cache after the first), from the step's x with its norm prologue, rounded
// through q8 blocks as the matmul's x_quant says, in integer dot products. The step then has no
// barrier level between the projection and attention.
//
// A workgroup reads 3 · head_dim weight rows, so only where those are few bytes: on the H100 one
// workgroup reads about 150 GB/s alone and 78 GB/s among 32 (bench/RESULTS.md), so Llama-3.2-1B's
// 221 KB a head take about 3 µs, within what the projection's own barrier level cost, while
// Llama-3.1-8B's 885 KB and Gemma 3's 940 KB would take longer than the level they save.
#pragma once

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "codegen/emitters.h"

namespace doppler::codegen {

// Whether the attention kernel reading an in_consumer q/k/v projection (graph::AttentionOfProjection)
// computes it for a plan of `tokens` on a device of `caps`: at one token, where the attention kernel
// appends its keys itself, the device has integer dot products and subgroups of one fixed size, the
// matmul's x is rounded through q8 blocks (x_quant) and is a plain value (not a norm or row another
// kernel computes), and a head's rows are at most kProjectionMaxBytes.
bool ProjectionInAttention(const graph::Graph& g, const graph::Node& matmul, int64_t tokens, const TargetCaps& caps);
inline constexpr int64_t kProjectionMaxBytes = 256 * 1024;

// The projection an attention kernel computes (ProjectionInAttention), if any.
std::optional<graph::ValueId> ProjectionOf(const EmitContext& c);

// GLSL for an attention kernel of `wg` invocations computing projection `matmul`: the matmul's x,
// weight and norm weight at the bindings of the attention's q, new keys and new values (which the
// kernel's args bind to them instead), `void project(uint h)` (every invocation calls it; it writes
// head h's rows to shared memory and ends with a barrier), and `float load_q(uint i)`,
// `load_kn(uint i)`, `load_vn(uint i)` reading them as the attention's q, new keys and new values
// (of the step's one token) would be read. Needs the attention's constants (HD, GROUP, KVW, QW, WG).
absl::StatusOr<std::string> ProjectionGlsl(const EmitContext& c, const graph::Node& matmul, uint32_t wg);

}  // namespace doppler::codegen
