// SentencePiece vocabularies as llama.cpp's converter stores them in GGUF (tokenizer.ggml.model
// "llama"): the fixtures' lcpp files carry spm384, a 384-piece BPE model with byte fallback, whose
// protobuf (gguf/lcpp/spm384.model) is read here independently of doppler's GGUF reader.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "formats/gguf/gguf_file.h"
#include "tests/support/fixtures.h"
#include "tokenizers/gguf_tokenizer.h"

namespace doppler {
namespace {

// One SentencePiece of a ModelProto: piece (field 1), score (2, float), type (3: 1 normal,
// 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte), as sentencepiece_model.proto says.
struct Piece {
  std::string text;
  float score = 0;
  int type = 1;
};

uint64_t Varint(const std::string& b, size_t& at) {
  uint64_t v = 0;
  for (int shift = 0; at < b.size(); shift += 7) {
    const uint8_t c = static_cast<uint8_t>(b[at++]);
    v |= static_cast<uint64_t>(c & 0x7f) << shift;
    if (!(c & 0x80)) break;
  }
  return v;
}

// Calls f(field, wire type, payload) for each field of a message; varints come back as their value.
template <typename F>
void Fields(const std::string& b, F f) {
  for (size_t at = 0; at < b.size();) {
    const uint64_t key = Varint(b, at);
    const int field = static_cast<int>(key >> 3), wire = static_cast<int>(key & 7);
    if (wire == 0) {
      const uint64_t v = Varint(b, at);
      f(field, wire, std::string(reinterpret_cast<const char*>(&v), sizeof v));
    } else if (wire == 2) {
      const size_t n = Varint(b, at);
      f(field, wire, b.substr(at, n));
      at += n;
    } else if (wire == 5) {
      f(field, wire, b.substr(at, 4));
      at += 4;
    } else {  // wire 1: 8 bytes
      f(field, wire, b.substr(at, 8));
      at += 8;
    }
  }
}

std::vector<Piece> ReadSpmPieces(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<Piece> pieces;
  Fields(bytes, [&](int field, int wire, const std::string& payload) {
    if (field != 1 || wire != 2) return;
    Piece p;
    Fields(payload, [&](int f, int w, const std::string& v) {
      if (f == 1 && w == 2) p.text = v;
      if (f == 2 && w == 5) std::memcpy(&p.score, v.data(), 4);
      if (f == 3 && w == 0) p.type = static_cast<int>(*reinterpret_cast<const uint64_t*>(v.data()));
    });
    pieces.push_back(p);
  });
  return pieces;
}

std::unique_ptr<formats::GgufFile> OpenLcpp(const std::string& name) {
  absl::StatusOr<std::unique_ptr<formats::GgufFile>> f =
      formats::GgufFile::Open(test::FixturesDir() / "gguf" / "lcpp" / (name + "-lcpp-f32.gguf"));
  EXPECT_TRUE(f.ok()) << f.status();
  return f.ok() ? *std::move(f) : nullptr;
}

TEST(GgufSpmTokenizer, VocabularyIsTheSentencePieceModels) {
  const std::vector<Piece> pieces = ReadSpmPieces(test::FixturesDir() / "gguf" / "lcpp" / "spm384.model");
  ASSERT_EQ(pieces.size(), 384u);
  std::unique_ptr<formats::GgufFile> f = OpenLcpp("phi3");
  ASSERT_NE(f, nullptr);
  absl::StatusOr<tokenizers::GgufTokenizerData> d = tokenizers::ReadGgufTokenizerData(*f);
  ASSERT_TRUE(d.ok()) << d.status();
  ASSERT_EQ(d->tokens.size(), pieces.size());
  for (size_t i = 0; i < pieces.size(); ++i) {
    EXPECT_EQ(d->tokens[i], pieces[i].text) << i;
    EXPECT_EQ(d->scores[i], pieces[i].score) << i;
    EXPECT_EQ(d->token_types[i], pieces[i].type) << i;
  }
}

// Expectations that follow from the vocabulary alone: a character the vocabulary lacks becomes
// its UTF-8 bytes' <0xNN> pieces; a word-initial piece, encoded from its own text, is that piece
// (BPE built it from its parts by merges the model keeps); decoding restores the text.
TEST(GgufSpmTokenizer, EncodesAsTheVocabularyImplies) {
  const std::vector<Piece> pieces = ReadSpmPieces(test::FixturesDir() / "gguf" / "lcpp" / "spm384.model");
  std::unique_ptr<formats::GgufFile> f = OpenLcpp("phi3");  // add_space_prefix absent: true
  ASSERT_NE(f, nullptr);
  absl::StatusOr<std::unique_ptr<tokenizers::Tokenizer>> tok = tokenizers::LoadGgufTokenizer(*f);
  ASSERT_TRUE(tok.ok()) << tok.status();
  auto id_of = [&](const std::string& piece) {
    for (size_t i = 0; i < pieces.size(); ++i) {
      if (pieces[i].text == piece) return static_cast<int32_t>(i);
    }
    return -1;
  };
  const std::string space = "\xE2\x96\x81";
  // "☕" (E2 98 95) is not a piece: after the "▁" the prefix gives, its three bytes.
  ASSERT_EQ(id_of("\xE2\x98\x95"), -1);
  absl::StatusOr<std::vector<int32_t>> ids = (*tok)->Encode("\xE2\x98\x95", false);
  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_EQ(*ids, (std::vector<int32_t>{id_of(space), id_of("<0xE2>"), id_of("<0x98>"), id_of("<0x95>")}));
  int checked = 0;
  for (size_t i = 0; i < pieces.size(); ++i) {
    const Piece& p = pieces[i];
    if (p.type != 1 || p.text.rfind(space, 0) != 0 || p.text.size() <= space.size()) continue;
    if (p.text.find(space, space.size()) != std::string::npos) continue;  // one word only
    absl::StatusOr<std::vector<int32_t>> one = (*tok)->Encode(p.text.substr(space.size()), false);
    ASSERT_TRUE(one.ok()) << one.status();
    EXPECT_EQ(*one, std::vector<int32_t>{static_cast<int32_t>(i)}) << p.text;
    ++checked;
  }
  EXPECT_GT(checked, 20);
  for (const std::string text : {"In the beginning God created the heaven and the earth.", "  two  spaces",
                                 "caf\xC3\xA9 \xE2\x98\x95 \xE6\x97\xA5\xE6\x9C\xAC"}) {
    absl::StatusOr<std::vector<int32_t>> enc = (*tok)->Encode(text, true);
    ASSERT_TRUE(enc.ok()) << enc.status();
    EXPECT_EQ(std::optional<int32_t>(enc->front()), (*tok)->bos_id()) << "BOS first";
    EXPECT_EQ((*tok)->Decode(*enc, true), text);
  }
}

// Gemma's converter writes add_space_prefix false: no "▁" before the text.
TEST(GgufSpmTokenizer, GemmaAddsNoSpacePrefix) {
  std::unique_ptr<formats::GgufFile> gemma = OpenLcpp("gemma3"), phi3 = OpenLcpp("phi3");
  ASSERT_TRUE(gemma && phi3);
  absl::StatusOr<std::unique_ptr<tokenizers::Tokenizer>> g = tokenizers::LoadGgufTokenizer(*gemma);
  absl::StatusOr<std::unique_ptr<tokenizers::Tokenizer>> p = tokenizers::LoadGgufTokenizer(*phi3);
  ASSERT_TRUE(g.ok() && p.ok());
  absl::StatusOr<std::vector<int32_t>> phi3_plain = (*p)->Encode("the", false);
  absl::StatusOr<std::vector<int32_t>> gemma_plain = (*g)->Encode("the", false);
  absl::StatusOr<std::vector<int32_t>> gemma_spaced = (*g)->Encode(" the", false);
  ASSERT_TRUE(phi3_plain.ok() && gemma_plain.ok() && gemma_spaced.ok());
  EXPECT_EQ(*phi3_plain, *gemma_spaced);  // phi3's prefix space is what gemma needs spelled out
  EXPECT_NE(*phi3_plain, *gemma_plain);
}

}  // namespace
}  // namespace doppler
