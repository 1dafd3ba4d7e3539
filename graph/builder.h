// GraphBuilder: typed construction of graphs, one method per op.
//
// Errors are sticky: the first failing op is remembered, later calls are no-ops returning -1,
// and Finish() reports it. A model declaration can therefore read as straight-line code.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "graph/graph.h"
#include "graph/param_slice.h"

namespace doppler::graph {

class GraphBuilder {
 public:
  GraphBuilder() = default;
  // Continues a built graph: new nodes are appended after its nodes.
  explicit GraphBuilder(Graph g) : graph_(std::move(g)) {}

  // Labels of nodes added from now on start with this prefix, e.g. "layers.3".
  void SetScope(std::string scope) { scope_ = std::move(scope); }

  ValueId Input(const std::string& name, TensorType type);
  ValueId Param(const std::string& name, TensorType type);
  // A param whose values lie inside a larger stored tensor (graph/param_slice.h); `name` must still
  // be unique.
  ValueId ParamFrom(const std::string& name, TensorType type, const ParamSlice& slice);
  ValueId Const(const std::string& name, TensorType type, std::shared_ptr<const std::vector<float>> data);
  ValueId State(const std::string& name, TensorType type);

  ValueId Embedding(ValueId table, ValueId ids, std::string_view label = "embedding");
  ValueId MatMul(ValueId x, ValueId w, std::string_view label = "matmul");
  ValueId Add(ValueId a, ValueId b, std::string_view label = "add");
  ValueId Mul(ValueId a, ValueId b, std::string_view label = "mul");
  ValueId Silu(ValueId x, std::string_view label = "silu");
  ValueId GeluTanh(ValueId x, std::string_view label = "gelu_tanh");
  ValueId ClampedSwiglu(ValueId gate, ValueId up, double alpha, double limit, std::string_view label = "clamped_swiglu");
  ValueId Scale(ValueId x, double factor, std::string_view label = "scale");
  ValueId RmsNorm(ValueId x, ValueId w, double eps, double weight_offset, std::string_view label = "rms_norm");
  // RMSNorm of each group of `group` consecutive values (e.g. each head), with a weight [group].
  ValueId GroupRmsNorm(ValueId x, ValueId w, int64_t group, double eps, double weight_offset,
                       std::string_view label = "rms_norm");
  ValueId Rope(ValueId x, ValueId table, int64_t heads, int64_t head_dim, const std::string& style,
               std::string_view label = "rope");
  ValueId CacheWrite(ValueId state, ValueId x, std::string_view label = "cache_write");
  // With sinks >= 0 (f32[heads]), each head's sink logit joins its softmaxes (attr sinks).
  ValueId Attention(ValueId q, ValueId k_cache, ValueId v_cache, int64_t heads, int64_t kv_heads, int64_t head_dim,
                    double scale, int64_t window, std::string_view label = "attention", ValueId sinks = -1);
  ValueId LastRow(ValueId x, std::string_view label = "last_row");
  ValueId Argmax(ValueId x, std::string_view label = "argmax");
  ValueId RecordTokens(ValueId history, ValueId ids, std::string_view label = "record_tokens");
  ValueId RepeatPenalty(ValueId logits, ValueId history, double penalty, std::string_view label = "repeat_penalty");
  ValueId Sample(ValueId logits, double temperature, int64_t top_k, double top_p, double min_p, int64_t seed,
                 std::string_view label = "sample");

  // Fused ops (what the fusion passes produce; meanings in graph/op.h and graph/epilogue.h).
  // A matmul with an epilogue chain (e.g. "silu_mul,add") consuming `extras` in order, its value
  // optionally split in column groups (split = "w0,w1,...", read through Part).
  ValueId MatMulFused(ValueId x, ValueId w, const std::vector<ValueId>& extras, const std::string& epilogue,
                      const std::string& split = "", std::string_view label = "matmul");
  // matmul(rms_norm(x, gamma), w) as one node with a norm prologue (what fuse-norm-matmul makes).
  ValueId MatMulWithNorm(ValueId x, ValueId gamma, double eps, double weight_offset, ValueId w,
                         const std::vector<ValueId>& extras, const std::string& epilogue,
                         std::string_view label = "matmul");
  // rms_norm with residual = 1: s = x + r, value [T, 2D] split "D,D" = [s | norm(s) * (w + offset)].
  ValueId RmsNormResidual(ValueId x, ValueId w, ValueId r, double eps, double weight_offset,
                          std::string_view label = "rms_norm");
  // Column group `index` of a split value.
  ValueId Part(ValueId x, int64_t index, std::string_view label = "part");
  // The weights' rows stacked into one weight named `name`, materialised at load.
  ValueId ConcatRows(const std::vector<ValueId>& weights, const std::string& name,
                     std::string_view label = "concat_rows");

  // Mixture of experts (meanings in graph/op.h).
  ValueId TopK(ValueId x, int64_t k, std::string_view label = "top_k");
  ValueId RouteWeights(ValueId logits, ValueId ids, const std::string& weighting,
                       std::string_view label = "route_weights");
  // The chosen experts of the stacked weight w[experts*N, K] applied to each token, a slot each.
  // `biases` are the bias steps' inputs, `attrs` more attributes (a clamped_swiglu step's alpha
  // and limit).
  ValueId ExpertMatMul(ValueId x, ValueId w, ValueId ids, int64_t experts, const std::string& epilogue = "",
                       std::string_view label = "expert_matmul", const std::vector<ValueId>& biases = {},
                       const Attrs& attrs = {});
  // Each token's slots of y weighted by weights f32[T, k] and summed.
  ValueId RouteSum(ValueId y, ValueId weights, std::string_view label = "route_sum");

  void Output(const std::string& name, ValueId id);

  const Graph& graph() const { return graph_; }
  const absl::Status& status() const { return status_; }
  // The built graph, verified; or the first error met while building.
  absl::StatusOr<Graph> Finish() &&;

 private:
  ValueId Source(OpKind kind, const std::string& name, TensorType type);
  ValueId Compute(OpKind kind, std::vector<ValueId> inputs, Attrs attrs, std::string_view label);
  std::string Label(std::string_view name) const;

  Graph graph_;
  std::string scope_;
  absl::Status status_;
};

}  // namespace doppler::graph
