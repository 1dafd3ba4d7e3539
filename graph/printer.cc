#include "graph/printer.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace doppler::graph {
namespace {

std::string FormatAttr(const AttrValue& v) {
  if (const int64_t* i = std::get_if<int64_t>(&v)) return absl::StrCat(*i);
  if (const double* d = std::get_if<double>(&v)) return absl::StrCat(*d);
  return absl::StrCat("\"", std::get<std::string>(v), "\"");
}

}  // namespace

std::string FormatNode(const Graph& g, const Node& n) {
  std::string s = absl::StrCat("%", n.id, " = ", OpName(n.kind), "(",
                               absl::StrJoin(n.inputs, ", ", [](std::string* out, ValueId id) {
                                 absl::StrAppend(out, "%", id);
                               }),
                               ")");
  if (!n.attrs.values().empty()) {
    absl::StrAppend(&s, " {",
                    absl::StrJoin(n.attrs.values(), ", ",
                                  [](std::string* out, const auto& kv) {
                                    absl::StrAppend(out, kv.first, "=", FormatAttr(kv.second));
                                  }),
                    "}");
  }
  absl::StrAppend(&s, " : ", ToString(n.type));
  if (!n.label.empty() && n.label != n.attrs.Str("name")) absl::StrAppend(&s, "  # ", n.label);
  return s;
}

std::string ToText(const Graph& g) {
  std::string s;
  if (g.paging().paged()) absl::StrAppend(&s, ToString(g.paging()), "\n");
  for (const Node& n : g.nodes()) absl::StrAppend(&s, FormatNode(g, n), "\n");
  for (const auto& [name, id] : g.outputs()) absl::StrAppend(&s, "output ", name, " = %", id, "\n");
  return s;
}

}  // namespace doppler::graph
