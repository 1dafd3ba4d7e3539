#include "serve/api_error.h"

#include "serve/json_text.h"

namespace doppler::serve {

std::string ApiError::Body() const {
  nlohmann::json e = {{"message", message}, {"type", type}, {"param", nullptr}, {"code", nullptr}};
  if (!param.empty()) e["param"] = param;
  if (!code.empty()) e["code"] = code;
  return JsonText(nlohmann::json{{"error", e}});
}

ApiError InvalidField(const std::string& param, const std::string& message, const std::string& code) {
  return ApiError{400, message, "invalid_request_error", param, code};
}

ApiError FromStatus(const absl::Status& status) {
  const std::string message(status.message());
  switch (status.code()) {
    case absl::StatusCode::kResourceExhausted:
      return {429, message, "rate_limit_exceeded", "", "server_busy"};
    case absl::StatusCode::kUnavailable:
      return {503, message, "server_error", "", "unavailable"};
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange:
      return {400, message, "invalid_request_error", "", ""};
    default:
      return {500, message, "server_error", "", ""};
  }
}

}  // namespace doppler::serve
