#include "formats/json_file.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "formats/mapped_file.h"

namespace doppler::formats {

absl::StatusOr<nlohmann::json> ReadJsonFile(const std::filesystem::path& path) {
  // Mapped, not streamed: a FIFO or a device is refused before anything waits on it.
  absl::StatusOr<MappedFile> file = MappedFile::Open(path);
  if (!file.ok()) return file.status();
  const char* begin = reinterpret_cast<const char*>(file->data());
  try {
    return nlohmann::json::parse(begin, begin + file->size());
  } catch (const nlohmann::json::exception& ex) {
    return absl::InvalidArgumentError(absl::StrCat(path.string(), ": not valid JSON: ", ex.what()));
  }
}

}  // namespace doppler::formats
