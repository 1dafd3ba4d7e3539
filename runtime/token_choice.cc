#include "runtime/token_choice.h"

#include "absl/status/status.h"
#include "graph/builder.h"

namespace doppler::runtime {

absl::StatusOr<graph::Graph> AppendTokenChoice(graph::Graph g, const SamplingOptions& o) {
  using graph::Dim;
  using graph::DType;
  std::optional<graph::ValueId> logits_out = g.output("logits");
  std::optional<graph::ValueId> ids = g.FindNamed(graph::OpKind::kInput, "ids");
  if (!logits_out || !ids) return absl::InvalidArgumentError("the model graph has no \"logits\" output or \"ids\" input");
  const bool one_row = g.node(*logits_out).type.shape[0] == Dim::Static(1);
  if (g.paging().row_per_sequence) {
    // Each row is its own sequence: each row's argmax (a caller that samples reads the logits).
    if (o.temperature > 0.0) return absl::InvalidArgumentError("a step with a row per sequence chooses by argmax");
    graph::GraphBuilder b(std::move(g));
    b.Output("next_token", b.Argmax(*logits_out, "argmax"));
    return std::move(b).Finish();
  }
  graph::GraphBuilder b(std::move(g));
  graph::ValueId logits = one_row ? *logits_out : b.LastRow(*logits_out, "last_logits");
  if (o.temperature <= 0.0) {
    b.Output("next_token", b.Argmax(logits, "argmax"));
    return std::move(b).Finish();
  }
  if (o.repeat_penalty != 1.0) {
    if (o.repeat_last_n <= 0) return absl::InvalidArgumentError("repeat_last_n must be positive");
    graph::ValueId history = b.State("sampling.history", {DType::kI32, {Dim::Static(o.repeat_last_n)}});
    logits = b.RepeatPenalty(logits, b.RecordTokens(history, *ids, "record_tokens"), o.repeat_penalty, "repeat_penalty");
  }
  b.Output("next_token", b.Sample(logits, o.temperature, o.top_k, o.top_p, o.min_p, o.seed, "sample"));
  return std::move(b).Finish();
}

}  // namespace doppler::runtime
