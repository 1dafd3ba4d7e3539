#include "tokenizers/gguf_tokenizer.h"

#include <array>
#include <cstring>
#include <unordered_map>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "formats/json_file.h"
#include "formats/mapped_file.h"
#include "tokenizers/added_tokens.h"
#include "tokenizers/bpe_merge.h"
#include "tokenizers/bpe_model.h"
#include "tokenizers/byte_tokens.h"
#include "tokenizers/hf_decoder.h"
#include "tokenizers/json_fields.h"
#include "tokenizers/normalizer.h"
#include "tokenizers/pre_tokenizer.h"
#include "tokenizers/token_table.h"
#include "tokenizers/utf8.h"

namespace doppler::tokenizers {
namespace {

using nlohmann::json;

constexpr char kSpace[] = "\xE2\x96\x81";  // '▁', SentencePiece's spelling of a space

// The pre-tokenizer regexes GGUF's tokenizer.ggml.pre stands for (as the HF tokenizer.json files
// of those models spell them).
constexpr char kLlama3Regex[] =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr char kQwen2Regex[] =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

std::string ReplaceAll(std::string_view text, std::string_view from, std::string_view to) {
  std::string out;
  size_t done = 0;
  for (size_t at = text.find(from); at != std::string_view::npos; at = text.find(from, done)) {
    out.append(text.substr(done, at - done));
    out.append(to);
    done = at + from.size();
  }
  out.append(text.substr(done));
  return out;
}

// tokenizer.json's pre_tokenizer for a tokenizer.ggml.pre value, and whether that tokenizer
// NFC-normalizes and ignores merges for whole-vocabulary words.
struct PreSpec {
  json pre_tokenizer;
  bool nfc = false;
  bool ignore_merges = false;
};

absl::StatusOr<PreSpec> PreSpecFor(const std::string& pre, const std::string& where) {
  auto split_then_bytes = [](const char* regex) {
    return json{{"type", "Sequence"},
                {"pretokenizers",
                 {{{"type", "Split"}, {"pattern", {{"Regex", regex}}}, {"behavior", "Isolated"}, {"invert", false}},
                  {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}};
  };
  if (pre.empty() || pre == "default" || pre == "gpt-2" || pre == "gpt2") {
    return PreSpec{json{{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}, false, false};
  }
  if (pre == "llama-bpe" || pre == "llama3" || pre == "llama-v3") return PreSpec{split_then_bytes(kLlama3Regex), false, true};
  if (pre == "qwen2") return PreSpec{split_then_bytes(kQwen2Regex), true, false};
  return absl::UnimplementedError(absl::StrCat(where, ": tokenizer.ggml.pre '", pre,
                                               "' is not supported (default, llama-bpe, qwen2)"));
}

class GgufTokenizer final : public Tokenizer {
 public:
  struct Parts {
    bool spm = false;
    std::vector<std::string> tokens;
    std::vector<float> scores;
    // SentencePiece kind: piece -> id (the first id of a repeated piece), byte tokens.
    std::unordered_map<std::string, int32_t> lookup;
    std::array<int32_t, 256> byte_ids{};
    std::optional<int32_t> unk;
    bool add_space_prefix = true;
    // Byte-level kind.
    BpeModel bpe;
    Normalizer normalizer;
    PreTokenizer pre_tokenizer;
    // Both.
    std::optional<AddedTokenMatcher> added;
    HfDecoder decoder;
    TokenTable table;
    std::optional<int32_t> bos;
    std::vector<int32_t> eos;
    bool add_bos = false, add_eos = false;
    std::string chat_template;
  };

  explicit GgufTokenizer(Parts parts) : p_(std::move(parts)) {}

  absl::StatusOr<std::vector<int32_t>> Encode(std::string_view text, bool add_special) const override {
    if (!IsValidUtf8(text)) return absl::InvalidArgumentError("text to encode is not valid UTF-8");
    std::vector<int32_t> ids;
    if (add_special && p_.add_bos && p_.bos) ids.push_back(*p_.bos);
    bool after_special = true;  // SentencePiece: a space goes before the text and after special tokens
    for (const AddedTokenMatcher::Piece& piece : p_.added->Split(text)) {
      if (piece.id >= 0) {
        ids.push_back(piece.id);
        after_special = true;
        continue;
      }
      if (p_.spm) {
        std::string escaped = p_.add_space_prefix && after_special ? std::string(kSpace) : std::string();
        escaped += ReplaceAll(piece.text, " ", kSpace);
        EncodeSentencePiece(escaped, ids);
      } else {
        absl::StatusOr<std::string> normalized = p_.normalizer.Apply(piece.text);
        if (!normalized.ok()) return normalized.status();
        absl::StatusOr<std::vector<std::string>> words =
            p_.pre_tokenizer.Split(*normalized, piece.text.data() == text.data());
        if (!words.ok()) return words.status();
        for (const std::string& word : *words) p_.bpe.Tokenize(word, ids);
      }
      after_special = false;
    }
    if (add_special && p_.add_eos && !p_.eos.empty()) ids.push_back(p_.eos.front());
    return ids;
  }

  std::string TokenBytes(int32_t id) const override {
    const std::string* token = p_.table.Find(id);
    return token == nullptr ? std::string() : p_.decoder.PieceBytes(*token);
  }

  std::unique_ptr<DecodeSession> StartDecode(bool skip_special) const override {
    return p_.decoder.Start(p_.table, skip_special);
  }

  int32_t vocab_size() const override { return p_.table.size(); }
  std::optional<int32_t> bos_id() const override { return p_.bos; }
  std::vector<int32_t> eos_ids() const override { return p_.eos; }
  bool IsSpecial(int32_t id) const override { return p_.table.IsSpecial(id); }
  absl::Status SetExtraEos(std::span<const int32_t> ids) override { return AppendEosIds(ids, vocab_size(), p_.eos); }
  std::string chat_template() const override { return p_.chat_template; }

 private:
  // One symbol per character (its bytes' <0xNN> tokens when it is not in the vocabulary, else
  // <unk>), then merges by score.
  void EncodeSentencePiece(std::string_view text, std::vector<int32_t>& ids) const {
    std::vector<int32_t> symbols;
    for (size_t pos = 0; pos < text.size();) {
      const size_t start = pos;
      if (!NextCodePoint(text, pos)) pos = start + 1;
      const std::string character(text.substr(start, pos - start));
      if (auto it = p_.lookup.find(character); it != p_.lookup.end()) {
        symbols.push_back(it->second);
        continue;
      }
      bool bytes = true;
      for (char c : character) bytes = bytes && p_.byte_ids[static_cast<unsigned char>(c)] >= 0;
      if (bytes) {
        for (char c : character) symbols.push_back(p_.byte_ids[static_cast<unsigned char>(c)]);
      } else if (p_.unk) {
        symbols.push_back(*p_.unk);
      }
    }
    MergeSymbols(symbols, [this](int32_t left, int32_t right) -> std::optional<MergeStep> {
      auto it = p_.lookup.find(p_.tokens[left] + p_.tokens[right]);
      if (it == p_.lookup.end()) return std::nullopt;
      return MergeStep{-static_cast<double>(p_.scores[it->second]), it->second};  // highest score first
    });
    ids.insert(ids.end(), symbols.begin(), symbols.end());
  }

  Parts p_;
};

absl::Status Bad(const std::string& where, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(where, ": ", what));
}

// Optional metadata: absent -> nullopt; present with the wrong type -> error.
template <typename T, typename Get>
absl::Status Optional(const formats::GgufFile& f, const char* key, Get get, std::optional<T>& out) {
  if (f.Find(key) == nullptr) return absl::OkStatus();
  auto v = get(key);
  if (!v.ok()) return v.status();
  out = static_cast<T>(*v);
  return absl::OkStatus();
}

}  // namespace

bool GgufHasTokenizer(const formats::GgufFile& file) { return file.Find("tokenizer.ggml.model") != nullptr; }

absl::StatusOr<GgufTokenizerData> ReadGgufTokenizerData(const formats::GgufFile& f) {
  GgufTokenizerData d;
  absl::StatusOr<std::string> model = f.GetString("tokenizer.ggml.model");
  if (!model.ok()) return model.status();
  d.model = *model;
  absl::StatusOr<std::vector<std::string>> tokens = f.GetStringArray("tokenizer.ggml.tokens");
  if (!tokens.ok()) return tokens.status();
  d.tokens = *std::move(tokens);
  if (f.Find("tokenizer.ggml.scores") != nullptr) {
    absl::StatusOr<std::vector<double>> scores = f.GetFloatArray("tokenizer.ggml.scores");
    if (!scores.ok()) return scores.status();
    d.scores.assign(scores->begin(), scores->end());
  }
  if (f.Find("tokenizer.ggml.token_type") != nullptr) {
    absl::StatusOr<std::vector<int64_t>> types = f.GetIntArray("tokenizer.ggml.token_type");
    if (!types.ok()) return types.status();
    for (int64_t t : *types) d.token_types.push_back(static_cast<int32_t>(std::clamp<int64_t>(t, -1, 1000)));
  }
  if (f.Find("tokenizer.ggml.merges") != nullptr) {
    absl::StatusOr<std::vector<std::string>> merges = f.GetStringArray("tokenizer.ggml.merges");
    if (!merges.ok()) return merges.status();
    d.merges = *std::move(merges);
  }
  if (f.Find("tokenizer.ggml.pre") != nullptr) {
    absl::StatusOr<std::string> pre = f.GetString("tokenizer.ggml.pre");
    if (!pre.ok()) return pre.status();
    d.pre = *pre;
  }
  auto get_int = [&](const char* key) { return f.GetInt(key); };
  auto get_bool = [&](const char* key) { return f.GetBool(key); };
  for (auto [key, out] : {std::pair{"tokenizer.ggml.bos_token_id", &d.bos}, std::pair{"tokenizer.ggml.eos_token_id", &d.eos},
                          std::pair{"tokenizer.ggml.unknown_token_id", &d.unk},
                          std::pair{"tokenizer.ggml.padding_token_id", &d.pad},
                          std::pair{"tokenizer.ggml.eot_token_id", &d.eot}}) {
    if (absl::Status s = Optional<int32_t>(f, key, get_int, *out); !s.ok()) return s;
  }
  for (auto [key, out] : {std::pair{"tokenizer.ggml.add_bos_token", &d.add_bos},
                          std::pair{"tokenizer.ggml.add_eos_token", &d.add_eos},
                          std::pair{"tokenizer.ggml.add_space_prefix", &d.add_space_prefix}}) {
    if (absl::Status s = Optional<bool>(f, key, get_bool, *out); !s.ok()) return s;
  }
  if (f.Find("tokenizer.chat_template") != nullptr) {
    absl::StatusOr<std::string> t = f.GetString("tokenizer.chat_template");
    if (!t.ok()) return t.status();
    d.chat_template = *t;
  }
  return d;
}

absl::StatusOr<std::unique_ptr<Tokenizer>> TokenizerFromGgufData(const GgufTokenizerData& d, const std::string& where) {
  const size_t n = d.tokens.size();
  if (n == 0) return Bad(where, "tokenizer.ggml.tokens is empty");
  if (n > static_cast<size_t>(kMaxTokenId) + 1) return Bad(where, absl::StrCat("tokenizer.ggml.tokens holds ", n, " tokens"));
  if (!d.scores.empty() && d.scores.size() != n) {
    return Bad(where, absl::StrCat("tokenizer.ggml.scores has ", d.scores.size(), " values for ", n, " tokens"));
  }
  if (!d.token_types.empty() && d.token_types.size() != n) {
    return Bad(where, absl::StrCat("tokenizer.ggml.token_type has ", d.token_types.size(), " values for ", n, " tokens"));
  }
  for (auto [key, id] : {std::pair{"bos_token_id", d.bos}, std::pair{"eos_token_id", d.eos},
                         std::pair{"unknown_token_id", d.unk}, std::pair{"padding_token_id", d.pad},
                         std::pair{"eot_token_id", d.eot}}) {
    if (id && (*id < 0 || static_cast<size_t>(*id) >= n)) {
      return Bad(where, absl::StrCat("tokenizer.ggml.", key, " ", *id, " is outside the ", n, " tokens"));
    }
  }
  auto type_of = [&](size_t id) { return d.token_types.empty() ? int32_t{kGgufTokenNormal} : d.token_types[id]; };

  GgufTokenizer::Parts p;
  p.tokens = d.tokens;
  p.bos = d.bos;
  if (d.eos) p.eos.push_back(*d.eos);
  if (d.eot && *d.eot != d.eos.value_or(-1)) p.eos.push_back(*d.eot);
  p.chat_template = d.chat_template;
  p.unk = d.unk;
  p.add_eos = d.add_eos.value_or(false);
  std::vector<AddedToken> added;
  for (size_t id = 0; id < n; ++id) {
    const int32_t type = type_of(id);
    p.table.Set(static_cast<int32_t>(id), d.tokens[id], type == kGgufTokenControl || type == kGgufTokenUnknown);
    if ((type == kGgufTokenControl || type == kGgufTokenUserDefined) && !d.tokens[id].empty()) {
      AddedToken t;
      t.id = static_cast<int32_t>(id);
      t.content = d.tokens[id];
      t.special = type == kGgufTokenControl;
      added.push_back(std::move(t));
    }
  }
  p.added.emplace(added);

  json decoder;
  if (d.model == "llama") {
    p.spm = true;
    p.add_bos = d.add_bos.value_or(true);
    p.add_space_prefix = d.add_space_prefix.value_or(true);
    p.scores = d.scores.empty() ? std::vector<float>(n, 0.0f) : d.scores;
    p.byte_ids.fill(-1);
    for (size_t id = 0; id < n; ++id) {
      p.lookup.emplace(d.tokens[id], static_cast<int32_t>(id));
      if (std::optional<uint8_t> byte = ParseByteToken(d.tokens[id]); byte && p.byte_ids[*byte] < 0) {
        p.byte_ids[*byte] = static_cast<int32_t>(id);
      }
    }
    json steps = {{{"type", "Replace"}, {"pattern", {{"String", kSpace}}}, {"content", " "}},
                  {{"type", "ByteFallback"}},
                  {{"type", "Fuse"}}};
    if (p.add_space_prefix) steps.push_back({{"type", "Strip"}, {"content", " "}, {"start", 1u}, {"stop", 0u}});
    decoder = {{"type", "Sequence"}, {"decoders", steps}};
  } else if (d.model == "gpt2") {
    p.add_bos = d.add_bos.value_or(false);
    absl::StatusOr<PreSpec> pre = PreSpecFor(d.pre, where);
    if (!pre.ok()) return pre.status();
    json vocab = json::object();
    for (size_t id = 0; id < n; ++id) {
      if (!vocab.contains(d.tokens[id])) vocab[d.tokens[id]] = id;
    }
    json merges = json::array();
    for (const std::string& m : d.merges) merges.push_back(m);
    const json model = {{"type", "BPE"}, {"vocab", std::move(vocab)}, {"merges", std::move(merges)},
                        {"ignore_merges", pre->ignore_merges}};
    absl::StatusOr<BpeModel> bpe = BpeModel::FromJson(model, absl::StrCat(where, ": tokenizer.ggml.merges"));
    if (!bpe.ok()) return bpe.status();
    p.bpe = *std::move(bpe);
    absl::StatusOr<PreTokenizer> pre_tokenizer = PreTokenizer::FromJson(pre->pre_tokenizer, where);
    if (!pre_tokenizer.ok()) return pre_tokenizer.status();
    p.pre_tokenizer = *std::move(pre_tokenizer);
    absl::StatusOr<Normalizer> normalizer = Normalizer::FromJson(pre->nfc ? json{{"type", "NFC"}} : json(), where);
    if (!normalizer.ok()) return normalizer.status();
    p.normalizer = *std::move(normalizer);
    decoder = {{"type", "ByteLevel"}};
  } else {
    return absl::UnimplementedError(absl::StrCat(where, ": tokenizer.ggml.model '", d.model,
                                                 "' is not supported (llama, gpt2)"));
  }
  if (p.add_bos && !p.bos) return Bad(where, "tokenizer.ggml.add_bos_token is set but there is no bos_token_id");
  absl::StatusOr<HfDecoder> dec = HfDecoder::FromJson(decoder, where);
  if (!dec.ok()) return dec.status();
  p.decoder = *std::move(dec);
  return std::make_unique<GgufTokenizer>(std::move(p));
}

absl::StatusOr<std::unique_ptr<Tokenizer>> LoadGgufTokenizer(const formats::GgufFile& file) {
  absl::StatusOr<GgufTokenizerData> data = ReadGgufTokenizerData(file);
  if (!data.ok()) return data.status();
  return TokenizerFromGgufData(*data, file.path());
}

namespace {

// Pads the token list to the model's embedding rows with unused tokens.
void PadTokens(int64_t vocab_size, GgufTokenizerData& d) {
  for (int64_t id = static_cast<int64_t>(d.tokens.size()); id < vocab_size; ++id) {
    d.tokens.push_back(absl::StrCat("[PAD", id, "]"));
    d.token_types.push_back(kGgufTokenUnused);
    if (!d.scores.empty()) d.scores.push_back(0.0f);
  }
}

// Whether a pre_tokenizer / decoder spec is (or contains) a ByteLevel step; `regex` receives a
// Split step's regex, `gpt2_regex` whether a ByteLevel step applies GPT-2's own.
void Inspect(const json& spec, bool& byte_level, std::string& regex, bool& gpt2_regex) {
  if (!spec.is_object()) return;
  const std::string type = spec.value("type", "");
  if (type == "Sequence") {
    for (const char* key : {"pretokenizers", "decoders"}) {
      if (auto it = spec.find(key); it != spec.end() && it->is_array()) {
        for (const json& s : *it) Inspect(s, byte_level, regex, gpt2_regex);
      }
    }
  } else if (type == "ByteLevel") {
    byte_level = true;
    if (spec.value("use_regex", true)) gpt2_regex = true;
  } else if (type == "Split") {
    if (auto it = spec.find("pattern"); it != spec.end() && it->is_object() && it->contains("Regex") &&
                                        (*it)["Regex"].is_string()) {
      regex = (*it)["Regex"].get<std::string>();
    }
  }
}

}  // namespace

absl::StatusOr<GgufTokenizerData> GgufTokenizerDataFromHf(const std::filesystem::path& model_dir, int64_t vocab_size) {
  const std::filesystem::path path = model_dir / "tokenizer.json";
  const std::string where = path.string();
  absl::StatusOr<json> j = formats::ReadJsonFile(path);
  if (!j.ok()) return j.status();
  // The tokenizer itself says which ids it adds and which are BOS / EOS.
  absl::StatusOr<std::unique_ptr<Tokenizer>> tok = LoadHfTokenizer(model_dir);
  if (!tok.ok()) return tok.status();
  try {
    const json& model = j->at("model");
    bool byte_level = false, gpt2_regex = false;
    std::string regex;
    Inspect(j->value("pre_tokenizer", json()), byte_level, regex, gpt2_regex);
    if (model.value("type", "") != "BPE" || !byte_level) {
      return absl::UnimplementedError(absl::StrCat(where, ": only byte-level BPE tokenizers (Llama 3, Qwen, GPT-2) "
                                                   "can be stored in GGUF here"));
    }
    GgufTokenizerData d;
    d.model = "gpt2";
    if (regex == kLlama3Regex) {
      d.pre = "llama-bpe";
    } else if (regex == kQwen2Regex) {
      d.pre = "qwen2";
    } else if (regex.empty() && gpt2_regex) {
      d.pre = "default";
    } else {
      return absl::UnimplementedError(absl::StrCat(where, ": its pre-tokenizer regex has no GGUF name here "
                                                   "(known: Llama 3's, Qwen2's, GPT-2's)"));
    }
    std::vector<std::pair<int32_t, std::string>> entries;
    for (const auto& [token, id] : model.at("vocab").items()) entries.emplace_back(id.get<int32_t>(), token);
    std::vector<std::pair<int32_t, bool>> added;  // id, special
    for (const json& a : j->value("added_tokens", json::array())) {
      entries.emplace_back(a.at("id").get<int32_t>(), a.at("content").get<std::string>());
      added.emplace_back(a.at("id").get<int32_t>(), a.value("special", false));
    }
    int32_t size = 0;
    for (const auto& [id, token] : entries) {
      if (id < 0 || id > kMaxTokenId) return Bad(where, absl::StrCat("token id ", id, " is out of range"));
      size = std::max(size, id + 1);
    }
    d.tokens.assign(static_cast<size_t>(size), std::string());
    d.token_types.assign(static_cast<size_t>(size), kGgufTokenUnused);
    for (const auto& [id, token] : entries) {
      d.tokens[id] = token;
      d.token_types[id] = kGgufTokenNormal;
    }
    for (auto [id, special] : added) d.token_types[id] = special ? kGgufTokenControl : kGgufTokenUserDefined;
    for (int32_t id = 0; id < size; ++id) {
      if (d.token_types[id] == kGgufTokenUnused) d.tokens[id] = absl::StrCat("[PAD", id, "]");
    }
    for (const json& m : model.at("merges")) {
      if (m.is_string()) {
        d.merges.push_back(m.get<std::string>());
      } else {
        d.merges.push_back(absl::StrCat(m.at(0).get<std::string>(), " ", m.at(1).get<std::string>()));
      }
    }
    d.bos = (*tok)->bos_id();
    if (!(*tok)->eos_ids().empty()) d.eos = (*tok)->eos_ids().front();
    absl::StatusOr<std::vector<int32_t>> framing = (*tok)->Encode("", true);
    if (!framing.ok()) return framing.status();
    d.add_bos = !framing->empty() && d.bos && framing->front() == *d.bos;
    d.add_eos = !framing->empty() && d.eos && framing->back() == *d.eos;
    d.chat_template = (*tok)->chat_template();
    PadTokens(vocab_size, d);
    return d;
  } catch (const json::exception& e) {
    return Bad(where, absl::StrCat("malformed: ", e.what()));
  }
}

absl::StatusOr<GgufTokenizerData> GgufTokenizerDataFromLlama2c(const std::filesystem::path& file, int64_t vocab_size) {
  // Checked by the tokenizer's own loader first (sizes, byte tokens).
  absl::StatusOr<std::unique_ptr<Tokenizer>> tok = LoadLlama2cTokenizer(file);
  if (!tok.ok()) return tok.status();
  absl::StatusOr<formats::MappedFile> mapped = formats::MappedFile::Open(file);
  if (!mapped.ok()) return mapped.status();
  GgufTokenizerData d;
  d.model = "llama";
  d.pre = "default";
  const uint8_t* data = mapped->data();
  for (size_t offset = 4; offset + 8 <= mapped->size();) {
    float score;
    uint32_t length;
    std::memcpy(&score, data + offset, 4);
    std::memcpy(&length, data + offset + 4, 4);
    offset += 8;
    if (length > mapped->size() - offset) break;  // cannot happen: the loader checked
    std::string piece(reinterpret_cast<const char*>(data + offset), length);
    offset += length;
    const size_t id = d.tokens.size();
    // llama2.c spells BOS / EOS "\n<s>\n" and "\n</s>\n"; GGUF (SentencePiece) "<s>" and "</s>".
    if (id > 0 && id < 3) piece = std::string(absl::StripAsciiWhitespace(piece));
    d.tokens.push_back(ReplaceAll(piece, " ", kSpace));
    d.scores.push_back(score);
    d.token_types.push_back(id == 0 ? kGgufTokenUnknown
                            : id < 3 ? kGgufTokenControl
                            : id < 3 + 256 ? kGgufTokenByte
                                           : kGgufTokenNormal);
  }
  d.unk = 0;
  d.bos = 1;
  d.eos = 2;
  d.add_bos = true;
  d.add_eos = false;
  PadTokens(vocab_size, d);
  return d;
}

}  // namespace doppler::tokenizers
