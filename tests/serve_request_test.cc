// The server's pieces that need no model: choosing tokens with a request's own settings, chat
// prompts, and OpenAI request validation.
#include <cmath>
#include <filesystem>
#include <memory>
#include <map>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "jinja/template.h"
#include "nlohmann/json.hpp"
#include "serve/chat_prompt.h"
#include "serve/openai_request.h"
#include "serve/token_sampler.h"
#include "support/cli_runner.h"
#include "support/fixtures.h"

namespace doppler::serve {
namespace {

std::vector<float> LogitsOf(const std::vector<double>& probabilities) {
  std::vector<float> l;
  for (double p : probabilities) l.push_back(static_cast<float>(std::log(p) + 3.0));  // any shift
  return l;
}

std::map<int32_t, int> Draw(const SamplingSettings& s, const std::vector<float>& logits, int n, uint64_t seed = 7) {
  TokenSampler sampler(s, -1, seed);
  std::map<int32_t, int> counts;
  for (int i = 0; i < n; ++i) ++counts[sampler.Choose(logits).id];
  return counts;
}

TEST(ServeSampler, GreedyChoosesTheLargestLogitAndReportsLogSoftmax) {
  const std::vector<float> logits = {0.3f, 2.5f, -1.0f, 2.4f, 0.0f};
  SamplingSettings s;
  s.temperature = 0;
  TokenSampler sampler(s, 3, 1);
  const GeneratedToken t = sampler.Choose(logits);
  EXPECT_EQ(t.id, 1);
  double sum = 0;
  for (float l : logits) sum += std::exp(static_cast<double>(l));
  EXPECT_NEAR(t.logprob, 2.5 - std::log(sum), 1e-5);
  ASSERT_EQ(t.top.size(), 3u);
  EXPECT_EQ(t.top[0].id, 1);
  EXPECT_EQ(t.top[1].id, 3);
  EXPECT_EQ(t.top[2].id, 0);
  EXPECT_NEAR(t.top[1].logprob, 2.4 - std::log(sum), 1e-5);
}

TEST(ServeSampler, TemperatureOneDrawsFromTheSoftmax) {
  const std::vector<double> p = {0.5, 0.3, 0.15, 0.05};
  const int n = 20000;
  const std::map<int32_t, int> counts = Draw(SamplingSettings{}, LogitsOf(p), n);
  for (int i = 0; i < 4; ++i) {
    const double f = counts.count(i) ? static_cast<double>(counts.at(i)) / n : 0;
    EXPECT_NEAR(f, p[static_cast<size_t>(i)], 4 * std::sqrt(p[static_cast<size_t>(i)] / n)) << i;
  }
}

TEST(ServeSampler, TemperatureFlattens) {
  const std::vector<double> p = {0.8, 0.2};
  SamplingSettings s;
  s.temperature = 2.0;  // p ∝ sqrt(p): 0.6667, 0.3333
  const int n = 20000;
  const std::map<int32_t, int> counts = Draw(s, LogitsOf(p), n);
  EXPECT_NEAR(static_cast<double>(counts.at(0)) / n, 2.0 / 3.0, 0.015);
}

TEST(ServeSampler, TopKTopPAndMinPCutTheTail) {
  const std::vector<float> logits = LogitsOf({0.5, 0.3, 0.15, 0.05});
  SamplingSettings k;
  k.top_k = 2;
  SamplingSettings p;
  p.top_p = 0.75;  // 0.5 + 0.3 reaches it
  SamplingSettings m;
  m.min_p = 0.35;  // keeps p >= 0.175
  for (const SamplingSettings& s : {k, p, m}) {
    const std::map<int32_t, int> counts = Draw(s, logits, 4000);
    EXPECT_EQ(counts.count(2) + counts.count(3), 0u);
    ASSERT_TRUE(counts.count(0) && counts.count(1));
    EXPECT_NEAR(static_cast<double>(counts.at(0)) / 4000, 0.5 / 0.8, 0.04);
  }
}

TEST(ServeSampler, TheSameSeedGivesTheSameTokens) {
  const std::vector<float> logits = LogitsOf({0.25, 0.25, 0.25, 0.25});
  auto run = [&](uint64_t seed) {
    TokenSampler sampler(SamplingSettings{}, -1, seed);
    std::vector<int32_t> ids;
    for (int i = 0; i < 64; ++i) ids.push_back(sampler.Choose(logits).id);
    return ids;
  };
  EXPECT_EQ(run(11), run(11));
  EXPECT_NE(run(11), run(12));
}

TEST(ServeSampler, PenaltiesLowerTokensAlreadyGenerated) {
  SamplingSettings s;
  s.temperature = 0;
  s.frequency_penalty = 0.3;
  TokenSampler sampler(s, -1, 1);
  const std::vector<float> logits = {1.0f, 0.5f};
  // 1.0 beats 0.5 until token 0 was generated twice: 1.0 - 2 * 0.3 = 0.4.
  EXPECT_EQ(sampler.Choose(logits).id, 0);
  EXPECT_EQ(sampler.Choose(logits).id, 0);
  EXPECT_EQ(sampler.Choose(logits).id, 1);
  SamplingSettings presence;
  presence.temperature = 0;
  presence.presence_penalty = 0.6;
  TokenSampler once(presence, -1, 1);
  EXPECT_EQ(once.Choose(logits).id, 0);
  EXPECT_EQ(once.Choose(logits).id, 1);
}

ChatPromptOptions Chatml() {
  ChatPromptOptions o;
  o.format = *chat::ChatFormatByName("chatml");
  return o;
}

// The prompt of a request body, failing the test on an error.
ChatPrompt PromptOf(const std::string& body, const ChatPromptOptions& options) {
  std::variant<ChatPrompt, ApiError> p = ChatPromptOfRequest(body, options);
  if (const ApiError* e = std::get_if<ApiError>(&p)) {
    ADD_FAILURE() << e->message;
    return {};
  }
  return std::get<ChatPrompt>(p);
}

TEST(ServeChatPrompt, RendersSystemUserAndAssistantTurnsInTheBuiltInFormat) {
  const ChatPrompt p = PromptOf(R"({"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
      {"role": "assistant", "content": "Hello."}, {"role": "user", "content": [{"type": "text", "text": "Wh"}, {"type": "text", "text": "o?"}]}]})",
                                Chatml());
  // The text chatml's template (add_generation_prompt) writes for these messages.
  EXPECT_EQ(p.text,
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
            "Hello.<|im_end|>\n<|im_start|>user\nWho?<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(p.stop, std::vector<std::string>{"<|im_end|>"});
}

TEST(ServeChatPrompt, BuiltInFormatRejectsWhatItCannotRender) {
  for (const char* body : {R"({"messages": [{"role": "system", "content": "x"}]})",
                           R"({"messages": [{"role": "wizard", "content": "x"}]})",
                           R"({"messages": [{"role": "assistant", "content": "x"}]})",
                           R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function"}]})"}) {
    std::variant<ChatPrompt, ApiError> p = ChatPromptOfRequest(body, Chatml());
    ASSERT_TRUE(std::holds_alternative<ApiError>(p)) << body;
    EXPECT_EQ(std::get<ApiError>(p).status, 400) << body;
  }
  std::variant<ChatPrompt, ApiError> tools =
      ChatPromptOfRequest(R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function"}]})", Chatml());
  EXPECT_EQ(std::get<ApiError>(tools).param, "tools");
}

TEST(ServeChatPrompt, RejectsMalformedMessageFields) {
  const ChatPromptOptions o = Chatml();
  auto param_of = [&](const std::string& body) {
    std::variant<ChatPrompt, ApiError> p = ChatPromptOfRequest(body, o);
    return std::holds_alternative<ApiError>(p) ? std::get<ApiError>(p).param : std::string("(accepted)");
  };
  EXPECT_EQ(param_of(R"({"messages": []})"), "messages");
  EXPECT_EQ(param_of(R"({"messages": [{"content": "x"}]})"), "messages[0]");
  EXPECT_EQ(param_of(R"({"messages": [{"role": "user", "content": 3}]})"), "messages[0].content");
  EXPECT_EQ(param_of(R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})"), "messages[0].content[0]");
  EXPECT_EQ(param_of(R"({"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": null,
      "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": "{not json"}}]}]})"),
            "messages[1].tool_calls[0].function.arguments");
  EXPECT_EQ(param_of(R"({"messages": [{"role": "user", "content": "x"}], "tools": {}})"), "tools");
  EXPECT_EQ(param_of(R"({"messages": [{"role": "user", "content": "x"}], "chat_template_kwargs": []})"), "chat_template_kwargs");
}

using OrderedJson = nlohmann::ordered_json;  // the fixtures' key order is what tojson prints

// The fixture's chat template, with the special tokens of a case's context.
ChatPromptOptions FixtureTemplate(const OrderedJson& file, const OrderedJson& context) {
  const std::filesystem::path dir = test::FixturesDir() / "chat_templates";
  absl::StatusOr<jinja::Template> t = jinja::Template::Parse(test::ReadFile(dir / file["template"].get<std::string>()));
  EXPECT_TRUE(t.ok()) << t.status();
  ChatPromptOptions o;
  o.chat_template = std::make_shared<const jinja::Template>(*std::move(t));
  o.special_tokens = {context["bos_token"].get<std::string>(), context["eos_token"].get<std::string>()};
  return o;
}

// A case's context as an OpenAI request: tool calls' arguments as JSON strings (their empty
// content as null), the first
// message's content as two text parts, and the remaining variables as chat_template_kwargs.
std::string RequestBody(const OrderedJson& context) {
  OrderedJson body = {{"model", "m"}, {"messages", context["messages"]}};
  for (OrderedJson& m : body["messages"]) {
    if (m.contains("tool_calls")) {
      for (OrderedJson& call : m["tool_calls"]) call["function"]["arguments"] = call["function"]["arguments"].dump();
      if (m["content"] == "") m["content"] = nullptr;  // as OpenAI's clients send it
    }
  }
  const std::string first = body["messages"][0]["content"].get<std::string>();
  size_t half = first.size() / 2;
  while (half > 0 && (static_cast<unsigned char>(first[half]) & 0xC0) == 0x80) --half;  // a character's start
  body["messages"][0]["content"] = OrderedJson::array({{{"type", "text"}, {"text", first.substr(0, half)}},
                                                       {{"type", "text"}, {"text", first.substr(half)}}});
  if (context.contains("tools")) body["tools"] = context["tools"];
  OrderedJson kwargs = OrderedJson::object();
  for (const auto& [key, value] : context.items()) {
    if (key != "messages" && key != "tools" && key != "add_generation_prompt" && !absl::EndsWith(key, "_token")) {
      kwargs[key] = value;
    }
  }
  if (!kwargs.empty()) body["chat_template_kwargs"] = kwargs;
  return body.dump();
}

// Every case of the Hermes-2-Pro and Qwen3 templates the server can send (add_generation_prompt),
// tools and tool calls included, gives the text jinja2 rendered.
TEST(ServeChatPrompt, RendersTheModelsTemplateAsJinja2Did) {
  int checked = 0;
  int with_tools = 0;
  for (const char* name : {"NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use", "Qwen-Qwen3-0.6B"}) {
    const OrderedJson file =
        OrderedJson::parse(test::ReadFile(test::FixturesDir() / "chat_templates" / (std::string(name) + ".cases.json")));
    for (const OrderedJson& c : file["cases"]) {
      const OrderedJson& context = c["context"];
      if (!context["add_generation_prompt"].get<bool>() || c.contains("error")) continue;
      const std::string label = std::string(name) + " / " + c["case"].get<std::string>();
      ChatPromptOptions options = FixtureTemplate(file, context);
      // The server's kwargs are under the request's: a request's enable_thinking wins.
      options.kwargs = {{"enable_thinking", jinja::Value(true)}};
      const ChatPrompt p = PromptOf(RequestBody(context), options);
      EXPECT_EQ(p.text, c["expected"].get<std::string>()) << label;
      EXPECT_EQ(p.stop, std::vector<std::string>{context["eos_token"].get<std::string>()}) << label;
      ++checked;
      with_tools += context.contains("tools");
    }
  }
  EXPECT_GE(checked, 10);
  EXPECT_GE(with_tools, 4);
}

// A template that refuses the conversation: the request gets a 400 with the template's message.
TEST(ServeChatPrompt, TemplateRefusalIsA400WithItsMessage) {
  const OrderedJson file = OrderedJson::parse(
      test::ReadFile(test::FixturesDir() / "chat_templates" / "google-gemma-2-2b-it.cases.json"));
  int refusals = 0;
  for (const OrderedJson& c : file["cases"]) {
    if (!c.contains("error")) continue;
    const std::string error = c["error"].get<std::string>();  // "TemplateError: MESSAGE"
    ModelInfo model;
    model.id = "m";
    model.context = 4096;
    model.chat = FixtureTemplate(file, c["context"]);
    const auto r = ParseCompletionRequest(Endpoint::kChat, RequestBody(c["context"]), model);
    ASSERT_TRUE(std::holds_alternative<ApiError>(r)) << c["case"];
    const ApiError& e = std::get<ApiError>(r);
    EXPECT_EQ(e.status, 400);
    EXPECT_EQ(e.type, "invalid_request_error");
    EXPECT_TRUE(absl::StrContains(e.message, error.substr(error.find(": ") + 2))) << c["case"] << ": " << e.message;
    EXPECT_EQ(e.param, "messages");
    ++refusals;
  }
  EXPECT_GE(refusals, 1);
}

ModelInfo IdsOnlyModel() {
  ModelInfo m;
  m.id = "m";
  m.context = 50;
  m.vocab_size = 100;
  return m;
}

ApiError ErrorOf(Endpoint e, const nlohmann::json& body) {
  std::variant<CompletionRequest, ApiError> r = ParseCompletionRequest(e, body.dump(), IdsOnlyModel());
  EXPECT_TRUE(std::holds_alternative<ApiError>(r)) << body.dump();
  return std::holds_alternative<ApiError>(r) ? std::get<ApiError>(r) : ApiError{};
}

TEST(ServeRequest, TokenIdPromptsAndTheirSettings) {
  const nlohmann::json body = {{"prompt", {5, 6, 7}},     {"max_tokens", 9},  {"temperature", 0.5}, {"top_k", 4},
                               {"top_p", 0.9},            {"min_p", 0.1},     {"seed", 3},          {"stop", "x"},
                               {"stream", true},          {"logprobs", 2},    {"stream_options", {{"include_usage", true}}}};
  std::variant<CompletionRequest, ApiError> r = ParseCompletionRequest(Endpoint::kCompletions, body.dump(), IdsOnlyModel());
  ASSERT_TRUE(std::holds_alternative<CompletionRequest>(r)) << std::get<ApiError>(r).message;
  const CompletionRequest& c = std::get<CompletionRequest>(r);
  EXPECT_EQ(c.sequence.prompt, (std::vector<int32_t>{5, 6, 7}));
  EXPECT_EQ(c.sequence.max_tokens, 9);
  EXPECT_EQ(c.sequence.sampling.temperature, 0.5);
  EXPECT_EQ(c.sequence.sampling.top_k, 4);
  EXPECT_EQ(c.sequence.sampling.seed, 3u);
  EXPECT_EQ(c.sequence.stop, std::vector<std::string>{"x"});
  EXPECT_EQ(c.sequence.top_logprobs, 2);
  EXPECT_TRUE(c.stream && c.include_usage);
  // Without max_tokens, the rest of the context.
  std::variant<CompletionRequest, ApiError> rest =
      ParseCompletionRequest(Endpoint::kCompletions, R"({"prompt": [1, 2]})", IdsOnlyModel());
  ASSERT_TRUE(std::holds_alternative<CompletionRequest>(rest));
  EXPECT_EQ(std::get<CompletionRequest>(rest).sequence.max_tokens, 48);
}

TEST(ServeRequest, EachFaultIsOneErrorNamingItsField) {
  EXPECT_EQ(ErrorOf(Endpoint::kCompletions, {{"prompt", {1}}, {"n", 2}}).param, "n");
  EXPECT_EQ(ErrorOf(Endpoint::kCompletions, {{"prompt", {1}}, {"temperature", "hot"}}).code, "invalid_type");
  EXPECT_EQ(ErrorOf(Endpoint::kCompletions, {{"prompt", {1}}, {"temperature", 3}}).param, "temperature");
  EXPECT_EQ(ErrorOf(Endpoint::kCompletions, {{"prompt", {1, 100}}}).param, "prompt");
  EXPECT_EQ(ErrorOf(Endpoint::kCompletions, {{"prompt", "text"}}).param, "prompt");  // no tokenizer
  EXPECT_EQ(ErrorOf(Endpoint::kCompletions, {{"max_tokens", 3}}).code, "missing_required_parameter");
  EXPECT_EQ(ErrorOf(Endpoint::kCompletions, {{"prompt", {1}}, {"max_tokens", 0}}).param, "max_tokens");
  EXPECT_EQ(ErrorOf(Endpoint::kCompletions, {{"prompt", {1}}, {"stop", {1}}}).param, "stop");
  EXPECT_EQ(ErrorOf(Endpoint::kChat, {{"messages", "hi"}}).param, "messages");
  const ApiError ctx = ErrorOf(Endpoint::kCompletions, {{"prompt", std::vector<int>(40, 1)}, {"max_tokens", 11}});
  EXPECT_EQ(ctx.code, "context_length_exceeded");
  EXPECT_EQ(ctx.status, 400);
  std::variant<CompletionRequest, ApiError> bad = ParseCompletionRequest(Endpoint::kChat, "{\"messages\": ", IdsOnlyModel());
  ASSERT_TRUE(std::holds_alternative<ApiError>(bad));
  EXPECT_EQ(std::get<ApiError>(bad).code, "invalid_json");
  const nlohmann::json body = nlohmann::json::parse(std::get<ApiError>(bad).Body());
  EXPECT_TRUE(body["error"].contains("message") && body["error"].contains("type") && body["error"]["param"].is_null());
}

}  // namespace
}  // namespace doppler::serve
