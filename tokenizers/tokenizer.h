// Text <-> token ids for every model family doppler runs: HF tokenizer.json (byte-level BPE as in
// Llama 3 / Qwen, SentencePiece-style BPE as in Llama 2 / TinyLlama / Gemma) and llama2.c's
// tokenizer.bin.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace doppler::tokenizers {

// One decode in progress. Tokenizer::Decode and StreamDecoder both run one, so the streamed text
// and the whole-sequence text cannot disagree.
class DecodeSession {
 public:
  virtual ~DecodeSession() = default;
  // Appends to `out` the text that is final once `id` is known. Bytes that later ids may still
  // change (an unfinished UTF-8 character, a run of byte-fallback tokens) are held back.
  virtual void Push(int32_t id, std::string& out) = 0;
  // Appends whatever was held back; the session is finished afterwards.
  virtual void Finish(std::string& out) = 0;
};

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // Text to ids. add_special: add what the tokenizer itself adds for add_special_tokens=True
  // (tokenizer.json's post-processor, or tokenizer_config.json's add_bos_token / add_eos_token
  // where they are set). Note that a model may want a BOS its tokenizer does not add (the Llama 3
  // fixture's post-processor adds none): that choice belongs to the caller, with bos_id().
  // InvalidArgument when `text` is not valid UTF-8.
  virtual absl::StatusOr<std::vector<int32_t>> Encode(std::string_view text, bool add_special) const = 0;

  // The bytes of one token's piece as it appears in decoded text (after the byte-level / '▁' /
  // byte-fallback mapping; a byte-fallback token gives its single byte); special tokens give their
  // content. Empty for an id outside the vocabulary.
  virtual std::string TokenBytes(int32_t id) const = 0;

  // Whole-sequence decode, exactly as HF's decode() returns it (run.c's printing for llama2.c).
  // Ids outside the vocabulary are skipped.
  virtual std::string Decode(std::span<const int32_t> ids, bool skip_special) const;

  // The incremental form of Decode.
  virtual std::unique_ptr<DecodeSession> StartDecode(bool skip_special) const = 0;

  // One past the largest id (tokenizer.json's added tokens included).
  virtual int32_t vocab_size() const = 0;
  virtual std::optional<int32_t> bos_id() const = 0;
  // Every id that ends generation: the tokenizer's own EOS, then those given to SetExtraEos.
  virtual std::vector<int32_t> eos_ids() const = 0;
  virtual bool IsSpecial(int32_t id) const = 0;

  // More ids that end generation, e.g. generation_config.json's eos_token_id list. Duplicates are
  // ignored; InvalidArgument (nothing added) when an id is outside [0, vocab_size()).
  virtual absl::Status SetExtraEos(std::span<const int32_t> ids) = 0;

  // tokenizer_config.json's chat_template (Jinja source), empty when there is none.
  virtual std::string chat_template() const { return {}; }
};

// Loads DIR/tokenizer.json (+ DIR/tokenizer_config.json when present). Errors name the file.
absl::StatusOr<std::unique_ptr<Tokenizer>> LoadHfTokenizer(const std::filesystem::path& model_dir);
// Loads that file by its own name (+ tokenizer_config.json beside it when present).
absl::StatusOr<std::unique_ptr<Tokenizer>> LoadHfTokenizerFile(const std::filesystem::path& tokenizer_json);

// llama2.c's tokenizer.bin format (the stories260K tok512.bin), with BOS 1 / EOS 2.
absl::StatusOr<std::unique_ptr<Tokenizer>> LoadLlama2cTokenizer(const std::filesystem::path& file);

// Appends the ids not yet in `eos` (the shared part of every SetExtraEos).
absl::Status AppendEosIds(std::span<const int32_t> ids, int32_t vocab_size, std::vector<int32_t>& eos);

}  // namespace doppler::tokenizers
