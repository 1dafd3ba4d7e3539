// The profile report of a step: GPU time of every dispatch (vk::Plan::RunProfiled), per node and
// per op kind, with the bytes each dispatch reads and writes and the GB/s that gives.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "backend_vk/plan.h"
#include "graph/graph.h"
#include "nlohmann/json.hpp"

namespace doppler::runtime {

// Bytes a dispatch moves in a step of `tokens` tokens whose KV length (position + tokens) is
// `kv_length`: every value it binds, counted once — weights whole (an embedding table: only the
// rows it gathers; a stacked expert weight: only the chosen experts), activations for the step's tokens, a KV cache for the rows it reads
// (kv_length) or writes (tokens).
struct DispatchBytes {
  uint64_t weights = 0;      // params and load-time fused weights
  uint64_t activations = 0;  // everything else read or written (KV cache included)
  uint64_t total() const { return weights + activations; }
};
DispatchBytes BytesOf(const graph::Graph& g, const vk::PlannedDispatch& d, int64_t tokens, int64_t kv_length);

// Weight bytes a step of the plan reads (each weight once; of a stacked expert weight, the share
// of the experts its tokens choose, top-k a token): the bandwidth floor's numerator.
uint64_t WeightBytesPerStep(const graph::Graph& g, const vk::Plan& plan, int64_t tokens);

struct ProfileNode {
  std::string label, op, kernel;  // kernel: family.variant
  int level = 0;                  // the barrier level it runs in, with the other nodes of that level
  // Mean over the profiled steps: its share of its level's time, less its share of a timestamp's
  // cost (ProfileReport::timestamp_ns).
  double ns = 0;
  DispatchBytes bytes;
};

struct ProfileKind {
  std::string op;
  int count = 0;
  double ns = 0;
  uint64_t bytes = 0;
};

struct ProfileReport {
  std::vector<ProfileNode> nodes;  // dispatch order
  std::vector<ProfileKind> kinds;  // by time, largest first
  double total_ns = 0;             // sum of the nodes' times
  int levels = 0;                  // barrier levels (a level's nodes run concurrently)
  // What a timestamp after each level costs: the steps timed that way (timestamped_ns, the levels'
  // times summed) against the same steps timed at their ends only (bare_ns), over the levels.
  // Each level's time is less this, so that the nodes sum to about bare_ns.
  double timestamped_ns = 0, bare_ns = 0, timestamp_ns = 0;
  double measured_step_ns = 0;     // the step's wall time without profiling (0: not measured)
  int steps = 0;                   // profiled steps averaged
  std::string step = "a decode step";  // what was profiled, for the title
};

// `samples`: several profiled steps of `plan`; `kv_length` the KV length of a typical one.
ProfileReport MakeProfile(const graph::Graph& g, const vk::Plan& plan, const std::vector<vk::ProfiledStep>& samples,
                          int64_t kv_length, double measured_step_ns);

// The table (per op kind, then per node) and the total beside the measured step time.
std::string FormatProfile(const ProfileReport& report);
nlohmann::json ProfileJson(const ProfileReport& report);

// What the driver reports about each kernel variant's compiled code (registers, spills...) in the
// given plans, a line a variant (each once), under a title; "" where the driver does not support
// VK_KHR_pipeline_executable_properties.
std::string FormatDriverStatistics(const std::vector<const vk::Plan*>& plans);

}  // namespace doppler::runtime
