#include "checkpoints/hf_names.h"

#include <cstring>
#include <map>
#include <mutex>
#include <span>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "quant/quant.h"

namespace doppler::checkpoints {
namespace {

constexpr GgufNamePair kGlobalNames[] = {
    {"token_embd", "model.embed_tokens"}, {"output_norm", "model.norm"}, {"output", "lm_head"}};
// Within a layer: "blk.N.<gguf>" <-> "model.layers.N.<hf>".
constexpr GgufNamePair kLayerNames[] = {
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

// The name of `part` (a layer tensor's stem) in the other naming: the architecture's own names
// first, then the common ones.
std::optional<std::string_view> MapLayerPart(const GgufArch& arch, std::string_view part, bool to_hf) {
  for (std::span<const GgufNamePair> table : {arch.layer_names, std::span<const GgufNamePair>(kLayerNames)}) {
    for (const GgufNamePair& p : table) {
      if (part == (to_hf ? p.gguf : p.hf)) return to_hf ? p.hf : p.gguf;
    }
  }
  return std::nullopt;
}

// Maps "<from_prefix>N.<stem>.weight|bias" or "<stem>.weight|bias" from one naming to the other,
// and the architecture's whole layer names (GgufArch::layer_whole_names) as they are.
std::optional<std::string> MapName(const GgufArch& arch, std::string_view name, bool to_hf) {
  const std::string_view from_prefix = to_hf ? "blk." : "model.layers.";
  const std::string_view to_prefix = to_hf ? "model.layers." : "blk.";
  std::optional<std::string_view> layer, rest;  // "N." and what follows it
  if (name.substr(0, from_prefix.size()) == from_prefix) {
    const std::string_view after = name.substr(from_prefix.size());
    const size_t dot = after.find('.');
    if (dot == std::string_view::npos || !IsIndex(after.substr(0, dot))) return std::nullopt;
    layer = after.substr(0, dot + 1);
    rest = after.substr(dot + 1);
    for (const GgufNamePair& p : arch.layer_whole_names) {
      if (*rest == (to_hf ? p.gguf : p.hf)) {
        return std::string(to_prefix) + std::string(*layer) + std::string(to_hf ? p.hf : p.gguf);
      }
    }
  }
  std::string_view suffix;
  for (std::string_view s : {std::string_view(".weight"), std::string_view(".bias")}) {
    if (name.size() > s.size() && name.substr(name.size() - s.size()) == s) suffix = s;
  }
  if (suffix.empty()) return std::nullopt;
  if (!layer) {
    const std::string_view stem = name.substr(0, name.size() - suffix.size());
    for (const GgufNamePair& p : kGlobalNames) {
      if (stem == (to_hf ? p.gguf : p.hf)) return std::string(to_hf ? p.hf : p.gguf) + std::string(suffix);
    }
    return std::nullopt;
  }
  const std::optional<std::string_view> part = MapLayerPart(arch, rest->substr(0, rest->size() - suffix.size()), to_hf);
  if (!part) return std::nullopt;
  return std::string(to_prefix) + std::string(*layer) + std::string(*part) + std::string(suffix);
}

// llama.cpp's converter reorders the rows of each head of Llama's q_proj and k_proj (weight and
// bias) so that its RoPE, which rotates adjacent pairs (2i, 2i+1), matches transformers'
// rotate-half RoPE, which pairs i with i + D/2 (D = head size = rows / heads). Writing a row of
// head h as h*D + s*D/2 + i (s in {0, 1}, i < D/2), the converter stored
//     GGUF row h*D + 2*i + s  =  HF row h*D + s*D/2 + i,
// i.e. it interleaves each head's two halves. Undoing it gathers, for each HF row, that GGUF
// row. Whole rows move, so this holds for block-quantized rows as for floats.
absl::StatusOr<std::vector<uint8_t>> UnpermuteRows(const formats::TensorView& t, int64_t heads) {
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

// Gemma's norm weights as doppler's graph takes them: the stored w + shift, minus shift, in f32.
absl::StatusOr<std::vector<uint8_t>> UnshiftNorm(const formats::TensorView& t, float shift) {
  if (t.shape.size() != 1 || !graph::IsFloat(t.dtype)) {
    return absl::InvalidArgumentError(absl::StrCat(t.file, ": norm tensor '", t.name, "' must be a float vector"));
  }
  const int64_t n = t.shape[0];
  std::vector<float> w(static_cast<size_t>(n));
  if (absl::Status s = quant::DequantizeRow(t.dtype, t.data, n, w.data()); !s.ok()) return s;
  for (float& x : w) x -= shift;
  std::vector<uint8_t> out(w.size() * sizeof(float));
  std::memcpy(out.data(), w.data(), out.size());
  return out;
}

class HfNamedGgufStore : public formats::WeightStore {
 public:
  // q_heads / kv_heads: the head counts for undoing the q / k permutation; 0 = not permuted.
  HfNamedGgufStore(std::unique_ptr<formats::GgufFile> file, const GgufArch& arch, int64_t q_heads, int64_t kv_heads)
      : file_(std::move(file)), arch_(arch), q_heads_(q_heads), kv_heads_(kv_heads) {
    for (const formats::GgufTensorInfo& t : file_->Tensors()) {
      if (std::optional<std::string> hf = MapName(arch_, t.name, true)) to_gguf_.emplace(*hf, t.name);
    }
  }

  bool Has(std::string_view name) const override { return to_gguf_.find(name) != to_gguf_.end(); }

  absl::StatusOr<formats::TensorView> Get(std::string_view name) const override {
    auto it = to_gguf_.find(name);
    if (it == to_gguf_.end()) {
      return absl::NotFoundError(absl::StrCat("tensor '", GgufNameFromHf(arch_, name).value_or(std::string(name)),
                                              "' not found in ", file_->path()));
    }
    absl::StatusOr<formats::TensorView> t = file_->Get(it->second);
    if (!t.ok()) return t.status();
    // A layer's stacked experts (ggml [K, N, E]: E matrices of [N, K] back to back) are the one
    // [E*N, K] weight the mixture-of-experts graph reads.
    if (t->shape.size() == 3) t->shape = {t->shape[0] * t->shape[1], t->shape[2]};
    // Their biases (GPT-OSS: ggml [N, E]) likewise as one [E*N] vector.
    if (t->shape.size() == 2 && it->second.ends_with("_exps.bias")) t->shape = {t->shape[0] * t->shape[1]};
    // t->name stays the file's own (blk.5.attn_norm.weight), the name errors about it use.
    const int64_t heads = PermutedHeads(it->second);
    const bool shifted = arch_.norm_shift != 0.0f && it->second.ends_with("norm.weight");
    if (heads == 0 && !shifted) return t;
    std::lock_guard<std::mutex> lock(mu_);
    auto cached = derived_.find(name);
    if (cached == derived_.end()) {
      absl::StatusOr<std::vector<uint8_t>> bytes = shifted ? UnshiftNorm(*t, arch_.norm_shift) : UnpermuteRows(*t, heads);
      if (!bytes.ok()) return bytes.status();
      cached = derived_.emplace(std::string(name), *std::move(bytes)).first;
    }
    t->data = cached->second.data();  // map nodes never move, and entries are never erased
    if (shifted) {
      t->dtype = graph::DType::kF32;
      t->nbytes = cached->second.size();
    }
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

  std::unique_ptr<formats::GgufFile> file_;
  const GgufArch& arch_;
  int64_t q_heads_, kv_heads_;
  std::map<std::string, std::string, std::less<>> to_gguf_;  // HF name -> GGUF name
  // Tensors rewritten into HF's form (q/k rows un-permuted, Gemma norms unshifted), made on first
  // Get() and kept: views must stay valid.
  mutable std::mutex mu_;
  mutable std::map<std::string, std::vector<uint8_t>, std::less<>> derived_;
};

}  // namespace

std::optional<std::string> HfNameFromGguf(const GgufArch& arch, std::string_view gguf_name) {
  return MapName(arch, gguf_name, true);
}
std::optional<std::string> GgufNameFromHf(const GgufArch& arch, std::string_view hf_name) {
  return MapName(arch, hf_name, false);
}

std::optional<std::pair<std::string, int64_t>> StackedExpertOf(const GgufArch& arch, std::string_view hf_name) {
  if (arch.moe == nullptr) return std::nullopt;
  constexpr std::string_view kPrefix = "model.layers.";
  if (!hf_name.starts_with(kPrefix)) return std::nullopt;
  const size_t layer_end = hf_name.find('.', kPrefix.size());
  if (layer_end == std::string_view::npos || !IsIndex(hf_name.substr(kPrefix.size(), layer_end - kPrefix.size()))) {
    return std::nullopt;
  }
  const std::string experts = std::string(arch.moe->experts) + ".";
  std::string_view rest = hf_name.substr(layer_end + 1);
  if (!rest.starts_with(experts)) return std::nullopt;
  rest.remove_prefix(experts.size());
  const size_t dot = rest.find('.');
  if (dot == std::string_view::npos || !IsIndex(rest.substr(0, dot))) return std::nullopt;
  const int64_t e = std::stoll(std::string(rest.substr(0, dot)));  // at most 9 digits (IsIndex)
  return std::pair{std::string(hf_name.substr(0, layer_end + 1)) + experts + std::string(rest.substr(dot + 1)), e};
}

absl::StatusOr<std::unique_ptr<formats::WeightStore>> OpenHfNamedGguf(std::unique_ptr<formats::GgufFile> file) {
  absl::StatusOr<std::string> name = file->GetString("general.architecture");
  if (!name.ok()) return name.status();
  const GgufArch* arch = FindGgufArch(*name);
  if (arch == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(file->path(), ": architecture '", *name,
                                                   "' has no HF tensor names here (supported: ", GgufArchNames(), ")"));
  }
  if (!arch->permuted_qk) return std::make_unique<HfNamedGgufStore>(std::move(file), *arch, 0, 0);
  const std::string p = absl::StrCat(*name, ".");
  absl::StatusOr<int64_t> heads = file->GetInt(p + "attention.head_count");
  if (!heads.ok()) return heads.status();
  absl::StatusOr<int64_t> kv_heads = heads;
  if (file->Find(p + "attention.head_count_kv") != nullptr) kv_heads = file->GetInt(p + "attention.head_count_kv");
  if (!kv_heads.ok()) return kv_heads.status();
  if (*heads <= 0 || *kv_heads <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(file->path(), ": head counts must be positive (", *heads, ", ",
                                                   *kv_heads, ")"));
  }
  return std::make_unique<HfNamedGgufStore>(std::move(file), *arch, *heads, *kv_heads);
}

}  // namespace doppler::checkpoints
