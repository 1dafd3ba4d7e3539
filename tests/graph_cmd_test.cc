// doppler graph, run as a user would: the graph in text, JSON and DOT, dumps after passes, the
// kernels' GLSL, the step statistics, and one-line errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "nlohmann/json.hpp"
#include "passes/pass.h"
#include "tests/support/cli_runner.h"
#include "tests/support/fixtures.h"

namespace doppler {
namespace {

using Result = test::CommandResult;

Result Graph(const std::string& args) { return test::RunDoppler("graph " + args); }

std::string Llama() { return "--model " + (test::FixturesDir() / "hf" / "llama").string(); }

TEST(GraphCmd, TextListsTheNodes) {
  Result r = Graph(Llama() + " --passes none");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("= matmul(%"), std::string::npos);
  EXPECT_NE(r.out.find("layers.0.attn.q_proj"), std::string::npos);
  EXPECT_NE(r.out.find("output next_token = %"), std::string::npos);
  EXPECT_EQ(r.out.rfind("%0 = input() {name=\"ids\"} : i32[T]", 0), 0u) << r.out.substr(0, 200);
}

TEST(GraphCmd, JsonHasTheDocumentedKeys) {
  for (const char* passes : {"none", "default"}) {
    Result r = Graph(Llama() + " --format json --passes " + passes);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    nlohmann::json doc = nlohmann::json::parse(r.out, nullptr, /*allow_exceptions=*/false);
    ASSERT_FALSE(doc.is_discarded()) << r.out.substr(0, 200);
    EXPECT_EQ(doc["format"], "doppler-graph");
    EXPECT_EQ(doc["version"], 1);
    ASSERT_TRUE(doc["pipeline"].is_array());
    EXPECT_TRUE(doc["after"].is_string());
    ASSERT_TRUE(doc["outputs"].is_object());
    EXPECT_TRUE(doc["outputs"].contains("logits"));
    EXPECT_TRUE(doc["outputs"].contains("next_token"));
    ASSERT_TRUE(doc["nodes"].is_array());
    ASSERT_GT(doc["nodes"].size(), 10u);
    int tokens_dims = 0, fused = 0;
    for (size_t i = 0; i < doc["nodes"].size(); ++i) {
      const nlohmann::json& n = doc["nodes"][i];
      EXPECT_EQ(n["id"], static_cast<int>(i));
      for (const char* key : {"op", "dtype", "label"}) EXPECT_TRUE(n[key].is_string()) << key;
      EXPECT_TRUE(n["attrs"].is_object());
      ASSERT_TRUE(n["inputs"].is_array());
      for (const nlohmann::json& in : n["inputs"]) EXPECT_LT(in.get<int>(), static_cast<int>(i));
      ASSERT_TRUE(n["shape"].is_array());
      for (const nlohmann::json& d : n["shape"]) {
        EXPECT_TRUE(d.is_number_integer() || d == "T");
        tokens_dims += d == "T" ? 1 : 0;
      }
      if (n.contains("fused")) {
        ++fused;
        ASSERT_TRUE(n["fused"].is_array());
        EXPECT_GT(n["fused"].size(), 0u);
        for (const nlohmann::json& a : n["fused"]) EXPECT_TRUE(a["op"].is_string() && a["label"].is_string());
        EXPECT_TRUE(n["attrs"].contains("fused"));
      }
    }
    EXPECT_GT(tokens_dims, 0);
    if (std::string(passes) == "none") {
      EXPECT_EQ(fused, 0);
    } else {
      EXPECT_GT(fused, 0);
    }
  }
}

TEST(GraphCmd, DotIsAGraphvizDigraph) {
  Result r = Graph(Llama() + " --format dot");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out.rfind("digraph ", 0), 0u) << r.out.substr(0, 100);
  EXPECT_NE(r.out.find("n0 -> n"), std::string::npos);
  EXPECT_EQ(r.out.back(), '\n');
  EXPECT_EQ(r.out.substr(r.out.size() - 2), "}\n");
  EXPECT_NE(r.out.find("fused:"), std::string::npos);
  // Graphviz itself, where it is installed.
  if (std::system("command -v dot >/dev/null 2>&1") == 0) {
    const std::filesystem::path dir = test::MakeTempDir("graph_cmd_dot");
    std::ofstream(dir / "g.dot") << r.out;
    Result svg = test::RunShell("dot -Tsvg " + (dir / "g.dot").string());
    EXPECT_EQ(svg.exit_code, 0) << svg.err;
    EXPECT_NE(svg.out.find("<svg"), std::string::npos);
  }
}

TEST(GraphCmd, DumpAfterEveryPass) {
  const std::vector<std::string> pipeline = passes::DefaultPipeline();
  Result r = Graph(Llama() + " --format json --dump-after all");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::vector<std::string> lines = absl::StrSplit(r.out, '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), pipeline.size() + 1);
  for (size_t i = 0; i < lines.size(); ++i) {
    nlohmann::json doc = nlohmann::json::parse(lines[i], nullptr, false);
    ASSERT_FALSE(doc.is_discarded());
    EXPECT_EQ(doc["after"], i == 0 ? "input" : pipeline[i - 1]);
    EXPECT_EQ(doc.contains("changed"), i > 0);
  }
  if (pipeline.empty()) return;
  Result one = Graph(Llama() + " --dump-after " + pipeline.front());
  ASSERT_EQ(one.exit_code, 0) << one.err;
  EXPECT_EQ(one.out.rfind("# after " + pipeline.front(), 0), 0u) << one.out.substr(0, 100);
}

TEST(GraphCmd, EmitsTheGlslOfEveryKernel) {
  Result r = Graph(Llama() + " --passes none --emit-glsl");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out.find("%0 = input"), std::string::npos);  // the graph itself only when asked
  size_t kernels = 0;
  for (size_t p = r.out.find("#version"); p != std::string::npos; p = r.out.find("#version", p + 1)) ++kernels;
  size_t headers = 0;
  for (size_t p = r.out.find("\n// %"); p != std::string::npos; p = r.out.find("\n// %", p + 1)) ++headers;
  EXPECT_GT(kernels, 10u);
  EXPECT_EQ(headers + 1, kernels);  // the first header opens the output
  EXPECT_NE(r.out.find("void main()"), std::string::npos);
  EXPECT_NE(r.out.find("matmul."), std::string::npos);
}

struct StatsRow {
  std::string step, passes;
  int64_t tokens = 0, nodes = 0, dispatches = 0, barriers = 0, weight_bytes = 0, arena_bytes = 0, value_bytes = 0;
};

std::vector<StatsRow> ParseStats(const std::string& out) {
  std::vector<StatsRow> rows;
  for (absl::string_view line : absl::StrSplit(out, '\n', absl::SkipEmpty())) {
    const std::vector<std::string> f = absl::StrSplit(line, ' ', absl::SkipEmpty());
    if (f.size() != 9 || f[0] == "step") continue;
    StatsRow r{f[0], f[2]};
    int64_t* nums[] = {&r.tokens, &r.nodes, &r.dispatches, &r.barriers, &r.weight_bytes, &r.arena_bytes, &r.value_bytes};
    const int cols[] = {1, 3, 4, 5, 6, 7, 8};
    bool ok = true;
    for (int i = 0; i < 7; ++i) ok = ok && absl::SimpleAtoi(f[static_cast<size_t>(cols[i])], nums[i]);
    if (ok) rows.push_back(r);
  }
  return rows;
}

// --lowered: one line per dispatch, as many as --emit-glsl prints kernels, each naming
// the nodes it computes, its bindings (read or written, where they live), its workgroups and its
// family's config (every matmul's and attention's has one).
TEST(GraphCmd, LoweredListsEveryDispatch) {
  const std::filesystem::path f = test::FixturesDir();
  for (const std::filesystem::path& model : {f / "hf" / "llama", f / "hf" / "gemma3", f / "hf" / "phi3",
                                             f / "gguf" / "llama_q-Q4_K_M.gguf"}) {
    SCOPED_TRACE(model.string());
    Result r = Graph("--lowered --model " + model.string());
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const std::vector<std::string> lines = absl::StrSplit(r.out, '\n', absl::SkipEmpty());
    ASSERT_GT(lines.size(), 2u) << r.out;
    int header_count = -1;
    ASSERT_EQ(lines[0].rfind("# ", 0), 0u) << lines[0];
    ASSERT_TRUE(absl::SimpleAtoi(std::vector<std::string>(absl::StrSplit(lines[0], ' '))[1], &header_count)) << lines[0];
    EXPECT_EQ(header_count, static_cast<int>(lines.size()) - 1);
    for (size_t i = 1; i < lines.size(); ++i) {
      const std::vector<std::string> fields = absl::StrSplit(lines[i], " | ");
      ASSERT_EQ(fields.size(), 5u) << lines[i];
      EXPECT_EQ(fields[0].rfind(absl::StrCat("#", i - 1, " "), 0), 0u) << lines[i];
      EXPECT_NE(fields[0].find('.'), std::string::npos) << "family.variant: " << lines[i];
      EXPECT_EQ(fields[1].rfind("%", 0), 0u) << "nodes computed: " << lines[i];
      int written = 0;
      for (absl::string_view b : absl::StrSplit(fields[2], ", ")) {
        EXPECT_TRUE(absl::StrContains(b, " r ") || absl::StrContains(b, " w ")) << b;
        written += absl::StrContains(b, " w ") ? 1 : 0;
      }
      EXPECT_GE(written, 1) << "a dispatch writes something: " << lines[i];
      EXPECT_EQ(std::count(fields[3].begin(), fields[3].end(), 'x'), 2) << "workgroups: " << lines[i];
      if (absl::StartsWith(fields[0], absl::StrCat("#", i - 1, " matmul.")) ||
          absl::StartsWith(fields[0], absl::StrCat("#", i - 1, " attention."))) {
        EXPECT_TRUE(fields[4] != "-" && absl::StrContains(fields[4], "=")) << "config: " << lines[i];
      } else {
        EXPECT_EQ(fields[4], "-") << "config: " << lines[i];
      }
    }
    EXPECT_NE(lines[1].find("embedding"), std::string::npos) << lines[1];
    // As many as the GLSL listing has kernels.
    Result glsl = Graph("--emit-glsl --model " + model.string());
    ASSERT_EQ(glsl.exit_code, 0) << glsl.err;
    int kernels = 0;
    for (absl::string_view l : absl::StrSplit(glsl.out, '\n')) kernels += absl::StartsWith(l, "// %") ? 1 : 0;
    EXPECT_EQ(kernels, header_count);
  }
}

// --target makes the kernels for a known device of a class: NVIDIA's cooperative-matrix tiles for a
// prefill chunk, which the default caps (no optional feature) never take; an unknown class is an
// error naming it.
TEST(GraphCmd, TargetChoosesTheKnownDevicesKernels) {
  const std::string llama = (test::FixturesDir() / "hf" / "llama").string();
  Result nvidia = Graph("--lowered --tokens 64 --target nvidia --model " + llama);
  ASSERT_EQ(nvidia.exit_code, 0) << nvidia.err;
  EXPECT_TRUE(absl::StrContains(nvidia.out, " matmul.coop.")) << nvidia.out;
  Result plain = Graph("--lowered --tokens 64 --model " + llama);
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  EXPECT_FALSE(absl::StrContains(plain.out, " matmul.coop.")) << plain.out;
  for (const char* target : {"amd", "intel", "lavapipe", "generic"}) {
    Result r = Graph(absl::StrCat("--stats --tokens 64 --target ", target, " --model ", llama));
    EXPECT_EQ(r.exit_code, 0) << target << ": " << r.err;
  }
  Result bad = Graph("--lowered --target voodoo --model " + llama);
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_TRUE(absl::StrContains(bad.err, "--target: unknown target 'voodoo'")) << bad.err;
}

// A decode step's plan (a bucket of 1) is the engine's: on a device with integer dot products its
// block-quantized matmuls take x rounded through q8 (--decode-activations auto, as run's), f32
// keeps exact x, and a prefill chunk keeps it whatever the mode; q8 on a target without integer
// dot products is an error naming them, and an unknown mode an error naming the option.
TEST(GraphCmd, DecodeStepsTakeTheEnginesActivations) {
  const std::string args = Llama() + " --quant q8_0 --lowered --target nvidia";
  Result automatic = Graph(args);
  ASSERT_EQ(automatic.exit_code, 0) << automatic.err;
  EXPECT_TRUE(absl::StrContains(automatic.out, " matmul.gemv_q8.q8_0.")) << automatic.out;
  EXPECT_TRUE(absl::StrContains(automatic.out, "+x_q8")) << automatic.out;
  Result exact = Graph(args + " --decode-activations f32");
  ASSERT_EQ(exact.exit_code, 0) << exact.err;
  EXPECT_FALSE(absl::StrContains(exact.out, "gemv_q8")) << exact.out;
  EXPECT_TRUE(absl::StrContains(exact.out, " matmul.gemv.q8_0.")) << exact.out;
  Result chunk = Graph(args + " --tokens 64 --decode-activations q8");
  ASSERT_EQ(chunk.exit_code, 0) << chunk.err;
  EXPECT_FALSE(absl::StrContains(chunk.out, "+x_q8")) << chunk.out;
  Result no_dots = Graph(Llama() + " --quant q8_0 --lowered --decode-activations q8");
  EXPECT_EQ(no_dots.exit_code, 1);
  EXPECT_TRUE(absl::StrContains(no_dots.err, "need integer dot products, which the default target (no --target) does not have"))
      << no_dots.err;
  Result bad = Graph(args + " --decode-activations q4");
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_TRUE(absl::StrContains(bad.err, "--decode-activations: 'q4' is not one of auto, q8, f32")) << bad.err;
}

// --synthetic: a published model's shapes with no files and no weights made: gpt-oss-20b's MXFP4
// experts take the matrix-vector kernel's whole-block parts in decode, the gated one ranking its
// experts itself.
TEST(GraphCmd, SyntheticModelsNeedNoFiles) {
  Result r = Graph("--lowered --target nvidia --synthetic gpt-oss-20b");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(absl::StrContains(r.out, "expert_matmul.gemv.mxfp4.gated+top_k+bias+clamped_swiglu.block.")) << r.out.substr(0, 2000);
  Result bad = Graph("--lowered --synthetic llama-9z");
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_TRUE(absl::StrContains(bad.err, "unknown synthetic model 'llama-9z'")) << bad.err;
}

TEST(GraphCmd, StatsBeforeAndAfterThePipeline) {
  Result r = Graph(Llama() + " --stats --tokens 64");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::vector<StatsRow> rows = ParseStats(r.out);
  ASSERT_EQ(rows.size(), 4u) << r.out;
  EXPECT_EQ(rows[0].step, "decode");
  EXPECT_EQ(rows[2].step, "prefill");
  for (int i = 0; i < 4; i += 2) {
    const StatsRow &before = rows[static_cast<size_t>(i)], &after = rows[static_cast<size_t>(i) + 1];
    EXPECT_EQ(before.tokens, i == 0 ? 1 : 64);
    EXPECT_EQ(before.passes, "none");
    EXPECT_EQ(after.passes, "default");
    EXPECT_LE(after.dispatches, before.dispatches);
    EXPECT_LE(after.barriers, after.dispatches);
    EXPECT_GT(before.barriers, 0);
    // Fusion stacks weights but reads the same bytes.
    EXPECT_EQ(after.weight_bytes, before.weight_bytes);
    for (const StatsRow* row : {&before, &after}) {
      EXPECT_GT(row->arena_bytes, 0);
      EXPECT_LT(row->arena_bytes, row->value_bytes);
      EXPECT_GT(row->nodes, row->dispatches);
    }
    EXPECT_LT(after.dispatches, before.dispatches);
  }
  // The llama fixture: 3 layers of f16 weights, 512-token vocabulary (the decode step embeds one row).
  EXPECT_GT(rows[0].weight_bytes, 900000);
  EXPECT_GT(rows[2].weight_bytes, rows[0].weight_bytes);
  EXPECT_GT(rows[2].arena_bytes, rows[0].arena_bytes);
}

TEST(GraphCmd, NoneAndDefaultDiffer) {
  Result none = Graph(Llama() + " --passes none");
  Result def = Graph(Llama() + " --passes default");
  ASSERT_EQ(none.exit_code, 0) << none.err;
  ASSERT_EQ(def.exit_code, 0) << def.err;
  EXPECT_NE(none.out, def.out);
}

class GraphCmdErrors : public ::testing::TestWithParam<std::pair<std::string, std::string>> {};

// Exit code 1, or 2 where the command line itself is malformed (a required option missing).
TEST_P(GraphCmdErrors, OneLineAndExitOne) {
  Result r = Graph(GetParam().first);
  EXPECT_EQ(r.exit_code, GetParam().first.find("--model") == std::string::npos ? 2 : 1) << r.out;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_EQ(r.err.rfind("doppler graph: error: ", 0), 0u) << r.err;
  EXPECT_NE(r.err.find(GetParam().second), std::string::npos) << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out.substr(0, 200);
}

INSTANTIATE_TEST_SUITE_P(
    Cases, GraphCmdErrors,
    ::testing::Values(std::make_pair(Llama() + " --passes fuse-everything", "unknown pass 'fuse-everything'"),
                      std::make_pair(Llama() + " --format yaml", "'yaml' is not one of text, json, dot"),
                      std::make_pair(std::string("--passes none"), "--model PATH (or --synthetic NAME) is required"),
                      std::make_pair(std::string("--model /nonexistent/model"), "/nonexistent/model"),
                      std::make_pair(Llama() + " --passes none --dump-after dce", "not in the pipeline"),
                      std::make_pair(Llama() + " --tokens 0", "--tokens must be positive")));

}  // namespace
}  // namespace doppler
