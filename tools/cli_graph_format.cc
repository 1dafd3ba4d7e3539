#include "tools/cli_graph_format.h"

#include <variant>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "graph/printer.h"
#include "nlohmann/json.hpp"

namespace doppler::cli {
namespace {

using graph::Node;
using graph::OpKind;

bool IsSource(OpKind k) {
  return k == OpKind::kInput || k == OpKind::kParam || k == OpKind::kConst || k == OpKind::kState ||
         k == OpKind::kConcatRows;
}

struct Absorbed {
  std::string op, label;
};

// The passes record what a fused node absorbed as attr fused = "op:label op:label ...".
std::vector<Absorbed> FusedList(const Node& n) {
  std::vector<Absorbed> out;
  if (!n.attrs.Has("fused")) return out;
  const graph::AttrValue& v = n.attrs.values().at("fused");
  const std::string* text = std::get_if<std::string>(&v);
  if (text == nullptr) return out;
  for (absl::string_view item : absl::StrSplit(*text, absl::ByAnyChar(" \t\n"), absl::SkipEmpty())) {
    const size_t colon = item.find(':');
    if (colon == absl::string_view::npos) {
      out.push_back({std::string(item), ""});
    } else {
      out.push_back({std::string(item.substr(0, colon)), std::string(item.substr(colon + 1))});
    }
  }
  return out;
}

nlohmann::json AttrJson(const graph::AttrValue& v) {
  if (const int64_t* i = std::get_if<int64_t>(&v)) return *i;
  if (const double* d = std::get_if<double>(&v)) return *d;
  return std::get<std::string>(v);
}

std::string AttrText(const graph::AttrValue& v) {
  if (const int64_t* i = std::get_if<int64_t>(&v)) return absl::StrCat(*i);
  if (const double* d = std::get_if<double>(&v)) return absl::StrCat(*d);
  return std::get<std::string>(v);
}

// A DOT double-quoted string's contents; "\n" stays a line break of the label.
std::string DotEscape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out.push_back('\\');
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out.push_back(c);
  }
  return out;
}

}  // namespace

std::string GraphToJson(const graph::Graph& g, const std::vector<std::string>& pipeline, const std::string& after,
                        bool changed) {
  nlohmann::json nodes = nlohmann::json::array();
  for (const Node& n : g.nodes()) {
    nlohmann::json attrs = nlohmann::json::object();
    for (const auto& [name, value] : n.attrs.values()) attrs[name] = AttrJson(value);
    nlohmann::json shape = nlohmann::json::array();
    for (const graph::Dim& d : n.type.shape) {
      if (d.tokens) {
        shape.push_back("T");
      } else {
        shape.push_back(d.value);
      }
    }
    nlohmann::json node = {{"id", n.id},
                           {"op", graph::OpName(n.kind)},
                           {"inputs", n.inputs},
                           {"attrs", attrs},
                           {"dtype", graph::Name(n.type.dtype)},
                           {"shape", shape},
                           {"label", n.label}};
    if (n.attrs.Has("fused")) {
      nlohmann::json fused = nlohmann::json::array();
      for (const Absorbed& a : FusedList(n)) fused.push_back({{"op", a.op}, {"label", a.label}});
      node["fused"] = fused;
    }
    nodes.push_back(std::move(node));
  }
  nlohmann::json outputs = nlohmann::json::object();
  for (const auto& [name, id] : g.outputs()) outputs[name] = id;
  nlohmann::json doc = {{"format", "doppler-graph"}, {"version", 1}, {"pipeline", pipeline}, {"after", after}};
  if (after != "input") doc["changed"] = changed;
  doc["nodes"] = std::move(nodes);
  doc["outputs"] = std::move(outputs);
  return doc.dump();
}

std::string GraphToDot(const graph::Graph& g, const std::string& title) {
  std::string s = absl::StrCat("digraph \"", DotEscape(title), "\" {\n", "  label=\"", DotEscape(title),
                               "\";\n  labelloc=t;\n  rankdir=TB;\n",
                               "  node [shape=box, style=\"rounded,filled\", fillcolor=white, fontname=\"Helvetica\", "
                               "fontsize=10];\n  edge [color=\"#555555\", arrowsize=0.6];\n");
  for (const Node& n : g.nodes()) {
    std::vector<std::string> lines;
    const bool named = n.attrs.Has("name");
    lines.push_back(absl::StrCat("%", n.id, " ", graph::OpName(n.kind), named ? absl::StrCat(" ", n.attrs.Str("name")) : ""));
    std::vector<std::string> attrs;
    for (const auto& [name, value] : n.attrs.values()) {
      if (name == "name" || name == "fused") continue;
      attrs.push_back(absl::StrCat(name, "=", AttrText(value)));
    }
    if (!attrs.empty()) lines.push_back(absl::StrJoin(attrs, ", "));
    lines.push_back(graph::ToString(n.type));
    if (!n.label.empty() && (!named || n.label != n.attrs.Str("name"))) lines.push_back(n.label);
    const std::vector<Absorbed> fused = FusedList(n);
    std::string style;
    if (n.attrs.Has("fused")) {
      lines.push_back("fused:");
      for (const Absorbed& a : fused) lines.push_back(absl::StrCat("  ", a.op, a.label.empty() ? "" : " ", a.label));
      style = ", fillcolor=\"#ffcc99\", peripheries=2, penwidth=1.5";
    } else if (IsSource(n.kind)) {
      style = ", shape=ellipse, fillcolor=\"#e8eef8\"";
    } else if (n.kind == OpKind::kPart) {
      style = ", fillcolor=\"#f2f2f2\"";
    }
    absl::StrAppend(&s, "  n", n.id, " [label=\"", DotEscape(absl::StrJoin(lines, "\n")), "\"", style, "];\n");
  }
  for (const Node& n : g.nodes()) {
    for (graph::ValueId in : n.inputs) absl::StrAppend(&s, "  n", in, " -> n", n.id, ";\n");
  }
  int i = 0;
  for (const auto& [name, id] : g.outputs()) {
    absl::StrAppend(&s, "  out", i, " [label=\"", DotEscape(name), "\", shape=plaintext, style=\"\"];\n  n", id,
                    " -> out", i, ";\n");
    ++i;
  }
  absl::StrAppend(&s, "}\n");
  return s;
}

}  // namespace doppler::cli
