// Parses a template's tokens into statements (jinja2's grammar: the statements and expressions
// real chat templates use). Nesting is bounded so that a hostile template cannot exhaust the
// stack; every error names the template line.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "jinja/ast.h"

namespace doppler::jinja {

// Deeper nesting of blocks or of expressions than this is an error.
inline constexpr int kMaxParseDepth = 128;

absl::StatusOr<Body> Parse(const std::string& source);

}  // namespace doppler::jinja
