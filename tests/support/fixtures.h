// Where the reference fixtures live, and scratch directories for tests. (Namespace
// doppler::test, not ::testing, so gtest's names stay unambiguous inside doppler code.)
#pragma once

#include <filesystem>
#include <string_view>

namespace doppler::test {

// $DOPPLER_FIXTURES if set, else the DOPPLER_FIXTURES_DIR compile definition.
std::filesystem::path FixturesDir();

// A fresh, empty directory under the test temp dir, unique to this process and `tag`.
std::filesystem::path MakeTempDir(std::string_view tag);

}  // namespace doppler::test
