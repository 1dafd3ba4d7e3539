#include "runtime/profile.h"

#include <algorithm>
#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "graph/layout.h"

namespace doppler::runtime {
namespace {

using graph::OpKind;

bool IsWeight(OpKind k) { return k == OpKind::kParam || k == OpKind::kConcatRows || k == OpKind::kConst; }
bool IsCache(OpKind k) { return k == OpKind::kState || k == OpKind::kCacheWrite; }

uint64_t RowsOf(const graph::Node& n, uint64_t bytes, int64_t rows) {
  if (n.type.shape.empty() || n.type.shape[0].value <= 0) return bytes;
  const int64_t all = n.type.shape[0].value;
  return bytes / static_cast<uint64_t>(all) * static_cast<uint64_t>(std::clamp<int64_t>(rows, 0, all));
}

// The bytes of weight `v` that `node` reads in a step of `tokens` tokens: an embedding table only
// the rows it gathers, a stacked expert weight only the experts the tokens choose (top-k a token,
// each expert at most once).
uint64_t WeightBytesRead(const graph::Graph& g, const graph::Node& node, const graph::Node& v, int64_t tokens) {
  const uint64_t bytes = graph::ValueBytes(v, tokens);
  if (node.kind == OpKind::kEmbedding && v.id == node.inputs[0]) return RowsOf(v, bytes, tokens);
  if (node.kind == OpKind::kExpertMatMul && v.id == node.inputs[1]) {
    const int64_t experts = node.attrs.Int("experts"), top_k = g.node(node.inputs[2]).type.shape[1].value;
    return bytes / static_cast<uint64_t>(experts) * static_cast<uint64_t>(std::min(experts, tokens * top_k));
  }
  return bytes;
}

double GBps(uint64_t bytes, double ns) { return ns > 0 ? static_cast<double>(bytes) / ns : 0; }

}  // namespace

DispatchBytes BytesOf(const graph::Graph& g, const vk::PlannedDispatch& d, int64_t tokens, int64_t kv_length) {
  DispatchBytes b;
  const graph::Node& node = g.node(d.node);
  std::set<graph::ValueId> seen;
  for (const codegen::KernelArg& a : d.args) {
    if (!seen.insert(a.value).second) continue;
    const graph::Node& v = g.node(a.value);
    uint64_t bytes = graph::ValueBytes(v, tokens);
    if (IsWeight(v.kind)) {
      b.weights += WeightBytesRead(g, node, v, tokens);
    } else if (IsCache(v.kind)) {
      b.activations += RowsOf(v, bytes, a.written ? tokens : kv_length);
    } else {
      b.activations += bytes;
    }
  }
  return b;
}

uint64_t WeightBytesPerStep(const graph::Graph& g, const vk::Plan& plan, int64_t tokens) {
  std::map<graph::ValueId, uint64_t> read;
  for (const vk::PlannedDispatch& d : plan.dispatches()) {
    const graph::Node& node = g.node(d.node);
    for (const codegen::KernelArg& a : d.args) {
      const graph::Node& v = g.node(a.value);
      if (v.kind != OpKind::kParam && v.kind != OpKind::kConcatRows) continue;
      read[a.value] = std::max(read[a.value], WeightBytesRead(g, node, v, tokens));
    }
  }
  uint64_t total = 0;
  for (const auto& [id, bytes] : read) total += bytes;
  return total;
}

ProfileReport MakeProfile(const graph::Graph& g, const vk::Plan& plan, const std::vector<vk::ProfiledStep>& samples,
                          int64_t kv_length, double measured_step_ns) {
  ProfileReport r;
  r.steps = static_cast<int>(samples.size());
  r.measured_step_ns = measured_step_ns;
  r.levels = plan.stats().levels;
  const std::vector<vk::PlannedDispatch>& ds = plan.dispatches();
  // The levels' mean times as timestamped, and what a timestamp costs.
  std::vector<double> raw(ds.size(), 0), level_raw(static_cast<size_t>(r.levels), 0);
  for (const vk::ProfiledStep& s : samples) {
    for (size_t i = 0; i < ds.size() && i < s.dispatch_ns.size(); ++i) raw[i] += s.dispatch_ns[i] / static_cast<double>(samples.size());
    r.bare_ns += s.bare_ns / static_cast<double>(samples.size());
  }
  for (size_t i = 0; i < ds.size(); ++i) {
    level_raw[static_cast<size_t>(ds[i].level)] += raw[i];
    r.timestamped_ns += raw[i];
  }
  if (r.levels > 0 && !samples.empty()) r.timestamp_ns = std::max(0.0, r.timestamped_ns - r.bare_ns) / r.levels;
  std::map<std::string, ProfileKind> kinds;
  for (size_t i = 0; i < ds.size(); ++i) {
    ProfileNode n;
    n.level = ds[i].level;
    const graph::Node& node = g.node(ds[i].node);
    n.label = node.label.empty() ? absl::StrCat("%", node.id) : node.label;
    n.op = graph::OpName(node.kind);
    n.kernel = absl::StrCat(ds[i].family, ".", ds[i].variant);
    const double level = level_raw[static_cast<size_t>(n.level)];
    n.ns = level > 0 ? raw[i] * std::max(0.0, level - r.timestamp_ns) / level : 0;
    n.bytes = BytesOf(g, ds[i], plan.tokens(), kv_length);
    r.total_ns += n.ns;
    ProfileKind& k = kinds[n.op];
    k.op = n.op;
    ++k.count;
    k.ns += n.ns;
    k.bytes += n.bytes.total();
    r.nodes.push_back(std::move(n));
  }
  for (auto& [op, k] : kinds) r.kinds.push_back(k);
  std::sort(r.kinds.begin(), r.kinds.end(), [](const ProfileKind& a, const ProfileKind& b) { return a.ns > b.ns; });
  return r;
}

std::string FormatProfile(const ProfileReport& r) {
  std::string out = absl::StrFormat(
      "profile of %s (mean of %d profiled steps; a timestamp after each barrier level, its own cost taken off; the "
      "dispatches of a level run concurrently and share its time evenly)\n",
      r.step, r.steps);
  const double total = r.total_ns > 0 ? r.total_ns : 1;
  absl::StrAppendFormat(&out, "%-20s %6s %10s %7s %12s %8s\n", "op", "count", "time_us", "%", "bytes", "GB/s");
  for (const ProfileKind& k : r.kinds) {
    absl::StrAppendFormat(&out, "%-20s %6d %10.2f %6.1f%% %12llu %8.1f\n", k.op, k.count, k.ns / 1e3,
                          100.0 * k.ns / total, static_cast<unsigned long long>(k.bytes), GBps(k.bytes, k.ns));
  }
  absl::StrAppendFormat(&out, "\n%-4s %-5s %-40s %-14s %-34s %10s %7s %12s %8s\n", "#", "level", "node", "op", "kernel",
                        "time_us", "%", "bytes", "GB/s");
  for (size_t i = 0; i < r.nodes.size(); ++i) {
    const ProfileNode& n = r.nodes[i];
    absl::StrAppendFormat(&out, "%-4zu %-5d %-40s %-14s %-34s %10.2f %6.1f%% %12llu %8.1f\n", i, n.level, n.label, n.op,
                          n.kernel, n.ns / 1e3, 100.0 * n.ns / total, static_cast<unsigned long long>(n.bytes.total()),
                          GBps(n.bytes.total(), n.ns));
  }
  absl::StrAppendFormat(&out,
                        "\nprofile total %.3f ms (sum of %zu dispatches in %d levels, each less %.2f us: the steps took "
                        "%.3f ms with a timestamp after each level, %.3f ms with one at each end)",
                        r.total_ns / 1e6, r.nodes.size(), r.levels, r.timestamp_ns / 1e3, r.timestamped_ns / 1e6,
                        r.bare_ns / 1e6);
  if (r.measured_step_ns > 0) {
    absl::StrAppendFormat(&out, " | measured step %.3f ms (wall, unprofiled) | total/measured %.1f%%",
                          r.measured_step_ns / 1e6, 100.0 * r.total_ns / r.measured_step_ns);
  }
  out += "\n";
  return out;
}

nlohmann::json ProfileJson(const ProfileReport& r) {
  nlohmann::json j;
  j["steps"] = r.steps;
  j["total_us"] = r.total_ns / 1e3;
  j["measured_step_us"] = r.measured_step_ns / 1e3;
  j["levels"] = r.levels;
  j["timestamped_total_us"] = r.timestamped_ns / 1e3;
  j["bare_step_us"] = r.bare_ns / 1e3;
  j["timestamp_cost_us"] = r.timestamp_ns / 1e3;
  j["kinds"] = nlohmann::json::array();
  for (const ProfileKind& k : r.kinds) {
    j["kinds"].push_back({{"op", k.op}, {"count", k.count}, {"time_us", k.ns / 1e3}, {"bytes", k.bytes},
                          {"gb_per_s", GBps(k.bytes, k.ns)}});
  }
  j["nodes"] = nlohmann::json::array();
  for (const ProfileNode& n : r.nodes) {
    j["nodes"].push_back({{"label", n.label},
                          {"op", n.op},
                          {"kernel", n.kernel},
                          {"level", n.level},
                          {"time_us", n.ns / 1e3},
                          {"weight_bytes", n.bytes.weights},
                          {"bytes", n.bytes.total()},
                          {"gb_per_s", GBps(n.bytes.total(), n.ns)}});
  }
  return j;
}

std::string FormatDriverStatistics(const std::vector<const vk::Plan*>& plans) {
  std::set<std::string> seen;
  std::string out;
  for (const vk::Plan* plan : plans) {
    for (size_t i = 0; i < plan->dispatches().size(); ++i) {
      const std::string name = plan->dispatches()[i].family + "." + plan->dispatches()[i].variant;
      const auto& stats = plan->pipeline(i).statistics();
      if (stats.empty() || !seen.insert(name).second) continue;
      if (seen.size() == 1) out = "\ndriver statistics per kernel\n";
      std::string line;
      for (const auto& [key, value] : stats) absl::StrAppend(&line, line.empty() ? "" : ", ", key, " ", value);
      absl::StrAppendFormat(&out, "%-48s %s\n", name, line);
    }
  }
  return out;
}

}  // namespace doppler::runtime
