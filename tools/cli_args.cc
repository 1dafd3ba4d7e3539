#include "tools/cli_args.h"

#include <cmath>
#include <cstdio>

#include "absl/status/status.h"
#include "absl/strings/cord.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace doppler::cli {

const char kVersion[] = "0.1.0";

namespace {

constexpr char kUsagePayload[] = "doppler.cli/usage";

// Spellings that mean something else here, or nothing any more, and what to write instead.
struct Respelled {
  const char* old_spelling;
  const char* instead;
};
constexpr Respelled kRespelled[] = {
    {"-t", "the temperature is --temp (as in llama.cpp, where -t is the number of threads)"},
    {"--temperature", "the temperature is --temp (as in llama.cpp)"},
    {"--ctx", "the context size is -c, --ctx-size (as in llama.cpp)"},
    {"--system", "the system prompt is -sys, --system-prompt (as in llama.cpp)"},
    {"--stop", "a stop string is -r, --reverse-prompt (as in llama.cpp)"},
};

const OptionSpec* Find(const CommandSpec& spec, const std::string& name, bool is_short) {
  for (const OptionSpec& o : spec.options) {
    if ((is_short ? o.short_name : o.name) == name) return &o;
  }
  return nullptr;
}

}  // namespace

std::string ParsedArgs::Get(const std::string& name) const {
  auto it = values_.find(name);
  if (it != values_.end()) return it->second.back();
  for (const OptionSpec& o : spec_->options) {
    if (o.name == name) return o.default_value;
  }
  return "";
}

std::vector<std::string> ParsedArgs::GetAll(const std::string& name) const {
  auto it = values_.find(name);
  return it == values_.end() ? std::vector<std::string>{} : it->second;
}

absl::StatusOr<int64_t> ParsedArgs::GetInt(const std::string& name) const {
  int64_t v;
  const std::string s = Get(name);
  if (!absl::SimpleAtoi(s, &v)) return UsageError(absl::StrCat("--", name, ": '", s, "' is not an integer"));
  return v;
}

absl::StatusOr<double> ParsedArgs::GetFloat(const std::string& name) const {
  double v;
  const std::string s = Get(name);
  if (!absl::SimpleAtod(s, &v)) return UsageError(absl::StrCat("--", name, ": '", s, "' is not a number"));
  if (!std::isfinite(v)) return UsageError(absl::StrCat("--", name, ": '", s, "' is not a finite number"));
  return v;
}

absl::StatusOr<std::vector<int32_t>> ParsedArgs::GetIntList(const std::string& name) const {
  std::vector<int32_t> out;
  const std::string s = Get(name);
  for (absl::string_view part : absl::StrSplit(s, ',', absl::SkipWhitespace())) {
    int32_t v;
    if (!absl::SimpleAtoi(part, &v)) {
      return UsageError(absl::StrCat("--", name, ": '", std::string(part), "' is not an integer id"));
    }
    out.push_back(v);
  }
  return out;
}

absl::StatusOr<ParsedArgs> Parse(const CommandSpec& spec, const std::vector<std::string>& args) {
  ParsedArgs parsed;
  parsed.spec_ = &spec;
  for (size_t i = 0; i < args.size(); ++i) {
    std::string arg = args[i];
    if (arg == "--help" || arg == "-h" || arg == "--version") {
      parsed.values_[arg == "--version" ? "version" : "help"].push_back("1");
      continue;
    }
    bool is_short = arg.size() >= 2 && arg[0] == '-' && arg[1] != '-';
    bool is_long = arg.rfind("--", 0) == 0 && arg.size() > 2;
    if (!is_short && !is_long) {
      return UsageError(absl::StrCat("unexpected argument '", arg, "'"));
    }
    std::string name = arg.substr(is_long ? 2 : 1);
    std::optional<std::string> inline_value;
    if (size_t eq = name.find('='); is_long && eq != std::string::npos) {
      inline_value = name.substr(eq + 1);
      name = name.substr(0, eq);
    }
    const OptionSpec* o = Find(spec, name, is_short);
    if (o == nullptr) {
      const std::string spelled = is_long ? absl::StrCat("--", name) : arg;
      for (const Respelled& r : kRespelled) {
        if (spelled == r.old_spelling) return UsageError(absl::StrCat("unknown option '", spelled, "': ", r.instead));
      }
      return UsageError(absl::StrCat("unknown option '", arg, "' (see doppler ", spec.name, " --help)"));
    }
    if (o->value_name.empty()) {
      if (inline_value) return UsageError(absl::StrCat("--", o->name, " takes no value"));
      parsed.values_[o->name].push_back("1");
      continue;
    }
    if (inline_value) {
      parsed.values_[o->name].push_back(*inline_value);
    } else if (i + 1 < args.size()) {
      parsed.values_[o->name].push_back(args[++i]);
    } else {
      return UsageError(absl::StrCat(is_short ? arg : absl::StrCat("--", o->name), " needs a value (", o->value_name, ")"));
    }
  }
  return parsed;
}

absl::StatusOr<std::optional<ParsedArgs>> ParseOrHelp(const CommandSpec& spec, const std::vector<std::string>& args) {
  absl::StatusOr<ParsedArgs> parsed = Parse(spec, args);
  if (!parsed.ok()) return parsed.status();
  if (parsed->Has("help")) {
    std::printf("%s", Usage(spec).c_str());
    return std::nullopt;
  }
  if (parsed->Has("version")) {
    std::printf("doppler %s\n", kVersion);
    return std::nullopt;
  }
  return *std::move(parsed);
}

absl::Status UsageError(absl::string_view message) {
  absl::Status s = absl::InvalidArgumentError(message);
  s.SetPayload(kUsagePayload, absl::Cord("1"));
  return s;
}

bool IsUsageError(const absl::Status& status) { return status.GetPayload(kUsagePayload).has_value(); }

std::string Usage(const CommandSpec& spec) {
  std::string s = absl::StrCat("usage: doppler ", spec.name, " [options]\n\n", spec.summary, "\n\noptions:\n");
  std::vector<OptionSpec> options = spec.options;
  options.push_back({"help", "h", "", "this help", ""});
  options.push_back({"version", "", "", "the program's version", ""});
  for (const OptionSpec& o : options) {
    std::string left = absl::StrCat("  ", o.short_name.empty() ? "" : absl::StrCat("-", o.short_name, ", "), "--",
                                    o.name, o.value_name.empty() ? "" : absl::StrCat(" ", o.value_name));
    if (left.size() < 28) left.resize(28, ' ');
    absl::StrAppend(&s, left, " ", o.help, o.default_value.empty() ? "" : absl::StrCat(" (default: ", o.default_value, ")"),
                    "\n");
  }
  return s;
}

}  // namespace doppler::cli
