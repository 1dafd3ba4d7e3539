// Tokenizers kept in GGUF metadata (tokenizer.ggml.*), both ways: building a Tokenizer from a
// GGUF's vocabulary, and collecting the vocabulary of an HF tokenizer.json or a llama2.c
// tokenizer.bin so that a GGUF writer can store it.
//
// Two kinds (tokenizer.ggml.model):
//   "llama": SentencePiece-style: spaces become '▁' (and one is put before the text and after
//            each special token when add_space_prefix), then adjacent symbols merge, the pair whose
//            joined piece has the highest score first (the leftmost among equals); characters
//            missing from the vocabulary fall back to <0xNN> byte tokens.
//   "gpt2":  byte-level BPE with ranked merges and the pre-tokenizer tokenizer.ggml.pre names
//            ("default" = GPT-2's, "llama-bpe" = Llama 3's, "qwen2" = Qwen's, which also
//            NFC-normalizes as its tokenizer.json does).
// Token types (tokenizer.ggml.token_type): 1 normal, 2 unknown, 3 control, 4 user-defined,
// 5 unused, 6 byte. Control and user-defined tokens are matched in the text as whole tokens
// (like tokenizer.json's added tokens); unknown and control tokens count as special.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "formats/gguf/gguf_file.h"
#include "tokenizers/tokenizer.h"

namespace doppler::tokenizers {

enum GgufTokenType : int32_t {
  kGgufTokenNormal = 1,
  kGgufTokenUnknown = 2,
  kGgufTokenControl = 3,
  kGgufTokenUserDefined = 4,
  kGgufTokenUnused = 5,
  kGgufTokenByte = 6,
};

// The tokenizer.ggml.* values (and tokenizer.chat_template).
struct GgufTokenizerData {
  std::string model;  // "llama" or "gpt2"
  std::string pre;    // gpt2 only (empty: not stored)
  std::vector<std::string> tokens;
  std::vector<float> scores;        // llama: one per token; gpt2: empty
  std::vector<int32_t> token_types;  // one per token
  std::vector<std::string> merges;  // gpt2: "left right", best first
  std::optional<int32_t> bos, eos, unk, pad, eot;
  std::optional<bool> add_bos, add_eos, add_space_prefix;
  std::string chat_template;
};

// Whether the file has a tokenizer (tokenizer.ggml.model).
bool GgufHasTokenizer(const formats::GgufFile& file);

// Reads and checks the metadata; errors name the file and the key.
absl::StatusOr<GgufTokenizerData> ReadGgufTokenizerData(const formats::GgufFile& file);

// The tokenizer `data` describes; `where` names its origin in messages.
absl::StatusOr<std::unique_ptr<Tokenizer>> TokenizerFromGgufData(const GgufTokenizerData& data, const std::string& where);

// ReadGgufTokenizerData + TokenizerFromGgufData.
absl::StatusOr<std::unique_ptr<Tokenizer>> LoadGgufTokenizer(const formats::GgufFile& file);

// The GGUF form of DIR/tokenizer.json (+ tokenizer_config.json): byte-level BPE tokenizers
// (Llama 3, Qwen2/3, GPT-2) become "gpt2"; others (SentencePiece-style BPE, whose merges GGUF's
// "llama" kind cannot hold without scores) are Unimplemented. `vocab_size` pads the token list
// with unused "[PADn]" tokens up to the model's embedding rows, as llama.cpp's converter does.
absl::StatusOr<GgufTokenizerData> GgufTokenizerDataFromHf(const std::filesystem::path& model_dir, int64_t vocab_size);

// The GGUF form of a llama2.c tokenizer.bin: "llama" with its scores, '▁' for spaces, <unk> 0,
// BOS 1, EOS 2 (control), the 256 byte tokens (byte).
absl::StatusOr<GgufTokenizerData> GgufTokenizerDataFromLlama2c(const std::filesystem::path& file, int64_t vocab_size);

}  // namespace doppler::tokenizers
