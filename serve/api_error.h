// OpenAI's error object and the HTTP status that goes with it.
#pragma once

#include <string>

#include "absl/status/status.h"

namespace doppler::serve {

struct ApiError {
  int status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;  // the request field at fault, empty when none
  std::string code;   // e.g. "context_length_exceeded", empty when none

  // {"error": {"message", "type", "param", "code"}} (param and code null when empty).
  std::string Body() const;
};

ApiError InvalidField(const std::string& param, const std::string& message, const std::string& code = "invalid_value");
// A status from below (the scheduler's, the engine's) as an error object.
ApiError FromStatus(const absl::Status& status);

}  // namespace doppler::serve
