#include "models/json_file.h"

#include <fstream>
#include <sstream>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace doppler::models {

absl::StatusOr<nlohmann::json> ReadJsonFile(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path.string(), ": cannot open"));
  std::stringstream text;
  text << in.rdbuf();
  try {
    return nlohmann::json::parse(text.str());
  } catch (const nlohmann::json::exception& ex) {
    return absl::InvalidArgumentError(absl::StrCat(path.string(), ": not valid JSON: ", ex.what()));
  }
}

}  // namespace doppler::models
