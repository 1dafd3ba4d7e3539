// The Unicode tables behind NfcNormalize (unicode_nfc.cc), generated into unicode_nfc_data.cc by
// gen_unicode_nfc_data.py. Every array is sorted by its first field, for binary search.
#pragma once

#include <cstddef>
#include <cstdint>
#include <iterator>

namespace doppler::tokenizers::nfc_data {

struct CombiningClassRange {
  uint32_t first;
  uint32_t last;
  uint8_t combining_class;  // never 0: code points outside every range have class 0
};

// One level of a canonical decomposition: cp -> first (+ second, or 0 for a singleton).
struct Decomposition {
  uint32_t cp;
  uint32_t first;
  uint32_t second;
};

// A primary composite: first + second compose to `composite` (composition exclusions omitted).
struct Composition {
  uint32_t first;
  uint32_t second;
  uint32_t composite;
};

extern const char kUnicodeVersion[];
extern const CombiningClassRange kCombiningClasses[];
extern const size_t kCombiningClassesSize;
extern const Decomposition kDecompositions[];
extern const size_t kDecompositionsSize;
extern const Composition kCompositions[];
extern const size_t kCompositionsSize;

}  // namespace doppler::tokenizers::nfc_data
