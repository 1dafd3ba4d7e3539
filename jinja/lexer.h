// Splits a template into text and the tokens of its tags (newlines normalized to \n, one final
// newline dropped, as jinja2 does), applying jinja2's whitespace control as
// transformers configures it: trim_blocks (the newline after a block or comment tag is dropped),
// lstrip_blocks (spaces and tabs before a block or comment tag at the start of a line are
// dropped), "-" on a tag strips all whitespace on that side, "+" turns lstrip off. Comments are
// dropped and {% raw %} bodies become text.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace doppler::jinja {

struct Token {
  enum class Kind { kText, kVarBegin, kVarEnd, kBlockBegin, kBlockEnd, kName, kString, kInt, kFloat, kOp, kEnd };
  Kind kind;
  std::string text;  // text, name, string value, number spelling or operator
  int line;
};

absl::StatusOr<std::vector<Token>> Lex(const std::string& source);

}  // namespace doppler::jinja
