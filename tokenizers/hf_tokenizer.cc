// LoadHfTokenizer: tokenizer.json (+ tokenizer_config.json) assembled into HF's pipeline:
// added tokens -> normalizer -> pre-tokenizer -> BPE -> post-processor, and the decoder back.
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "formats/json_file.h"
#include "tokenizers/added_tokens.h"
#include "tokenizers/bpe_model.h"
#include "tokenizers/byte_level.h"
#include "tokenizers/hf_decoder.h"
#include "tokenizers/json_fields.h"
#include "tokenizers/normalizer.h"
#include "tokenizers/post_processor.h"
#include "tokenizers/pre_tokenizer.h"
#include "tokenizers/token_table.h"
#include "tokenizers/tokenizer.h"
#include "tokenizers/tokenizer_config.h"
#include "tokenizers/utf8.h"

namespace doppler::tokenizers {
namespace {

struct HfParts {
  BpeModel model;
  std::vector<AddedToken> added;
  AddedTokenMatcher raw_matcher;         // tokens matched in the input as written
  AddedTokenMatcher normalized_matcher;  // "normalized" tokens, matched after normalization
  Normalizer normalizer;
  PreTokenizer pre_tokenizer;
  HfDecoder decoder;
  SpecialTokenTemplate special_template;
  TokenTable table;
  std::optional<int32_t> bos;
  std::vector<int32_t> eos;
  std::string chat_template;
};

class HfTokenizer final : public Tokenizer {
 public:
  explicit HfTokenizer(HfParts parts) : parts_(std::move(parts)) {}

  absl::StatusOr<std::vector<int32_t>> Encode(std::string_view text, bool add_special) const override {
    if (!IsValidUtf8(text)) return absl::InvalidArgumentError("text to encode is not valid UTF-8");
    std::vector<int32_t> ids;
    if (add_special) ids = parts_.special_template.prefix;
    // Added tokens are found in the raw text first (those marked "normalized" after normalizing).
    for (const AddedTokenMatcher::Piece& raw : parts_.raw_matcher.Split(text)) {
      if (raw.id >= 0) {
        ids.push_back(raw.id);
        continue;
      }
      absl::StatusOr<std::string> normalized = parts_.normalizer.Apply(raw.text);
      if (!normalized.ok()) return normalized.status();
      for (const AddedTokenMatcher::Piece& piece : parts_.normalized_matcher.Split(*normalized)) {
        if (piece.id >= 0) {
          ids.push_back(piece.id);
          continue;
        }
        const bool at_input_start = raw.text.data() == text.data() && piece.text.data() == normalized->data();
        absl::StatusOr<std::vector<std::string>> words = parts_.pre_tokenizer.Split(piece.text, at_input_start);
        if (!words.ok()) return words.status();
        for (const std::string& word : *words) parts_.model.Tokenize(word, ids);
      }
    }
    if (add_special) {
      ids.insert(ids.end(), parts_.special_template.suffix.begin(), parts_.special_template.suffix.end());
    }
    return ids;
  }

  std::string TokenBytes(int32_t id) const override {
    const std::string* token = parts_.table.Find(id);
    return token == nullptr ? std::string() : parts_.decoder.PieceBytes(*token);
  }

  std::unique_ptr<DecodeSession> StartDecode(bool skip_special) const override {
    return parts_.decoder.Start(parts_.table, skip_special);
  }

  int32_t vocab_size() const override { return parts_.table.size(); }
  std::optional<int32_t> bos_id() const override { return parts_.bos; }
  std::vector<int32_t> eos_ids() const override { return parts_.eos; }
  bool IsSpecial(int32_t id) const override { return parts_.table.IsSpecial(id); }
  absl::Status SetExtraEos(std::span<const int32_t> ids) override {
    return AppendEosIds(ids, vocab_size(), parts_.eos);
  }
  std::string chat_template() const override { return parts_.chat_template; }

 private:
  HfParts parts_;
};

// A token's id by content: added tokens first (they take precedence in HF), then the vocabulary.
std::optional<int32_t> FindToken(const HfParts& parts, const std::string& content) {
  for (const AddedToken& token : parts.added) {
    if (token.content == content) return token.id;
  }
  return parts.model.Find(content);
}

// tokenizer_config.json's BOS/EOS, and its add_bos_token / add_eos_token, which (as transformers
// does) replace the post-processor's choice for that end of the sequence.
absl::Status ApplyConfig(const TokenizerConfig& config, const std::string& config_where, HfParts& parts) {
  auto resolve = [&](const char* name,
                     const std::optional<std::string>& content) -> absl::StatusOr<std::optional<int32_t>> {
    if (!content) return std::nullopt;
    std::optional<int32_t> id = FindToken(parts, *content);
    if (!id) return JsonError(config_where, absl::StrCat(name, " \"", *content, "\" is not in tokenizer.json"));
    return id;
  };
  absl::StatusOr<std::optional<int32_t>> bos = resolve("bos_token", config.bos_token);
  if (!bos.ok()) return bos.status();
  absl::StatusOr<std::optional<int32_t>> eos = resolve("eos_token", config.eos_token);
  if (!eos.ok()) return eos.status();
  parts.bos = *bos;
  if (*eos) parts.eos = {**eos};
  if (config.add_bos_token.has_value()) {
    if (*config.add_bos_token && !parts.bos) {
      return JsonError(config_where, "add_bos_token is true but there is no bos_token");
    }
    parts.special_template.prefix.clear();
    if (*config.add_bos_token) parts.special_template.prefix.push_back(*parts.bos);
  }
  if (config.add_eos_token.has_value()) {
    if (*config.add_eos_token && parts.eos.empty()) {
      return JsonError(config_where, "add_eos_token is true but there is no eos_token");
    }
    parts.special_template.suffix.clear();
    if (*config.add_eos_token) parts.special_template.suffix.push_back(parts.eos.front());
  }
  parts.chat_template = config.chat_template;
  return absl::OkStatus();
}

absl::StatusOr<HfParts> ParseTokenizerJson(const nlohmann::json& json, const std::string& where) {
  if (!json.is_object()) return JsonError(where, "expected a JSON object");
  auto field = [&](const char* key) -> const nlohmann::json& {
    static const nlohmann::json kNull;
    auto it = json.find(key);
    return it == json.end() ? kNull : *it;
  };
  auto where_of = [&](const char* key) { return absl::StrCat(where, ": ", key); };
  if (field("model").is_null()) return JsonError(where, "missing \"model\"");
  absl::StatusOr<BpeModel> model = BpeModel::FromJson(field("model"), where_of("model"));
  if (!model.ok()) return model.status();
  absl::StatusOr<std::vector<AddedToken>> added = ParseAddedTokens(field("added_tokens"), where_of("added_tokens"));
  if (!added.ok()) return added.status();
  absl::StatusOr<Normalizer> normalizer = Normalizer::FromJson(field("normalizer"), where_of("normalizer"));
  if (!normalizer.ok()) return normalizer.status();
  absl::StatusOr<PreTokenizer> pre_tokenizer =
      PreTokenizer::FromJson(field("pre_tokenizer"), where_of("pre_tokenizer"));
  if (!pre_tokenizer.ok()) return pre_tokenizer.status();
  if (pre_tokenizer->byte_level()) {
    // A byte without its symbol would be dropped from the text without a word (as HF does).
    for (int b = 0; b < 256; ++b) {
      std::string symbol;
      AppendByteLevel(std::string(1, static_cast<char>(b)), symbol);
      if (!model->Find(symbol)) {
        return JsonError(where_of("model"), absl::StrCat("the byte-level vocabulary has no symbol for byte ",
                                                         absl::Hex(b, absl::kZeroPad2), " (\"", symbol,
                                                         "\"): text holding that byte could not be encoded"));
      }
    }
  }
  absl::StatusOr<HfDecoder> decoder = HfDecoder::FromJson(field("decoder"), where_of("decoder"));
  if (!decoder.ok()) return decoder.status();
  absl::StatusOr<SpecialTokenTemplate> special_template =
      ParsePostProcessor(field("post_processor"), where_of("post_processor"));
  if (!special_template.ok()) return special_template.status();

  // As in HF, a "normalized" token is looked for in its normalized spelling.
  std::vector<AddedToken> raw, normalized;
  for (const AddedToken& token : *added) {
    if (!token.normalized) {
      raw.push_back(token);
      continue;
    }
    absl::StatusOr<std::string> content = normalizer->Apply(token.content);
    if (!content.ok()) return JsonError(where_of("normalizer"), std::string(content.status().message()));
    normalized.push_back(token);
    normalized.back().content = *std::move(content);
  }
  HfParts parts{.model = *std::move(model),
                .added = *std::move(added),
                .raw_matcher = AddedTokenMatcher(raw),
                .normalized_matcher = AddedTokenMatcher(normalized),
                .normalizer = *std::move(normalizer),
                .pre_tokenizer = *std::move(pre_tokenizer),
                .decoder = *std::move(decoder),
                .special_template = *std::move(special_template)};
  for (auto [token, id] : parts.model.Entries()) parts.table.Set(id, std::string(token), false);
  for (const AddedToken& token : parts.added) parts.table.Set(token.id, token.content, token.special);
  return parts;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> LoadHfTokenizer(const std::filesystem::path& model_dir) {
  return LoadHfTokenizerFile(model_dir / "tokenizer.json");
}

absl::StatusOr<std::unique_ptr<Tokenizer>> LoadHfTokenizerFile(const std::filesystem::path& path) {
  const std::filesystem::path model_dir = path.parent_path();
  const std::string where = path.string();
  absl::StatusOr<nlohmann::json> json = formats::ReadJsonFile(path);
  if (!json.ok()) return json.status();
  absl::StatusOr<TokenizerConfig> config = ReadTokenizerConfig(model_dir);
  if (!config.ok()) return config.status();
  // The parsers check what they read; this catch only keeps an overlooked nlohmann exception
  // from escaping.
  try {
    absl::StatusOr<HfParts> parts = ParseTokenizerJson(*json, where);
    if (!parts.ok()) return parts.status();
    const std::string config_where = (model_dir / "tokenizer_config.json").string();
    if (absl::Status status = ApplyConfig(*config, config_where, *parts); !status.ok()) return status;
    return std::make_unique<HfTokenizer>(*std::move(parts));
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": malformed: ", e.what()));
  }
}

}  // namespace doppler::tokenizers
