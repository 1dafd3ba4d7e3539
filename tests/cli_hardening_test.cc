// The command line against broken files and bad options, as a new user would try them: each case
// reproduces a command that used to crash, hang, or answer wrongly, and asserts one clear line on
// stderr with exit code 1 (2 for a malformed command line). The broken files are made in a temp
// directory from the fixtures, never written into them.
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <cstdlib>
#include <fstream>
#include <functional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "nlohmann/json.hpp"
#include "tests/support/cli_runner.h"
#include "tests/support/fixtures.h"

namespace doppler {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using Result = test::CommandResult;

Result Doppler(const std::string& args) { return test::RunDoppler(args); }

fs::path Fixture(const std::string& relative) { return test::FixturesDir() / relative; }
const std::string kLlama = Fixture("hf/llama").string();  // 3 layers, vocabulary 512, trained on 512 positions
const fs::path kStories = Fixture("stories260K");

int Lines(const std::string& s) { return static_cast<int>(std::count(s.begin(), s.end(), '\n')); }

bool Has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// One line on stderr holding `message`, nothing on stdout, and the exit code.
void ExpectError(const Result& r, int exit_code, const std::string& message) {
  EXPECT_EQ(r.exit_code, exit_code) << r.err;
  EXPECT_EQ(Lines(r.err), 1) << r.err;
  EXPECT_TRUE(Has(r.err, message)) << "expected '" << message << "' in: " << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;
}

// A copy of an HF model directory whose config.json is edited by `edit` (the safetensors file is
// linked, not copied).
fs::path EditedModel(const std::string& tag, const fs::path& model, const std::function<void(json&)>& edit) {
  const fs::path dir = test::MakeTempDir(tag);
  json config = json::parse(test::ReadFile(model / "config.json"));
  edit(config);
  std::ofstream(dir / "config.json") << config.dump();
  fs::create_symlink(model / "model.safetensors", dir / "model.safetensors");
  return dir;
}

// A copy of an HF model directory whose safetensors header text is rewritten by `edit`.
fs::path EditedCheckpoint(const std::string& tag, const fs::path& model,
                          const std::function<std::string(const std::string&)>& edit) {
  const fs::path dir = test::MakeTempDir(tag);
  fs::copy_file(model / "config.json", dir / "config.json");
  const std::string bytes = test::ReadFile(model / "model.safetensors");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<uint8_t>(bytes[static_cast<size_t>(i)]);
  std::string header = edit(bytes.substr(8, n));
  header.resize(std::max<size_t>(header.size(), n), ' ');  // padded as the format allows
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[static_cast<size_t>(i)] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
  std::ofstream(dir / "model.safetensors", std::ios::binary) << out << header << bytes.substr(8 + n);
  return dir;
}

std::string EditHeaderJson(const std::string& header, const std::function<void(json&)>& edit) {
  json j = json::parse(header);
  edit(j);
  return j.dump();
}

// A GGUF fixture with one u32 metadata value replaced.
fs::path PatchedGguf(const std::string& tag, const std::string& key, uint32_t value,
                     const std::string& fixture = "gguf/llama_q-Q8_0.gguf") {
  std::string bytes = test::ReadFile(Fixture(fixture));
  const size_t at = bytes.find(key);
  EXPECT_NE(at, std::string::npos) << key;
  const size_t type_at = at + key.size();
  EXPECT_EQ(bytes[type_at], 4) << key << " is not a u32";  // GGUF_TYPE_UINT32
  for (int i = 0; i < 4; ++i) bytes[type_at + 4 + static_cast<size_t>(i)] = static_cast<char>((value >> (8 * i)) & 0xff);
  const fs::path file = test::MakeTempDir(tag) / "model.gguf";
  std::ofstream(file, std::ios::binary) << bytes;
  return file;
}

// A BPE tokenizer.json of `tokens` tokens ("a", "b", ..., then "<26>", "<27>", ...).
fs::path TinyTokenizer(const fs::path& dir, const std::string& name, int tokens) {
  json vocab = json::object();
  for (int i = 0; i < tokens; ++i) vocab[i < 26 ? std::string(1, static_cast<char>('a' + i)) : absl::StrCat("<", i, ">")] = i;
  const json j = {{"version", "1.0"},
                  {"added_tokens", json::array()},
                  {"normalizer", nullptr},
                  {"pre_tokenizer", nullptr},
                  {"post_processor", nullptr},
                  {"decoder", nullptr},
                  {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", json::array()}}}};
  std::ofstream(dir / name) << j.dump();
  return dir / name;
}

std::string Stories() {
  return "--model " + (kStories / "hf").string() + " --tokenizer " + (kStories / "tok512.bin").string();
}

// --- 1. sizes from options are bounded before anything is allocated from them ---

TEST(CliHardening, HugeContextIsRefusedBeforeAllocating) {
  ExpectError(Doppler("run --model " + kLlama + " --prompt-ids 1,2 -c 4611686018427387904"), 1,
              "-c, --ctx-size 4611686018427387904 is more than the 1048576 tokens doppler supports");
  ExpectError(Doppler("graph --model " + kLlama + " -c 2305843009213693952"), 1,
              "-c, --ctx-size 2305843009213693952 is more than the 1048576 tokens doppler supports");
  ExpectError(Doppler("run --model " + kLlama + " --prompt-ids 1,2 -c 1000000000"), 1, "is more than the 1048576");
}

// Several prompts and the batched engine's options: one clear error each.
TEST(CliHardening, BatchOptionsAndPromptsAreChecked) {
  ExpectError(Doppler("run " + Stories() + " --prompts-file /nonexistent/prompts.txt"), 1, "/nonexistent/prompts.txt");
  ExpectError(Doppler("run --model " + kLlama + " --prompt-ids 1,2 --prompt-ids 3 -np 0"), 2, "-np, --parallel must be 1..1024");
  ExpectError(Doppler("run --model " + kLlama + " --prompt-ids 1,2 --prompt-ids 3 --kv-page 0"), 2, "--kv-page must be 1..4096");
  ExpectError(Doppler("run --model " + kLlama + " --prompt-ids 1,2 --prompt-ids 3,x"), 2, "'x' is not a token id");
  ExpectError(Doppler("run --model " + kLlama + " --prompt-ids 1,2 --prompt-ids 3 --ctx-total 4611686018427387904"), 1,
              "--ctx-total 4611686018427387904 is not between 0 and");
  // A pool with no room for even one sequence's prompt and tokens: refused, naming the option.
  ExpectError(Doppler("run --model " + kLlama + " --prompt-ids 1,2,3,4,5,6,7,8 --prompt-ids 3 -n 40 --ctx-total 16"), 1,
              "--ctx-total");
  ExpectError(Doppler("bench --synthetic tiny --batch 0"), 2, "--batch: 0 is not a batch size");
  ExpectError(Doppler("bench --synthetic tiny --batch 1,x"), 2, "--batch");
}

TEST(CliHardening, ContextBeyondTheTrainedLengthWarns) {
  Result r = Doppler("graph --model " + kLlama + " -c 1024 --stats");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err, "warning: -c, --ctx-size 1024 is more than the 512 tokens the model was trained on "
                   "(max_position_embeddings)\n");
}

// --- 2. the config's sizes are checked against the checkpoint before the graph is built ---

TEST(CliHardening, ConfigLayersAreCheckedAgainstTheCheckpoint) {
  for (int layers : {1000000000, 5, 2}) {
    const fs::path model = EditedModel("layers", kLlama, [&](json& c) { c["num_hidden_layers"] = layers; });
    const std::string want = absl::StrCat("num_hidden_layers is ", layers, " but ", (model / "model.safetensors").string(),
                                          " holds tensors for 3 layers (model.layers.N.*)");
    ExpectError(Doppler("run --model " + model.string() + " --prompt-ids 1,2"), 1, want);
    ExpectError(Doppler("graph --model " + model.string()), 1, want);
    const fs::path out = model / "out.gguf";
    ExpectError(Doppler("convert --model " + model.string() + " --out " + out.string()), 1, want);
    EXPECT_FALSE(fs::exists(out));
  }
}

TEST(CliHardening, ConfigShapesAreCheckedAgainstTheCheckpoint) {
  const fs::path vocab = EditedModel("vocab", kLlama, [](json& c) { c["vocab_size"] = 1000; });
  ExpectError(Doppler("graph --model " + vocab.string()), 1,
              "tensor model.embed_tokens.weight is [512, 128] but the config gives [1000, 128] (vocab_size x hidden_size)");
  const fs::path heads = EditedModel("heads", kLlama, [](json& c) { c["num_key_value_heads"] = 4; });
  ExpectError(Doppler("graph --model " + heads.string()), 1, "tensor model.layers.0.self_attn.k_proj.weight is [");
}

// --- 3. --tokenizer FILE reads that file ---

TEST(CliHardening, TokenizerFileIsReadByItsName) {
  const fs::path dir = test::MakeTempDir("tokenizer_name");
  std::ofstream(dir / "tokenizer.json") << "not the tokenizer";
  const fs::path mine = TinyTokenizer(dir, "mine.json", 3);
  ExpectError(Doppler("run --model " + kLlama + " --tokenizer " + mine.string() + " -p abc"), 1,
              "the tokenizer has 3 tokens but the model's vocabulary 512");
  ExpectError(Doppler("run --model " + kLlama + " --tokenizer " + (dir / "missing.json").string() + " -p abc"), 1,
              (dir / "missing.json").string() + ": no such file");
}

// --- 4. NaN and infinite option values are refused by the parser ---

TEST(CliHardening, NonFiniteOptionValuesAreUsageErrors) {
  for (const char* option : {"--temp nan", "--top-p nan", "--min-p nan", "--repeat-penalty inf", "--temp -inf"}) {
    const std::string value = std::vector<std::string>(absl::StrSplit(option, ' '))[1];
    ExpectError(Doppler("run --model " + kLlama + " --prompt-ids 1,2 " + option), 2,
                "'" + value + "' is not a finite number");
  }
}

// --- 5. safetensors whose tensors overlap or repeat are refused ---

TEST(CliHardening, SafetensorsOverlapAndRepeatsAreRefused) {
  const fs::path overlap = EditedCheckpoint("overlap", kLlama, [](const std::string& h) {
    return EditHeaderJson(h, [](json& j) {
      j["model.norm.weight"]["data_offsets"] = j["model.layers.0.input_layernorm.weight"]["data_offsets"];
    });
  });
  ExpectError(Doppler("run --model " + overlap.string() + " --prompt-ids 1,2"), 1, ") overlap");
  const fs::path repeated = EditedCheckpoint("repeated", kLlama, [](const std::string& h) {
    const json j = json::parse(h);
    const std::string entry = "\"model.norm.weight\":" + j["model.norm.weight"].dump();
    return "{" + entry + "," + h.substr(1);
  });
  ExpectError(Doppler("run --model " + repeated.string() + " --prompt-ids 1,2"), 1,
              "the header names tensor 'model.norm.weight' twice");
}

// --- 6. convert checks its input as run does, and writes only where it may ---

TEST(CliHardening, ConvertChecksTheCheckpoint) {
  const fs::path untied = EditedModel("untied", Fixture("hf/llama_tied"), [](json& c) { c["tie_word_embeddings"] = false; });
  const fs::path out = test::MakeTempDir("convert_checks") / "out.gguf";
  ExpectError(Doppler("convert --model " + untied.string() + " --out " + out.string()), 1, "lm_head.weight");
  const fs::path transposed = EditedCheckpoint("transposed", kLlama, [](const std::string& h) {
    return EditHeaderJson(h, [](json& j) {
      json& shape = j["model.layers.1.mlp.gate_proj.weight"]["shape"];
      shape = json::array({shape[1], shape[0]});
    });
  });
  ExpectError(Doppler("convert --model " + transposed.string() + " --out " + out.string()), 1,
              "tensor 'model.layers.1.mlp.gate_proj.weight' has shape [128, 256] but the config implies [256, 128]");
  const fs::path dir = test::MakeTempDir("convert_vocab");
  ExpectError(Doppler("convert --model " + kLlama + " --tokenizer " + TinyTokenizer(dir, "t.json", 5).string() +
                      " --out " + out.string()),
              1, "the tokenizer has 5 tokens but the model's vocabulary 512");
  EXPECT_FALSE(fs::exists(out));
}

TEST(CliHardening, ConvertReplacesOnlyRegularFilesThatAreNotItsInput) {
  const fs::path model = EditedModel("convert_out", kLlama, [](json&) {});
  const fs::path dir = test::MakeTempDir("convert_targets");
  fs::create_symlink(dir / "elsewhere", dir / "link.gguf");
  ASSERT_EQ(test::RunShell("mkfifo " + (dir / "fifo.gguf").string()).exit_code, 0);
  const std::string convert = "convert --model " + model.string() + " --out ";
  ExpectError(Doppler(convert + (dir / "link.gguf").string()), 1, "is a symbolic link");
  EXPECT_FALSE(fs::exists(dir / "elsewhere"));
  ExpectError(Doppler(convert + (dir / "fifo.gguf").string()), 1, "is not a regular file");
  ExpectError(Doppler(convert + "/dev/full"), 1, "--out /dev/full is not a regular file");
  const std::string config = test::ReadFile(model / "config.json");
  ExpectError(Doppler(convert + (model / "config.json").string()), 1, "refusing to overwrite the input");
  EXPECT_EQ(test::ReadFile(model / "config.json"), config);
}

// --- 7. output that cannot be written is an error ---

TEST(CliHardening, StdoutWriteErrorsFailTheCommand) {
  Result r = test::RunShell("(" + test::DopplerBinary() + " run " + Stories() +
                            " -p 'Once upon a time' -n 8 --temp 0 >/dev/full)");
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_TRUE(Has(r.err, "doppler run: error: cannot write the output: No space left on device")) << r.err;
}

// --- 8. paths that are not regular files, or do not exist ---

TEST(CliHardening, FifosAndMissingPathsAreRefusedWithoutWaiting) {
  const fs::path dir = test::MakeTempDir("fifos");
  ASSERT_EQ(test::RunShell("mkfifo " + (dir / "model.gguf").string() + " " + (dir / "tok.json").string()).exit_code, 0);
  // `timeout` turns a hang into exit code 124.
  Result model = test::RunShell("timeout 60 " + test::DopplerBinary() + " run --model " + (dir / "model.gguf").string() +
                                " --prompt-ids 1,2");
  ExpectError(model, 1, (dir / "model.gguf").string() + ": not a regular file");
  Result tok = test::RunShell("timeout 60 " + test::DopplerBinary() + " run --model " + kLlama + " --tokenizer " +
                              (dir / "tok.json").string() + " -p hi");
  ExpectError(tok, 1, (dir / "tok.json").string() + ": not a regular file");
  ExpectError(Doppler("run --model /no/such/model --prompt-ids 1"), 1,
              "--model /no/such/model: no such file or directory");
}

// --- 9. a tokenizer of another model, and trained lengths of 0 ---

TEST(CliHardening, TokenizerOfAnotherSizeIsRefused) {
  const fs::path dir = test::MakeTempDir("tokenizer_size");
  for (int tokens : {20, 600}) {
    ExpectError(Doppler("run --model " + kLlama + " --tokenizer " + TinyTokenizer(dir, "t.json", tokens).string() + " -p a"),
                1, absl::StrCat("the tokenizer has ", tokens, " tokens but the model's vocabulary 512: it is not this model's"));
  }
}

TEST(CliHardening, ByteLevelVocabularyWithoutEveryByteIsRefused) {
  const fs::path dir = test::MakeTempDir("byte_level");
  const fs::path file = TinyTokenizer(dir, "t.json", 26);
  json j = json::parse(test::ReadFile(file));
  j["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}};
  std::ofstream(file) << j.dump();
  ExpectError(Doppler("run --model " + kLlama + " --tokenizer " + file.string() + " -p a"), 1,
              "the byte-level vocabulary has no symbol for byte 00 (\"\u0100\"): text holding that byte could not be encoded");
}

TEST(CliHardening, TrainedLengthOfZeroIsAnError) {
  const fs::path model = EditedModel("max_pos0", kLlama, [](json& c) { c["max_position_embeddings"] = 0; });
  ExpectError(Doppler("run --model " + model.string() + " --prompt-ids 1,2"), 1,
              "key 'max_position_embeddings' must be positive, got 0");
  ExpectError(Doppler("run --model " + PatchedGguf("ctx0", "llama.context_length", 0).string() + " --prompt-ids 1,2"), 1,
              "llama.context_length");
}

// --- 10. GGUF files are described in GGUF terms; usage errors exit 2, once prefixed ---

TEST(CliHardening, GgufErrorsUseGgufNames) {
  ExpectError(Doppler("run --model " + PatchedGguf("blocks", "llama.block_count", 7).string() + " --prompt-ids 1,2"), 1,
              "llama.block_count is 7 but ");
}

// A mixture of experts' keys and tensors (gguf/lcpp/mixtral edited in place), told in GGUF terms.
TEST(CliHardening, GgufExpertErrorsUseGgufNames) {
  const std::string mixtral = "gguf/lcpp/mixtral-lcpp-f32.gguf";
  auto run = [](const fs::path& model) { return Doppler("run --model " + model.string() + " --prompt-ids 1,2"); };
  ExpectError(run(PatchedGguf("used5", "llama.expert_used_count", 5, mixtral)), 1,
              "llama.expert_used_count is 5: it must be between 1 and llama.expert_count (4)");
  ExpectError(run(PatchedGguf("experts0", "llama.expert_count", 0, mixtral)), 1,
              "llama.expert_used_count is 2 but llama.expert_count is 0");
  // A tensor's name, and a tensor's dims (ggml's order, innermost first: [128, 96, 4] -> [128, 48, 8]).
  auto edited = [&](const std::string& tag, const std::string& tensor, const std::function<void(std::string&, size_t)>& edit) {
    std::string bytes = test::ReadFile(Fixture(mixtral));
    const size_t at = bytes.find(tensor);
    EXPECT_NE(at, std::string::npos) << tensor;
    edit(bytes, at + tensor.size());  // where the tensor's dimension count follows its name
    const fs::path file = test::MakeTempDir(tag) / "model.gguf";
    std::ofstream(file, std::ios::binary) << bytes;
    return file;
  };
  ExpectError(run(edited("exps_missing", "blk.1.ffn_down_exps.weight", [](std::string& b, size_t end) { b[end - 8] = 'z'; })), 1,
              "tensor blk.1.ffn_down_exps.weight is missing: llama.expert_count is 4");
  ExpectError(run(edited("exps_shape", "blk.0.ffn_up_exps.weight",
                         [](std::string& b, size_t end) {
                           b[end + 4 + 8] = 48;   // dims[1]: 96 -> 48 (little-endian u64s after the u32 count)
                           b[end + 4 + 16] = 8;   // dims[2]: 4 -> 8
                         })),
              1,
              "tensor blk.0.ffn_up_exps.weight is [8, 48, 128] but the metadata gives [4, 96, 128] "
              "(llama.expert_count x llama.feed_forward_length x llama.embedding_length)");
}

TEST(CliHardening, UsageErrorsExitTwoWithOnePrefix) {
  Result unknown = Doppler("run --model " + kLlama + " --prompt-ids 1 --frobnicate");
  EXPECT_EQ(unknown.exit_code, 2);
  EXPECT_EQ(unknown.err, "doppler run: error: unknown option '--frobnicate' (see doppler run --help)\n");
  ExpectError(Doppler("run --model " + kLlama + " --prompt-ids 1 -n"), 2, "doppler run: error: -n needs a value (N)");
  ExpectError(Doppler("convert --model " + kLlama), 2, "--out FILE is required");
  ExpectError(Doppler("frobnicate"), 2, "unknown command 'frobnicate'");
}

// doppler serve's own numbers: usage errors before it listens or loads anything.
TEST(CliHardening, ServeOptionsAreCheckedBeforeListening) {
  ExpectError(Doppler("serve --threads-http 0"), 2, "doppler serve: error: --threads-http must be between 1 and 65536");
  ExpectError(Doppler("serve --threads-http many"), 2, "--threads-http: 'many' is not an integer");
  ExpectError(Doppler("serve --port 70000"), 2, "--port must be between 0 and 65535");
  ExpectError(Doppler("serve --max-queue -1"), 2, "--max-queue must be between 0 and 1048576");
}

// --- llama.cpp's spellings ---

TEST(CliHardening, OldSpellingsNameTheNewOnes) {
  ExpectError(Doppler("run --model " + kLlama + " --prompt-ids 1 -t 8"), 2,
              "unknown option '-t': the temperature is --temp (as in llama.cpp, where -t is the number of threads)");
  ExpectError(Doppler("run --model " + kLlama + " --prompt-ids 1 --temperature 0"), 2, "the temperature is --temp");
  ExpectError(Doppler("run --model " + kLlama + " --prompt-ids 1 --ctx 64"), 2, "the context size is -c, --ctx-size");
  ExpectError(Doppler("run --model " + kLlama + " --chat --system hi"), 2, "the system prompt is -sys, --system-prompt");
  ExpectError(Doppler("run --model " + kLlama + " --prompt-ids 1 --stop x"), 2, "a stop string is -r, --reverse-prompt");
}

TEST(CliHardening, VersionIsPrinted) {
  for (const char* args : {"--version", "run --version"}) {
    Result r = Doppler(args);
    EXPECT_EQ(r.exit_code, 0);
    EXPECT_EQ(r.out, "doppler 0.1.0\n");
  }
}

constexpr char kStory[] = "Once upon a time, there was a little girl named Lily. She loved to play outsid\n";

TEST(CliHardening, PromptFromFileStdinAndEscapes) {
  const fs::path file = test::MakeTempDir("prompt_file") / "prompt.txt";
  std::ofstream(file) << "Once upon a time";
  const std::string run = test::DopplerBinary() + " run " + Stories() + " --temp 0 -n 20";
  EXPECT_EQ(test::RunShell(run + " -f " + file.string()).out, kStory);
  // (RunShell gives the command /dev/null as input: the pipe is inside the parentheses.)
  EXPECT_EQ(test::RunShell("(printf 'Once upon a time' | " + run + " -p -)").out, kStory);
  EXPECT_EQ(test::RunShell("(printf 'Once upon a time' | " + run + ")").out, kStory);
  Result escaped = test::RunShell(run + " -n 1 -e -p 'Once\\tupon'");
  ASSERT_EQ(escaped.exit_code, 0) << escaped.err;
  EXPECT_EQ(escaped.out.rfind("Once\tupon", 0), 0u) << escaped.out;
}

TEST(CliHardening, NPredictMinusOneRunsUntilTheContextIsFull) {
  Result r = Doppler("run " + Stories() + " -p 'Once upon a time' --temp 0 -n -1 -c 40 --ignore-eos");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(Has(r.err, "stop: context full")) << r.err;
}

TEST(CliHardening, SeedMinusOneIsRandomAndReported) {
  Result r = Doppler("run " + Stories() + " -p 'Once' -n 4 --seed -1");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(Has(r.err, "; seed ")) << r.err;
  EXPECT_FALSE(Has(r.err, "seed -1")) << r.err;
  ExpectError(Doppler("run " + Stories() + " -p 'Once' -n 4 --seed -2"), 1, "--seed must be -1 (random) or in [0, ");
}

TEST(CliHardening, ReversePromptStops) {
  Result r = Doppler("run " + Stories() + " -p 'Once upon a time' --temp 0 -n 20 -r 'little'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "Once upon a time, there was a \n");
  EXPECT_TRUE(Has(r.err, "stop: stop string")) << r.err;
}

// --- 11. Ctrl-C ---

// Runs a bash script with $RUN (doppler run and the given arguments, split at spaces: no quoting)
// reading the FIFO $D/in
// (opened for writing as fd 3) and writing $D/out and $D/err; the script's waits are bounded by
// `timeout` (exit 124). The script ends with `wait $pid`: its exit code is doppler's.
Result Script(const std::string& run_args, const std::string& body) {
  const fs::path dir = test::MakeTempDir("sigint");
  const std::string script = "D=" + dir.string() + "\nRUN=\"" + test::DopplerBinary() + " run " + run_args + "\"\n" +
                             "mkfifo $D/in\n$RUN <$D/in >$D/out 2>$D/err & pid=$!\nexec 3>$D/in\n" + body;
  std::ofstream(dir / "script.sh") << script;
  const int status = std::system(("timeout 300 bash " + (dir / "script.sh").string()).c_str());
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, test::ReadFile(dir / "out"), test::ReadFile(dir / "err")};
}

const std::string kEndless = Stories() + " --temp 0 -n -1 -c 100000 --ignore-eos --gpu-loop 1";

TEST(CliHardening, CtrlCStopsTheGenerationWithASummary) {
  Result r = Script("-p Once " + kEndless, R"(
until [ -s $D/out ]; do sleep 0.1; done
kill -INT $pid
wait $pid
)");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  ASSERT_GT(r.out.size(), 5u) << r.err;
  EXPECT_EQ(r.out.rfind("Once", 0), 0u) << r.out;
  EXPECT_EQ(r.out.back(), '\n');
  EXPECT_TRUE(Has(r.err, "(stopping the generation; Ctrl-C again exits)")) << r.err;
  EXPECT_TRUE(Has(r.err, "stop: interrupted")) << r.err;
}

TEST(CliHardening, CtrlCInAChatEndsTheReplyAndTheChatGoesOn) {
  Result r = Script("--chat --chat-format mistral " + kEndless, R"(
printf 'Tell me a story\n' >&3
until [ -s $D/out ]; do sleep 0.1; done
kill -INT $pid
until grep -q 'stop: interrupted' $D/err; do sleep 0.1; done
size=$(stat -c %s $D/out)
printf 'And then\n' >&3
until [ $(stat -c %s $D/out) -gt $((size + 8)) ]; do sleep 0.1; done
kill -INT $pid
until [ $(grep -c 'stop: interrupted' $D/err) -ge 2 ]; do sleep 0.1; done
printf '\n' >&3
wait $pid
)");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  const std::vector<std::string> summaries = absl::StrSplit(r.err, "prompt: ");
  EXPECT_EQ(summaries.size(), 3u) << r.err;  // both turns answered, each ended by Ctrl-C
}

TEST(CliHardening, SecondCtrlCExits) {
  Result r = Script("--chat --chat-format mistral " + kEndless, R"(
until grep -q '> ' $D/err; do sleep 0.1; done
kill -INT $pid
sleep 0.5
kill -INT $pid
wait $pid
)");
  EXPECT_EQ(r.exit_code, 130) << r.err;
  EXPECT_TRUE(Has(r.err, "interrupted twice: exiting")) << r.err;
}

TEST(CliHardening, ChatDropsTheOldestTurnsWhenTheContextIsFull) {
  const std::string run = test::DopplerBinary() + " run --chat --chat-format mistral " + Stories() +
                          " --temp 0 -n 12 -c 64 -sys 'Be brief'";
  Result r = test::RunShell("(printf 'Tell me a story\\nAnd then\\nWhat next\\nThe end\\n\\n' | " + run + ")");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::vector<std::string> summaries = absl::StrSplit(r.err, "prompt: ");
  EXPECT_EQ(summaries.size(), 5u) << r.err;  // four turns answered
  EXPECT_TRUE(Has(r.err, "dropped, the system prompt kept")) << r.err;
}

TEST(CliHardening, TemplateChatDropsTheOldestTurnsWhenTheContextIsFull) {
  // The same through a chat template (the path a model with its own template takes).
  const fs::path dir = test::MakeTempDir("template_chat_full");
  std::ofstream(dir / "chat.jinja")
      << "{% for m in messages %}[{{ m.role }}] {{ m.content }}\n{% endfor %}{% if add_generation_prompt %}[assistant] "
         "{% endif %}";
  const std::string run = test::DopplerBinary() + " run --chat --chat-template " + (dir / "chat.jinja").string() + " " +
                          Stories() + " --temp 0 -n 12 -c 64 -sys 'Be brief'";
  Result r = test::RunShell("(printf 'Tell me a story\\nAnd then\\nWhat next\\nThe end\\n\\n' | " + run + ")");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::vector<std::string> summaries = absl::StrSplit(r.err, "prompt: ");
  EXPECT_EQ(summaries.size(), 5u) << r.err;  // four turns answered
  EXPECT_TRUE(Has(r.err, "dropped, the system prompt kept")) << r.err;
}

// --- 12. the plans are run once before anything is timed, under the progress line ---

TEST(CliHardening, PlansRunOnceBeforeTheTimerUnderTheProgressLine) {
  // On a terminal (script(1) gives the command one) the progress line covers compiling each plan
  // and its first run, where drivers finish compiling, and both come before the prompt is echoed
  // and timed.
  const std::string run = test::DopplerBinary() + " run " + Stories() + " -p Once --temp 0 -n 4";
  Result r = test::RunShell("script -qec \"" + run + "\" /dev/null");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const size_t compiled = r.out.find("compiling the prefill plan");
  const size_t warmed = r.out.find("first run of the plans (the driver compiles at first use)... done");
  const size_t prompt = r.out.find("Once");
  const size_t summary = r.out.find("prompt: ");
  ASSERT_NE(compiled, std::string::npos) << r.out;
  ASSERT_NE(warmed, std::string::npos) << r.out;
  EXPECT_LT(compiled, warmed) << r.out;
  EXPECT_LT(warmed, prompt) << r.out;
  EXPECT_LT(prompt, summary) << r.out;
}

}  // namespace
}  // namespace doppler
