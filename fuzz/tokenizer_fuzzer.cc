// libFuzzer target for tokenizer.json: load it as `doppler run --tokenizer FILE.json` does, then
// encode a fixed text and the input's own bytes, and decode what came out (whole and streamed).
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "fuzz/fuzz_file.h"
#include "tokenizers/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace doppler;
  static fuzz::FuzzFile file;
  absl::StatusOr<std::unique_ptr<tokenizers::Tokenizer>> tok = tokenizers::LoadHfTokenizerFile(file.Write(data, size));
  if (!tok.ok()) return 0;
  const std::string own(reinterpret_cast<const char*>(data), std::min<size_t>(size, 256));
  for (const std::string& text : {std::string("Hello, world! 123 \xc3\xa9t\xc3\xa9 <s>\n  x"), own}) {
    for (bool special : {false, true}) {
      absl::StatusOr<std::vector<int32_t>> ids = (*tok)->Encode(text, special);
      if (!ids.ok()) continue;
      (void)(*tok)->Decode(*ids, special);
      std::unique_ptr<tokenizers::DecodeSession> session = (*tok)->StartDecode(special);
      std::string out;
      for (int32_t id : *ids) session->Push(id, out);
      session->Finish(out);
    }
  }
  for (int32_t id : {-1, 0, 1, (*tok)->vocab_size() - 1, (*tok)->vocab_size()}) (void)(*tok)->TokenBytes(id);
  return 0;
}
