#include "checkpoints/hf_to_gguf.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <tuple>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "checkpoints/gguf_arch.h"
#include "checkpoints/gpt_oss_experts.h"
#include "checkpoints/hf_names.h"
#include "formats/gguf/gguf_key_names.h"
#include "formats/gguf/gguf_writer.h"
#include "formats/hf_config.h"
#include "formats/safetensors.h"
#include "models/blocks.h"
#include "models/rope.h"
#include "quant/float_codec.h"
#include "quant/quant.h"
#include "tokenizers/gguf_tokenizer.h"

namespace doppler::checkpoints {
namespace {

// Llama 3 RoPE scaling as llama.cpp stores it: per frequency, the divisor of the base inverse
// frequency (1 for short wavelengths, `factor` for long ones, a smooth blend in between), computed
// in double from the float32 base frequencies and stored as float32.
std::vector<float> Llama3RopeDivisors(const formats::RopeConfig& rope, int head_dim) {
  formats::RopeConfig base = rope;
  base.scaling = formats::RopeScaling{};
  const std::vector<float> freqs = models::ComputeRope(base, head_dim, 0).inv_freq;
  const formats::RopeScaling& s = rope.scaling;
  const double old_len = s.original_max_position_embeddings;
  const double low_wavelen = old_len / s.low_freq_factor, high_wavelen = old_len / s.high_freq_factor;
  std::vector<float> out;
  for (float f : freqs) {
    const double wavelen = 2 * M_PI / static_cast<double>(f);
    if (wavelen < high_wavelen) {
      out.push_back(1.0f);
    } else if (wavelen > low_wavelen) {
      out.push_back(s.factor);
    } else {
      const double smooth = (old_len / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
      out.push_back(static_cast<float>(1.0 / ((1 - smooth) / s.factor + smooth)));
    }
  }
  return out;
}

// Sort key: token_embd, rope factor tensors, the layers in order, output_norm, output.
std::tuple<int, int64_t, std::string> OrderOf(const std::string& gguf) {
  if (gguf.starts_with("token_embd")) return {0, 0, gguf};
  if (gguf.starts_with("rope_")) return {1, 0, gguf};
  if (gguf.starts_with("blk.")) {
    const size_t dot = gguf.find('.', 4);
    int64_t layer = 0;
    (void)absl::SimpleAtoi(gguf.substr(4, dot == std::string::npos ? std::string::npos : dot - 4), &layer);
    return {2, layer, gguf};
  }
  if (gguf.starts_with("output_norm")) return {3, 0, gguf};
  return {4, 0, gguf};
}

void AddTokenizer(formats::GgufWriter& w, const tokenizers::GgufTokenizerData& d) {
  w.AddString("tokenizer.ggml.model", d.model);
  if (!d.pre.empty()) w.AddString("tokenizer.ggml.pre", d.pre);
  w.AddStringArray("tokenizer.ggml.tokens", d.tokens);
  if (!d.scores.empty()) w.AddF32Array("tokenizer.ggml.scores", d.scores);
  w.AddI32Array("tokenizer.ggml.token_type", d.token_types);
  if (!d.merges.empty()) w.AddStringArray("tokenizer.ggml.merges", d.merges);
  for (auto [key, id] : {std::pair{"tokenizer.ggml.bos_token_id", d.bos}, std::pair{"tokenizer.ggml.eos_token_id", d.eos},
                         std::pair{"tokenizer.ggml.unknown_token_id", d.unk},
                         std::pair{"tokenizer.ggml.padding_token_id", d.pad},
                         std::pair{"tokenizer.ggml.eot_token_id", d.eot}}) {
    if (id) w.AddU32(key, static_cast<uint32_t>(*id));
  }
  if (d.add_bos) w.AddBool("tokenizer.ggml.add_bos_token", *d.add_bos);
  if (d.add_eos) w.AddBool("tokenizer.ggml.add_eos_token", *d.add_eos);
  if (d.add_space_prefix) w.AddBool("tokenizer.ggml.add_space_prefix", *d.add_space_prefix);
  if (!d.chat_template.empty()) w.AddString("tokenizer.chat_template", d.chat_template);
}

// Fails when llama.cpp, reading the file, would not run the model the config describes: what
// GGUF metadata cannot say must be what llama.cpp assumes (docs/models.md). `moe`: the config's
// mixture of experts, if it is the architecture's mixture-of-experts family.
absl::Status CheckExpressible(const formats::ModelConfig& c, const GgufArch& arch, const models::MoeSpec* moe, const std::string& where) {
  auto unexpressible = [&](const std::string& what) {
    return absl::UnimplementedError(absl::StrCat(where, ": ", what, " cannot be written as GGUF ", std::string(arch.gguf)));
  };
  if (moe != nullptr) {
    // llama.cpp makes every layer a mixture, of experts as wide as its keys say.
    absl::StatusOr<double> step = models::ConfigNumber(c, "decoder_sparse_step", 1);
    const auto dense = c.raw.find("mlp_only_layers");
    if (!step.ok() || *step != 1 || (dense != c.raw.end() && dense->is_array() && !dense->empty())) {
      return unexpressible("dense MLP layers among the mixtures of experts (mlp_only_layers, decoder_sparse_step)");
    }
    if (!arch.moe->expert_width_key && moe->intermediate != c.intermediate_size) {
      return unexpressible("experts of another width than intermediate_size");
    }
    // llama.cpp's qwen3moe always renormalises the chosen experts' weights.
    absl::StatusOr<bool> norm_topk = models::ConfigBool(c, "norm_topk_prob", false);
    if (arch.gguf == "qwen3moe" && (!norm_topk.ok() || !*norm_topk)) {
      return unexpressible("norm_topk_prob false (llama.cpp always renormalises the chosen experts' weights)");
    }
  }
  if (arch.gguf == "gpt-oss") {
    // llama.cpp fixes the clamped SwiGLU's limit at 7 and slides every even layer.
    absl::StatusOr<double> limit = models::ConfigNumber(c, "swiglu_limit", 7.0);
    if (!limit.ok() || *limit != 7.0) return unexpressible("swiglu_limit other than 7 (llama.cpp fixes it)");
    if (!c.sliding_window) return unexpressible("GPT-OSS without a sliding_window (llama.cpp requires one)");
    for (int l = 0; l < c.num_layers && !c.layer_types.empty(); ++l) {
      if ((c.layer_types[static_cast<size_t>(l)] == "sliding_attention") != (l % 2 == 0)) {
        return unexpressible(absl::StrCat("a layer pattern other than every even layer sliding (layer ", l, ")"));
      }
    }
  }
  if (c.hidden_act != arch.hidden_act) return unexpressible(absl::StrCat("activation '", c.hidden_act, "'"));
  if (c.sliding_window && !arch.sliding_window) return unexpressible("sliding-window attention");
  const formats::RopeScaling& s = c.rope.scaling;
  if (s.type == "llama3" && arch.gguf != "llama") return unexpressible("llama3 rope scaling");
  if (c.rope_local && (arch.gguf != "gemma3" || c.rope_local->scaling.type != "default")) {
    return unexpressible("a scaled or second rope");
  }
  if (arch.gguf == "gemma3") {
    for (int l = 0; l < c.num_layers; ++l) {
      const bool slides = c.layer_types.empty()
                              ? c.sliding_window && (l + 1) % c.raw.value("sliding_window_pattern", kLlamaCppGemma3Pattern) != 0
                              : c.layer_types[static_cast<size_t>(l)] == "sliding_attention";
      if (slides != (c.sliding_window && (l + 1) % kLlamaCppGemma3Pattern != 0)) {
        return unexpressible(absl::StrCat("a layer pattern other than every ", kLlamaCppGemma3Pattern,
                                          "th layer global (layer ", l, ")"));
      }
    }
    const double scalar = c.raw.value("query_pre_attn_scalar", static_cast<double>(c.head_dim));
    const int64_t assumed = LlamaCppGemma3QueryScalar(c.num_layers, c.hidden_size, c.num_heads, c.head_dim);
    if (scalar != static_cast<double>(assumed)) {
      return unexpressible(absl::StrCat("query_pre_attn_scalar ", scalar, " (llama.cpp assumes ", assumed, ")"));
    }
  }
  return absl::OkStatus();
}

// The rope scaling's keys (and, for LongRoPE, its factor tensors' values).
void AddRopeScaling(formats::GgufWriter& w, const std::string& p, const formats::RopeScaling& s, std::vector<std::pair<std::string, std::vector<float>>>& rope_tensors) {
  if (s.type == "linear") {
    w.AddString(p + "rope.scaling.type", "linear");
    w.AddF32(p + "rope.scaling.factor", s.factor);
  } else if (s.type == "yarn") {
    w.AddString(p + "rope.scaling.type", "yarn");
    w.AddF32(p + "rope.scaling.factor", s.factor);
    w.AddU32(p + "rope.scaling.original_context_length", static_cast<uint32_t>(s.original_max_position_embeddings));
    w.AddF32(p + "rope.scaling.yarn_beta_fast", s.beta_fast);
    w.AddF32(p + "rope.scaling.yarn_beta_slow", s.beta_slow);
    // llama.cpp multiplies attn_factor into YaRN's own 0.1 ln(factor) + 1.
    const double own = s.factor > 1 ? 0.1 * std::log(static_cast<double>(s.factor)) + 1.0 : 1.0;
    w.AddF32(p + "rope.scaling.attn_factor", static_cast<float>(s.attention_factor / own));
    // llama.cpp rounds the ramp's ends whatever the file says; doppler reads this (gguf_key_names.h).
    if (!s.truncate) w.AddBool(p + formats::kYarnTruncateKey, false);
  } else if (s.type == "longrope") {
    w.AddU32(p + "rope.scaling.original_context_length", static_cast<uint32_t>(s.original_max_position_embeddings));
    w.AddF32(p + "rope.scaling.attn_factor", s.attention_factor);
    rope_tensors.push_back({"rope_factors_long.weight", s.long_factor});
    rope_tensors.push_back({"rope_factors_short.weight", s.short_factor});
  }
}

}  // namespace

std::vector<uint8_t> PermuteRowsForGguf(const std::vector<uint8_t>& rows, int64_t n_rows, int64_t heads) {
  const int64_t head = n_rows / heads, half = head / 2;
  const size_t row_bytes = rows.size() / static_cast<size_t>(n_rows);
  std::vector<uint8_t> out(rows.size());
  for (int64_t h = 0; h < heads; ++h) {
    for (int64_t s = 0; s < 2; ++s) {
      for (int64_t i = 0; i < half; ++i) {
        const int64_t gguf_row = h * head + 2 * i + s, hf_row = h * head + s * half + i;
        std::memcpy(out.data() + gguf_row * row_bytes, rows.data() + hf_row * row_bytes, row_bytes);
      }
    }
  }
  return out;
}

absl::Status ConvertHfToGguf(const HfToGgufOptions& o) {
  auto note = [&](const std::string& s) {
    if (o.note) o.note(s);
  };
  absl::StatusOr<formats::ModelConfig> config = formats::ReadHfConfig(o.model_dir / "config.json");
  if (!config.ok()) return config.status();
  const formats::ModelConfig& c = *config;
  const GgufArch* arch = FindGgufArchOfHfClass(c.architecture);
  if (arch == nullptr) {
    return absl::UnimplementedError(absl::StrCat(o.model_dir.string(), ": architecture '", c.architecture,
                                                 "' cannot be written as GGUF here (the classes of ", GgufArchNames(),
                                                 ")"));
  }
  std::optional<models::MoeSpec> moe;
  if (IsGgufMoeClass(*arch, c.architecture)) {
    absl::StatusOr<models::MoeSpec> spec = models::ConfigMoe(c);
    if (!spec.ok()) {
      return absl::Status(spec.status().code(), absl::StrCat(o.model_dir.string(), ": ", spec.status().message()));
    }
    moe = *std::move(spec);
  }
  const int64_t experts = moe ? moe->experts : 0;
  if (absl::Status st = CheckExpressible(c, *arch, moe ? &*moe : nullptr, o.model_dir.string()); !st.ok()) return st;
  const formats::RopeScaling& scaling = c.rope.scaling;
  absl::StatusOr<std::unique_ptr<formats::WeightStore>> opened = formats::OpenSafetensors(o.model_dir);
  if (!opened.ok()) return opened.status();
  std::shared_ptr<const formats::WeightStore> store(std::move(*opened));

  formats::GgufWriter w;
  const std::string p = absl::StrCat(std::string(arch->gguf), ".");
  std::string name = o.name;
  if (name.empty()) name = std::filesystem::absolute(o.model_dir).lexically_normal().filename().string();
  if (name.empty()) name = std::filesystem::absolute(o.model_dir).lexically_normal().parent_path().filename().string();
  w.AddString("general.architecture", std::string(arch->gguf));
  w.AddString("general.name", name);
  if (c.max_position_embeddings > 0) w.AddU32(p + "context_length", static_cast<uint32_t>(c.max_position_embeddings));
  w.AddU32(p + "embedding_length", static_cast<uint32_t>(c.hidden_size));
  w.AddU32(p + "block_count", static_cast<uint32_t>(c.num_layers));
  w.AddU32(p + "feed_forward_length", static_cast<uint32_t>(c.intermediate_size));
  w.AddU32(p + "rope.dimension_count", static_cast<uint32_t>(c.head_dim));
  w.AddU32(p + "attention.head_count", static_cast<uint32_t>(c.num_heads));
  w.AddU32(p + "attention.head_count_kv", static_cast<uint32_t>(c.num_kv_heads));
  if (static_cast<int64_t>(c.head_dim) * c.num_heads != c.hidden_size) {
    w.AddU32(p + "attention.key_length", static_cast<uint32_t>(c.head_dim));
    w.AddU32(p + "attention.value_length", static_cast<uint32_t>(c.head_dim));
  }
  w.AddF32(p + "attention.layer_norm_rms_epsilon", c.rms_norm_eps);
  w.AddF32(p + "rope.freq_base", c.rope.theta);
  w.AddU32(p + "vocab_size", static_cast<uint32_t>(c.vocab_size));
  if (moe) {
    w.AddU32(p + "expert_count", static_cast<uint32_t>(moe->experts));
    w.AddU32(p + "expert_used_count", static_cast<uint32_t>(moe->top_k));
    if (arch->moe->expert_width_key) w.AddU32(p + "expert_feed_forward_length", static_cast<uint32_t>(moe->intermediate));
  }
  if (arch->sliding_window) w.AddU32(p + "attention.sliding_window", static_cast<uint32_t>(c.sliding_window.value_or(0)));
  if (c.rope_local) w.AddF32(p + "rope.freq_base_swa", c.rope_local->theta);
  std::vector<std::pair<std::string, std::vector<float>>> rope_tensors;  // name, values (F32)
  AddRopeScaling(w, p, scaling, rope_tensors);
  if (scaling.type == "llama3") {
    const std::vector<float> rope_divisors = Llama3RopeDivisors(c.rope, c.head_dim);
    rope_tensors.push_back({"rope_freqs.weight", rope_divisors});
    // A reader recovers original_max_position_embeddings from a divisor strictly between 1 and
    // factor; when none is, the length has to be stated.
    if (std::none_of(rope_divisors.begin(), rope_divisors.end(),
                     [&](float r) { return r > 1.0f && r < scaling.factor; })) {
      w.AddU32(p + "rope.scaling.original_context_length",
               static_cast<uint32_t>(scaling.original_max_position_embeddings));
    }
  }
  w.AddU32("general.file_type", static_cast<uint32_t>(quant::GgufFileType(o.quant)));
  if (o.quant != quant::QuantScheme::kNone && o.quant != quant::QuantScheme::kF16) w.AddU32("general.quantization_version", 2);

  // The tokenizer: --tokenizer, else MODEL/tokenizer.json when present.
  std::filesystem::path tok = o.tokenizer;
  if (tok.empty() && std::filesystem::exists(o.model_dir / "tokenizer.json")) tok = o.model_dir / "tokenizer.json";
  if (tok.empty()) {
    note("no tokenizer.json: the GGUF has no tokenizer (name one with --tokenizer)");
  } else {
    absl::StatusOr<tokenizers::GgufTokenizerData> data = tok.extension() == ".json"
                                                 ? tokenizers::GgufTokenizerDataFromHf(tok.parent_path(), c.vocab_size)
                                                 : tokenizers::GgufTokenizerDataFromLlama2c(tok, c.vocab_size);
    if (!data.ok() && absl::IsUnimplemented(data.status()) && o.tokenizer.empty()) {
      // MODEL/tokenizer.json of a kind GGUF metadata cannot hold here: the weights still convert.
      note(absl::StrCat(data.status().message(), "; the GGUF has no tokenizer"));
    } else if (!data.ok()) {
      return data.status();
    } else {
      if (static_cast<int64_t>(data->tokens.size()) != c.vocab_size) {
        note(absl::StrCat("the tokenizer has ", data->tokens.size(), " tokens, the model ", c.vocab_size, " embeddings"));
      }
      AddTokenizer(w, *data);
    }
  }

  // Tensors: one per HF tensor, except the experts' matrices, each layer's stacked into one.
  struct Item {
    std::vector<std::string> hf;  // the tensor, or a layer's experts' matrices in expert order
    std::string gguf;
    bool stacked = false;
    std::optional<GgufTensorPlan> plan;  // made otherwise (GPT-OSS's experts), written as it is
  };
  std::vector<Item> items;
  std::map<std::string, std::map<int64_t, std::string>> stacks;  // GGUF name -> expert -> HF name
  const bool interleaved_experts = moe && arch->moe->hf_gate_up_interleaved;
  for (const std::string& hf : store->Names()) {
    if (interleaved_experts && hf.find("." + std::string(arch->moe->experts) + ".") != std::string::npos) continue;
    std::optional<std::pair<std::string, int64_t>> expert = moe ? StackedExpertOf(*arch, hf) : std::nullopt;
    std::optional<std::string> gguf = GgufNameFromHf(*arch, expert ? expert->first : hf);
    if (!gguf) {
      note(absl::StrCat("tensor '", hf, "' has no GGUF name; left out"));
      continue;
    }
    if (expert) {
      if (expert->second >= experts) {
        return absl::InvalidArgumentError(absl::StrCat(o.model_dir.string(), ": tensor '", hf, "' is expert ", expert->second,
                                                       " of a model of ", experts, " experts"));
      }
      stacks[*gguf][expert->second] = hf;
      continue;
    }
    if (c.tie_word_embeddings && hf == "lm_head.weight") continue;
    items.push_back({{hf}, *gguf});
  }
  for (int l = 0; interleaved_experts && l < c.num_layers; ++l) {
    absl::StatusOr<std::vector<GgufTensorPlan>> plans = GptOssExpertTensors(store, c, *moe, o.quant, l);
    if (!plans.ok()) return plans.status();
    for (GgufTensorPlan& plan : *plans) items.push_back({{}, plan.name, false, std::move(plan)});
  }
  for (int l = 0; moe && !interleaved_experts && l < c.num_layers; ++l) {
    for (const char* part : {"ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"}) {
      const std::string gguf = absl::StrCat("blk.", l, ".", part, ".weight");
      const std::map<int64_t, std::string>& stack = stacks[gguf];
      if (static_cast<int64_t>(stack.size()) == experts) {
        std::vector<std::string> hf;
        for (const auto& [e, name] : stack) hf.push_back(name);
        items.push_back({hf, gguf, true});
        continue;
      }
      // The first expert missing, named as the checkpoint would name it.
      int64_t missing = 0;
      while (stack.count(missing) != 0) ++missing;
      const std::string stacked = HfNameFromGguf(*arch, gguf).value_or(gguf);
      const size_t at = stacked.find(std::string(arch->moe->experts) + ".") + arch->moe->experts.size() + 1;
      return absl::InvalidArgumentError(absl::StrCat(o.model_dir.string(), ": tensor '", stacked.substr(0, at), missing,
                                                     ".", stacked.substr(at), "' is missing (the config has ", experts,
                                                     " experts a layer)"));
    }
  }
  std::sort(items.begin(), items.end(), [](const Item& a, const Item& b) { return OrderOf(a.gguf) < OrderOf(b.gguf); });
  for (const auto& rope_tensor : rope_tensors) {
    const std::vector<float>& values = rope_tensor.second;
    absl::Status s = w.AddTensor(rope_tensor.first, graph::DType::kF32, {static_cast<int64_t>(values.size())},
                                 [values]() { return quant::EncodeFloats(graph::DType::kF32, values); });
    if (!s.ok()) return s;
  }
  std::map<std::string, graph::DType> types;
  for (const Item& item : items) {
    if (item.plan) {
      types[item.gguf] = item.plan->dtype;
      absl::Status s = w.AddTensor(item.gguf, item.plan->dtype, item.plan->shape, item.plan->bytes);
      if (!s.ok()) return absl::Status(s.code(), absl::StrCat(o.out.string(), ": ", s.message()));
      continue;
    }
    absl::StatusOr<formats::TensorView> t = store->Get(item.hf[0]);
    if (!t.ok()) return t.status();
    if (t->shape.empty() || t->shape.size() > 2 || (item.stacked && t->shape.size() != 2)) {
      return absl::InvalidArgumentError(absl::StrCat(t->file, ": tensor '", item.hf[0], "' has ", t->shape.size(),
                                                     " dimensions; GGUF conversion takes vectors and matrices"));
    }
    // A layer's experts, each [rows, cols], stacked as [experts, rows, cols].
    for (const std::string& hf : item.hf) {
      absl::StatusOr<formats::TensorView> e = store->Get(hf);
      if (!e.ok()) return e.status();
      if (e->shape != t->shape) {
        return absl::InvalidArgumentError(absl::StrCat(e->file, ": tensor '", hf, "' is [", absl::StrJoin(e->shape, ", "),
                                                       "] but '", item.hf[0], "' is [", absl::StrJoin(t->shape, ", "), "]"));
      }
    }
    const bool matrix = t->shape.size() == 2;
    const int64_t cols = t->shape.back(), rows = matrix ? t->shape[0] : 1;
    const graph::DType dtype = matrix ? quant::QuantizedDType(o.quant, item.hf[0], cols, c.num_layers, c.tie_word_embeddings,
                                                       experts, graph::DType::kF16)
                                      : graph::DType::kF32;
    types[item.gguf] = dtype;
    int64_t heads = 0;
    if (arch->permuted_qk) {
      if (item.hf[0].find("self_attn.q_proj.") != std::string::npos) heads = c.num_heads;
      if (item.hf[0].find("self_attn.k_proj.") != std::string::npos) heads = c.num_kv_heads;
    }
    const int64_t n_rows = t->shape[0];
    if (heads > 0 && (n_rows % heads != 0 || (n_rows / heads) % 2 != 0)) {
      return absl::InvalidArgumentError(absl::StrCat(t->file, ": tensor '", item.hf[0], "' has ", n_rows,
                                                     " rows, which do not split into ", heads, " heads of even size"));
    }
    // Gemma: norm weights stored as w + shift (gguf_arch.h).
    const float shift = !matrix && item.gguf.ends_with("norm.weight") ? arch->norm_shift : 0.0f;
    std::vector<int64_t> shape = t->shape;
    if (item.stacked) shape.insert(shape.begin(), static_cast<int64_t>(item.hf.size()));
    const std::vector<std::string> hf = item.hf;
    absl::Status s = w.AddTensor(item.gguf, dtype, shape, [store, hf, dtype, rows, cols, heads, n_rows, shift]()
                                                               -> absl::StatusOr<std::vector<uint8_t>> {
      std::vector<uint8_t> out;
      for (const std::string& name : hf) {
        absl::StatusOr<formats::TensorView> view = store->Get(name);
        if (!view.ok()) return view.status();
        absl::StatusOr<std::vector<float>> x = quant::ToFloat32(*view);
        if (!x.ok()) return x.status();
        for (float& v : *x) v += shift;
        absl::StatusOr<std::vector<uint8_t>> bytes = quant::QuantizeRows(dtype, x->data(), rows, cols);
        if (!bytes.ok()) return bytes.status();
        if (heads > 0) *bytes = PermuteRowsForGguf(*bytes, n_rows, heads);
        out.insert(out.end(), bytes->begin(), bytes->end());
      }
      return out;
    });
    if (!s.ok()) return absl::Status(s.code(), absl::StrCat(o.out.string(), ": ", s.message()));
  }
  return w.Write(o.out, [&](size_t done, size_t total, const std::string& tensor) {
    if (!o.progress) return;
    auto it = types.find(tensor);
    o.progress(done, total, tensor, graph::Name(it == types.end() ? graph::DType::kF32 : it->second));
  });
}

}  // namespace doppler::checkpoints
