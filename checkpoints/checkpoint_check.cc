#include "checkpoints/checkpoint_check.h"

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "checkpoints/gguf_arch.h"
#include "checkpoints/hf_names.h"
#include "formats/gguf/gguf_key_names.h"

namespace doppler::checkpoints {
namespace {

constexpr char kLayerPrefix[] = "model.layers.";

// The tensor's name as the checkpoint spells it (GGUF names for a GGUF file of a known architecture).
std::string TensorName(const std::string& hf_name, const formats::ModelConfig& config, CheckpointNaming naming) {
  if (naming == CheckpointNaming::kHf) return hf_name;
  const GgufArch* arch = FindGgufArchOfHfClass(config.architecture);
  if (arch == nullptr) return hf_name;
  return GgufNameFromHf(*arch, hf_name).value_or(hf_name);
}

// The number of layers the checkpoint holds tensors for: one more than the highest layer index.
int64_t CheckpointLayers(const formats::WeightStore& store) {
  int64_t layers = 0;
  for (const std::string& name : store.Names()) {
    if (name.rfind(kLayerPrefix, 0) != 0) continue;
    const size_t start = sizeof(kLayerPrefix) - 1;
    const size_t dot = name.find('.', start);
    int64_t index;
    if (dot != std::string::npos && absl::SimpleAtoi(name.substr(start, dot - start), &index) && index >= layers) {
      layers = index + 1;
    }
  }
  return layers;
}

}  // namespace

std::string ConfigKeyName(const std::string& hf_key, const formats::ModelConfig& config, CheckpointNaming naming) {
  if (naming == CheckpointNaming::kHf) return hf_key;
  const GgufArch* arch = FindGgufArchOfHfClass(config.architecture);
  return arch == nullptr ? hf_key : formats::GgufKeyOfHfKey(hf_key, std::string(arch->gguf));
}

absl::Status CheckConfigAgainstCheckpoint(const formats::ModelConfig& c, const formats::WeightStore& store, CheckpointNaming naming) {
  const std::string where = store.Describe();
  auto key = [&](const char* hf_key) { return ConfigKeyName(hf_key, c, naming); };
  const int64_t layers = CheckpointLayers(store);
  if (layers != c.num_layers) {
    return absl::InvalidArgumentError(absl::StrCat(
        key("num_hidden_layers"), " is ", c.num_layers, " but ", where, " holds tensors for ", layers, " layers",
        naming == CheckpointNaming::kGguf ? " (blk.N.*)" : " (model.layers.N.*)"));
  }
  // A tensor's shape against what the config implies, where the checkpoint has the tensor (the
  // families differ in which they have; a missing one is reported when the weights load).
  struct Expected {
    std::string tensor;
    std::vector<int64_t> shape;
    std::string because;
  };
  const int64_t hidden = c.hidden_size, q_rows = int64_t{c.num_heads} * c.head_dim,
                kv_rows = int64_t{c.num_kv_heads} * c.head_dim;
  const std::vector<Expected> expected = {
      {"model.embed_tokens.weight", {c.vocab_size, hidden}, absl::StrCat(key("vocab_size"), " x ", key("hidden_size"))},
      {"model.layers.0.self_attn.q_proj.weight", {q_rows, hidden},
       absl::StrCat(key("num_attention_heads"), " x ", key("head_dim"), ", ", key("hidden_size"))},
      {"model.layers.0.self_attn.k_proj.weight", {kv_rows, hidden},
       absl::StrCat(key("num_key_value_heads"), " x ", key("head_dim"), ", ", key("hidden_size"))},
      {"model.layers.0.mlp.down_proj.weight", {hidden, c.intermediate_size},
       absl::StrCat(key("hidden_size"), ", ", key("intermediate_size"))},
  };
  for (const Expected& e : expected) {
    if (!store.Has(e.tensor)) continue;
    absl::StatusOr<formats::TensorView> t = store.Get(e.tensor);
    if (!t.ok()) return t.status();
    if (t->shape != e.shape) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": tensor ", TensorName(e.tensor, c, naming), " is [", absl::StrJoin(t->shape, ", "), "] but the ",
          naming == CheckpointNaming::kGguf ? "metadata" : "config", " gives [", absl::StrJoin(e.shape, ", "), "] (",
          e.because, ")"));
    }
  }
  return absl::OkStatus();
}

}  // namespace doppler::checkpoints
