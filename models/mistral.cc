// The Mistral family: the standard decoder with sliding-window attention on every layer (when the
// config gives a sliding_window; Mistral v0.2+ configs set it to null).
#include "models/architecture.h"
#include "models/blocks.h"

namespace doppler::models {

absl::StatusOr<graph::Graph> BuildMistral(const formats::ModelConfig& c, const BuildOptions& o) {
  absl::StatusOr<DecoderSpec> d = StandardDecoder(c);
  if (!d.ok()) return d.status();
  if (absl::Status s = SetSlidingWindows(c, [](int) { return true; }, *d); !s.ok()) return s;
  return BuildDecoder(c, *d, o);
}

}  // namespace doppler::models
