#include "graph/param_slice.h"

#include "absl/strings/str_cat.h"

namespace doppler::graph {

std::optional<ParamSlice> ParamSliceOf(const Node& param) {
  if (param.kind != OpKind::kParam || !param.attrs.Has("source")) return std::nullopt;
  ParamSlice s;
  s.source = param.attrs.Str("source");
  s.source_rows = param.attrs.Int("source_rows");
  s.row_offset = param.attrs.Int("row_offset");
  s.row_stride = param.attrs.Has("row_stride") ? param.attrs.Int("row_stride") : 1;
  s.source_experts = param.attrs.Int("source_experts");
  s.expert = param.attrs.Int("expert");
  s.in_out = param.attrs.Int("in_out") == 1;
  return s;
}

void SetParamSlice(const ParamSlice& s, Attrs& attrs) {
  attrs.Set("source", s.source);
  attrs.Set("source_rows", s.source_rows);
  attrs.Set("row_offset", s.row_offset);
  if (s.row_stride != 1) attrs.Set("row_stride", s.row_stride);
  if (s.source_experts > 0) {
    attrs.Set("source_experts", s.source_experts);
    attrs.Set("expert", s.expert);
  }
  if (s.in_out) attrs.Set("in_out", int64_t{1});
}

absl::Status CheckParamSlice(const Node& n) {
  const auto& v = n.attrs.values();
  auto is_int = [&](const char* key, bool required) {
    auto it = v.find(key);
    return it == v.end() ? !required : std::holds_alternative<int64_t>(it->second);
  };
  const bool typed = std::holds_alternative<std::string>(v.at("source")) && is_int("source_rows", true) &&
                     is_int("row_offset", true) && is_int("row_stride", false) && is_int("source_experts", false) &&
                     is_int("expert", false) && is_int("in_out", false) && (v.count("source_experts") == v.count("expert"));
  const std::optional<ParamSlice> s = ParamSliceOf(n);
  const size_t rank = n.type.shape.size();
  if (!typed || !s || s->source.empty() || (rank != 1 && rank != 2) || (rank == 1 && s->in_out) ||
      n.type.shape[0].tokens) {
    return absl::InvalidArgumentError("a param slice needs a string source, int source_rows and row_offset (and "
                                      "optionally row_stride, source_experts with expert, in_out) and is a matrix or, "
                                      "not in_out, a vector");
  }
  const int64_t rows = n.type.shape[0].value;
  if (s->row_offset < 0 || s->row_stride < 1 || rows < 1 ||
      s->row_offset + (rows - 1) * s->row_stride >= s->source_rows) {
    return absl::InvalidArgumentError(absl::StrCat("its ", rows, " rows from row ", s->row_offset, " every ",
                                                   s->row_stride, " do not lie inside the source's ", s->source_rows));
  }
  if (s->source_experts < 0 || (s->source_experts > 0 && (s->expert < 0 || s->expert >= s->source_experts))) {
    return absl::InvalidArgumentError(absl::StrCat("expert ", s->expert, " of ", s->source_experts));
  }
  return absl::OkStatus();
}

std::vector<int64_t> StoredShape(const ParamSlice& s, const std::vector<int64_t>& param_shape) {
  std::vector<int64_t> shape;
  if (s.source_experts > 0) shape.push_back(s.source_experts);
  if (param_shape.size() == 1) {
    shape.push_back(s.source_rows);
  } else if (s.in_out) {
    shape.insert(shape.end(), {param_shape[1], s.source_rows});
  } else {
    shape.insert(shape.end(), {s.source_rows, param_shape[1]});
  }
  return shape;
}

}  // namespace doppler::graph
