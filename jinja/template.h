// A Jinja template as transformers' apply_chat_template renders it (jinja2 3.1,
// ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, loopcontrols, {% generation %},
// tojson as json.dumps(ensure_ascii=False), raise_exception, strftime_now). See
// docs/chat-templates.md for what is covered.
//
// Errors are values and name the template line: a syntax error or a failed operation is
// InvalidArgument, raise_exception(msg) is FailedPrecondition carrying msg (the template refuses
// its input), a limit reached is ResourceExhausted.
#pragma once

#include <cstddef>
#include <cstdint>
#include <ctime>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "jinja/ast.h"
#include "jinja/value.h"

namespace doppler::jinja {

// Bounds on one render, so that a hostile template cannot hang, exhaust memory or the stack.
struct RenderOptions {
  size_t max_output_bytes = size_t{32} << 20;     // the rendered text, and any one string or list
  size_t max_bytes_produced = size_t{512} << 20;  // all strings and lists built during the render
  int64_t max_loop_iterations = 5'000'000;        // all loop iterations of the render together
  int max_call_depth = 200;                       // nested macro, caller and recursive-loop calls
  int max_nesting = 1000;                         // expressions and statements evaluated within each other
  int max_value_depth = 256;                      // lists and dicts nested in one value
  std::optional<std::tm> now;                     // strftime_now's instant; local time when unset
};

class Template {
 public:
  static absl::StatusOr<Template> Parse(const std::string& source);
  // Renders with the given top-level variables.
  absl::StatusOr<std::string> Render(const Dict& variables, const RenderOptions& options = {}) const;

 private:
  std::shared_ptr<const Body> body_;
};

}  // namespace doppler::jinja
