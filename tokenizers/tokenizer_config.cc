#include "tokenizers/tokenizer_config.h"

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "formats/json_file.h"
#include "tokenizers/json_fields.h"

namespace doppler::tokenizers {
namespace {

// bos_token / eos_token: a string, an AddedToken object {"content": ...}, or null.
absl::StatusOr<std::optional<std::string>> TokenField(const nlohmann::json& config, const char* key,
                                                      const std::string& where) {
  auto it = config.find(key);
  if (it == config.end() || it->is_null()) return std::nullopt;
  if (it->is_string()) return it->get<std::string>();
  absl::StatusOr<std::string> content = StringField(*it, "content", absl::StrCat(where, ".", key));
  if (!content.ok()) return content.status();
  return *std::move(content);
}

absl::StatusOr<std::optional<bool>> FlagField(const nlohmann::json& config, const char* key, const std::string& where) {
  auto it = config.find(key);
  if (it == config.end() || it->is_null()) return std::nullopt;
  if (!it->is_boolean()) return JsonError(where, absl::StrCat("\"", key, "\" must be true or false"));
  return it->get<bool>();
}

absl::StatusOr<std::string> ChatTemplateField(const nlohmann::json& config, const std::string& where) {
  auto it = config.find("chat_template");
  if (it == config.end() || it->is_null()) return std::string();
  if (it->is_string()) return it->get<std::string>();
  if (!it->is_array() || it->empty()) return JsonError(where, "\"chat_template\" must be a string or a list");
  const nlohmann::json* chosen = &(*it)[0];
  for (const nlohmann::json& entry : *it) {
    if (entry.is_object() && entry.contains("name") && entry.at("name") == "default") chosen = &entry;
  }
  return StringField(*chosen, "template", absl::StrCat(where, ".chat_template"));
}

}  // namespace

absl::StatusOr<TokenizerConfig> ReadTokenizerConfig(const std::filesystem::path& model_dir) {
  TokenizerConfig config;
  const std::filesystem::path path = model_dir / "tokenizer_config.json";
  const std::string where = path.string();
  std::error_code error;
  if (std::filesystem::exists(path, error)) {
    absl::StatusOr<nlohmann::json> json = formats::ReadJsonFile(path);
    if (!json.ok()) return json.status();
    if (!json->is_object()) return JsonError(where, "expected a JSON object");
    for (auto [key, field] : {std::pair{"bos_token", &config.bos_token}, std::pair{"eos_token", &config.eos_token}}) {
      absl::StatusOr<std::optional<std::string>> token = TokenField(*json, key, where);
      if (!token.ok()) return token.status();
      *field = *std::move(token);
    }
    for (auto [key, field] :
         {std::pair{"add_bos_token", &config.add_bos_token}, std::pair{"add_eos_token", &config.add_eos_token}}) {
      absl::StatusOr<std::optional<bool>> flag = FlagField(*json, key, where);
      if (!flag.ok()) return flag.status();
      *field = *flag;
    }
    absl::StatusOr<std::string> chat_template = ChatTemplateField(*json, where);
    if (!chat_template.ok()) return chat_template.status();
    config.chat_template = *std::move(chat_template);
  }
  const std::filesystem::path jinja = model_dir / "chat_template.jinja";
  if (config.chat_template.empty() && std::filesystem::exists(jinja, error)) {
    std::ifstream in(jinja, std::ios::binary);
    if (!in) return absl::NotFoundError(absl::StrCat(jinja.string(), ": cannot open"));
    std::stringstream text;
    text << in.rdbuf();
    config.chat_template = text.str();
  }
  return config;
}

}  // namespace doppler::tokenizers
