// libFuzzer target for config.json: parse it as `doppler run` does, then build the step graph of
// the models small enough to build quickly (the checkpoint check bounds the rest before a graph
// is built from them: checkpoints/checkpoint_check.h).
#include <cstddef>
#include <cstdint>

#include "formats/hf_config.h"
#include "models/architecture.h"
#include "nlohmann/json.hpp"

namespace {

// Sizes a fuzzed config may have for its graph to be built (the builders' own checks are fuzzed;
// a config of a billion layers is the checkpoint check's to refuse).
bool SmallEnough(const doppler::formats::ModelConfig& c) {
  auto in = [](int64_t v, int64_t most) { return v > 0 && v <= most; };
  return in(c.num_layers, 4) && in(c.hidden_size, 512) && in(c.intermediate_size, 1024) && in(c.num_heads, 16) &&
         in(c.num_kv_heads, 16) && in(c.head_dim, 128) && in(c.vocab_size, 1024);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace doppler;
  const nlohmann::json j = nlohmann::json::parse(data, data + size, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return 0;
  absl::StatusOr<formats::ModelConfig> config = formats::ParseHfConfig(j, "config.json");
  if (!config.ok() || !SmallEnough(*config)) return 0;
  models::BuildOptions build;
  build.context = 16;
  build.max_step_tokens = 8;
  (void)models::BuildModelGraph(*config, build);
  return 0;
}
