// Decoding of GGUF metadata values (internal to formats/gguf): used when the file is opened,
// where arrays are walked and checked but not copied, and when an array is later expanded.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "formats/gguf/byte_cursor.h"
#include "formats/gguf/gguf_file.h"

namespace doppler::formats::gguf_internal {

// The type numbered `raw` in the file, if it is one.
std::optional<GgufType> ToGgufType(uint32_t raw);

// Reads one value of type `type`; an array is validated element by element (nested arrays to
// a bounded depth) and returned as a view. `what` names the value in messages.
absl::StatusOr<GgufValue> ReadValue(ByteCursor& in, GgufType type, const std::string& what);

}  // namespace doppler::formats::gguf_internal
