// Where `doppler run` takes its text from, as llama.cpp's tools do: -p TEXT, -p - or no prompt
// option (standard input), -f FILE; and -e's escape sequences.
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace doppler::cli {

// \n, \r, \t, \', \", \\ and \xHH replaced by what they stand for; any other backslash is kept.
std::string ProcessEscapes(const std::string& text);

// The whole of a regular file (a FIFO, a device or a directory is refused before it is opened).
absl::StatusOr<std::string> ReadTextFile(const std::string& path);

// All of standard input.
std::string ReadStandardInput();

}  // namespace doppler::cli
