#include "tokenizers/unicode_nfc.h"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <vector>

#include "tokenizers/unicode_nfc_data.h"
#include "tokenizers/utf8.h"

namespace doppler::tokenizers {
namespace {

using nfc_data::kCombiningClasses;
using nfc_data::kCombiningClassesSize;
using nfc_data::kCompositions;
using nfc_data::kCompositionsSize;
using nfc_data::kDecompositions;
using nfc_data::kDecompositionsSize;

// Hangul syllables decompose and compose arithmetically (Unicode chapter 3.12).
constexpr char32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr char32_t kLCount = 19, kVCount = 21, kTCount = 28, kNCount = kVCount * kTCount;
constexpr char32_t kSCount = kLCount * kNCount;

// Every code point below U+0300 is its own NFC form and composes with nothing before it; in
// UTF-8 those are exactly the texts whose bytes all lie below 0xCC (the lead byte of U+0300).
constexpr unsigned char kFirstNonTrivialLead = 0xCC;

uint8_t CombiningClass(char32_t cp) {
  const auto* end = kCombiningClasses + kCombiningClassesSize;
  const auto* it = std::upper_bound(kCombiningClasses, end, cp,
                                    [](char32_t c, const nfc_data::CombiningClassRange& r) { return c < r.first; });
  if (it == kCombiningClasses) return 0;
  --it;
  return cp <= it->last ? it->combining_class : 0;
}

void Decompose(char32_t cp, std::vector<char32_t>& out) {
  if (cp >= kSBase && cp < kSBase + kSCount) {
    const char32_t s = cp - kSBase;
    out.push_back(kLBase + s / kNCount);
    out.push_back(kVBase + (s % kNCount) / kTCount);
    if (s % kTCount != 0) out.push_back(kTBase + s % kTCount);
    return;
  }
  const auto* end = kDecompositions + kDecompositionsSize;
  const auto* it =
      std::lower_bound(kDecompositions, end, cp, [](const nfc_data::Decomposition& d, char32_t c) { return d.cp < c; });
  if (it == end || it->cp != cp) {
    out.push_back(cp);
    return;
  }
  // The table holds one level; the parts may decompose further (e.g. U+1E69 -> U+1E63 + U+0307).
  Decompose(it->first, out);
  if (it->second != 0) Decompose(it->second, out);
}

std::optional<char32_t> Compose(char32_t first, char32_t second) {
  if (first >= kLBase && first < kLBase + kLCount && second >= kVBase && second < kVBase + kVCount) {
    return kSBase + ((first - kLBase) * kVCount + (second - kVBase)) * kTCount;
  }
  if (first >= kSBase && first < kSBase + kSCount && (first - kSBase) % kTCount == 0 && second > kTBase &&
      second < kTBase + kTCount) {
    return first + (second - kTBase);
  }
  const auto* end = kCompositions + kCompositionsSize;
  const auto* it = std::lower_bound(kCompositions, end, std::pair{first, second},
                                    [](const nfc_data::Composition& c, const std::pair<char32_t, char32_t>& key) {
                                      return std::pair<char32_t, char32_t>{c.first, c.second} < key;
                                    });
  if (it == end || it->first != first || it->second != second) return std::nullopt;
  return it->composite;
}

// Canonical ordering: a stable sort by combining class within each run of non-starters.
void OrderMarks(std::vector<char32_t>& cps) {
  size_t i = 0;
  while (i < cps.size()) {
    if (CombiningClass(cps[i]) == 0) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < cps.size() && CombiningClass(cps[j]) != 0) ++j;
    std::stable_sort(cps.begin() + i, cps.begin() + j,
                     [](char32_t a, char32_t b) { return CombiningClass(a) < CombiningClass(b); });
    i = j;
  }
}

// Canonical composition: each character joins the last starter unless something between them
// blocks it (a character of class 0 or of a class >= its own).
std::vector<char32_t> ComposeAll(const std::vector<char32_t>& cps) {
  std::vector<char32_t> out;
  out.reserve(cps.size());
  std::optional<size_t> starter;
  int last_class = -1;  // class of the last character kept after the starter; -1: none kept
  for (char32_t cp : cps) {
    const int cc = CombiningClass(cp);
    if (starter && (last_class == -1 || last_class < cc)) {
      if (auto composite = Compose(out[*starter], cp)) {
        out[*starter] = *composite;
        continue;
      }
    }
    if (cc == 0) {
      starter = out.size();
      last_class = -1;
    } else {
      last_class = cc;
    }
    out.push_back(cp);
  }
  return out;
}

}  // namespace

std::string NfcNormalize(std::string_view text) {
  if (std::all_of(text.begin(), text.end(),
                  [](char c) { return static_cast<unsigned char>(c) < kFirstNonTrivialLead; })) {
    return std::string(text);
  }
  std::vector<char32_t> cps;
  for (size_t pos = 0; pos < text.size();) {
    const std::optional<char32_t> cp = NextCodePoint(text, pos);
    if (!cp) return std::string(text);  // callers validate; never loop on bad input
    Decompose(*cp, cps);
  }
  OrderMarks(cps);
  std::string out;
  out.reserve(text.size());
  for (char32_t cp : ComposeAll(cps)) AppendUtf8(cp, out);
  return out;
}

}  // namespace doppler::tokenizers
