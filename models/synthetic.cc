#include "models/synthetic.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <thread>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "graph/half.h"
#include "graph/param_slice.h"
#include "models/architecture.h"
#include "models/blocks.h"
#include "nlohmann/json.hpp"

namespace doppler::models {
namespace {

using graph::DType;
using nlohmann::json;

// The published config.json values (the keys the readers use).
json Llama32(int hidden, int intermediate, int layers, int heads, int head_dim) {
  return json{{"architectures", {"LlamaForCausalLM"}},
              {"model_type", "llama"},
              {"hidden_size", hidden},
              {"intermediate_size", intermediate},
              {"num_hidden_layers", layers},
              {"num_attention_heads", heads},
              {"num_key_value_heads", 8},
              {"head_dim", head_dim},
              {"vocab_size", 128256},
              {"rms_norm_eps", 1e-5},
              {"hidden_act", "silu"},
              {"max_position_embeddings", 131072},
              {"rope_theta", 500000.0},
              {"rope_scaling",
               {{"rope_type", "llama3"},
                {"factor", 32.0},
                {"low_freq_factor", 1.0},
                {"high_freq_factor", 4.0},
                {"original_max_position_embeddings", 8192}}},
              {"tie_word_embeddings", true},
              {"bos_token_id", 128000},
              {"eos_token_id", 128001}};
}

json ConfigJson(std::string_view name) {
  if (name == "llama-3.2-1b") return Llama32(2048, 8192, 16, 32, 64);
  if (name == "llama-3.2-3b") return Llama32(3072, 8192, 28, 24, 128);
  if (name == "llama-3.1-8b") {
    json j = Llama32(4096, 14336, 32, 32, 128);
    j["rope_scaling"]["factor"] = 8.0;
    j["tie_word_embeddings"] = false;
    return j;
  }
  if (name == "llama-3.1-405b") {  // for the compile benchmark (bench/compile_plans.cc)
    json j = Llama32(16384, 53248, 126, 128, 128);
    j["rope_scaling"]["factor"] = 8.0;
    j["tie_word_embeddings"] = false;
    return j;
  }
  if (name == "qwen2.5-1.5b") {
    return json{{"architectures", {"Qwen2ForCausalLM"}},
                {"model_type", "qwen2"},
                {"hidden_size", 1536},
                {"intermediate_size", 8960},
                {"num_hidden_layers", 28},
                {"num_attention_heads", 12},
                {"num_key_value_heads", 2},
                {"vocab_size", 151936},
                {"rms_norm_eps", 1e-6},
                {"hidden_act", "silu"},
                {"max_position_embeddings", 131072},
                {"rope_theta", 1000000.0},
                {"use_sliding_window", false},
                {"sliding_window", 131072},
                {"max_window_layers", 28},
                {"tie_word_embeddings", true},
                {"bos_token_id", 151643},
                {"eos_token_id", 151643}};
  }
  if (name == "qwen3-0.6b") {
    return json{{"architectures", {"Qwen3ForCausalLM"}},
                {"model_type", "qwen3"},
                {"hidden_size", 1024},
                {"intermediate_size", 3072},
                {"num_hidden_layers", 28},
                {"num_attention_heads", 16},
                {"num_key_value_heads", 8},
                {"head_dim", 128},
                {"vocab_size", 151936},
                {"rms_norm_eps", 1e-6},
                {"hidden_act", "silu"},
                {"max_position_embeddings", 40960},
                {"rope_theta", 1000000.0},
                {"attention_bias", false},
                {"use_sliding_window", false},
                {"max_window_layers", 28},
                {"tie_word_embeddings", true},
                {"bos_token_id", 151643},
                {"eos_token_id", 151645}};
  }
  if (name == "gemma-3-1b") {
    return json{{"architectures", {"Gemma3ForCausalLM"}},
                {"model_type", "gemma3_text"},
                {"hidden_size", 1152},
                {"intermediate_size", 6912},
                {"num_hidden_layers", 26},
                {"num_attention_heads", 4},
                {"num_key_value_heads", 1},
                {"head_dim", 256},
                {"vocab_size", 262144},
                {"rms_norm_eps", 1e-6},
                {"hidden_activation", "gelu_pytorch_tanh"},
                {"max_position_embeddings", 32768},
                {"rope_theta", 1000000.0},
                {"rope_local_base_freq", 10000.0},
                {"rope_scaling", nullptr},
                {"query_pre_attn_scalar", 256},
                {"sliding_window", 512},
                {"sliding_window_pattern", 6},
                {"final_logit_softcapping", nullptr},
                {"attn_logit_softcapping", nullptr},
                {"tie_word_embeddings", true},
                {"bos_token_id", 2},
                {"eos_token_id", {1, 106}}};
  }
  if (name == "qwen3-30b-a3b") {
    return json{{"architectures", {"Qwen3MoeForCausalLM"}},
                {"model_type", "qwen3_moe"},
                {"hidden_size", 2048},
                {"intermediate_size", 6144},
                {"moe_intermediate_size", 768},
                {"num_experts", 128},
                {"num_experts_per_tok", 8},
                {"norm_topk_prob", true},
                {"decoder_sparse_step", 1},
                {"mlp_only_layers", json::array()},
                {"num_hidden_layers", 48},
                {"num_attention_heads", 32},
                {"num_key_value_heads", 4},
                {"head_dim", 128},
                {"vocab_size", 151936},
                {"rms_norm_eps", 1e-6},
                {"hidden_act", "silu"},
                {"max_position_embeddings", 40960},
                {"rope_theta", 1000000.0},
                {"attention_bias", false},
                {"use_sliding_window", false},
                {"max_window_layers", 48},
                {"tie_word_embeddings", false},
                {"bos_token_id", 151643},
                {"eos_token_id", 151645}};
  }
  if (name == "mixtral-8x7b") {
    return json{{"architectures", {"MixtralForCausalLM"}},
                {"model_type", "mixtral"},
                {"hidden_size", 4096},
                {"intermediate_size", 14336},
                {"num_local_experts", 8},
                {"num_experts_per_tok", 2},
                {"num_hidden_layers", 32},
                {"num_attention_heads", 32},
                {"num_key_value_heads", 8},
                {"vocab_size", 32000},
                {"rms_norm_eps", 1e-5},
                {"hidden_act", "silu"},
                {"max_position_embeddings", 32768},
                {"rope_theta", 1000000.0},
                {"sliding_window", nullptr},
                {"tie_word_embeddings", false},
                {"bos_token_id", 1},
                {"eos_token_id", 2}};
  }
  if (name == "gpt-oss-20b") {
    json layer_types = json::array();
    for (int l = 0; l < 24; ++l) layer_types.push_back(l % 2 == 0 ? "sliding_attention" : "full_attention");
    return json{{"architectures", {"GptOssForCausalLM"}},
                {"model_type", "gpt_oss"},
                {"hidden_size", 2880},
                {"intermediate_size", 2880},
                {"num_local_experts", 32},
                {"num_experts_per_tok", 4},
                {"num_hidden_layers", 24},
                {"num_attention_heads", 64},
                {"num_key_value_heads", 8},
                {"head_dim", 64},
                {"vocab_size", 201088},
                {"rms_norm_eps", 1e-5},
                {"hidden_act", "silu"},
                {"attention_bias", true},
                {"sliding_window", 128},
                {"layer_types", layer_types},
                {"swiglu_limit", 7.0},
                {"max_position_embeddings", 131072},
                {"rope_theta", 150000.0},
                {"rope_scaling",
                 {{"rope_type", "yarn"},
                  {"factor", 32.0},
                  {"beta_fast", 32.0},
                  {"beta_slow", 1.0},
                  {"truncate", false},
                  {"original_max_position_embeddings", 4096}}},
                // As published: the experts' matrices in MXFP4 (SyntheticWeightStore keeps them so).
                {"quantization_config", {{"quant_method", "mxfp4"}}},
                {"tie_word_embeddings", false},
                {"bos_token_id", 199998},
                {"eos_token_id", 200002}};
  }
  if (name == "tiny") {
    return json{{"architectures", {"LlamaForCausalLM"}},
                {"model_type", "llama"},
                {"hidden_size", 64},
                {"intermediate_size", 128},
                {"num_hidden_layers", 2},
                {"num_attention_heads", 4},
                {"num_key_value_heads", 2},
                {"vocab_size", 256},
                {"rms_norm_eps", 1e-5},
                {"hidden_act", "silu"},
                {"max_position_embeddings", 512},
                {"rope_theta", 10000.0},
                {"tie_word_embeddings", false},
                {"bos_token_id", 1},
                {"eos_token_id", 2}};
  }
  return nullptr;
}

uint64_t SplitMix(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

uint64_t Fnv1a(std::string_view s) {
  uint64_t h = 1469598103934665603ull;
  for (char c : s) h = (h ^ static_cast<uint8_t>(c)) * 1099511628211ull;
  return h;
}

// A small fast generator per row.
struct Rng {
  uint64_t state;
  uint64_t Next() { return SplitMix(state); }
  // Uniform in [0, 1).
  float Unit() { return static_cast<float>(Next() >> 40) * (1.0f / 16777216.0f); }
  int Int(int lo, int hi) { return lo + static_cast<int>(Next() % static_cast<uint64_t>(hi - lo + 1)); }
};

void PutHalf(uint8_t* p, float v) {
  const uint16_t h = graph::FloatToHalf(v);
  std::memcpy(p, &h, 2);
}

void FillRow(DType dtype, int64_t cols, uint64_t seed, float mean, float stddev, uint8_t* out) {
  Rng rng{seed};
  const float half_width = stddev * std::sqrt(3.0f);  // uniform on [-a, a] has sd a / sqrt(3)
  switch (dtype) {
    case DType::kF32:
    case DType::kF16:
    case DType::kBF16: {
      for (int64_t i = 0; i < cols; ++i) {
        const float v = mean + half_width * (2.0f * rng.Unit() - 1.0f);
        if (dtype == DType::kF32) {
          std::memcpy(out + 4 * i, &v, 4);
        } else {
          const uint16_t h = dtype == DType::kF16 ? graph::FloatToHalf(v) : graph::FloatToBF16(v);
          std::memcpy(out + 2 * i, &h, 2);
        }
      }
      return;
    }
    case DType::kQ8_0: {  // {f16 d; int8 qs[32]}: d * q, q uniform in [-127, 127] (sd 73.6)
      for (int64_t b = 0; b < cols / 32; ++b) {
        uint8_t* blk = out + 34 * b;
        PutHalf(blk, stddev / 73.6f);
        for (int i = 0; i < 32; ++i) blk[2 + i] = static_cast<uint8_t>(static_cast<int8_t>(rng.Int(-127, 127)));
      }
      return;
    }
    case DType::kQ5_0: {  // {f16 d; qh[4]; qs[16]}: d * (q - 16), q uniform 5-bit (sd 9.23)
      for (int64_t b = 0; b < cols / 32; ++b) {
        uint8_t* blk = out + 22 * b;
        PutHalf(blk, stddev / 9.23f);
        const uint64_t r[3] = {rng.Next(), rng.Next(), rng.Next()};
        std::memcpy(blk + 2, r, 20);
      }
      return;
    }
    case DType::kQ4_K:
    case DType::kQ5_K: {
      // {f16 d, dmin; scales[12]; (Q5_K: qh[32];) qs[128]}: d*sc*q - dmin*m per 32-value sub-block.
      // With m = sc and dmin = d * mean(q): d*sc*(q - mean(q)), mean 0; sc uniform in [32, 63].
      const bool q5 = dtype == DType::kQ5_K;
      const int bytes = q5 ? 176 : 144;
      const float q_mean = q5 ? 15.5f : 7.5f, q_sd = q5 ? 9.23f : 4.61f;
      const float d = stddev / (47.5f * q_sd);
      for (int64_t b = 0; b < cols / 256; ++b) {
        uint8_t* blk = out + static_cast<int64_t>(bytes) * b;
        PutHalf(blk, d);
        PutHalf(blk + 2, d * q_mean);
        uint8_t* scales = blk + 4;
        std::memset(scales, 0, 12);
        for (int j = 0; j < 8; ++j) {
          const int sc = rng.Int(32, 63);
          // Eight 6-bit scales and mins: sub-blocks 0-3 in the low bits of bytes 0-7, 4-7 as
          // nibbles of bytes 8-11 with their top two bits in the spare bits of bytes 0-7.
          if (j < 4) {
            scales[j] |= static_cast<uint8_t>(sc);
            scales[j + 4] |= static_cast<uint8_t>(sc);
          } else {
            scales[j + 4] = static_cast<uint8_t>((sc & 0xF) | ((sc & 0xF) << 4));
            scales[j - 4] |= static_cast<uint8_t>((sc >> 4) << 6);
            scales[j] |= static_cast<uint8_t>((sc >> 4) << 6);
          }
        }
        uint8_t* rest = blk + 16;
        const int rest_bytes = bytes - 16;
        for (int i = 0; i < rest_bytes; i += 8) {
          const uint64_t r = rng.Next();
          std::memcpy(rest + i, &r, std::min(8, rest_bytes - i));
        }
      }
      return;
    }
    case DType::kQ6_K: {
      // {ql[128]; qh[64]; int8 scales[16]; f16 d}: d * sc * (q - 32), q uniform 6-bit (sd 18.5),
      // sc uniform in [32, 127].
      const float d = stddev / (79.5f * 18.47f);
      for (int64_t b = 0; b < cols / 256; ++b) {
        uint8_t* blk = out + 210 * b;
        for (int i = 0; i < 192; i += 8) {
          const uint64_t r = rng.Next();
          std::memcpy(blk + i, &r, 8);
        }
        for (int i = 0; i < 16; ++i) blk[192 + i] = static_cast<uint8_t>(rng.Int(32, 127));
        PutHalf(blk + 208, d);
      }
      return;
    }
    case DType::kQ4_0:
    case DType::kIQ4_NL:
    case DType::kQ4_1:
    case DType::kQ5_1:
    case DType::kQ2_K:
    case DType::kQ3_K:
    case DType::kIQ4_XS: {
      // Random quants and scale fields; the f16 fields then set so that values have sd `stddev`,
      // mean ~0 (the sd of a uniform quant: 4.61 for 4 bits, 9.23 for 5, 1.12 for Q2_K's 2 bits and
      // 2.29 for Q3_K's 3; IQ4's grid 67.4; random 6-bit scales offset by 32: 18.5; Q2_K's 4-bit
      // scales are kept in [8, 15], mean 11.5, their mins equal to them).
      const graph::DTypeInfo& info = graph::Info(dtype);
      for (int64_t b = 0; b < cols / info.block_elems; ++b) {
        uint8_t* blk = out + static_cast<int64_t>(info.block_bytes) * b;
        for (int i = 0; i < info.block_bytes; i += 8) {
          const uint64_t r = rng.Next();
          std::memcpy(blk + i, &r, std::min(8, info.block_bytes - i));
        }
        switch (dtype) {
          case DType::kQ4_0: PutHalf(blk, stddev / 4.61f); break;
          case DType::kIQ4_NL: PutHalf(blk, stddev / 67.4f); break;
          case DType::kQ4_1:
          case DType::kQ5_1: {
            const float sd = dtype == DType::kQ4_1 ? 4.61f : 9.23f, mean = dtype == DType::kQ4_1 ? 7.5f : 15.5f;
            PutHalf(blk, stddev / sd);
            PutHalf(blk + 2, -mean * stddev / sd);
            break;
          }
          case DType::kQ2_K: {
            for (int i = 0; i < 16; ++i) blk[i] = static_cast<uint8_t>((8 + (blk[i] & 7)) * 17);  // scale = min
            const float d = stddev / (11.5f * 1.12f);
            PutHalf(blk + 80, d);
            PutHalf(blk + 82, 1.5f * d);
            break;
          }
          case DType::kQ3_K: PutHalf(blk + 108, stddev / (18.5f * 2.29f)); break;
          default: PutHalf(blk, stddev / (18.5f * 67.4f)); break;  // IQ4_XS
        }
      }
      return;
    }
    case DType::kMXFP4: {
      // {E8M0 e; qs[16]}: kMXFP4Values[q] * 2^(e - 128), q uniform (the grid's sd 5.85). The scale
      // is a power of two: 2^a below the wanted sd or 2^(a + 1) above it, the lower with the
      // probability that makes the mean square the wanted one.
      const float ratio = std::max(stddev, 1e-30f) / 5.85f;
      const int a = static_cast<int>(std::floor(std::log2(ratio)));
      const double r = static_cast<double>(ratio) * ratio / std::ldexp(1.0, 2 * a);  // in [1, 4)
      const double lower = (4.0 - r) / 3.0;
      for (int64_t b = 0; b < cols / 32; ++b) {
        uint8_t* blk = out + 17 * b;
        const int e = 128 + a + (rng.Unit() < lower ? 0 : 1);
        blk[0] = static_cast<uint8_t>(std::clamp(e, 0, 254));
        const uint64_t r[2] = {rng.Next(), rng.Next()};
        std::memcpy(blk + 1, r, 16);
      }
      return;
    }
    default:
      std::memset(out, 0, graph::ByteSize(dtype, cols));
  }
}

constexpr uint64_t kKeepBytes = 1ull << 30;

}  // namespace

std::vector<std::string> SyntheticModelNames() {
  return {"llama-3.2-1b", "llama-3.2-3b", "llama-3.1-8b", "llama-3.1-405b", "qwen2.5-1.5b", "qwen3-0.6b",
          "gemma-3-1b", "qwen3-30b-a3b", "mixtral-8x7b", "gpt-oss-20b", "tiny"};
}

absl::StatusOr<formats::ModelConfig> SyntheticConfig(std::string_view name) {
  const json j = ConfigJson(name);
  if (j.is_null()) {
    return absl::NotFoundError(absl::StrCat("unknown synthetic model '", absl::string_view(name.data(), name.size()),
                                            "' (known: ", absl::StrJoin(SyntheticModelNames(), ", "), ")"));
  }
  return formats::ParseHfConfig(j, absl::StrCat("synthetic:", absl::string_view(name.data(), name.size())));
}

void FillRandom(DType dtype, int64_t rows, int64_t cols, uint64_t seed, float mean, float stddev, uint8_t* out) {
  const size_t row_bytes = graph::ByteSize(dtype, cols);
  auto fill = [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      uint64_t s = seed + static_cast<uint64_t>(r) * 0x632BE59BD9B4E019ull;
      FillRow(dtype, cols, SplitMix(s), mean, stddev, out + static_cast<size_t>(r) * row_bytes);
    }
  };
  const int threads = rows * cols < (1 << 20)
                          ? 1
                          : static_cast<int>(std::clamp<unsigned>(std::thread::hardware_concurrency(), 1, 16));
  if (threads == 1) {
    fill(0, rows);
    return;
  }
  std::vector<std::thread> pool;
  const int64_t per = (rows + threads - 1) / threads;
  for (int t = 0; t < threads; ++t) {
    const int64_t b = std::min(rows, t * per), e = std::min(rows, (t + 1) * per);
    if (b < e) pool.emplace_back(fill, b, e);
  }
  for (std::thread& t : pool) t.join();
}

absl::StatusOr<std::unique_ptr<SyntheticWeightStore>> SyntheticWeightStore::Create(const std::string& name,
                                                                                   const formats::ModelConfig& config,
                                                                                   DType weight_dtype,
                                                                                   quant::QuantScheme quant, uint64_t seed) {
  std::unique_ptr<SyntheticWeightStore> s(new SyntheticWeightStore());
  s->name_ = name;
  s->seed_ = seed;
  s->norm_base_ = config.model_type.rfind("gemma", 0) == 0 ? 0.0f : 1.0f;
  // A config whose checkpoint holds its experts in MXFP4 (GPT-OSS as published): their stacked
  // matrices are generated in MXFP4 whatever the other matrices' type.
  const auto q = config.raw.find("quantization_config");
  const bool mxfp4_experts = q != config.raw.end() && q->is_object() && q->value("quant_method", "") == "mxfp4";
  // The tensors are exactly the params of the model's graph (shapes do not depend on the context).
  BuildOptions o;
  o.context = 16;
  o.max_step_tokens = 1;
  absl::StatusOr<graph::Graph> g = BuildModelGraph(config, o);
  if (!g.ok()) return g.status();
  for (const graph::Node& n : g->nodes()) {
    if (n.kind != graph::OpKind::kParam) continue;
    std::string tensor = n.attrs.Str("name");
    std::vector<int64_t> shape;
    for (const graph::Dim& d : n.type.shape) shape.push_back(d.value);
    const std::optional<graph::ParamSlice> slice = graph::ParamSliceOf(n);
    if (slice) {  // inside a larger tensor
      tensor = slice->source;
      shape = graph::StoredShape(*slice, shape);
    }
    DType dtype = DType::kF32;
    // Matrices (stacked experts' too) take the model's type, except those the graph keeps f32
    // whatever it is (a mixture of experts' router; the graph is built with f16 matrices).
    if (shape.size() >= 2 && n.type.dtype != DType::kF32) {
      dtype = mxfp4_experts && slice && slice->source_experts > 0 ? DType::kMXFP4
              : quant == quant::QuantScheme::kNone
                  ? weight_dtype
                  : quant::QuantizedDType(quant, tensor, shape.back(), config.num_layers, config.tie_word_embeddings,
                                   ConfigExpertCount(config), weight_dtype);
    }
    s->tensors_[tensor] = SyntheticTensor{shape, dtype};
  }
  return s;
}

bool SyntheticWeightStore::Has(std::string_view name) const { return tensors_.count(std::string(name)) > 0; }

std::vector<std::string> SyntheticWeightStore::Names() const {
  std::vector<std::string> names;
  for (const auto& [n, t] : tensors_) names.push_back(n);
  return names;
}

DType SyntheticWeightStore::DTypeOf(const std::string& tensor, DType default_dtype) const {
  auto it = tensors_.find(tensor);
  return it == tensors_.end() ? default_dtype : it->second.dtype;
}

uint64_t SyntheticWeightStore::TotalBytes() const {
  uint64_t bytes = 0;
  for (const auto& [n, t] : tensors_) {
    int64_t count = 1;
    for (int64_t d : t.shape) count *= d;
    bytes += graph::ByteSize(t.dtype, count);
  }
  return bytes;
}

uint64_t SyntheticWeightStore::TotalParameters() const {
  uint64_t count = 0;
  for (const auto& [n, t] : tensors_) {
    int64_t c = 1;
    for (int64_t d : t.shape) c *= d;
    count += static_cast<uint64_t>(c);
  }
  return count;
}

absl::StatusOr<formats::TensorView> SyntheticWeightStore::Get(std::string_view name) const {
  const std::string key(name);
  auto it = tensors_.find(key);
  if (it == tensors_.end()) {
    return absl::NotFoundError(absl::StrCat("tensor '", key, "' is not in synthetic model ", name_));
  }
  const SyntheticTensor& t = it->second;
  int64_t rows = 1;  // a stacked tensor's [E, rows, cols] is E * rows rows
  for (size_t i = 0; i + 1 < t.shape.size(); ++i) rows *= t.shape[i];
  const int64_t cols = t.shape.back();
  std::lock_guard<std::mutex> lock(mu_);
  const std::vector<uint8_t>* data = nullptr;
  for (const auto& [n, d] : cache_) {
    if (n == key) data = d.get();
  }
  if (data == nullptr) {
    auto bytes = std::make_unique<std::vector<uint8_t>>(graph::ByteSize(t.dtype, rows * cols));
    float mean = 0.0f, stddev = 1.0f / std::sqrt(static_cast<float>(cols));
    if (t.shape.size() == 1) {
      const bool bias = key.size() >= 5 && key.compare(key.size() - 5, 5, ".bias") == 0;
      mean = bias ? 0.0f : norm_base_;
      stddev = bias ? 0.02f : 0.05f;
    }
    FillRandom(t.dtype, rows, cols, seed_ ^ Fnv1a(key), mean, stddev, bytes->data());
    cached_bytes_ += bytes->size();
    data = bytes.get();
    cache_.emplace_back(key, std::move(bytes));
    while (cache_.size() > 1 && cached_bytes_ > kKeepBytes) {
      cached_bytes_ -= cache_.front().second->size();
      cache_.pop_front();
    }
  }
  return formats::TensorView{key, t.dtype, t.shape, data->data(), data->size(), Describe()};
}

}  // namespace doppler::models
