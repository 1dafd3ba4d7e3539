#include "serve/openai_response.h"

namespace doppler::serve {

using json = nlohmann::json;

ResponseBuilder::ResponseBuilder(Endpoint endpoint, std::string id, int64_t created, std::string model,
                                 const tokenizers::Tokenizer* tokenizer, bool logprobs)
    : endpoint_(endpoint),
      id_(std::move(id)),
      created_(created),
      model_(std::move(model)),
      tokenizer_(tokenizer),
      logprobs_(logprobs) {}

json ResponseBuilder::UsageJson(const Usage& u) {
  return {{"prompt_tokens", u.prompt_tokens},
          {"completion_tokens", u.completion_tokens},
          {"total_tokens", u.prompt_tokens + u.completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", u.cached_tokens}}}};
}

std::string ResponseBuilder::TokenText(int32_t id) const {
  return tokenizer_ ? tokenizer_->TokenBytes(id) : std::to_string(id);
}

json ResponseBuilder::Envelope(const char* object) const {
  return {{"id", id_}, {"object", object}, {"created", created_}, {"model", model_}};
}

json ResponseBuilder::Logprobs(const std::vector<GeneratedToken>& tokens) {
  if (!logprobs_) return nullptr;
  auto bytes = [](const std::string& s) {
    json b = json::array();
    for (unsigned char c : s) b.push_back(c);
    return b;
  };
  if (endpoint_ == Endpoint::kChat) {
    json content = json::array();
    for (const GeneratedToken& t : tokens) {
      const std::string text = TokenText(t.id);
      json top = json::array();
      for (const TokenLogprob& alt : t.top) {
        const std::string alt_text = TokenText(alt.id);
        top.push_back({{"token", alt_text}, {"logprob", alt.logprob}, {"bytes", bytes(alt_text)}});
      }
      content.push_back({{"token", text}, {"logprob", t.logprob}, {"bytes", bytes(text)}, {"top_logprobs", top}});
    }
    return {{"content", content}};
  }
  json out = {{"tokens", json::array()}, {"token_logprobs", json::array()}, {"top_logprobs", json::array()},
              {"text_offset", json::array()}};
  for (const GeneratedToken& t : tokens) {
    const std::string text = TokenText(t.id);
    out["tokens"].push_back(text);
    out["token_logprobs"].push_back(t.logprob);
    json top = json::object();
    for (const TokenLogprob& alt : t.top) top[TokenText(alt.id)] = alt.logprob;
    out["top_logprobs"].push_back(top);
    out["text_offset"].push_back(text_offset_);
    text_offset_ += text.size();
  }
  return out;
}

json ResponseBuilder::Whole(const std::string& text, const std::vector<GeneratedToken>& tokens, FinishReason finish,
                            const Usage& usage) {
  json choice = {{"index", 0}, {"logprobs", Logprobs(tokens)}, {"finish_reason", FinishReasonName(finish)}};
  json out;
  if (endpoint_ == Endpoint::kChat) {
    out = Envelope("chat.completion");
    choice["message"] = {{"role", "assistant"}, {"content", text}};
  } else {
    out = Envelope("text_completion");
    choice["text"] = text;
  }
  out["choices"] = json::array({choice});
  out["usage"] = UsageJson(usage);
  return out;
}

json ResponseBuilder::Chunk(const std::string& text, const std::vector<GeneratedToken>& tokens,
                            std::optional<FinishReason> finish, bool with_usage) {
  json choice = {{"index", 0}, {"logprobs", Logprobs(tokens)}, {"finish_reason", nullptr}};
  if (finish) choice["finish_reason"] = FinishReasonName(*finish);
  json out;
  if (endpoint_ == Endpoint::kChat) {
    out = Envelope("chat.completion.chunk");
    json delta = json::object();
    if (!sent_role_) delta["role"] = "assistant";
    if (!finish || !text.empty()) delta["content"] = text;
    sent_role_ = true;
    choice["delta"] = delta;
  } else {
    out = Envelope("text_completion");
    choice["text"] = text;
  }
  out["choices"] = json::array({choice});
  if (with_usage) out["usage"] = nullptr;
  return out;
}

json ResponseBuilder::UsageChunk(const Usage& usage) const {
  json out = Envelope(endpoint_ == Endpoint::kChat ? "chat.completion.chunk" : "text_completion");
  out["choices"] = json::array();
  out["usage"] = UsageJson(usage);
  return out;
}

}  // namespace doppler::serve
