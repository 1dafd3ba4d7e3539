#include "serve/openai_request.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "serve/chat_prompt.h"

namespace doppler::serve {
namespace {

using json = nlohmann::json;

// Reads the optional fields of one request body, keeping the first error.
class Fields {
 public:
  explicit Fields(const json& body) : body_(body) {}

  std::optional<ApiError> error;

  const json* Find(const std::string& name) const {
    auto it = body_.find(name);
    return it == body_.end() || it->is_null() ? nullptr : &*it;
  }
  void Fail(const std::string& param, const std::string& message, const std::string& code = "invalid_value") {
    if (!error) error = InvalidField(param, message, code);
  }
  void Fail(const ApiError& e) {
    if (!error) error = e;
  }
  void Bool(const std::string& name, bool& out) {
    if (const json* v = Find(name)) {
      if (!v->is_boolean()) return Fail(name, absl::StrCat("'", name, "' must be a boolean"), "invalid_type");
      out = v->get<bool>();
    }
  }
  // A number in [lo, hi].
  void Number(const std::string& name, double lo, double hi, double& out) {
    if (const json* v = Find(name)) {
      if (!v->is_number()) return Fail(name, absl::StrCat("'", name, "' must be a number"), "invalid_type");
      const double x = v->get<double>();
      if (!(x >= lo && x <= hi)) return Fail(name, absl::StrCat("'", name, "' must be between ", lo, " and ", hi, ", not ", x));
      out = x;
    }
  }
  void Integer(const std::string& name, int64_t lo, int64_t hi, std::optional<int64_t>& out) {
    if (const json* v = Find(name)) {
      if (!v->is_number_integer()) return Fail(name, absl::StrCat("'", name, "' must be an integer"), "invalid_type");
      const int64_t x = v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)
                            ? INT64_MAX
                            : v->get<int64_t>();
      if (x < lo || x > hi) return Fail(name, absl::StrCat("'", name, "' must be between ", lo, " and ", hi, ", not ", x));
      out = x;
    }
  }

 private:
  const json& body_;
};

// The prompt of /v1/completions: text, or token ids (also as a one-element batch of either).
std::optional<std::vector<int32_t>> CompletionPrompt(const json& body, const ModelInfo& model, Fields& f) {
  const json* p = f.Find("prompt");
  if (!p) {
    f.Fail("prompt", "'prompt' is required", "missing_required_parameter");
    return std::nullopt;
  }
  json prompt = *p;
  if (prompt.is_array() && prompt.size() == 1 && (prompt[0].is_string() || prompt[0].is_array())) prompt = prompt[0];
  if (prompt.is_array() && !prompt.empty() && (prompt[0].is_string() || prompt[0].is_array())) {
    f.Fail("prompt", "'prompt' holds several prompts: this server takes one per request");
    return std::nullopt;
  }
  if (prompt.is_string()) {
    if (!model.tokenizer) {
      f.Fail("prompt", "this model has no tokenizer: give the prompt as an array of token ids");
      return std::nullopt;
    }
    absl::StatusOr<std::vector<int32_t>> ids = model.tokenizer->Encode(prompt.get<std::string>(), /*add_special=*/model.add_bos);
    if (!ids.ok()) {
      f.Fail("prompt", std::string(ids.status().message()));
      return std::nullopt;
    }
    const std::optional<int32_t> bos = model.tokenizer->bos_id();
    if (model.add_bos && bos && (ids->empty() || ids->front() != *bos)) ids->insert(ids->begin(), *bos);
    return *std::move(ids);
  }
  if (!prompt.is_array()) {
    f.Fail("prompt", "'prompt' must be a string or an array of token ids", "invalid_type");
    return std::nullopt;
  }
  std::vector<int32_t> ids;
  for (size_t i = 0; i < prompt.size(); ++i) {
    const json& id = prompt[i];
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= model.vocab_size) {
      f.Fail("prompt", absl::StrCat("prompt[", i, "] is not a token id in [0, ", model.vocab_size, ")"));
      return std::nullopt;
    }
    ids.push_back(id.get<int32_t>());
  }
  return ids;
}

std::optional<std::vector<int32_t>> ChatPromptIds(const std::string& body, const ModelInfo& model, Fields& f,
                                                  std::vector<std::string>& stop) {
  std::variant<ChatPrompt, ApiError> rendered = ChatPromptOfRequest(body, model.chat);
  if (ApiError* e = std::get_if<ApiError>(&rendered)) {
    f.Fail(*e);
    return std::nullopt;
  }
  if (!model.tokenizer) {
    f.Fail("messages", "this model has no tokenizer: use /v1/completions with token ids");
    return std::nullopt;
  }
  const ChatPrompt& prompt = std::get<ChatPrompt>(rendered);
  absl::StatusOr<std::vector<int32_t>> ids = model.tokenizer->Encode(prompt.text, /*add_special=*/false);
  if (!ids.ok()) {
    f.Fail("messages", std::string(ids.status().message()));
    return std::nullopt;
  }
  // A template writes the special tokens it wants (bos_token among them), as transformers
  // tokenizes its text; a built-in format's text starts with the tokenizer's BOS.
  const std::optional<int32_t> bos = model.tokenizer->bos_id();
  if (!model.chat.chat_template && model.add_bos && bos) ids->insert(ids->begin(), *bos);
  stop.insert(stop.end(), prompt.stop.begin(), prompt.stop.end());
  return *std::move(ids);
}

void Stops(Fields& f, std::vector<std::string>& out) {
  const json* s = f.Find("stop");
  if (!s) return;
  if (s->is_string()) {
    out.push_back(s->get<std::string>());
    return;
  }
  if (!s->is_array() || s->size() > 16) return f.Fail("stop", "'stop' must be a string or an array of up to 16 strings", "invalid_type");
  for (const json& x : *s) {
    if (!x.is_string()) return f.Fail("stop", "'stop' must be a string or an array of up to 16 strings", "invalid_type");
    out.push_back(x.get<std::string>());
  }
}

}  // namespace

std::variant<nlohmann::json, ApiError> ParseJsonObject(const std::string& body) {
  json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    return ApiError{400, "the request body is not valid JSON", "invalid_request_error", "", "invalid_json"};
  }
  if (!j.is_object()) return ApiError{400, "the request body must be a JSON object", "invalid_request_error", "", "invalid_json"};
  return j;
}

std::variant<CompletionRequest, ApiError> ParseCompletionRequest(Endpoint endpoint, const std::string& body_text,
                                                                 const ModelInfo& model) {
  std::variant<json, ApiError> parsed = ParseJsonObject(body_text);
  if (ApiError* e = std::get_if<ApiError>(&parsed)) return *e;
  const json& body = std::get<json>(parsed);
  Fields f(body);
  CompletionRequest r;
  r.endpoint = endpoint;
  SequenceRequest& s = r.sequence;

  if (const json* m = f.Find("model"); m && !m->is_string()) f.Fail("model", "'model' must be a string", "invalid_type");
  if (const json* n = f.Find("n"); n && *n != 1) {
    f.Fail("n", "'n' must be 1: this server returns one choice per request");
  }
  f.Bool("stream", r.stream);
  if (const json* so = f.Find("stream_options")) {
    if (!so->is_object()) {
      f.Fail("stream_options", "'stream_options' must be an object", "invalid_type");
    } else if (so->contains("include_usage") && !(*so)["include_usage"].is_null()) {
      if (!(*so)["include_usage"].is_boolean()) {
        f.Fail("stream_options.include_usage", "'stream_options.include_usage' must be a boolean", "invalid_type");
      } else {
        r.include_usage = (*so)["include_usage"].get<bool>();
      }
    }
  }
  std::optional<int64_t> max_tokens, max_completion_tokens, top_k, seed, top_logprobs;
  f.Integer("max_tokens", 1, INT64_MAX, max_tokens);
  f.Integer("max_completion_tokens", 1, INT64_MAX, max_completion_tokens);
  f.Number("temperature", 0, 2, s.sampling.temperature);
  f.Number("top_p", 0, 1, s.sampling.top_p);
  if (s.sampling.top_p <= 0) f.Fail("top_p", "'top_p' must be greater than 0");
  f.Integer("top_k", -1, INT32_MAX, top_k);
  if (top_k && *top_k > 0) s.sampling.top_k = *top_k;
  f.Number("min_p", 0, 1, s.sampling.min_p);
  f.Number("presence_penalty", -2, 2, s.sampling.presence_penalty);
  f.Number("frequency_penalty", -2, 2, s.sampling.frequency_penalty);
  f.Integer("seed", INT64_MIN, INT64_MAX, seed);
  if (seed) s.sampling.seed = static_cast<uint64_t>(*seed);
  f.Bool("ignore_eos", s.ignore_eos);
  Stops(f, s.stop);
  if (endpoint == Endpoint::kChat) {
    bool logprobs = false;
    f.Bool("logprobs", logprobs);
    f.Integer("top_logprobs", 0, 20, top_logprobs);
    if (top_logprobs && !logprobs) f.Fail("top_logprobs", "'top_logprobs' needs 'logprobs': true");
    if (logprobs) s.top_logprobs = static_cast<int>(top_logprobs.value_or(0));
  } else {
    std::optional<int64_t> logprobs;
    f.Integer("logprobs", 0, 20, logprobs);
    if (logprobs) s.top_logprobs = static_cast<int>(*logprobs);
    bool echo = false;
    f.Bool("echo", echo);
    if (echo) f.Fail("echo", "'echo' is not supported");
    if (f.Find("suffix")) f.Fail("suffix", "'suffix' is not supported");
    if (const json* best_of = f.Find("best_of"); best_of && *best_of != 1) f.Fail("best_of", "'best_of' must be 1");
  }
  if (f.error) return *f.error;

  std::optional<std::vector<int32_t>> prompt = endpoint == Endpoint::kChat ? ChatPromptIds(body_text, model, f, s.stop)
                                                                           : CompletionPrompt(body, model, f);
  if (f.error) return *f.error;
  s.prompt = *std::move(prompt);
  if (s.prompt.empty()) return InvalidField(endpoint == Endpoint::kChat ? "messages" : "prompt", "the prompt is empty");

  const int64_t prompt_tokens = static_cast<int64_t>(s.prompt.size());
  const std::optional<int64_t> asked = max_completion_tokens ? max_completion_tokens : max_tokens;
  if (prompt_tokens + asked.value_or(1) > model.context) {
    ApiError e = InvalidField(endpoint == Endpoint::kChat ? "messages" : "prompt",
                              absl::StrCat("This model's maximum context length is ", model.context,
                                           " tokens. However, you requested ", prompt_tokens + asked.value_or(1),
                                           " tokens (", prompt_tokens, " in the prompt, ", asked.value_or(1),
                                           " for the completion). Please reduce the prompt or the completion length."),
                              "context_length_exceeded");
    return e;
  }
  s.max_tokens = asked.value_or(model.context - prompt_tokens);
  return r;
}

}  // namespace doppler::serve
