#include "models/gguf/hf_names.h"

#include <cstring>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace doppler::models {
namespace {

struct NamePair {
  std::string_view gguf, hf;
};
constexpr NamePair kGlobalNames[] = {
    {"token_embd", "model.embed_tokens"}, {"output_norm", "model.norm"}, {"output", "lm_head"}};
// Within a layer: "blk.N.<gguf>" <-> "model.layers.N.<hf>".
constexpr NamePair kLayerNames[] = {
    {"attn_q", "self_attn.q_proj"},       {"attn_k", "self_attn.k_proj"},      {"attn_v", "self_attn.v_proj"},
    {"attn_output", "self_attn.o_proj"},  {"attn_q_norm", "self_attn.q_norm"}, {"attn_k_norm", "self_attn.k_norm"},
    {"attn_norm", "input_layernorm"},     {"ffn_norm", "post_attention_layernorm"},
    {"ffn_gate", "mlp.gate_proj"},        {"ffn_up", "mlp.up_proj"},           {"ffn_down", "mlp.down_proj"}};

// A layer index written canonically (digits, no leading zero), so the mapping is one-to-one.
bool IsIndex(std::string_view s) {
  if (s.empty() || s.size() > 9 || (s.size() > 1 && s[0] == '0')) return false;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
  }
  return true;
}

// Maps "<from_prefix>N.<stem>.weight|bias" or "<stem>.weight|bias" from one naming to the other.
std::optional<std::string> MapName(std::string_view name, bool to_hf) {
  std::string_view suffix;
  for (std::string_view s : {std::string_view(".weight"), std::string_view(".bias")}) {
    if (name.size() > s.size() && name.substr(name.size() - s.size()) == s) suffix = s;
  }
  if (suffix.empty()) return std::nullopt;
  const std::string_view stem = name.substr(0, name.size() - suffix.size());
  for (const NamePair& p : kGlobalNames) {
    if (stem == (to_hf ? p.gguf : p.hf)) return std::string(to_hf ? p.hf : p.gguf) + std::string(suffix);
  }
  const std::string_view from_prefix = to_hf ? "blk." : "model.layers.";
  const std::string_view to_prefix = to_hf ? "model.layers." : "blk.";
  if (stem.substr(0, from_prefix.size()) != from_prefix) return std::nullopt;
  const std::string_view rest = stem.substr(from_prefix.size());
  const size_t dot = rest.find('.');
  if (dot == std::string_view::npos || !IsIndex(rest.substr(0, dot))) return std::nullopt;
  const std::string_view part = rest.substr(dot + 1);
  for (const NamePair& p : kLayerNames) {
    if (part == (to_hf ? p.gguf : p.hf)) {
      return std::string(to_prefix) + std::string(rest.substr(0, dot + 1)) + std::string(to_hf ? p.hf : p.gguf) +
             std::string(suffix);
    }
  }
  return std::nullopt;
}

// llama.cpp's converter reorders the rows of each head of Llama's q_proj and k_proj (weight and
// bias) so that its RoPE, which rotates adjacent pairs (2i, 2i+1), matches transformers'
// rotate-half RoPE, which pairs i with i + D/2 (D = head size = rows / heads). Writing a row of
// head h as h*D + s*D/2 + i (s in {0, 1}, i < D/2), the converter stored
//     GGUF row h*D + 2*i + s  =  HF row h*D + s*D/2 + i,
// i.e. it interleaves each head's two halves. Undoing it gathers, for each HF row, that GGUF
// row. Whole rows move, so this holds for block-quantized rows as for floats.
absl::StatusOr<std::vector<uint8_t>> UnpermuteRows(const TensorView& t, int64_t heads) {
  const int64_t rows = t.shape.empty() ? 0 : t.shape[0];
  if (rows <= 0 || heads <= 0 || rows % heads != 0 || (rows / heads) % 2 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(t.file, ": tensor '", t.name, "' has ", rows,
                                                   " rows, which do not split into ", heads, " heads of even size"));
  }
  const int64_t head = rows / heads, half = head / 2;
  const size_t row_bytes = t.nbytes / static_cast<size_t>(rows);
  std::vector<uint8_t> out(t.nbytes);
  for (int64_t h = 0; h < heads; ++h) {
    for (int64_t s = 0; s < 2; ++s) {
      for (int64_t i = 0; i < half; ++i) {
        const int64_t hf_row = h * head + s * half + i, gguf_row = h * head + 2 * i + s;
        std::memcpy(out.data() + hf_row * row_bytes, t.data + gguf_row * row_bytes, row_bytes);
      }
    }
  }
  return out;
}

class HfNamedGgufStore : public WeightStore {
 public:
  // q_heads / kv_heads: the head counts for undoing the q / k permutation; 0 = not permuted.
  HfNamedGgufStore(std::unique_ptr<GgufFile> file, int64_t q_heads, int64_t kv_heads)
      : file_(std::move(file)), q_heads_(q_heads), kv_heads_(kv_heads) {
    for (const GgufTensorInfo& t : file_->Tensors()) {
      if (std::optional<std::string> hf = HfNameFromGguf(t.name)) to_gguf_.emplace(*hf, t.name);
    }
  }

  bool Has(std::string_view name) const override { return to_gguf_.find(name) != to_gguf_.end(); }

  absl::StatusOr<TensorView> Get(std::string_view name) const override {
    auto it = to_gguf_.find(name);
    if (it == to_gguf_.end()) {
      return absl::NotFoundError(absl::StrCat("tensor '", GgufNameFromHf(name).value_or(std::string(name)),
                                              "' not found in ", file_->path()));
    }
    absl::StatusOr<TensorView> t = file_->Get(it->second);
    if (!t.ok()) return t.status();
    // t->name stays the file's own (blk.5.attn_norm.weight), the name errors about it use.
    const int64_t heads = PermutedHeads(it->second);
    if (heads == 0) return t;
    std::lock_guard<std::mutex> lock(mu_);
    auto cached = unpermuted_.find(name);
    if (cached == unpermuted_.end()) {
      absl::StatusOr<std::vector<uint8_t>> rows = UnpermuteRows(*t, heads);
      if (!rows.ok()) return rows.status();
      cached = unpermuted_.emplace(std::string(name), *std::move(rows)).first;
    }
    t->data = cached->second.data();  // map nodes never move, and entries are never erased
    return t;
  }

  std::vector<std::string> Names() const override {
    std::vector<std::string> names;
    for (const auto& [hf, unused] : to_gguf_) names.push_back(hf);
    return names;  // std::map keeps them sorted
  }

  std::string Describe() const override { return file_->path(); }

 private:
  int64_t PermutedHeads(const std::string& gguf_name) const {
    auto has_part = [&](std::string_view part) {
      return gguf_name.find(std::string(".") + std::string(part) + ".") != std::string::npos;
    };
    if (has_part("attn_q")) return q_heads_;
    if (has_part("attn_k")) return kv_heads_;
    return 0;
  }

  std::unique_ptr<GgufFile> file_;
  int64_t q_heads_, kv_heads_;
  std::map<std::string, std::string, std::less<>> to_gguf_;  // HF name -> GGUF name
  // Un-permuted copies of q/k tensors, made on first Get() and kept: views must stay valid.
  mutable std::mutex mu_;
  mutable std::map<std::string, std::vector<uint8_t>, std::less<>> unpermuted_;
};

}  // namespace

std::optional<std::string> HfNameFromGguf(std::string_view gguf_name) { return MapName(gguf_name, true); }
std::optional<std::string> GgufNameFromHf(std::string_view hf_name) { return MapName(hf_name, false); }

absl::StatusOr<std::unique_ptr<WeightStore>> OpenHfNamedGguf(std::unique_ptr<GgufFile> file) {
  absl::StatusOr<std::string> arch = file->GetString("general.architecture");
  if (!arch.ok()) return arch.status();
  if (*arch == "qwen2" || *arch == "qwen3") {  // converted without reordering: same rope as HF
    return std::make_unique<HfNamedGgufStore>(std::move(file), 0, 0);
  }
  if (*arch != "llama") {
    return absl::InvalidArgumentError(absl::StrCat(file->path(), ": architecture '", *arch,
                                                   "' has no HF tensor names here (supported: llama, qwen2, qwen3)"));
  }
  absl::StatusOr<int64_t> heads = file->GetInt("llama.attention.head_count");
  if (!heads.ok()) return heads.status();
  absl::StatusOr<int64_t> kv_heads = heads;
  if (file->Find("llama.attention.head_count_kv") != nullptr) kv_heads = file->GetInt("llama.attention.head_count_kv");
  if (!kv_heads.ok()) return kv_heads.status();
  if (*heads <= 0 || *kv_heads <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(file->path(), ": head counts must be positive (", *heads, ", ",
                                                   *kv_heads, ")"));
  }
  return std::make_unique<HfNamedGgufStore>(std::move(file), *heads, *kv_heads);
}

}  // namespace doppler::models
