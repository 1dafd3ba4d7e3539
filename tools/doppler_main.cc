// doppler: the command line. Dispatches to a subcommand and prints its error, if any, once.
#include <cstdio>
#include <string>
#include <vector>

#include "tools/cli_args.h"
#include "tools/commands.h"

namespace {

constexpr char kUsage[] =
    "usage: doppler <command> [options]\n"
    "\n"
    "commands:\n"
    "  run         generate text (or token ids), or chat\n"
    "  serve       an OpenAI-compatible HTTP server with a web chat page\n"
    "  bench       prefill and decode speed (llama-bench style), of a model or a synthetic one; --profile\n"
    "  logits      write the float32 logits of a prompt and of decode steps to a file\n"
    "  perplexity  perplexity of a text file\n"
    "  convert     convert an HF model to a GGUF file (f16, q8_0, q4_k_m, ...)\n"
    "  template    render a chat template with the variables of a JSON file\n"
    "  graph       print a model's graph before/after the passes, its kernels' GLSL, step statistics\n"
    "  devices     list Vulkan devices and their features\n"
    "\n"
    "doppler <command> --help shows the options of a command; doppler --version the version.\n"
    "Exit codes: 0 success, 1 an error, 2 a malformed command line.\n";

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h" ||
      std::string(argv[1]) == "help") {
    std::printf("%s", kUsage);
    return argc < 2 ? 2 : 0;
  }
  const std::string command = argv[1];
  if (command == "--version") {
    std::printf("doppler %s\n", doppler::cli::kVersion);
    return 0;
  }
  const std::vector<std::string> args(argv + 2, argv + argc);
  absl::StatusOr<int> rc;
  if (command == "run") {
    rc = doppler::cli::RunCommand(args);
  } else if (command == "serve") {
    rc = doppler::cli::ServeCommand(args);
  } else if (command == "bench") {
    rc = doppler::cli::BenchCommand(args);
  } else if (command == "logits") {
    rc = doppler::cli::LogitsCommand(args);
  } else if (command == "perplexity") {
    rc = doppler::cli::PerplexityCommand(args);
  } else if (command == "convert") {
    rc = doppler::cli::ConvertCommand(args);
  } else if (command == "graph") {
    rc = doppler::cli::GraphCommand(args);
  } else if (command == "template") {
    rc = doppler::cli::TemplateCommand(args);
  } else if (command == "devices") {
    rc = doppler::cli::DevicesCommand(args);
  } else {
    std::fprintf(stderr, "doppler: unknown command '%s' (commands: run, serve, bench, logits, perplexity, convert, template, graph, devices; see doppler --help)\n",
                 command.c_str());
    return 2;
  }
  if (!rc.ok()) {
    std::fprintf(stderr, "doppler %s: error: %s\n", command.c_str(), std::string(rc.status().message()).c_str());
    return doppler::cli::IsUsageError(rc.status()) ? 2 : 1;
  }
  return *rc;
}
