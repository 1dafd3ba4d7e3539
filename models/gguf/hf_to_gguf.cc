#include "models/gguf/hf_to_gguf.h"

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
#include "models/gguf/gguf_writer.h"
#include "models/gguf/hf_names.h"
#include "models/hf_config.h"
#include "models/quant/quant.h"
#include "models/safetensors.h"
#include "models/tokenizer/gguf_tokenizer.h"
#include "models/weights.h"

namespace doppler::models {
namespace {

struct ArchInfo {
  const char* hf;
  const char* gguf;
  bool permute_qk;  // llama.cpp's llama converter interleaves q/k rows; qwen2/qwen3's do not
};
constexpr ArchInfo kArchs[] = {{"LlamaForCausalLM", "llama", true},
                               {"Qwen2ForCausalLM", "qwen2", false},
                               {"Qwen3ForCausalLM", "qwen3", false}};

// Llama 3 RoPE scaling as llama.cpp stores it: per frequency, the divisor of the base inverse
// frequency (1 for short wavelengths, `factor` for long ones, a smooth blend in between), computed
// in double from the float32 base frequencies and stored as float32.
std::vector<float> Llama3RopeDivisors(const RopeConfig& rope, int head_dim) {
  RopeConfig base = rope;
  base.scaling = RopeScaling{};
  const std::vector<float> freqs = RopeInvFreq(base, head_dim);
  const RopeScaling& s = rope.scaling;
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

// Sort key: token_embd, rope_freqs, the layers in order, output_norm, output.
std::tuple<int, int64_t, std::string> OrderOf(const std::string& gguf) {
  if (gguf.starts_with("token_embd")) return {0, 0, gguf};
  if (gguf.starts_with("rope_freqs")) return {1, 0, gguf};
  if (gguf.starts_with("blk.")) {
    const size_t dot = gguf.find('.', 4);
    int64_t layer = 0;
    (void)absl::SimpleAtoi(gguf.substr(4, dot == std::string::npos ? std::string::npos : dot - 4), &layer);
    return {2, layer, gguf};
  }
  if (gguf.starts_with("output_norm")) return {3, 0, gguf};
  return {4, 0, gguf};
}

void AddTokenizer(GgufWriter& w, const GgufTokenizerData& d) {
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
  absl::StatusOr<ModelConfig> config = ReadHfConfig(o.model_dir / "config.json");
  if (!config.ok()) return config.status();
  const ModelConfig& c = *config;
  const ArchInfo* arch = nullptr;
  for (const ArchInfo& a : kArchs) {
    if (c.architecture == a.hf) arch = &a;
  }
  if (arch == nullptr) {
    return absl::UnimplementedError(absl::StrCat(o.model_dir.string(), ": architecture '", c.architecture,
                                                 "' cannot be written as GGUF here (LlamaForCausalLM, "
                                                 "Qwen2ForCausalLM, Qwen3ForCausalLM)"));
  }
  if (c.sliding_window) {
    return absl::UnimplementedError(absl::StrCat(o.model_dir.string(), ": sliding-window attention cannot be "
                                                 "written as GGUF here"));
  }
  const RopeScaling& scaling = c.rope.scaling;
  if (scaling.type != "default" && scaling.type != "linear" && scaling.type != "llama3") {
    return absl::UnimplementedError(absl::StrCat(o.model_dir.string(), ": rope scaling '", scaling.type,
                                                 "' cannot be written as GGUF here (linear, llama3)"));
  }
  if (scaling.type == "llama3" && std::string(arch->gguf) != "llama") {
    return absl::UnimplementedError(absl::StrCat(o.model_dir.string(), ": llama3 rope scaling on ", arch->gguf));
  }
  absl::StatusOr<std::unique_ptr<WeightStore>> opened = OpenSafetensors(o.model_dir);
  if (!opened.ok()) return opened.status();
  std::shared_ptr<const WeightStore> store(std::move(*opened));

  GgufWriter w;
  const std::string p = absl::StrCat(arch->gguf, ".");
  std::string name = o.name;
  if (name.empty()) name = std::filesystem::absolute(o.model_dir).lexically_normal().filename().string();
  if (name.empty()) name = std::filesystem::absolute(o.model_dir).lexically_normal().parent_path().filename().string();
  w.AddString("general.architecture", arch->gguf);
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
  if (scaling.type == "linear") {
    w.AddString(p + "rope.scaling.type", "linear");
    w.AddF32(p + "rope.scaling.factor", scaling.factor);
  }
  std::vector<float> rope_divisors;
  if (scaling.type == "llama3") {
    rope_divisors = Llama3RopeDivisors(c.rope, c.head_dim);
    // A reader recovers original_max_position_embeddings from a divisor strictly between 1 and
    // factor; when none is, the length has to be stated.
    if (std::none_of(rope_divisors.begin(), rope_divisors.end(),
                     [&](float r) { return r > 1.0f && r < scaling.factor; })) {
      w.AddU32(p + "rope.scaling.original_context_length",
               static_cast<uint32_t>(scaling.original_max_position_embeddings));
    }
  }
  w.AddU32("general.file_type", static_cast<uint32_t>(GgufFileType(o.quant)));
  if (o.quant != QuantScheme::kNone && o.quant != QuantScheme::kF16) w.AddU32("general.quantization_version", 2);

  // The tokenizer: --tokenizer, else MODEL/tokenizer.json when present.
  std::filesystem::path tok = o.tokenizer;
  if (tok.empty() && std::filesystem::exists(o.model_dir / "tokenizer.json")) tok = o.model_dir / "tokenizer.json";
  if (tok.empty()) {
    note("no tokenizer.json: the GGUF has no tokenizer (name one with --tokenizer)");
  } else {
    absl::StatusOr<GgufTokenizerData> data = tok.extension() == ".json"
                                                 ? GgufTokenizerDataFromHf(tok.parent_path(), c.vocab_size)
                                                 : GgufTokenizerDataFromLlama2c(tok, c.vocab_size);
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

  // Tensors.
  struct Item {
    std::string hf, gguf;
  };
  std::vector<Item> items;
  for (const std::string& hf : store->Names()) {
    std::optional<std::string> gguf = GgufNameFromHf(hf);
    if (!gguf) {
      note(absl::StrCat("tensor '", hf, "' has no GGUF name; left out"));
      continue;
    }
    if (c.tie_word_embeddings && hf == "lm_head.weight") continue;
    items.push_back({hf, *gguf});
  }
  std::sort(items.begin(), items.end(), [](const Item& a, const Item& b) { return OrderOf(a.gguf) < OrderOf(b.gguf); });
  if (!rope_divisors.empty()) {
    std::vector<float> values = rope_divisors;
    absl::Status s = w.AddTensor("rope_freqs.weight", graph::DType::kF32, {static_cast<int64_t>(values.size())},
                                 [values]() { return EncodeFloats(graph::DType::kF32, values); });
    if (!s.ok()) return s;
  }
  std::map<std::string, graph::DType> types;
  for (const Item& item : items) {
    absl::StatusOr<TensorView> t = store->Get(item.hf);
    if (!t.ok()) return t.status();
    if (t->shape.empty() || t->shape.size() > 2) {
      return absl::InvalidArgumentError(absl::StrCat(t->file, ": tensor '", item.hf, "' has ", t->shape.size(),
                                                     " dimensions; GGUF conversion takes vectors and matrices"));
    }
    const bool matrix = t->shape.size() == 2;
    const int64_t cols = t->shape.back(), rows = matrix ? t->shape[0] : 1;
    const graph::DType dtype =
        matrix ? QuantizedDType(o.quant, item.hf, cols, c.num_layers, c.tie_word_embeddings, graph::DType::kF16)
               : graph::DType::kF32;
    types[item.gguf] = dtype;
    int64_t heads = 0;
    if (arch->permute_qk) {
      if (item.hf.find("self_attn.q_proj.") != std::string::npos) heads = c.num_heads;
      if (item.hf.find("self_attn.k_proj.") != std::string::npos) heads = c.num_kv_heads;
    }
    const int64_t n_rows = t->shape[0];
    if (heads > 0 && (n_rows % heads != 0 || (n_rows / heads) % 2 != 0)) {
      return absl::InvalidArgumentError(absl::StrCat(t->file, ": tensor '", item.hf, "' has ", n_rows,
                                                     " rows, which do not split into ", heads, " heads of even size"));
    }
    const std::string hf = item.hf;
    absl::Status s = w.AddTensor(item.gguf, dtype, t->shape, [store, hf, dtype, rows, cols, heads, n_rows]()
                                                                  -> absl::StatusOr<std::vector<uint8_t>> {
      absl::StatusOr<TensorView> view = store->Get(hf);
      if (!view.ok()) return view.status();
      absl::StatusOr<std::vector<float>> x = ToFloat32(*view);
      if (!x.ok()) return x.status();
      absl::StatusOr<std::vector<uint8_t>> bytes = QuantizeRows(dtype, x->data(), rows, cols);
      if (!bytes.ok()) return bytes.status();
      if (heads > 0) return PermuteRowsForGguf(*bytes, n_rows, heads);
      return bytes;
    });
    if (!s.ok()) return absl::Status(s.code(), absl::StrCat(o.out.string(), ": ", s.message()));
  }
  return w.Write(o.out, [&](size_t done, size_t total, const std::string& tensor) {
    if (!o.progress) return;
    auto it = types.find(tensor);
    o.progress(done, total, tensor, graph::Name(it == types.end() ? graph::DType::kF32 : it->second));
  });
}

}  // namespace doppler::models
