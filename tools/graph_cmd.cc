// doppler graph: a model's step graph before and after the pass pipeline, as text, JSON or DOT;
// the GLSL of its kernels; and per-step statistics (dispatches, barriers, bytes) computed without
// a GPU from the device-independent schedule and the memory plan.
#include <algorithm>
#include <cstdio>
#include <set>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "backend_vk/schedule.h"
#include "codegen/kernel.h"
#include "codegen/known_targets.h"
#include "codegen/lowering.h"
#include "graph/layout.h"
#include "graph/printer.h"
#include "passes/memory_plan.h"
#include "passes/pass.h"
#include "runtime/decode_activations.h"
#include "runtime/model_source.h"
#include "runtime/plan_compile.h"
#include "tools/cli_args.h"
#include "tools/cli_engine.h"
#include "tools/cli_graph_format.h"
#include "tools/commands.h"

namespace doppler::cli {
namespace {

using graph::OpKind;


CommandSpec Spec() {
  return CommandSpec{
      "graph",
      "Print a model's step graph after the pass pipeline (or after one pass, or every pass), as text, JSON\n"
      "(docs/graph-format.md) or Graphviz DOT; the GLSL of its kernels (--emit-glsl); its dispatches (--lowered);\n"
      "or statistics of a decode step and a prefill chunk before and after the pipeline (--stats). No GPU is\n"
      "needed. With --stats, --emit-glsl or --lowered the graph itself is printed only when --format or\n"
      "--dump-after is given.",
      {
          {"model", "m", "PATH", "HF model directory (config.json) or a GGUF file", ""},
          {"synthetic", "", "NAME", "instead of --model: the shapes of a synthetic model (doppler bench --synthetic's names)", ""},
          {"passes", "", "LIST", "the pass pipeline: default, none, or pass names, comma-separated", "default"},
          {"dump-after", "", "PASS",
           "print the graph after this pass of the pipeline instead of the final graph; all: the input graph and "
           "the graph after every pass",
           ""},
          {"format", "", "FMT", "text, json or dot", "text"},
          {"emit-glsl", "", "",
           "print the GLSL of every kernel of the final graph (bucket: --tokens if given, else 1: a decode step, as "
           "the engine runs it: its block-quantized matmuls take x as --decode-activations says for --target)",
           ""},
          {"lowered", "", "",
           "print the dispatches of a plan of the final graph, one a line: family.variant, the nodes it computes, its "
           "bindings (value, read or write, bytes) and workgroups (bucket: --tokens if given, else 1: a decode step, "
           "as for --emit-glsl)",
           ""},
          {"stats", "", "", "nodes, dispatches, barriers, weight and activation bytes of a decode step (T=1) and a "
                            "prefill chunk (T=--tokens), before and after the pipeline",
           ""},
          {"target", "", "CLASS",
           "the device the kernels of --stats, --emit-glsl and --lowered are made for, without one: nvidia, amd, intel, "
           "lavapipe or generic (codegen/known_targets.h); without it the default caps (codegen::TargetCaps{}: "
           "subgroups of 32, 16 KiB of shared memory, 128 invocations, no optional feature)",
           ""},
          {"tokens", "", "T", "the prefill chunk: the token bucket of --stats, and the graph's most tokens per step",
           "256"},
          {"dtype", "", "TYPE", "weight storage type for an HF model: f16, bf16 or f32", "f16"},
          {"quant", "", "TYPE", "quantize an HF model's matrices as `doppler run --quant` would: q8_0, q6_k, q5_k_m, q4_k_m, q4_0, iq4_xs", ""},
          {"ctx-size", "c", "N", "context size (default: the model's trained length, at most 4096)", ""},
          DecodeActivationsOptionSpec(),
      }};
}

// The step graph the engine would compile, before its pass pipeline: the model, then the
// greedy token choice (runtime::OpenModel resolves the same options as doppler run).
absl::StatusOr<graph::Graph> BuildStepGraph(const ParsedArgs& args, int64_t& tokens) {
  absl::StatusOr<runtime::EngineOptions> options = EngineOptionsFromArgs(args);
  if (!options.ok()) return options.status();
  options->prefill_chunk = tokens;
  absl::StatusOr<runtime::OpenedModel> model = runtime::OpenModel(*options);
  if (!model.ok()) return model.status();
  tokens = options->prefill_chunk;
  return runtime::StepGraph(model->config, model->build, runtime::SamplingOptions{}, "none");
}

struct StepStats {
  int nodes = 0, dispatches = 0, barriers = 0;
  uint64_t weight_bytes = 0;  // params and concat_rows the kernels read (an embedding table: its T rows)
  size_t arena_bytes = 0, value_bytes = 0;
};

struct PlanPlaces {
  runtime::LoweredStep step;                 // the dispatches and the memory plan
  std::vector<vk::ValueLocation> locations;  // by value id
};

// The dispatches of a plan of `g` for a bucket of `tokens`, and where it would put every value: the
// engine's bindings (a decode step reads its token from the buffer the previous step's choice
// wrote) and the memory plan.
// Buffers are numbered: 1 the token, 2 the prompt, 3 + id a source's own.
absl::StatusOr<PlanPlaces> LocateForPlan(const graph::Graph& g, const codegen::TargetCaps& caps, int64_t tokens,
                                          bool decode) {
  constexpr uint64_t kTokenBuffer = 1, kPromptBuffer = 2;
  std::map<graph::ValueId, uint64_t> external;
  std::set<graph::ValueId> outside;
  for (const graph::Node& n : g.nodes()) {
    if (n.kind == OpKind::kInput) {
      external[n.id] = decode ? kTokenBuffer : kPromptBuffer;
    } else if (passes::IsExternalKind(n.kind)) {
      external[n.id] = 3 + static_cast<uint64_t>(n.id);
    }
  }
  if (std::optional<graph::ValueId> next = g.output("next_token")) {
    external[*next] = kTokenBuffer;
    outside.insert(*next);
  }
  absl::StatusOr<runtime::LoweredStep> step = runtime::LowerStep(g, caps, tokens, outside);
  if (!step.ok()) return step.status();
  absl::StatusOr<std::vector<vk::ValueLocation>> locations =
      vk::LocateValues(g, tokens, vk::ArenaLayout{step->memory.arena_bytes, step->memory.offset}, external);
  if (!locations.ok()) return locations.status();
  return PlanPlaces{*std::move(step), *std::move(locations)};
}

// What a plan of `g` for a bucket of `tokens` would record, without a device: the memory plan, the
// kernels' bindings and the barrier schedule.
absl::StatusOr<StepStats> Measure(const graph::Graph& g, const codegen::TargetCaps& caps, int64_t tokens, bool decode) {
  StepStats st;
  st.nodes = g.size();
  absl::StatusOr<PlanPlaces> memory = LocateForPlan(g, caps, tokens, decode);
  if (!memory.ok()) return memory.status();
  st.arena_bytes = memory->step.memory.arena_bytes;
  st.value_bytes = memory->step.memory.sum_of_values;
  std::vector<vk::DispatchAccess> accesses;
  std::map<graph::ValueId, uint64_t> weight_read;
  for (const codegen::Dispatch& d : memory->step.dispatches) {
    const graph::Node& n = g.node(d.node);
    const codegen::Kernel& k = d.kernel;
    accesses.push_back(vk::AccessOf(k, memory->locations));
    for (const codegen::KernelArg& a : k.args) {
      const graph::Node& w = g.node(a.value);
      if (w.kind != OpKind::kParam && w.kind != OpKind::kConcatRows) continue;
      uint64_t bytes = graph::ValueBytes(w, tokens);
      if (n.kind == OpKind::kEmbedding && a.value == n.inputs[0] && !w.type.shape.empty() && w.type.shape[0].value > 0) {
        const int64_t rows = w.type.shape[0].value;
        bytes = bytes / static_cast<uint64_t>(rows) * static_cast<uint64_t>(std::min(tokens, rows));
      }
      weight_read[a.value] = std::max(weight_read[a.value], bytes);
    }
  }
  st.dispatches = static_cast<int>(accesses.size());
  for (bool b : vk::PlaceBarriers(accesses)) st.barriers += b ? 1 : 0;
  for (const auto& [id, bytes] : weight_read) st.weight_bytes += bytes;
  return st;
}

// One line per dispatch of a plan of `g` for a bucket of `tokens`: its index, family.variant, the
// nodes it computes, its bindings (value, r or w, and where: the arena's bytes, or buffer B, bound
// whole) and its workgroups.
absl::Status PrintLowered(const graph::Graph& g, const codegen::TargetCaps& caps, int64_t tokens) {
  absl::StatusOr<PlanPlaces> memory = LocateForPlan(g, caps, tokens, tokens == 1);
  if (!memory.ok()) return memory.status();
  const std::vector<codegen::Dispatch>* dispatches = &memory->step.dispatches;
  std::printf("# %zu dispatches, T=%lld: family.variant | nodes computed | bindings | workgroups | config\n", dispatches->size(),
              static_cast<long long>(tokens));
  for (size_t i = 0; i < dispatches->size(); ++i) {
    const codegen::Dispatch& d = (*dispatches)[i];
    std::vector<std::string> covers, bindings;
    for (graph::ValueId id : d.covers) {
      covers.push_back(absl::StrCat("%", id, " ", graph::OpName(g.node(id).kind), " ", g.node(id).label));
    }
    for (const codegen::KernelArg& a : d.kernel.args) {
      const vk::ValueLocation& l = memory->locations[static_cast<size_t>(a.value)];
      const std::string where = l.buffer != vk::kArenaBuffer ? absl::StrCat("buffer ", l.buffer)
                                                             : absl::StrCat("arena [", l.offset, ",", l.offset + l.bytes, ")");
      bindings.push_back(absl::StrCat("%", a.value, " ", a.written ? "w" : "r", " ", where));
    }
    const std::string line =
        absl::StrCat("#", i, " ", d.kernel.family, ".", d.kernel.variant, " | ", absl::StrJoin(covers, ", "), " | ",
                     absl::StrJoin(bindings, ", "), " | ", d.kernel.groups[0], "x", d.kernel.groups[1], "x",
                     d.kernel.groups[2], " | ", codegen::tuning::ConfigText(d.kernel.config), "\n");
    std::fwrite(line.data(), 1, line.size(), stdout);
  }
  return absl::OkStatus();
}

std::string Title(const std::string& after, bool changed) {
  return after == "input" ? "input" : absl::StrCat("after ", after, changed ? "" : " (unchanged)");
}

// `header`: a dump (--dump-after) rather than the final graph.
void PrintGraph(const graph::Graph& g, const std::string& format, const std::vector<std::string>& pipeline,
                const std::string& after, bool changed, bool header) {
  std::string out;
  if (format == "json") {
    out = GraphToJson(g, pipeline, after, changed) + "\n";
  } else if (format == "dot") {
    out = GraphToDot(g, header ? Title(after, changed)
                               : pipeline.empty() ? "input (no passes)"
                                                  : absl::StrCat("after ", absl::StrJoin(pipeline, ", ")));
  } else {
    if (header) out = absl::StrCat("# ", Title(after, changed), ": ", g.size(), " nodes\n");
    out += graph::ToText(g);
  }
  std::fwrite(out.data(), 1, out.size(), stdout);
}

}  // namespace

absl::StatusOr<int> GraphCommand(const std::vector<std::string>& argv) {
  const CommandSpec spec = Spec();
  absl::StatusOr<std::optional<ParsedArgs>> parsed = ParseOrHelp(spec, argv);
  if (!parsed.ok()) return parsed.status();
  if (!parsed->has_value()) return 0;
  const ParsedArgs& args = **parsed;

  const std::string format = args.Get("format");
  if (format != "text" && format != "json" && format != "dot") {
    return absl::InvalidArgumentError(absl::StrCat("--format: '", format, "' is not one of text, json, dot"));
  }
  absl::StatusOr<int64_t> tokens = args.GetInt("tokens");
  if (!tokens.ok()) return tokens.status();
  if (*tokens <= 0) return absl::InvalidArgumentError("--tokens must be positive");
  absl::StatusOr<codegen::TargetCaps> caps =
      args.Has("target") ? codegen::KnownTargetCaps(args.Get("target")) : codegen::TargetCaps{};
  if (!caps.ok()) return absl::InvalidArgumentError(absl::StrCat("--target: ", caps.status().message()));
  absl::StatusOr<passes::PassManager> pm = passes::PassManager::Parse(args.Get("passes"));
  if (!pm.ok()) return pm.status();
  const std::vector<std::string> pipeline = pm->names();
  const std::string dump_after = args.Get("dump-after");
  if (args.Has("dump-after") && dump_after != "all" &&
      std::find(pipeline.begin(), pipeline.end(), dump_after) == pipeline.end()) {
    return absl::InvalidArgumentError(absl::StrCat("--dump-after: pass '", dump_after, "' is not in the pipeline (",
                                                   pipeline.empty() ? "empty" : absl::StrJoin(pipeline, ", "), ")"));
  }

  absl::StatusOr<runtime::DecodeActivations> activations = DecodeActivationsFromArgs(args);
  if (!activations.ok()) return activations.status();
  const std::string target = args.Has("target") ? absl::StrCat("--target ", args.Get("target")) : "the default target (no --target)";
  // A decode step's graph, as the engine's decode plans take it (runtime/decode_activations.h).
  auto decode_graph = [&](const graph::Graph& g) {
    return runtime::WithDecodeActivations(g, *activations, *caps, target);
  };

  int64_t prefill = *tokens;
  absl::StatusOr<graph::Graph> input = BuildStepGraph(args, prefill);
  if (!input.ok()) return input.status();
  const bool print_graph = (!args.Has("stats") && !args.Has("emit-glsl") && !args.Has("lowered")) || args.Has("format") ||
                           args.Has("dump-after");

  graph::Graph g = *input;
  if (print_graph && dump_after == "all") PrintGraph(g, format, pipeline, "input", false, true);
  std::string last = "input";
  bool last_changed = false;
  absl::Status s = pm->Run(g, [&](const std::string& pass, const graph::Graph& now, bool changed) {
    last = pass;
    last_changed = changed;
    if (print_graph && (dump_after == "all" || dump_after == pass)) PrintGraph(now, format, pipeline, pass, changed, true);
  });
  if (!s.ok()) return s;
  std::fflush(stdout);
  if (print_graph && !args.Has("dump-after")) PrintGraph(g, format, pipeline, last, last_changed, false);

  const int64_t bucket = args.Has("tokens") ? prefill : 1;
  // The decode step's graph where a decode step is lowered (and an error in it only then).
  const bool decodes = (bucket == 1 && (args.Has("emit-glsl") || args.Has("lowered"))) || args.Has("stats");
  absl::StatusOr<graph::Graph> decode = decodes ? decode_graph(g) : absl::StatusOr<graph::Graph>(graph::Graph());
  if (!decode.ok()) return decode.status();
  const graph::Graph& planned = bucket == 1 ? *decode : g;
  if (args.Has("emit-glsl")) {
    absl::StatusOr<std::vector<codegen::Dispatch>> dispatches = codegen::Lower(planned, *caps, bucket);
    if (!dispatches.ok()) return dispatches.status();
    for (const codegen::Dispatch& d : *dispatches) {
      const graph::Node& n = planned.node(d.node);
      const codegen::Kernel& k = d.kernel;
      std::printf("// %%%d %s %s: %s.%s, T=%lld, workgroups %ux%ux%u\n%s\n", n.id, graph::OpName(n.kind), n.label.c_str(),
                  k.family.c_str(), k.variant.c_str(), static_cast<long long>(bucket), k.groups[0], k.groups[1],
                  k.groups[2], k.glsl.c_str());
    }
  }
  if (args.Has("lowered")) {
    if (absl::Status s = PrintLowered(planned, *caps, bucket); !s.ok()) return s;
  }

  if (args.Has("stats")) {
    const std::string after_name = args.Get("passes");
    std::printf("%-8s %5s  %-10s %6s %11s %9s %14s %12s %12s\n", "step", "T", "passes", "nodes", "dispatches",
                "barriers", "weight_bytes", "arena_bytes", "value_bytes");
    absl::StatusOr<graph::Graph> decode_input = decode_graph(*input);
    if (!decode_input.ok()) return decode_input.status();
    for (const auto& [step, t] : {std::pair<const char*, int64_t>{"decode", 1}, {"prefill", prefill}}) {
      const bool is_decode = std::string(step) == "decode";
      for (const auto& [name, step_graph] : {std::pair<std::string, const graph::Graph*>{"none", is_decode ? &*decode_input : &*input},
                                             {after_name, is_decode ? &*decode : &g}}) {
        absl::StatusOr<StepStats> st = Measure(*step_graph, *caps, t, is_decode);
        if (!st.ok()) return absl::Status(st.status().code(), absl::StrCat(step, " with passes ", name, ": ", st.status().message()));
        std::printf("%-8s %5lld  %-10s %6d %11d %9d %14llu %12zu %12zu\n", step, static_cast<long long>(t), name.c_str(),
                    st->nodes, st->dispatches, st->barriers, static_cast<unsigned long long>(st->weight_bytes),
                    st->arena_bytes, st->value_bytes);
      }
    }
  }
  return 0;
}

}  // namespace doppler::cli
