// Nodes a matmul's (or a router's) kernel computes besides its own value, so that they take no
// dispatch (and no barrier level) of their own. These are facts of the step graph and the plan's bucket, derived
// here on each lowering and stored nowhere: lowering (codegen/lowering.cc) gives such a node no
// dispatch, and the matmul emitter (codegen/emit_matmul.cc) binds and computes it.
//
//  - A tail: an argmax, or a whole-row RMSNorm, whose input is a matmul's unsplit rows (the LM
//    head's argmax; Gemma 3's post-norm, residual add and next pre-norm after the output and down
//    projections). The matmul's last workgroup computes it once the others have written their rows.
//  - A norm in x: a residual RMSNorm whose normalised sum matmuls alone read, as x
//    (graph::MatmulsOfNormedPart: the next projections, one, or two where v's weight type differs
//    from q's and k's). Every workgroup of each consumer computes its rows as it reads x, and one
//    workgroup of the first consumer writes the sum, which later residual adds read (each after that
//    consumer in the graph's order). It takes precedence over a tail (the producer's kernel then
//    stays plain).
//  - A plain norm in x: a whole-row RMSNorm without a residual whose normalised row an expert
//    product reads, besides float matmuls (where matmuls alone read it, fuse-norm-matmul made it
//    their prologue already), at one row of x (every reader a matrix-vector pass: the float one,
//    the expert one) and for expert products of at most tuning::PlainNormInExpertsUpTo weight values
//    a token (none by default; DOPPLER_TUNE's experts.norm_upto). Each reader reads the norm's
//    input as x, sums its squares and multiplies it by the norm's weight as it loads it, and scales
//    its dot products by 1 / rms, so the row is never written. It also takes precedence over a tail.
//  - A plain norm written by its float reader: such a norm whose expert products exceed that bound
//    (by default every one), where the first of its readers is a float matmul: that matmul computes
//    it as above and its workgroups write the normalised row, a share each, which the expert
//    products (a level later) read.
//  - A last row in x: a last_row that one matmul alone reads, as x (the LM head): every matmul
//    variant reads row T − 1 of the last_row's input itself, so the row is never copied.
//  - A route sum in the expert product: a route_sum whose slots an expert product alone writes,
//    where that product takes a matrix-vector pass a row (its rows not grouped by expert) and its
//    epilogue is affine (bias steps only): the product's workgroups weight and sum a token's slots
//    as they compute them, so the slots are never stored. Where the product groups its rows by
//    expert (from tuning::ExpertsGroupedFrom rows), a token's slots come from different
//    workgroups: the slots are stored and the route_sum is a dispatch of its own.
//  - top_k in its readers: a top_k that one route_weights and expert products read, at one row of
//    x (every product a matrix-vector pass). The route_weights kernel ranks each row itself and writes the ids beside
//    the weights; an expert product whose x does not depend on the ids (the first of the MLP)
//    ranks its token's row in each workgroup (codegen/expert_ranking.h) and reads the router's
//    logits in place of the ids, so that it runs beside the route weights, a level after the
//    router; the products after it read the ids the route_weights kernel wrote.
//
// DOPPLER_TUNE's matmul.tail, matmul.norm_in_x, matmul.plain_norm_in_x, matmul.last_row_in_x,
// matmul.route_sum and matmul.top_k (1 or 0) turn each on or off, to compare plans with and without; matmul.half_x
// and matmul.planes_x likewise the rules of codegen/half_x.h and codegen/plane_x.h, read with them.
#pragma once

#include <cstdint>

#include "absl/status/statusor.h"
#include "graph/graph.h"

namespace doppler::codegen {

struct InMatMulRules {
  bool tail = true;
  bool norm_in_x = true;
  bool plain_norm_in_x = true;
  bool last_row_in_x = true;
  bool route_sum = true;
  bool top_k = true;
  bool half_x = true;  // values stored as f16 where every reader rounds them so (codegen/half_x.h)
  bool planes_x = true;  // values stored in planes for the expert products' parts (codegen/plane_x.h)
  int64_t experts_grouped_from = 0;  // tuning::ExpertsGroupedFrom()
  int64_t plain_norm_experts_upto = 0;  // tuning::PlainNormInExpertsUpTo()
};

// The rules with DOPPLER_TUNE's values in place (an entry other than 0 or 1 is an error naming it).
absl::StatusOr<InMatMulRules> InMatMulRulesFromTune();

// Whether the kernel of `n`'s input (a matmul) computes `n` as its tail for a plan of `tokens`: the
// q8 matrix-vector variant does, where its config (tuning::ChooseGemvQ8) takes the bucket's rows
// as one block of rows, unless the norm is in its consumers' x.
bool TailInMatMul(const graph::Graph& g, const graph::Node& n, int64_t tokens, const InMatMulRules& rules);

// Whether the matmuls reading the normalised sum of a residual norm `n` compute the norm for a
// plan of `tokens`: the q8 matrix-vector variant does, where it takes the bucket's rows as one
// block and their q8 staging takes at most kNormInXStageBytes (every device's shared memory holds
// them, with the kernel's reductions, in one segment); the float one (float weights) at one row of
// x of a multiple of four values, where the norm has no prologue.
bool NormInX(const graph::Graph& g, const graph::Node& n, int64_t tokens, const InMatMulRules& rules);
inline constexpr int64_t kNormInXStageBytes = 12 * 1024;

// Whether the readers of a plain RMSNorm `n` compute it as they read x for a plan of `tokens`
// (a plain norm in x, above).
bool PlainNormInX(const graph::Graph& g, const graph::Node& n, int64_t tokens, const InMatMulRules& rules);

// Whether the first reader of a plain RMSNorm `n`, a float matmul, computes it and writes its row
// for the others in a plan of `tokens` (a plain norm written by its float reader, above).
bool PlainNormInFloatReader(const graph::Graph& g, const graph::Node& n, int64_t tokens, const InMatMulRules& rules);

// Whether the matmul reading a last_row `n` reads the row itself, from the last_row's input (every
// variant can: x_row0() in MatMulSpec::io_glsl, codegen/matmul.h).
bool LastRowInX(const graph::Graph& g, const graph::Node& n, const InMatMulRules& rules);

// Whether the expert product `n` groups its rows by expert in a plan of `tokens`: x has at least
// rules.experts_grouped_from rows. Each group is then a tiled product of its rows (the matmul
// family's tiled variants), so that an expert's weights are read once a tile of its rows.
bool ExpertsGrouped(const graph::Node& n, int64_t tokens, const InMatMulRules& rules);

// Whether the expert product whose slots a route_sum `n` sums computes `n` in a plan of `tokens`:
// where `n` is its only reader, it does not group its rows, and its epilogue adds biases at most.
bool RouteSumInExperts(const graph::Graph& g, const graph::Node& n, int64_t tokens, const InMatMulRules& rules);

// Whether the readers of a top_k `n` compute it in a plan of `tokens` (top_k in its readers, above).
bool TopKInReaders(const graph::Graph& g, const graph::Node& n, int64_t tokens, const InMatMulRules& rules);

// Whether the expert product `n` ranks its experts itself in a plan of `tokens`: its ids are a top_k
// its readers compute, and its x does not depend on them.
bool RanksItsExperts(const graph::Graph& g, const graph::Node& n, int64_t tokens, const InMatMulRules& rules);

// Whether a kernel of its readers computes `n` in any of the ways above: `n` then has no dispatch.
bool InMatMul(const graph::Graph& g, const graph::Node& n, int64_t tokens, const InMatMulRules& rules);

}  // namespace doppler::codegen
