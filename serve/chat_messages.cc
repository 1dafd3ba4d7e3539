#include "serve/chat_messages.h"

#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "jinja/json_value.h"

namespace doppler::serve {
namespace {

using jinja::Value;

// A field of a dict that is present and not null.
const Value* Field(const Value& dict, const std::string& key) {
  const Value* v = dict.Find(key);
  return v == nullptr || v->is_none() ? nullptr : v;
}

// A message's content: a string, an array of {"type": "text", "text": ...} parts, which become one
// string (the templates expect text), or null, as OpenAI sends beside tool_calls, which becomes ""
// (templates concatenate and search the content whatever the message carries).
std::variant<Value, ApiError> Content(const Value& content, const std::string& param) {
  if (content.is_none()) return Value("");
  if (content.is_string()) return content;
  if (!content.is_list()) return InvalidField(param, absl::StrCat("'", param, "' must be a string or an array of text parts"), "invalid_type");
  std::string text;
  const jinja::List& parts = content.as_list();
  for (size_t i = 0; i < parts.size(); ++i) {
    const Value& part = parts[i];
    const Value* type = part.is_dict() ? part.Find("type") : nullptr;
    const Value* part_text = part.is_dict() ? part.Find("text") : nullptr;
    if (type == nullptr || !type->is_string() || type->as_string() != "text" || part_text == nullptr || !part_text->is_string()) {
      const std::string where = absl::StrCat(param, "[", i, "]");
      return InvalidField(where, absl::StrCat("'", where, "' must be a text part {\"type\": \"text\", \"text\": \"...\"} (this model reads text only)"));
    }
    text += part_text->as_string();
  }
  return Value(std::move(text));
}

// An assistant message's tool_calls, each function's arguments parsed from the JSON string OpenAI
// sends into the object the templates iterate over.
std::variant<Value, ApiError> ToolCalls(const Value& calls, const std::string& param) {
  if (!calls.is_list()) return InvalidField(param, absl::StrCat("'", param, "' must be an array"), "invalid_type");
  jinja::List out;
  for (size_t i = 0; i < calls.as_list().size(); ++i) {
    const Value& call = calls.as_list()[i];
    const std::string where = absl::StrCat(param, "[", i, "]");
    if (!call.is_dict()) return InvalidField(where, absl::StrCat("'", where, "' must be an object"), "invalid_type");
    const Value* function = Field(call, "function");
    const Value* arguments = function != nullptr && function->is_dict() ? Field(*function, "arguments") : nullptr;
    if (arguments == nullptr || !arguments->is_string()) {
      out.push_back(call);
      continue;
    }
    const std::string arg_param = where + ".function.arguments";
    absl::StatusOr<Value> parsed = jinja::ValueFromJson(arguments->as_string());
    if (!parsed.ok()) {
      return InvalidField(arg_param, absl::StrCat("'", arg_param, "' is not valid JSON"));
    }
    jinja::Dict new_function = function->as_dict();
    for (auto& [key, value] : new_function) {
      if (key == "arguments") value = *std::move(parsed);
    }
    jinja::Dict new_call = call.as_dict();
    for (auto& [key, value] : new_call) {
      if (key == "function") value = Value::MakeDict(std::move(new_function));
    }
    out.push_back(Value::MakeDict(std::move(new_call)));
  }
  return Value::MakeList(std::move(out));
}

std::variant<Value, ApiError> Message(const Value& message, const std::string& where) {
  const Value* role = message.is_dict() ? Field(message, "role") : nullptr;
  if (role == nullptr || !role->is_string()) {
    return InvalidField(where, absl::StrCat("'", where, "' must be an object with a string 'role'"), "invalid_type");
  }
  jinja::Dict out = message.as_dict();
  if (message.Find("content") == nullptr) out.emplace_back("content", Value(""));
  for (auto& [key, value] : out) {
    std::variant<Value, ApiError> checked = value;
    if (key == "content") checked = Content(value, where + ".content");
    if (key == "tool_calls" && !value.is_none()) checked = ToolCalls(value, where + ".tool_calls");
    if (ApiError* e = std::get_if<ApiError>(&checked)) return *e;
    value = std::get<Value>(std::move(checked));
  }
  return Value::MakeDict(std::move(out));
}

}  // namespace

std::variant<ChatConversation, ApiError> ChatConversationOf(const Value& body) {
  ChatConversation c;
  const Value* messages = Field(body, "messages");
  if (messages == nullptr) return InvalidField("messages", "'messages' is required", "missing_required_parameter");
  if (!messages->is_list() || messages->as_list().empty()) {
    return InvalidField("messages", "'messages' must be a non-empty array", "invalid_type");
  }
  jinja::List list;
  for (size_t i = 0; i < messages->as_list().size(); ++i) {
    std::variant<Value, ApiError> m = Message(messages->as_list()[i], absl::StrCat("messages[", i, "]"));
    if (ApiError* e = std::get_if<ApiError>(&m)) return *e;
    list.push_back(std::get<Value>(std::move(m)));
  }
  c.messages = Value::MakeList(std::move(list));

  if (const Value* tools = Field(body, "tools")) {
    if (!tools->is_list()) return InvalidField("tools", "'tools' must be an array of tool definitions", "invalid_type");
    if (!tools->as_list().empty()) c.tools = *tools;  // no tools offered: as transformers' tools=None
  }
  if (const Value* kwargs = Field(body, "chat_template_kwargs")) {
    if (!kwargs->is_dict()) return InvalidField("chat_template_kwargs", "'chat_template_kwargs' must be an object", "invalid_type");
    c.kwargs = kwargs->as_dict();
  }
  return c;
}

}  // namespace doppler::serve
