#include "formats/hf_config.h"

#include <cmath>
#include <limits>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "formats/json_file.h"

namespace doppler::formats {
namespace {

using nlohmann::json;

absl::Status Bad(const std::string& source, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(source, ": ", what));
}

// HF configs write null for "not set"; treat it like an absent key.
const json* Find(const json& j, const char* key) {
  auto it = j.find(key);
  return (it == j.end() || it->is_null()) ? nullptr : &*it;
}

// Integers may be written as 4096 or (rarely) 4096.0; anything else is an error.
absl::StatusOr<std::optional<int>> OptInt(const json& j, const char* key, const std::string& source,
                                          const std::string& where = "") {
  const json* v = Find(j, key);
  if (v == nullptr) return std::optional<int>();
  const std::string name = absl::StrCat(where, key);
  if (v->is_number_integer()) {
    const int64_t x = v->get<int64_t>();
    if (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
      return Bad(source, absl::StrCat("key '", name, "' is out of range: ", v->dump()));
    }
    if (x < std::numeric_limits<int>::min() || x > std::numeric_limits<int>::max()) {
      return Bad(source, absl::StrCat("key '", name, "' is out of range: ", v->dump()));
    }
    return std::optional<int>(static_cast<int>(x));
  }
  if (v->is_number_float()) {
    const double d = v->get<double>();
    if (d == std::floor(d) && std::abs(d) <= std::numeric_limits<int>::max()) return std::optional<int>(static_cast<int>(d));
  }
  return Bad(source, absl::StrCat("key '", name, "' must be an integer, got ", v->dump()));
}

absl::StatusOr<std::optional<float>> OptFloat(const json& j, const char* key, const std::string& source,
                                              const std::string& where = "") {
  const json* v = Find(j, key);
  if (v == nullptr) return std::optional<float>();
  if (!v->is_number()) return Bad(source, absl::StrCat("key '", where, key, "' must be a number, got ", v->dump()));
  const double d = v->get<double>();
  if (!(std::abs(d) <= std::numeric_limits<float>::max())) {  // also rejects NaN; the cast would be UB
    return Bad(source, absl::StrCat("key '", where, key, "' is out of float range: ", v->dump()));
  }
  return std::optional<float>(static_cast<float>(d));
}

absl::StatusOr<std::optional<bool>> OptBool(const json& j, const char* key, const std::string& source) {
  const json* v = Find(j, key);
  if (v == nullptr) return std::optional<bool>();
  if (!v->is_boolean()) return Bad(source, absl::StrCat("key '", key, "' must be true or false, got ", v->dump()));
  return std::optional<bool>(v->get<bool>());
}

absl::StatusOr<std::optional<std::string>> OptString(const json& j, const char* key, const std::string& source,
                                                     const std::string& where = "") {
  const json* v = Find(j, key);
  if (v == nullptr) return std::optional<std::string>();
  if (!v->is_string()) return Bad(source, absl::StrCat("key '", where, key, "' must be a string, got ", v->dump()));
  return std::optional<std::string>(v->get<std::string>());
}

// Reads a required, positive integer.
absl::Status RequirePositive(const json& j, const char* key, const std::string& source, int& out) {
  absl::StatusOr<std::optional<int>> v = OptInt(j, key, source);
  if (!v.ok()) return v.status();
  if (!v->has_value()) return Bad(source, absl::StrCat("required key '", key, "' is missing"));
  if (**v <= 0) return Bad(source, absl::StrCat("key '", key, "' must be positive, got ", **v));
  out = **v;
  return absl::OkStatus();
}

// Statement macro (use inside braces): assigns the value of a StatusOr or returns its error.
#define ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                          \
  if (!tmp.ok()) return tmp.status();         \
  lhs = *std::move(tmp)
#define CONCAT_INNER(a, b) a##b
#define CONCAT(a, b) CONCAT_INNER(a, b)
#define ASSIGN_OR_RETURN(lhs, expr) ASSIGN_OR_RETURN_IMPL(CONCAT(status_or_, __LINE__), lhs, expr)

// What a rope scaling's defaults depend on outside its own object.
struct RopeSurroundings {
  int max_position_embeddings = 0;
  std::optional<int> original_max_position_embeddings;  // top level (Phi-3's spelling)
  int head_dim = 0;
};

// transformers' get_mscale: YaRN's attention factor for a scale (1 when it does not stretch).
double YarnMscale(double scale, double mscale) { return scale <= 1 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0; }

// A list of positive numbers, one per frequency (LongRoPE's long_factor, short_factor).
absl::StatusOr<std::vector<float>> FactorList(const json& obj, const char* key, size_t n, const std::string& source,
                                              const std::string& where) {
  const json* v = Find(obj, key);
  if (v == nullptr) return Bad(source, absl::StrCat("required key '", where, key, "' is missing for longrope"));
  if (!v->is_array() || v->size() != n) {
    return Bad(source, absl::StrCat("key '", where, key, "' must be a list of ", n, " numbers (half the head size)"));
  }
  std::vector<float> out;
  for (const json& e : *v) {
    if (!e.is_number() || !(e.get<double>() > 0) || !(e.get<double>() <= std::numeric_limits<float>::max())) {
      return Bad(source, absl::StrCat("key '", where, key, "' holds something other than a positive number: ", e.dump()));
    }
    out.push_back(static_cast<float>(e.get<double>()));
  }
  return out;
}

// YaRN's keys (transformers' _compute_yarn_parameters): the original context defaults to
// max_position_embeddings, the attention factor to get_mscale(factor) (or the ratio of two
// get_mscale when mscale and mscale_all_dim are both given).
absl::Status ParseYarn(const json& obj, const RopeSurroundings& around, const std::string& source,
                       const std::string& where, RopeScaling& s) {
  if (s.original_max_position_embeddings == 0) s.original_max_position_embeddings = around.max_position_embeddings;
  if (s.original_max_position_embeddings <= 0) {
    return Bad(source, absl::StrCat("yarn rope needs '", where, "original_max_position_embeddings' or max_position_embeddings"));
  }
  std::optional<float> f, mscale, mscale_all_dim;
  ASSIGN_OR_RETURN(f, OptFloat(obj, "beta_fast", source, where));
  if (f) s.beta_fast = *f;
  ASSIGN_OR_RETURN(f, OptFloat(obj, "beta_slow", source, where));
  if (f) s.beta_slow = *f;
  if (!(s.beta_fast > 0) || !(s.beta_slow > 0)) {
    return Bad(source, absl::StrCat("keys '", where, "beta_fast' and '", where, "beta_slow' must be positive"));
  }
  std::optional<bool> truncate;
  ASSIGN_OR_RETURN(truncate, OptBool(obj, "truncate", source));
  s.truncate = truncate.value_or(true);
  ASSIGN_OR_RETURN(mscale, OptFloat(obj, "mscale", source, where));
  ASSIGN_OR_RETURN(mscale_all_dim, OptFloat(obj, "mscale_all_dim", source, where));
  ASSIGN_OR_RETURN(f, OptFloat(obj, "attention_factor", source, where));
  if (f) {
    s.attention_factor = *f;
  } else if (mscale && mscale_all_dim && *mscale != 0 && *mscale_all_dim != 0) {
    s.attention_factor = static_cast<float>(YarnMscale(s.factor, *mscale) / YarnMscale(s.factor, *mscale_all_dim));
  } else {
    s.attention_factor = static_cast<float>(YarnMscale(s.factor, 1.0));
  }
  return absl::OkStatus();
}

// LongRoPE's keys (transformers' _compute_longrope_parameters): with an original context (top
// level, as Phi-3 writes it, or in the object) the factor is max_position_embeddings / original;
// the attention factor defaults to sqrt(1 + ln(factor) / ln(original)) when the factor exceeds 1.
absl::Status ParseLongRope(const json& obj, const RopeSurroundings& around, const std::string& source,
                           const std::string& where, RopeScaling& s) {
  const size_t n = static_cast<size_t>(around.head_dim / 2);
  ASSIGN_OR_RETURN(s.long_factor, FactorList(obj, "long_factor", n, source, where));
  ASSIGN_OR_RETURN(s.short_factor, FactorList(obj, "short_factor", n, source, where));
  if (around.original_max_position_embeddings) s.original_max_position_embeddings = *around.original_max_position_embeddings;
  double factor = s.factor;
  if (s.original_max_position_embeddings > 0) {
    if (around.max_position_embeddings <= 0) {
      return Bad(source, "longrope rope with an original context needs a positive 'max_position_embeddings'");
    }
    factor = static_cast<double>(around.max_position_embeddings) / s.original_max_position_embeddings;
  } else {
    s.original_max_position_embeddings = around.max_position_embeddings;
  }
  if (s.original_max_position_embeddings <= 0) {
    return Bad(source, absl::StrCat("longrope rope needs '", where, "original_max_position_embeddings' or max_position_embeddings"));
  }
  std::optional<float> f;
  ASSIGN_OR_RETURN(f, OptFloat(obj, "attention_factor", source, where));
  if (f) {
    s.attention_factor = *f;
  } else if (factor > 1.0) {
    s.attention_factor =
        static_cast<float>(std::sqrt(1.0 + std::log(factor) / std::log(static_cast<double>(s.original_max_position_embeddings))));
  }
  return absl::OkStatus();
}

// One RoPE description: a classic rope_scaling object, or one rope_parameters object.
// `where` is its key path for messages ("rope_scaling.", "rope_parameters.full_attention.").
absl::StatusOr<RopeConfig> ParseRope(const json* obj, float fallback_theta, const RopeSurroundings& around,
                                     const std::string& source, const std::string& where) {
  RopeConfig rope;
  rope.theta = fallback_theta;
  if (obj == nullptr) return rope;
  if (!obj->is_object()) return Bad(source, absl::StrCat("key '", where.substr(0, where.size() - 1), "' must be an object"));
  std::optional<float> theta;
  ASSIGN_OR_RETURN(theta, OptFloat(*obj, "rope_theta", source, where));
  if (theta) rope.theta = *theta;
  std::optional<std::string> type;
  ASSIGN_OR_RETURN(type, OptString(*obj, "rope_type", source, where));
  if (!type) {  // older spelling
    ASSIGN_OR_RETURN(type, OptString(*obj, "type", source, where));
  }
  RopeScaling& s = rope.scaling;
  if (type) s.type = *type;
  if (s.type != "default" && s.type != "linear" && s.type != "llama3" && s.type != "yarn" && s.type != "longrope") {
    return Bad(source, absl::StrCat("key '", where, "rope_type': unsupported rope type ", s.type));
  }
  std::optional<float> f;
  ASSIGN_OR_RETURN(f, OptFloat(*obj, "factor", source, where));
  if (f) s.factor = *f;
  ASSIGN_OR_RETURN(f, OptFloat(*obj, "low_freq_factor", source, where));
  if (f) s.low_freq_factor = *f;
  ASSIGN_OR_RETURN(f, OptFloat(*obj, "high_freq_factor", source, where));
  if (f) s.high_freq_factor = *f;
  std::optional<int> orig;
  ASSIGN_OR_RETURN(orig, OptInt(*obj, "original_max_position_embeddings", source, where));
  if (orig) s.original_max_position_embeddings = *orig;

  if (!(rope.theta > 0)) return Bad(source, absl::StrCat("key '", where, "rope_theta' must be positive, got ", rope.theta));
  if (s.type != "default" && !(s.factor > 0)) {
    return Bad(source, absl::StrCat("key '", where, "factor' must be positive, got ", s.factor));
  }
  if (s.type == "llama3") {
    if (s.original_max_position_embeddings <= 0) {
      return Bad(source, absl::StrCat("key '", where, "original_max_position_embeddings' must be positive for llama3 rope"));
    }
    if (!(s.low_freq_factor > 0) || !(s.high_freq_factor > s.low_freq_factor)) {
      return Bad(source, absl::StrCat("keys '", where, "low_freq_factor' (", s.low_freq_factor, ") and '", where,
                                      "high_freq_factor' (", s.high_freq_factor, ") must satisfy 0 < low < high"));
    }
  }
  if (s.type == "yarn") {
    if (absl::Status st = ParseYarn(*obj, around, source, where, s); !st.ok()) return st;
  }
  if (s.type == "longrope") {
    if (absl::Status st = ParseLongRope(*obj, around, source, where, s); !st.ok()) return st;
  }
  if (!(s.attention_factor > 0)) {
    return Bad(source, absl::StrCat("key '", where, "attention_factor' must be positive, got ", s.attention_factor));
  }
  return rope;
}

absl::Status ParseRopeKeys(const json& j, const std::string& source, ModelConfig& c) {
  std::optional<float> top_theta, local_base;
  ASSIGN_OR_RETURN(top_theta, OptFloat(j, "rope_theta", source));
  ASSIGN_OR_RETURN(local_base, OptFloat(j, "rope_local_base_freq", source));
  const float theta = top_theta.value_or(10000.0f);
  RopeSurroundings around{c.max_position_embeddings, {}, c.head_dim};
  ASSIGN_OR_RETURN(around.original_max_position_embeddings, OptInt(j, "original_max_position_embeddings", source));

  if (const json* params = Find(j, "rope_parameters")) {  // transformers 5 spelling
    if (!params->is_object()) return Bad(source, "key 'rope_parameters' must be an object");
    const json* full = Find(*params, "full_attention");
    const json* sliding = Find(*params, "sliding_attention");
    if (full == nullptr && sliding == nullptr) {
      ASSIGN_OR_RETURN(c.rope, ParseRope(params, theta, around, source, "rope_parameters."));
      return absl::OkStatus();
    }
    // Keyed by layer type (gemma3): full -> global rope, sliding -> local rope.
    if (full == nullptr) return Bad(source, "key 'rope_parameters.full_attention' is missing (sliding_attention is given)");
    ASSIGN_OR_RETURN(c.rope, ParseRope(full, theta, around, source, "rope_parameters.full_attention."));
    if (sliding != nullptr) {
      ASSIGN_OR_RETURN(c.rope_local, ParseRope(sliding, local_base.value_or(10000.0f), around, source,
                                               "rope_parameters.sliding_attention."));
    }
    return absl::OkStatus();
  }
  // Classic spelling: top-level rope_theta wins over one repeated inside rope_scaling.
  const json* scaling = Find(j, "rope_scaling");
  float scaling_theta = theta;
  if (!top_theta && scaling != nullptr && scaling->is_object()) {
    std::optional<float> inner;
    ASSIGN_OR_RETURN(inner, OptFloat(*scaling, "rope_theta", source, "rope_scaling."));
    scaling_theta = inner.value_or(theta);
  }
  ASSIGN_OR_RETURN(c.rope, ParseRope(scaling, scaling_theta, around, source, "rope_scaling."));
  c.rope.theta = scaling_theta;
  if (local_base) {  // gemma's local layers: plain rope, no scaling
    if (!(*local_base > 0)) return Bad(source, "key 'rope_local_base_freq' must be positive");
    c.rope_local = RopeConfig{*local_base, RopeScaling{}};
  }
  return absl::OkStatus();
}

absl::Status ParseTokens(const json& j, const std::string& source, ModelConfig& c) {
  ASSIGN_OR_RETURN(c.bos_token_id, OptInt(j, "bos_token_id", source));
  const json* eos = Find(j, "eos_token_id");
  if (eos == nullptr) return absl::OkStatus();
  if (eos->is_number()) {
    std::optional<int> id;
    ASSIGN_OR_RETURN(id, OptInt(j, "eos_token_id", source));
    c.eos_token_ids.push_back(*id);
    return absl::OkStatus();
  }
  if (!eos->is_array()) return Bad(source, absl::StrCat("key 'eos_token_id' must be an integer or a list, got ", eos->dump()));
  for (const json& e : *eos) {
    if (!e.is_number_integer() || e.get<int64_t>() < 0 || e.get<int64_t>() > std::numeric_limits<int>::max()) {
      return Bad(source, absl::StrCat("key 'eos_token_id' holds something other than a token id: ", e.dump()));
    }
    c.eos_token_ids.push_back(static_cast<int>(e.get<int64_t>()));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ModelConfig> ParseHfConfig(const json& j, const std::string& source) {
  if (!j.is_object()) return Bad(source, "not a JSON object");
  ModelConfig c;
  c.raw = j;
  if (const json* archs = Find(j, "architectures")) {
    if (!archs->is_array() || (!archs->empty() && !(*archs)[0].is_string())) {
      return Bad(source, "key 'architectures' must be a list of strings");
    }
    if (!archs->empty()) c.architecture = (*archs)[0].get<std::string>();
  }
  std::optional<std::string> s;
  ASSIGN_OR_RETURN(s, OptString(j, "model_type", source));
  c.model_type = s.value_or("");

  for (auto [key, field] : {std::pair{"vocab_size", &c.vocab_size}, std::pair{"hidden_size", &c.hidden_size},
                            std::pair{"intermediate_size", &c.intermediate_size},
                            std::pair{"num_hidden_layers", &c.num_layers},
                            std::pair{"num_attention_heads", &c.num_heads}}) {
    if (absl::Status st = RequirePositive(j, key, source, *field); !st.ok()) return st;
  }
  std::optional<int> i;
  ASSIGN_OR_RETURN(i, OptInt(j, "num_key_value_heads", source));
  c.num_kv_heads = i.value_or(c.num_heads);
  if (c.num_kv_heads <= 0 || c.num_heads % c.num_kv_heads != 0) {
    return Bad(source, absl::StrCat("key 'num_key_value_heads' (", c.num_kv_heads,
                                    ") must be positive and divide num_attention_heads (", c.num_heads, ")"));
  }
  ASSIGN_OR_RETURN(i, OptInt(j, "head_dim", source));
  if (i) {
    c.head_dim = *i;
  } else if (c.hidden_size % c.num_heads != 0) {
    return Bad(source, absl::StrCat("no 'head_dim', and hidden_size (", c.hidden_size,
                                    ") is not a multiple of num_attention_heads (", c.num_heads, ")"));
  } else {
    c.head_dim = c.hidden_size / c.num_heads;
  }
  if (c.head_dim <= 0) return Bad(source, absl::StrCat("key 'head_dim' must be positive, got ", c.head_dim));

  std::optional<float> f;
  ASSIGN_OR_RETURN(f, OptFloat(j, "rms_norm_eps", source));
  if (f) c.rms_norm_eps = *f;
  if (!(c.rms_norm_eps >= 0)) return Bad(source, "key 'rms_norm_eps' must be non-negative");
  std::optional<bool> b;
  ASSIGN_OR_RETURN(b, OptBool(j, "tie_word_embeddings", source));
  // Absent: transformers' per-family default (Gemma ties, Llama/Qwen/Mistral/Phi do not).
  c.tie_word_embeddings = b.value_or(absl::StartsWith(c.model_type, "gemma"));
  ASSIGN_OR_RETURN(i, OptInt(j, "max_position_embeddings", source));
  c.max_position_embeddings = i.value_or(0);  // absent: 0, the trained length is not known
  if (i && *i <= 0) return Bad(source, absl::StrCat("key 'max_position_embeddings' must be positive, got ", *i));
  ASSIGN_OR_RETURN(s, OptString(j, "hidden_act", source));
  if (!s) {  // gemma's name for it
    ASSIGN_OR_RETURN(s, OptString(j, "hidden_activation", source));
  }
  if (s) c.hidden_act = *s;
  ASSIGN_OR_RETURN(b, OptBool(j, "attention_bias", source));
  c.attention_bias = b.value_or(false);

  if (absl::Status st = ParseRopeKeys(j, source, c); !st.ok()) return st;

  ASSIGN_OR_RETURN(c.sliding_window, OptInt(j, "sliding_window", source));
  if (c.sliding_window && *c.sliding_window <= 0) return Bad(source, "key 'sliding_window' must be positive");
  // Qwen2-style configs keep a window size but switch it off with use_sliding_window=false.
  ASSIGN_OR_RETURN(b, OptBool(j, "use_sliding_window", source));
  if (b && !*b) c.sliding_window.reset();

  if (const json* lt = Find(j, "layer_types")) {
    if (!lt->is_array()) return Bad(source, "key 'layer_types' must be a list of strings");
    for (const json& t : *lt) {
      if (!t.is_string()) return Bad(source, absl::StrCat("key 'layer_types' holds a non-string: ", t.dump()));
      c.layer_types.push_back(t.get<std::string>());
    }
    if (static_cast<int>(c.layer_types.size()) != c.num_layers) {
      return Bad(source, absl::StrCat("key 'layer_types' has ", c.layer_types.size(), " entries but num_hidden_layers is ",
                                      c.num_layers));
    }
  }
  if (absl::Status st = ParseTokens(j, source, c); !st.ok()) return st;
  return c;
}

absl::StatusOr<ModelConfig> ReadHfConfig(const std::filesystem::path& config_json) {
  const std::string source = config_json.string();
  absl::StatusOr<json> j = ReadJsonFile(config_json);
  if (!j.ok()) return j.status();
  return ParseHfConfig(*j, source);
}

}  // namespace doppler::formats

#undef ASSIGN_OR_RETURN
#undef ASSIGN_OR_RETURN_IMPL
#undef CONCAT
#undef CONCAT_INNER
