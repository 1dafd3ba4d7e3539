// A small command-line parser for the doppler subcommands: declared options, generated --help,
// and one clear error for an unknown option, a missing value or a malformed number.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace doppler::cli {

// A malformed command line (unknown command or option, a missing or malformed value, an old
// spelling): main exits with 2 for these, 1 for every other error (docs/cli.md).
absl::Status UsageError(absl::string_view message);
bool IsUsageError(const absl::Status& status);

// The program's version, as `doppler --version` prints it.
extern const char kVersion[];

struct OptionSpec {
  std::string name;         // long name without dashes, e.g. "model"
  std::string short_name;   // e.g. "n" for -n, or empty
  std::string value_name;   // e.g. "DIR"; empty for a flag without value
  std::string help;
  std::string default_value;  // shown in --help; empty when none
};

struct CommandSpec {
  std::string name;
  std::string summary;
  std::vector<OptionSpec> options;
};

class ParsedArgs {
 public:
  bool Has(const std::string& name) const { return values_.count(name) > 0; }
  // The option's (last) value, or its declared default.
  std::string Get(const std::string& name) const;
  // Every value a repeatable option was given, in order.
  std::vector<std::string> GetAll(const std::string& name) const;
  absl::StatusOr<int64_t> GetInt(const std::string& name) const;
  // A finite number: NaN and infinities are usage errors.
  absl::StatusOr<double> GetFloat(const std::string& name) const;
  // A comma-separated list of integers, e.g. "1,2,3".
  absl::StatusOr<std::vector<int32_t>> GetIntList(const std::string& name) const;

 private:
  friend absl::StatusOr<ParsedArgs> Parse(const CommandSpec&, const std::vector<std::string>&);
  const CommandSpec* spec_ = nullptr;
  std::map<std::string, std::vector<std::string>> values_;
};

// Parses the arguments after the subcommand name. "--help" yields a ParsedArgs with "help" set,
// "--version" one with "version" set. Every error is a UsageError; an option another program
// (llama.cpp) or an older doppler spells differently is named in its error.
absl::StatusOr<ParsedArgs> Parse(const CommandSpec& spec, const std::vector<std::string>& args);

// Parses like Parse; on --help prints the usage (on --version the version) and returns nullopt
// (the command then exits 0).
absl::StatusOr<std::optional<ParsedArgs>> ParseOrHelp(const CommandSpec& spec, const std::vector<std::string>& args);

// Usage text: summary and one line per option.
std::string Usage(const CommandSpec& spec);

}  // namespace doppler::cli
