// llama2.c's tokenizer.bin: encoding and printing exactly as its run.c does.
//
// Layout (little-endian): uint32 max_token_length, then per id until the end of the file:
// float32 score, uint32 byte length, the bytes. Ids 0, 1, 2 are <unk>, BOS, EOS; ids 3..258 are
// the byte tokens <0x00>..<0xFF>; pieces spell SentencePiece's '▁' as a plain space.
#include <cstring>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "formats/mapped_file.h"
#include "tokenizers/bpe_merge.h"
#include "tokenizers/byte_tokens.h"
#include "tokenizers/tokenizer.h"
#include "tokenizers/utf8.h"

namespace doppler::tokenizers {
namespace {

constexpr int32_t kBos = 1;
constexpr int32_t kEos = 2;
constexpr int32_t kFirstByteToken = 3;
constexpr int32_t kMinVocab = kFirstByteToken + 256;

// run.c prints a piece that is a single byte only when it is printable or whitespace (C locale).
bool PrintedAlone(unsigned char byte) { return (byte >= 0x20 && byte < 0x7F) || (byte >= 0x09 && byte <= 0x0D); }

class Llama2cTokenizer final : public Tokenizer {
 public:
  Llama2cTokenizer(std::vector<std::string> pieces, std::vector<float> scores)
      : pieces_(std::move(pieces)), scores_(std::move(scores)) {
    // One id per piece; for a repeated piece (which run.c's binary search would pick arbitrarily) the first.
    for (int32_t id = 0; id < static_cast<int32_t>(pieces_.size()); ++id) lookup_.emplace(pieces_[id], id);
  }

  absl::StatusOr<std::vector<int32_t>> Encode(std::string_view text, bool add_special) const override {
    if (!IsValidUtf8(text)) return absl::InvalidArgumentError("text to encode is not valid UTF-8");
    std::vector<int32_t> ids;
    if (add_special) ids.push_back(kBos);
    if (text.empty()) return ids;
    // SentencePiece's dummy prefix: the text is encoded as if it started with a space.
    std::vector<int32_t> symbols;
    AppendSymbols(" ", symbols);
    for (size_t pos = 0; pos < text.size();) {
      const size_t start = pos;
      NextCodePoint(text, pos);
      AppendSymbols(text.substr(start, pos - start), symbols);
    }
    MergeSymbols(symbols, [this](int32_t left, int32_t right) -> std::optional<MergeStep> {
      auto it = lookup_.find(pieces_[left] + pieces_[right]);
      if (it == lookup_.end()) return std::nullopt;
      return MergeStep{-static_cast<double>(scores_[it->second]), it->second};  // highest score first
    });
    ids.insert(ids.end(), symbols.begin(), symbols.end());
    return ids;
  }

  std::string TokenBytes(int32_t id) const override {
    if (id < 0 || id >= vocab_size()) return {};
    if (std::optional<uint8_t> byte = ParseByteToken(pieces_[id])) return std::string(1, static_cast<char>(*byte));
    return pieces_[id];
  }

  std::unique_ptr<DecodeSession> StartDecode(bool skip_special) const override {
    return std::make_unique<Session>(*this, skip_special);
  }

  int32_t vocab_size() const override { return static_cast<int32_t>(pieces_.size()); }
  std::optional<int32_t> bos_id() const override { return kBos; }
  std::vector<int32_t> eos_ids() const override { return eos_; }
  bool IsSpecial(int32_t id) const override { return id >= 0 && id < kFirstByteToken; }

  absl::Status SetExtraEos(std::span<const int32_t> ids) override { return AppendEosIds(ids, vocab_size(), eos_); }

 private:
  // run.c's decode + safe_printf: after BOS a piece drops its leading space, byte tokens become
  // their byte, and a lone byte that is neither printable nor whitespace is not printed.
  class Session final : public DecodeSession {
   public:
    Session(const Llama2cTokenizer& tokenizer, bool skip_special)
        : tokenizer_(tokenizer), skip_special_(skip_special) {}

    void Push(int32_t id, std::string& out) override {
      const int32_t prev = prev_;
      prev_ = id;
      if (id < 0 || id >= tokenizer_.vocab_size() || (skip_special_ && tokenizer_.IsSpecial(id))) return;
      std::string piece = tokenizer_.TokenBytes(id);
      if (prev == kBos && !piece.empty() && piece[0] == ' ') piece.erase(0, 1);
      piece.resize(std::strlen(piece.c_str()));  // printf("%s") stops at a NUL byte
      if (piece.size() == 1 && !PrintedAlone(static_cast<unsigned char>(piece[0]))) return;
      out += piece;
    }
    void Finish(std::string&) override {}

   private:
    const Llama2cTokenizer& tokenizer_;
    bool skip_special_;
    int32_t prev_ = -1;
  };

  // A character's id, or its bytes' fallback ids when the vocabulary lacks it.
  void AppendSymbols(std::string_view character, std::vector<int32_t>& symbols) const {
    if (auto it = lookup_.find(std::string(character)); it != lookup_.end()) {
      symbols.push_back(it->second);
      return;
    }
    for (char c : character) symbols.push_back(kFirstByteToken + static_cast<unsigned char>(c));
  }

  std::vector<std::string> pieces_;
  std::vector<float> scores_;
  std::unordered_map<std::string, int32_t> lookup_;
  std::vector<int32_t> eos_ = {kEos};
};

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> LoadLlama2cTokenizer(const std::filesystem::path& file) {
  absl::StatusOr<formats::MappedFile> mapped = formats::MappedFile::Open(file);
  if (!mapped.ok()) return mapped.status();
  const std::string name = file.string();
  const uint8_t* data = mapped->data();
  const size_t size = mapped->size();
  auto read_u32 = [&](size_t offset) {
    uint32_t value;
    std::memcpy(&value, data + offset, sizeof(value));
    return value;
  };
  if (size < 4) return absl::InvalidArgumentError(absl::StrCat(name, ": too short for a llama2.c tokenizer"));
  std::vector<std::string> pieces;
  std::vector<float> scores;
  for (size_t offset = 4; offset < size;) {
    if (size - offset < 8) {
      return absl::InvalidArgumentError(absl::StrCat(name, ": truncated entry for id ", pieces.size()));
    }
    float score;
    std::memcpy(&score, data + offset, sizeof(score));
    const uint32_t length = read_u32(offset + 4);
    offset += 8;
    if (length > size - offset) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, ": id ", pieces.size(), " claims ", length, " bytes, only ", size - offset, " remain"));
    }
    pieces.emplace_back(reinterpret_cast<const char*>(data + offset), length);
    scores.push_back(score);
    offset += length;
  }
  if (pieces.size() < static_cast<size_t>(kMinVocab)) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": ", pieces.size(), " tokens; llama2.c needs at least ",
                                                   kMinVocab, " (<unk>, BOS, EOS and the 256 byte tokens)"));
  }
  for (int b = 0; b < 256; ++b) {
    if (ParseByteToken(pieces[kFirstByteToken + b]) != b) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, ": id ", kFirstByteToken + b, " should be the byte token ", ByteTokenName(b)));
    }
  }
  return std::make_unique<Llama2cTokenizer>(std::move(pieces), std::move(scores));
}

}  // namespace doppler::tokenizers
