// JSON to text for the wire. Model output is valid UTF-8, but a token's own bytes (logprobs,
// /detokenize of arbitrary ids) may be part of a character: those bytes become U+FFFD rather than
// an exception.
#pragma once

#include <string>

#include "nlohmann/json.hpp"

namespace doppler::serve {

inline std::string JsonText(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace doppler::serve
