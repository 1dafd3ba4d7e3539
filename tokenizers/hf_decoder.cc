#include "tokenizers/hf_decoder.h"

#include "absl/strings/str_cat.h"
#include "tokenizers/byte_level.h"
#include "tokenizers/byte_tokens.h"
#include "tokenizers/json_fields.h"
#include "tokenizers/utf8.h"

namespace doppler::tokenizers {
namespace {

constexpr char kReplacementCharacter[] = "\xEF\xBF\xBD";  // U+FFFD

absl::StatusOr<size_t> CountField(const nlohmann::json& spec, const char* key, const std::string& where) {
  auto it = spec.find(key);
  if (it == spec.end() || !it->is_number_unsigned()) {
    return JsonError(where, absl::StrCat("\"", key, "\" must be a non-negative integer"));
  }
  return it->get<size_t>();
}

}  // namespace

class HfDecoder::Session final : public DecodeSession {
 public:
  Session(const HfDecoder& decoder, const TokenTable& table, bool skip_special)
      : decoder_(decoder), table_(table), skip_special_(skip_special), strip_left_(decoder.strip_count_) {}

  void Push(int32_t id, std::string& out) override {
    const std::string* token = table_.Find(id);
    if (token == nullptr || (skip_special_ && table_.IsSpecial(id))) return;
    const bool first = !started_;
    started_ = true;
    switch (decoder_.kind_) {
      case Kind::kJoinWithSpaces:
        if (!first) out += ' ';
        out += *token;
        return;
      case Kind::kByteLevel:
        utf8_.Feed(decoder_.PieceBytes(*token), out);
        return;
      case Kind::kPieces: {
        const std::string piece = decoder_.Substitute(*token, first);
        if (decoder_.byte_fallback_) {
          if (std::optional<uint8_t> byte = ParseByteToken(piece)) {
            run_ += static_cast<char>(*byte);
            return;
          }
        }
        FlushRun(out);
        Emit(piece, out);
        return;
      }
    }
  }

  void Finish(std::string& out) override {
    FlushRun(out);
    utf8_.Finish(out);
  }

 private:
  // HF's ByteFallback: a run of byte tokens is its text when valid UTF-8, else one U+FFFD per byte.
  void FlushRun(std::string& out) {
    if (run_.empty()) return;
    if (IsValidUtf8(run_)) {
      Emit(run_, out);
    } else {
      std::string replaced;
      for (size_t i = 0; i < run_.size(); ++i) replaced += kReplacementCharacter;
      Emit(replaced, out);
    }
    run_.clear();
  }

  // Strip (after Fuse) removes characters from the start of the whole text.
  void Emit(std::string_view text, std::string& out) {
    while (strip_left_ > 0 && !decoder_.strip_.empty() && text.starts_with(decoder_.strip_)) {
      text.remove_prefix(decoder_.strip_.size());
      --strip_left_;
    }
    if (!text.empty()) strip_left_ = 0;
    out += text;
  }

  const HfDecoder& decoder_;
  const TokenTable& table_;
  const bool skip_special_;
  bool started_ = false;
  size_t strip_left_;
  std::string run_;  // pending byte-fallback bytes
  Utf8Sanitizer utf8_;
};

absl::StatusOr<HfDecoder> HfDecoder::FromJson(const nlohmann::json& spec, const std::string& where) {
  HfDecoder decoder;
  if (absl::Status status = decoder.Add(spec, where); !status.ok()) return status;
  return decoder;
}

absl::Status HfDecoder::Add(const nlohmann::json& spec, const std::string& where) {
  if (spec.is_null()) return absl::OkStatus();
  absl::StatusOr<std::string> type = StringField(spec, "type", where);
  if (!type.ok()) return type.status();
  if (*type == "Sequence") {
    const auto it = spec.find("decoders");
    if (it == spec.end() || !it->is_array()) return JsonError(where, "Sequence needs a \"decoders\" array");
    for (size_t i = 0; i < it->size(); ++i) {
      if (absl::Status status = Add((*it)[i], absl::StrCat(where, ".decoders[", i, "]")); !status.ok()) return status;
    }
    return absl::OkStatus();
  }
  if (kind_ == Kind::kByteLevel) return JsonError(where, "ByteLevel cannot be combined with other decoders");
  if (*type == "ByteLevel") {
    if (kind_ != Kind::kJoinWithSpaces) {
      return JsonError(where, "ByteLevel cannot be combined with other decoders");
    }
    kind_ = Kind::kByteLevel;
    return absl::OkStatus();
  }
  kind_ = Kind::kPieces;
  if (*type == "Replace" || *type == "Metaspace") {
    if (byte_fallback_ || fused_ || strip_count_ > 0) {
      return JsonError(where, absl::StrCat(*type, " after ByteFallback, Fuse or Strip is not supported"));
    }
    Substitution substitution;
    if (*type == "Replace") {
      const nlohmann::json* pattern = spec.contains("pattern") ? &spec.at("pattern") : nullptr;
      if (pattern == nullptr || !pattern->contains("String")) {
        return JsonError(where, "Replace decoders need {\"pattern\": {\"String\": ...}}");
      }
      absl::StatusOr<std::string> from = StringField(*pattern, "String", where);
      if (!from.ok()) return from.status();
      absl::StatusOr<std::string> to = StringField(spec, "content", where);
      if (!to.ok()) return to.status();
      substitution = {*from, *to, *to};
    } else {
      absl::StatusOr<std::string> replacement = StringField(spec, "replacement", where);
      if (!replacement.ok()) return replacement.status();
      bool strips_first = true;
      if (spec.contains("prepend_scheme")) {
        absl::StatusOr<std::string> scheme = StringField(spec, "prepend_scheme", where);
        if (!scheme.ok()) return scheme.status();
        strips_first = *scheme != "never";
      } else {
        absl::StatusOr<bool> add_prefix_space = BoolField(spec, "add_prefix_space", true, where);
        if (!add_prefix_space.ok()) return add_prefix_space.status();
        strips_first = *add_prefix_space;
      }
      substitution = {*replacement, " ", strips_first ? "" : " "};
    }
    if (substitution.from.empty()) return JsonError(where, "empty pattern");
    substitutions_.push_back(std::move(substitution));
    return absl::OkStatus();
  }
  if (*type == "ByteFallback") {
    if (fused_ || strip_count_ > 0) return JsonError(where, "ByteFallback after Fuse or Strip is not supported");
    byte_fallback_ = true;
    return absl::OkStatus();
  }
  if (*type == "Fuse") {
    if (strip_count_ > 0) return JsonError(where, "Fuse after Strip is not supported");
    fused_ = true;
    return absl::OkStatus();
  }
  if (*type == "Strip") {
    if (!fused_) return JsonError(where, "Strip is supported only after Fuse (it would strip every token)");
    absl::StatusOr<std::string> content = StringField(spec, "content", where);
    if (!content.ok()) return content.status();
    absl::StatusOr<size_t> start = CountField(spec, "start", where);
    if (!start.ok()) return start.status();
    absl::StatusOr<size_t> stop = CountField(spec, "stop", where);
    if (!stop.ok()) return stop.status();
    if (*stop != 0) return JsonError(where, "Strip from the end of the text is not supported");
    strip_ = *std::move(content);
    strip_count_ = *start;
    return absl::OkStatus();
  }
  return JsonError(where, absl::StrCat("unsupported decoder type \"", *type, "\""));
}

std::string HfDecoder::Substitute(std::string_view token, bool first) const {
  std::string text(token);
  for (const Substitution& s : substitutions_) {
    std::string replaced;
    size_t done = 0;
    for (size_t at = text.find(s.from); at != std::string::npos; at = text.find(s.from, done)) {
      replaced.append(text, done, at - done);
      replaced += first ? s.first_to : s.to;
      done = at + s.from.size();
    }
    replaced.append(text, done);
    text = std::move(replaced);
  }
  return text;
}

std::string HfDecoder::PieceBytes(std::string_view token) const {
  switch (kind_) {
    case Kind::kJoinWithSpaces:
      return std::string(token);
    case Kind::kByteLevel: {
      // A token outside the byte-level alphabet (an added token, say) stands for its own bytes.
      std::string bytes;
      if (!AppendBytesFromByteLevel(token, bytes)) bytes = token;
      return bytes;
    }
    case Kind::kPieces: {
      std::string piece = Substitute(token, false);
      if (byte_fallback_) {
        if (std::optional<uint8_t> byte = ParseByteToken(piece)) return std::string(1, static_cast<char>(*byte));
      }
      return piece;
    }
  }
  return std::string(token);
}

std::unique_ptr<DecodeSession> HfDecoder::Start(const TokenTable& table, bool skip_special) const {
  return std::make_unique<Session>(*this, table, skip_special);
}

}  // namespace doppler::tokenizers
