// tokenizer.json's "pre_tokenizer": cuts normalized text into the pieces that BPE encodes one by
// one. Supported: Split (a regex, e.g. Llama 3's and Qwen's), ByteLevel (GPT-2's byte-to-character
// mapping, optionally with GPT-2's regex), Metaspace (SentencePiece's '▁'), and Sequence of them.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "tokenizers/regex.h"

namespace doppler::tokenizers {

class PreTokenizer {
 public:
  // `spec` may be null (the whole text is one piece). Unknown types are an error naming `where`.
  static absl::StatusOr<PreTokenizer> FromJson(const nlohmann::json& spec, const std::string& where);

  // `text` must be valid UTF-8. `at_input_start`: the text begins the caller's input (not after an
  // added token), which Metaspace's prepend_scheme "first" asks about.
  absl::StatusOr<std::vector<std::string>> Split(std::string_view text, bool at_input_start) const;
  // Whether a ByteLevel step turns every byte into a symbol of its own (the vocabulary must hold
  // all 256 of them).
  bool byte_level() const;

 private:
  // What a Split does with the pattern's matches (HF's SplitDelimiterBehavior).
  enum class Behavior { kIsolated, kRemoved, kMergedWithPrevious, kMergedWithNext, kContiguous };
  struct Piece {
    std::string text;
    bool at_input_start;
  };
  struct Step {
    enum class Kind { kSplit, kByteLevel, kMetaspace } kind;
    std::optional<Regex> pattern;  // Split; ByteLevel with use_regex (GPT-2's pattern); Metaspace: '▁'
    Behavior behavior = Behavior::kIsolated;
    bool invert = false;            // Split: the pieces between matches are the delimiters
    bool add_prefix_space = false;  // ByteLevel
    std::string replacement;        // Metaspace
    enum class Prepend { kAlways, kFirst, kNever } prepend = Prepend::kAlways;  // Metaspace
  };

  absl::Status Add(const nlohmann::json& spec, const std::string& where);
  static absl::Status SplitWith(const Regex& pattern, Behavior behavior, bool invert, const Piece& piece,
                                std::vector<Piece>& out);
  static absl::Status Apply(const Step& step, const Piece& piece, std::vector<Piece>& out);

  std::vector<Step> steps_;
};

}  // namespace doppler::tokenizers
