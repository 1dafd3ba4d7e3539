// libFuzzer target for the Jinja interpreter: the input is a template, optionally followed by a
// NUL byte and a JSON object of variables (else a conversation with tools, as a chat template
// sees it). Any template must parse and render, or fail with an error, within the render limits:
// no crash, no hang, bounded memory and recursion.
#include <cstddef>
#include <cstdint>
#include <ctime>
#include <string>

#include "jinja/json_value.h"
#include "jinja/template.h"

namespace {

constexpr char kDefaultContext[] = R"({
  "bos_token": "<s>", "eos_token": "</s>", "add_generation_prompt": true, "enable_thinking": false,
  "messages": [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Weather in Paris? {{ x }} \u00e9"},
    {"role": "assistant", "content": "", "tool_calls": [{"id": "call_1", "type": "function",
      "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "{\"t\": 18}"},
    {"role": "assistant", "content": "<think>warm</think>18 degrees."}
  ],
  "tools": [{"type": "function", "function": {"name": "get_weather", "description": "Weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
})";

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace doppler::jinja;
  const std::string input(reinterpret_cast<const char*>(data), size);
  const size_t nul = input.find('\0');
  const std::string source = input.substr(0, nul);
  const std::string context = nul == std::string::npos ? kDefaultContext : input.substr(nul + 1);
  absl::StatusOr<Template> t = Template::Parse(source);
  if (!t.ok()) return 0;
  absl::StatusOr<Value> vars = ValueFromJson(context, 64);
  if (!vars.ok() || !vars->is_dict()) return 0;
  RenderOptions options;  // small limits keep each run fast under the sanitizers
  options.max_output_bytes = 1 << 20;
  options.max_bytes_produced = 16 << 20;
  options.max_loop_iterations = 20'000;
  options.max_call_depth = 64;
  options.max_nesting = 300;
  options.max_value_depth = 64;
  std::tm now{};
  now.tm_year = 126;
  now.tm_mon = 10;
  now.tm_mday = 26;
  options.now = now;
  (void)t->Render(vars->as_dict(), options);
  return 0;
}
