// Chat templates end to end through the command line: the fixtures' real templates rendered by
// `doppler template` byte for byte as jinja2 rendered them (refusals as refusals), and `run --chat`
// through a template file.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "nlohmann/json.hpp"
#include "support/cli_runner.h"
#include "support/fixtures.h"

namespace doppler {
namespace {

using Json = nlohmann::ordered_json;  // the context's key order is what tojson prints

void WriteFile(const std::filesystem::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}

TEST(ChatTemplateCli, RendersEveryFixtureCaseAsJinja2Did) {
  const std::filesystem::path dir = test::FixturesDir() / "chat_templates";
  const std::filesystem::path tmp = test::MakeTempDir("chat_templates");
  int cases = 0;
  int refusals = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (!absl::EndsWith(name, ".cases.json")) continue;
    const Json file = Json::parse(test::ReadFile(entry.path()));
    const std::filesystem::path tmpl = dir / file["template"].get<std::string>();
    for (const Json& c : file["cases"]) {
      const std::string label = name + " / " + c["case"].get<std::string>();
      const std::filesystem::path ctx = tmp / ("case" + std::to_string(cases) + ".json");
      WriteFile(ctx, c["context"].dump());
      const test::CommandResult r = test::RunDoppler("template --chat-template '" + tmpl.string() + "' --context " +
                                                     ctx.string() + " --now '2026-11-26 12:00:00'");
      ++cases;
      if (c.contains("error")) {
        ++refusals;
        // "TemplateError: MESSAGE": the template's own message.
        const std::string error = c["error"].get<std::string>();
        const std::string message = error.substr(error.find(": ") + 2);
        EXPECT_EQ(r.exit_code, 1) << label;
        EXPECT_NE(r.err.find(message), std::string::npos) << label << ": " << r.err;
        EXPECT_EQ(r.out, "") << label;
      } else {
        EXPECT_EQ(r.exit_code, 0) << label << ": " << r.err;
        EXPECT_EQ(r.out, c["expected"].get<std::string>()) << label;
      }
    }
  }
  EXPECT_EQ(cases, 126);
  EXPECT_GT(refusals, 0);
}

TEST(ChatTemplateCli, ModelTemplateAndItsSpecialTokens) {
  const std::filesystem::path tmp = test::MakeTempDir("chat_template_model");
  WriteFile(tmp / "ctx.json", R"({"messages": [{"role": "user", "content": "Hi"}], "add_generation_prompt": true})");
  // The Llama 3 tokenizer fixture ships a template and <|begin_of_text|> as its BOS.
  const std::filesystem::path fixture = test::FixturesDir() / "tokenizers" / "llama3";
  const std::filesystem::path llama3 = tmp / "llama3";
  std::filesystem::create_directories(llama3);
  ASSERT_EQ(test::RunShell("tar xzf '" + (fixture / "tokenizer.tar.gz").string() + "' -C '" + llama3.string() + "'").exit_code, 0);
  test::CommandResult r = test::RunDoppler("template --model " + llama3.string() + " --context " +
                                           (tmp / "ctx.json").string() + " --now '2026-11-26 12:00:00'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out.rfind("<|begin_of_text|>", 0), 0u) << r.out;
  EXPECT_TRUE(absl::EndsWith(r.out, "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
                                    "<|start_header_id|>assistant<|end_header_id|>\n\n"))
      << r.out;
  // Errors: a template that does not parse names its line; a missing context is named.
  WriteFile(tmp / "bad.jinja", "ok\n{% if %}");
  r = test::RunDoppler("template --chat-template " + (tmp / "bad.jinja").string() + " --context " +
                       (tmp / "ctx.json").string());
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("template line 2"), std::string::npos) << r.err;
  r = test::RunDoppler("template --chat-template " + (tmp / "bad.jinja").string() + " --context " +
                       (tmp / "none.json").string());
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("none.json"), std::string::npos) << r.err;
}

// `run --chat` renders the conversation with a template file, each turn, on hf/llama (whose
// vocabulary of 512 matches the stories260K tokenizer).
TEST(ChatTemplateCli, RunChatThroughATemplateFile) {
  const std::filesystem::path tmp = test::MakeTempDir("chat_template_run");
  WriteFile(tmp / "t.jinja",
            "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}"
            "{% if add_generation_prompt %}{{ 'assistant' if polite is not defined else 'dear assistant' }}:{% endif %}");
  const std::filesystem::path fx = test::FixturesDir();
  const std::string model = " --model " + (fx / "hf" / "llama").string() + " --tokenizer " +
                            (fx / "stories260K" / "tok512.bin").string() + " --dtype f32 --temp 0 -n 6 --ignore-eos";
  test::CommandResult r =
      test::RunShell("(printf 'Hello there\\nAnd then\\n\\n' | " + test::DopplerBinary() + " run --chat --chat-template " +
                     (tmp / "t.jinja").string() + " --chat-template-kwargs '{\"polite\": true}'" + model + ")");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("chat (template: " + (tmp / "t.jinja").string() + ")"), std::string::npos) << r.err;
  const std::vector<std::string> summaries = absl::StrSplit(r.err, "prompt: ");
  ASSERT_EQ(summaries.size(), 3u) << r.err;  // two turns, six tokens each
  EXPECT_NE(summaries[1].find("generated: 6 tokens"), std::string::npos) << r.err;
  EXPECT_NE(summaries[2].find("generated: 6 tokens"), std::string::npos) << r.err;
  // Without a template (hf/llama ships none), the error names where one would be and the options.
  r = test::RunShell("(printf 'hi\\n' | " + test::DopplerBinary() + " run --chat" + model + ")");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("tokenizer_config.json"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("--chat-template FILE"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("--chat-format"), std::string::npos) << r.err;
  // A GGUF file keeps its template under tokenizer.chat_template; the fixture's has none.
  r = test::RunShell("(printf 'hi\\n' | " + test::DopplerBinary() + " run --chat -n 1 --model " +
                     (fx / "gguf" / "llama_q-Q8_0.gguf").string() + ")");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("the GGUF key tokenizer.chat_template"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("--chat-template FILE"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace doppler
