// Where the reference fixtures live, and scratch directories for tests. (Namespace
// doppler::test, not ::testing, so gtest's names stay unambiguous inside doppler code.)
#pragma once

#include <filesystem>
#include <string>
#include <string_view>

#include "nlohmann/json.hpp"

namespace doppler::test {

// $DOPPLER_FIXTURES if set, else the DOPPLER_FIXTURES_DIR compile definition.
std::filesystem::path FixturesDir();

// The bytes of the file at `path`; where it cannot be read, a test failure naming it, and "".
std::string ReadFileBytes(const std::filesystem::path& path);

// The JSON in the file at `path`; where it cannot be read or is not JSON, a test failure naming
// it, and null.
nlohmann::json ReadJsonFile(const std::filesystem::path& path);

// A fresh, empty directory under the test temp dir, unique to this process and `tag`, removed with
// what it holds when the test process exits.
std::filesystem::path MakeTempDir(std::string_view tag);

}  // namespace doppler::test
