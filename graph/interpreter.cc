#include "graph/interpreter.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "graph/activation_quant.h"
#include "graph/attention_inputs.h"
#include "graph/cache_write_inputs.h"
#include "graph/epilogue.h"
#include "graph/half.h"
#include "graph/layout.h"
#include "graph/sampling.h"

namespace doppler::graph {

Tensor Tensor::F32(std::vector<int64_t> shape, std::vector<float> data) {
  Tensor t;
  t.dtype = DType::kF32;
  t.shape = std::move(shape);
  t.f = std::move(data);
  return t;
}

Tensor Tensor::I32(std::vector<int64_t> shape, std::vector<int32_t> data) {
  Tensor t;
  t.dtype = DType::kI32;
  t.shape = std::move(shape);
  t.i = std::move(data);
  return t;
}

int64_t Tensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

namespace {

using TensorPtr = std::shared_ptr<Tensor>;

absl::Status OpError(const Node& n, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(OpName(n.kind), " '", n.label, "': ", what));
}

TensorPtr NewF32(std::vector<int64_t> shape) {
  auto t = std::make_shared<Tensor>();
  t->shape = std::move(shape);
  t->f.assign(static_cast<size_t>(t->numel()), 0.0f);
  return t;
}

// Values written to state are stored in the state's dtype: round through it.
float StoreAs(DType dtype, float v) { return dtype == DType::kF16 ? HalfToFloat(FloatToHalf(v)) : v; }

TensorPtr MatMul(const Tensor& x, const Tensor& w) {
  const int64_t m = x.shape[0], k = x.shape[1], n = w.shape[0];
  TensorPtr out = NewF32({m, n});
  for (int64_t r = 0; r < m; ++r) {
    const float* xr = &x.f[static_cast<size_t>(r * k)];
    for (int64_t c = 0; c < n; ++c) {
      const float* wr = &w.f[static_cast<size_t>(c * k)];
      double acc = 0.0;
      for (int64_t i = 0; i < k; ++i) acc += static_cast<double>(xr[i]) * wr[i];
      out->f[static_cast<size_t>(r * n + c)] = static_cast<float>(acc);
    }
  }
  return out;
}

// Each row is cut into groups of `group` consecutive values (group = the width: the whole row),
// each normalised on its own with the same weight w[group].
TensorPtr RmsNorm(const Tensor& x, const Tensor& w, int64_t group, double eps, double weight_offset) {
  const int64_t m = x.shape[0] * (x.shape[1] / group), d = group;
  TensorPtr out = NewF32(x.shape);
  for (int64_t r = 0; r < m; ++r) {
    const float* xr = &x.f[static_cast<size_t>(r * d)];
    double ss = 0.0;
    for (int64_t i = 0; i < d; ++i) ss += static_cast<double>(xr[i]) * xr[i];
    const float inv = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(d) + eps));
    for (int64_t i = 0; i < d; ++i) {
      out->f[static_cast<size_t>(r * d + i)] = xr[i] * inv * static_cast<float>(w.f[static_cast<size_t>(i)] + weight_offset);
    }
  }
  return out;
}

// A node's head norm prologue: RMSNorm over each head_dim-wide group of x (attrs norm_eps,
// norm_offset).
TensorPtr HeadNorm(const Node& n, const Tensor& x, const Tensor& w) {
  return RmsNorm(x, w, n.attrs.Int("head_dim"), n.attrs.Float("norm_eps"), n.attrs.Float("norm_offset"));
}

// Rotates pairs of each head: (i, i + d/2) for "neox" (rotate-half), (2i, 2i + 1) for "interleaved".
// Row t is rotated for its position (rows.position(t)).
absl::StatusOr<TensorPtr> Rope(const Node& n, const Tensor& x, const Tensor& table, const StepRows& rows) {
  const int64_t tokens = x.shape[0], width = x.shape[1];
  const int64_t heads = n.attrs.Int("heads"), d = n.attrs.Int("head_dim"), half = d / 2;
  const bool neox = n.attrs.Str("style") == "neox";
  TensorPtr out = NewF32(x.shape);
  for (int64_t t = 0; t < tokens; ++t) {
    const int64_t p = rows.position(t);
    if (p >= table.shape[0]) {
      return OpError(n, absl::StrCat("position ", p, " is past the rope table (", table.shape[0], ")"));
    }
    const float* tab = &table.f[static_cast<size_t>(p * half * 2)];
    for (int64_t h = 0; h < heads; ++h) {
      const size_t base = static_cast<size_t>(t * width + h * d);
      for (int64_t i = 0; i < half; ++i) {
        const size_t a = base + static_cast<size_t>(neox ? i : 2 * i);
        const size_t b = base + static_cast<size_t>(neox ? i + half : 2 * i + 1);
        const float c = tab[2 * i], s = tab[2 * i + 1];
        out->f[a] = x.f[a] * c - x.f[b] * s;
        out->f[b] = x.f[b] * c + x.f[a] * s;
      }
    }
  }
  return out;
}

// Row t goes to the cache row of its position (graph/paging.h): without pages a cache of C rows
// is a ring, position p in row p % C, so it holds the last C positions written (a cache with a row
// per position of the context never wraps); with pages, the row its sequence's page table says.
absl::StatusOr<TensorPtr> CacheWrite(const Node& n, TensorPtr state, const Tensor& x, const StepRows& rows) {
  const int64_t tokens = x.shape[0], width = x.shape[1], capacity = state->shape[0];
  if (!rows.paged() && tokens > capacity) {
    return OpError(n, absl::StrCat("a step of ", tokens, " tokens does not fit the cache's ", capacity, " rows"));
  }
  for (int64_t t = 0; t < tokens; ++t) {
    const int64_t row = rows.cache_row(t, rows.position(t), capacity);
    if (row < 0) {
      return OpError(n, absl::StrCat("row ", t, "'s position ", rows.position(t), " has no page in a cache of ",
                                     capacity, " rows"));
    }
    for (int64_t i = 0; i < width; ++i) {
      state->f[static_cast<size_t>(row * width + i)] = StoreAs(n.type.dtype, x.f[static_cast<size_t>(t * width + i)]);
    }
  }
  return state;
}

// Causal attention: the query at absolute position p (rows.position(t)) sees keys j of its
// sequence with p - window < j <= p (all j <= p when window is 0), softmax in double, GQA by head
// groups. Key j is read from the cache row of position j (graph/paging.h). Without pages that is row
// j % C, and the caches hold positions up to pos + T - 1 (the step's own keys are written first): a
// key the step needs that the ring has already overwritten (j <= pos + T - 1 - C) is an error, as
// is, for a cache of the whole context, a position past its end; with pages, a position without a
// page.
// With sinks (f32[heads]), head h's sink joins each of its softmaxes as a key of value 0: the
// maximum is taken over the scores and the sink, which adds exp(sink - max) to the denominator.
absl::StatusOr<TensorPtr> Attention(const Node& n, const Tensor& q, const Tensor& k, const Tensor& v,
                                    const Tensor* sinks, const StepRows& rows) {
  const int64_t tokens = q.shape[0];
  const int64_t heads = n.attrs.Int("heads"), kv_heads = n.attrs.Int("kv_heads"), d = n.attrs.Int("head_dim");
  const int64_t window = n.attrs.Int("window"), group = heads / kv_heads;
  const double scale = n.attrs.Float("scale");
  const int64_t kv_width = kv_heads * d, capacity = k.shape[0];
  if (!rows.paged()) {
    const int64_t pos = rows.position(0);
    const int64_t oldest_needed = window > 0 ? std::max<int64_t>(0, pos - window + 1) : 0;
    if (oldest_needed <= pos + tokens - 1 - capacity) {
      return OpError(n, absl::StrCat("positions up to ", pos + tokens, " need key ", oldest_needed,
                                     ", which a cache of ", capacity, " rows no longer holds"));
    }
  }
  TensorPtr out = NewF32(q.shape);
  std::vector<double> scores;
  for (int64_t t = 0; t < tokens; ++t) {
    const int64_t p = rows.position(t);
    const int64_t first = window > 0 ? std::max<int64_t>(0, p - window + 1) : 0;
    for (int64_t h = 0; h < heads; ++h) {
      const float* qh = &q.f[static_cast<size_t>(t * heads * d + h * d)];
      const int64_t kvh = h / group;
      scores.assign(static_cast<size_t>(p - first + 1), 0.0);
      const double sink = sinks ? static_cast<double>(sinks->f[static_cast<size_t>(h)]) : 0.0;
      double mx = sinks ? sink : -std::numeric_limits<double>::infinity();
      for (int64_t j = first; j <= p; ++j) {
        const int64_t row = rows.cache_row(t, j, capacity);
        if (row < 0) return OpError(n, absl::StrCat("row ", t, "'s key ", j, " has no page in the cache"));
        const float* kj = &k.f[static_cast<size_t>(row * kv_width + kvh * d)];
        double dot = 0.0;
        for (int64_t i = 0; i < d; ++i) dot += static_cast<double>(qh[i]) * kj[i];
        scores[static_cast<size_t>(j - first)] = dot * scale;
        mx = std::max(mx, dot * scale);
      }
      double sum = sinks ? std::exp(sink - mx) : 0.0;
      for (double& s : scores) sum += (s = std::exp(s - mx));
      float* oh = &out->f[static_cast<size_t>(t * heads * d + h * d)];
      for (int64_t i = 0; i < d; ++i) {
        double acc = 0.0;
        for (int64_t j = first; j <= p; ++j) {
          acc += scores[static_cast<size_t>(j - first)] *
                 v.f[static_cast<size_t>(rows.cache_row(t, j, capacity) * kv_width + kvh * d + i)];
        }
        oh[i] = static_cast<float>(acc / sum);
      }
    }
  }
  return out;
}

// One step of node n's matmul epilogue (graph/epilogue.h); `extra` is the step's input, if it
// takes one (a bias of y's width).
TensorPtr ApplyEpilogueStep(const Node& n, EpilogueStep s, const Tensor& y, const Tensor* extra) {
  const int64_t rows = y.shape[0], cols = y.shape[1];
  if (IsGatedStep(s)) {
    const int64_t half = cols / 2;
    const float alpha = static_cast<float>(n.attrs.Float("alpha")), limit = static_cast<float>(n.attrs.Float("limit"));
    TensorPtr out = NewF32({rows, half});
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < half; ++c) {
        const size_t i = static_cast<size_t>(r * cols + c);
        const float gate = y.f[i], up = y.f[i + static_cast<size_t>(half)];
        out->f[static_cast<size_t>(r * half + c)] = s == EpilogueStep::kClampedSwiglu
                                                        ? ClampedSwiglu(gate, up, alpha, limit)
                                                        : Activate(GateActivation(s), gate) * up;
      }
    }
    return out;
  }
  auto out = std::make_shared<Tensor>(y);
  for (size_t i = 0; i < out->f.size(); ++i) {
    switch (s) {
      case EpilogueStep::kBias:
        out->f[i] += extra->f[i % static_cast<size_t>(cols)];
        break;
      case EpilogueStep::kAdd:
        out->f[i] += extra->f[i];
        break;
      case EpilogueStep::kSilu:
        out->f[i] = Activate(Activation::kSilu, out->f[i]);
        break;
      case EpilogueStep::kGeluTanh:
        out->f[i] = Activate(Activation::kGeluTanh, out->f[i]);
        break;
      default:
        break;
    }
  }
  return out;
}

// Each row's indices of its k largest values, largest first; of equal values the lower index first.
TensorPtr TopK(const Tensor& x, int64_t k) {
  const int64_t rows = x.shape[0], cols = x.shape[1];
  auto out = std::make_shared<Tensor>(Tensor::I32({rows, k}, std::vector<int32_t>(static_cast<size_t>(rows * k))));
  std::vector<int32_t> order(static_cast<size_t>(cols));
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = &x.f[static_cast<size_t>(r * cols)];
    for (int32_t i = 0; i < cols; ++i) order[static_cast<size_t>(i)] = i;
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return row[a] > row[b]; });
    std::copy_n(order.begin(), k, &out->i[static_cast<size_t>(r * k)]);
  }
  return out;
}

// The chosen experts' weights: a softmax over the chosen logits, or over all logits read at the
// chosen ones (in double, from the row's largest logit).
TensorPtr RouteWeights(const Tensor& logits, const Tensor& ids, const std::string& weighting) {
  const int64_t rows = logits.shape[0], experts = logits.shape[1], k = ids.shape[1];
  const bool over_all = weighting == "softmax_all";
  TensorPtr out = NewF32({rows, k});
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = &logits.f[static_cast<size_t>(r * experts)];
    const int32_t* chosen = &ids.i[static_cast<size_t>(r * k)];
    double mx = -std::numeric_limits<double>::infinity(), sum = 0.0;
    for (int64_t e = 0; e < experts; ++e) mx = std::max(mx, static_cast<double>(row[e]));
    if (over_all) {
      for (int64_t e = 0; e < experts; ++e) sum += std::exp(row[e] - mx);
    } else {
      for (int64_t j = 0; j < k; ++j) sum += std::exp(row[chosen[j]] - mx);
    }
    for (int64_t j = 0; j < k; ++j) {
      out->f[static_cast<size_t>(r * k + j)] = static_cast<float>(std::exp(row[chosen[j]] - mx) / sum);
    }
  }
  return out;
}

// Slot j of token t: y = x_j · W[ids[t, j]]ᵀ (x_j the row, or its j-th K-wide part when x holds
// one input per slot; with x_quant, rounded through q8 blocks), then the epilogue per slot, a bias
// step adding its expert's bias. `extras` are the bias steps' inputs.
absl::StatusOr<TensorPtr> ExpertMatMul(const Node& n, const Tensor& x, const Tensor& w, const Tensor& ids,
                                       const std::vector<const Tensor*>& extras) {
  const int64_t tokens = x.shape[0], k = ids.shape[1], experts = n.attrs.Int("experts");
  const int64_t rows = w.shape[0] / experts, kdim = w.shape[1];
  const bool per_slot = x.shape[1] != kdim;
  absl::StatusOr<std::vector<EpilogueStep>> steps = ParseEpilogue(n.attrs.Str("epilogue"));
  if (!steps.ok()) return OpError(n, std::string(steps.status().message()));
  const int64_t width = IsGated(*steps) ? rows / 2 : rows;
  TensorPtr out = NewF32({tokens, k * width});
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t j = 0; j < k; ++j) {
      const int32_t e = ids.i[static_cast<size_t>(t * k + j)];
      if (e < 0 || e >= experts) return OpError(n, absl::StrCat("expert id ", e, " is outside [0, ", experts, ")"));
      const auto x_begin = x.f.begin() + t * x.shape[1] + (per_slot ? j * kdim : 0);
      const auto w_begin = w.f.begin() + e * rows * kdim;
      Tensor xj = Tensor::F32({1, kdim}, std::vector<float>(x_begin, x_begin + kdim));
      if (n.attrs.Has("x_quant")) RoundThroughQ8(xj.f.data(), kdim, xj.f.data());
      const Tensor we = Tensor::F32({rows, kdim}, std::vector<float>(w_begin, w_begin + rows * kdim));
      TensorPtr y = MatMul(xj, we);
      size_t next = 0;
      for (EpilogueStep s : *steps) {
        Tensor bias;
        if (s == EpilogueStep::kBias) {  // expert e's: values e*W.. of every expert's
          const Tensor& all = *extras[next++];
          const int64_t bw = y->shape[1];
          bias = Tensor::F32({bw}, std::vector<float>(all.f.begin() + e * bw, all.f.begin() + (e + 1) * bw));
        }
        y = ApplyEpilogueStep(n, s, *y, s == EpilogueStep::kBias ? &bias : nullptr);
      }
      std::copy(y->f.begin(), y->f.begin() + width, out->f.begin() + t * k * width + j * width);
    }
  }
  return out;
}

// Token t's slots j of y, each N wide, weighted by weights[t, j] and summed in slot order, then
// the residual's row added where there is one.
TensorPtr RouteSum(const Tensor& y, const Tensor& weights, const Tensor* residual) {
  const int64_t tokens = y.shape[0], k = weights.shape[1], width = y.shape[1] / k;
  TensorPtr out = NewF32({tokens, width});
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t c = 0; c < width; ++c) {
      float sum = 0.0f;
      for (int64_t j = 0; j < k; ++j) {
        sum += weights.f[static_cast<size_t>(t * k + j)] * y.f[static_cast<size_t>((t * k + j) * width + c)];
      }
      const size_t at = static_cast<size_t>(t * width + c);
      out->f[at] = residual != nullptr ? sum + residual->f[at] : sum;
    }
  }
  return out;
}

// The step's token count: the first dimension of the input whose first dimension is T (-1: none).
int64_t StepTokens(const Graph& g, const std::map<std::string, Tensor>& inputs) {
  int64_t tokens = -1;
  for (const Node& n : g.nodes()) {
    if (n.kind != OpKind::kInput || n.type.shape.empty() || !n.type.shape[0].tokens) continue;
    auto it = inputs.find(n.attrs.Str("name"));
    if (it != inputs.end() && !it->second.shape.empty()) tokens = it->second.shape[0];
  }
  return tokens;
}

}  // namespace

absl::StatusOr<std::shared_ptr<Tensor>> Interpreter::Eval(const Graph& g, const Node& n,
                                                          const std::map<std::string, Tensor>& inputs,
                                                          const StepRows& rows) {
  const int64_t tokens = rows.tokens();
  auto in = [&](int i) -> const Tensor& { return *values_[static_cast<size_t>(n.inputs[static_cast<size_t>(i)])]; };
  // cache_write's meaning, for cache_write nodes and the ones an appending attention stands for: a
  // rope prologue (the table) rotates x first, with the node's rope attrs; before that, a head norm
  // prologue (its weight) normalises each head (graph/cache_write_inputs.h).
  auto AppendToCache = [&](const Node& w) -> absl::StatusOr<TensorPtr> {
    auto value = [&](ValueId id) -> const Tensor& { return *values_[static_cast<size_t>(id)]; };
    const CacheWriteInputs c = CacheWriteInputsOf(w);
    TensorPtr state = values_[static_cast<size_t>(c.cache)];
    if (!c.rope) return CacheWrite(w, state, value(c.x), rows);
    absl::StatusOr<TensorPtr> roped =
        Rope(w, c.x_norm ? *HeadNorm(w, value(c.x), value(*c.x_norm)) : value(c.x), value(*c.rope), rows);
    if (!roped.ok()) return roped.status();
    return CacheWrite(w, state, **roped, rows);
  };
  const std::string& name = n.attrs.Str("name");
  switch (n.kind) {
    case OpKind::kInput: {
      auto it = inputs.find(name);
      if (it == inputs.end()) return OpError(n, absl::StrCat("no value given for input ", name));
      if (it->second.shape != Resolve(n.type.shape, tokens) || it->second.dtype != n.type.dtype) {
        return OpError(n, absl::StrCat("input ", name, " does not have type ", ToString(n.type)));
      }
      return std::make_shared<Tensor>(it->second);
    }
    case OpKind::kParam: {
      auto& cached = param_cache_[name];
      if (!cached) {
        absl::StatusOr<std::vector<float>> data = params_.Float32(n);
        if (!data.ok()) return data.status();
        std::vector<int64_t> shape = Resolve(n.type.shape, tokens);
        Tensor t = Tensor::F32(shape, *std::move(data));
        if (static_cast<int64_t>(t.f.size()) != t.numel()) {
          return OpError(n, absl::StrCat("weight ", name, " has ", t.f.size(), " values, expected ", t.numel()));
        }
        cached = std::make_shared<Tensor>(std::move(t));
      }
      return cached;
    }
    case OpKind::kConst:
      return std::make_shared<Tensor>(Tensor::F32(Resolve(n.type.shape, tokens), *g.const_data(name)));
    case OpKind::kState: {
      auto& state = states_[name];
      if (!state) {
        const std::vector<int64_t> shape = Resolve(n.type.shape, tokens);
        state = n.type.dtype == DType::kI32
                    ? std::make_shared<Tensor>(Tensor::I32(shape, std::vector<int32_t>(static_cast<size_t>(shape[0]))))
                    : NewF32(shape);
      }
      return state;
    }
    case OpKind::kEmbedding: {
      const Tensor& table = in(0);
      const Tensor& ids = in(1);
      const int64_t rows = table.shape[0], d = table.shape[1];
      TensorPtr out = NewF32({tokens, d});
      for (int64_t t = 0; t < tokens; ++t) {
        const int32_t id = ids.i[static_cast<size_t>(t)];
        if (id < 0 || id >= rows) return OpError(n, absl::StrCat("token id ", id, " is outside [0, ", rows, ")"));
        std::copy_n(&table.f[static_cast<size_t>(id * d)], d, &out->f[static_cast<size_t>(t * d)]);
      }
      // An optional factor (fuse-embedding-scale), applied as scale's is.
      if (n.attrs.Has("scale")) {
        const float factor = static_cast<float>(n.attrs.Float("scale"));
        for (float& v : out->f) v *= factor;
      }
      return out;
    }
    case OpKind::kMatMul: {
      // A norm prologue: x is RMS-normalised with weight input 2 first.
      // Then x_quant: x is rounded through q8 blocks (graph/activation_quant.h).
      const bool norm = n.attrs.Has("norm_eps");
      TensorPtr normed =
          norm ? RmsNorm(in(0), in(2), in(0).shape[1], n.attrs.Float("norm_eps"), n.attrs.Float("norm_offset")) : nullptr;
      const Tensor* x = normed ? normed.get() : &in(0);
      TensorPtr rounded;
      if (n.attrs.Has("x_quant")) {
        rounded = std::make_shared<Tensor>(*x);
        for (int64_t r = 0; r < x->shape[0]; ++r) {
          float* row = &rounded->f[static_cast<size_t>(r * x->shape[1])];
          RoundThroughQ8(row, x->shape[1], row);
        }
        x = rounded.get();
      }
      TensorPtr y = MatMul(*x, in(1));
      absl::StatusOr<std::vector<EpilogueStep>> steps = ParseEpilogue(n.attrs.Str("epilogue"));
      if (!steps.ok()) return OpError(n, std::string(steps.status().message()));
      int next = norm ? 3 : 2;
      for (EpilogueStep s : *steps) {
        y = ApplyEpilogueStep(n, s, *y, s == EpilogueStep::kBias || s == EpilogueStep::kAdd ? &in(next++) : nullptr);
      }
      return y;
    }
    case OpKind::kPart: {
      // A split value holds its parts side by side in each row; a part is a column range.
      const Tensor& x = in(0);
      const std::vector<int64_t> widths = SplitWidths(g.node(n.inputs[0]));
      const int64_t index = n.attrs.Int("index"), cols = x.shape[1], rows = x.shape[0];
      int64_t start = 0;
      for (int64_t i = 0; i < index; ++i) start += widths[static_cast<size_t>(i)];
      const int64_t w = widths[static_cast<size_t>(index)];
      TensorPtr out = NewF32({rows, w});
      for (int64_t r = 0; r < rows; ++r) {
        std::copy_n(&x.f[static_cast<size_t>(r * cols + start)], w, &out->f[static_cast<size_t>(r * w)]);
      }
      return out;
    }
    case OpKind::kConcatRows: {
      auto out = std::make_shared<Tensor>();
      out->shape = Resolve(n.type.shape, tokens);
      for (size_t i = 0; i < n.inputs.size(); ++i) out->f.insert(out->f.end(), in(static_cast<int>(i)).f.begin(), in(static_cast<int>(i)).f.end());
      return out;
    }
    case OpKind::kAdd:
    case OpKind::kMul: {
      // b is a's shape, or a vector of a's row width repeated for every row (index i % width).
      const Tensor& a = in(0);
      const Tensor& b = in(1);
      TensorPtr out = NewF32(a.shape);
      const bool add = n.kind == OpKind::kAdd;
      const size_t bn = b.f.size();
      for (size_t i = 0; i < out->f.size(); ++i) out->f[i] = add ? a.f[i] + b.f[i % bn] : a.f[i] * b.f[i % bn];
      return out;
    }
    case OpKind::kSilu:
    case OpKind::kGeluTanh: {
      const Activation a = n.kind == OpKind::kSilu ? Activation::kSilu : Activation::kGeluTanh;
      TensorPtr out = NewF32(in(0).shape);
      for (size_t i = 0; i < out->f.size(); ++i) out->f[i] = Activate(a, in(0).f[i]);
      return out;
    }
    case OpKind::kScale: {
      TensorPtr out = NewF32(in(0).shape);
      const float factor = static_cast<float>(n.attrs.Float("factor"));
      for (size_t i = 0; i < out->f.size(); ++i) out->f[i] = in(0).f[i] * factor;
      return out;
    }
    case OpKind::kRmsNorm: {
      if (n.attrs.Int("residual") == 0) {
        return RmsNorm(in(0), in(1), n.attrs.Has("group") ? n.attrs.Int("group") : in(0).shape[1],
                       n.attrs.Float("eps"), n.attrs.Float("weight_offset"));
      }
      // [s | norm(s)] with s = x + r, row by row; with a norm prologue (attr norm_eps),
      // s = norm(x) · (w' + norm_offset) + r with w' input 3.
      const int64_t rows = in(0).shape[0], d = in(0).shape[1];
      Tensor sum = n.attrs.Has("norm_eps")
                       ? *RmsNorm(in(0), in(3), d, n.attrs.Float("norm_eps"), n.attrs.Float("norm_offset"))
                       : Tensor::F32(in(0).shape, in(0).f);
      for (size_t i = 0; i < sum.f.size(); ++i) sum.f[i] += in(2).f[i];
      TensorPtr normed = RmsNorm(sum, in(1), d, n.attrs.Float("eps"), n.attrs.Float("weight_offset"));
      TensorPtr out = NewF32({rows, 2 * d});
      for (int64_t r = 0; r < rows; ++r) {
        std::copy_n(&sum.f[static_cast<size_t>(r * d)], d, &out->f[static_cast<size_t>(r * 2 * d)]);
        std::copy_n(&normed->f[static_cast<size_t>(r * d)], d, &out->f[static_cast<size_t>(r * 2 * d + d)]);
      }
      return out;
    }
    case OpKind::kRope:
      return Rope(n, in(0), in(1), rows);
    case OpKind::kCacheWrite:
      return AppendToCache(n);
    case OpKind::kAttention: {
      // Appending (attr append): the step's keys and values go to the caches first, exactly as
      // the cache writes the op absorbed.
      const AttentionInputs a = AttentionInputsOf(n);
      if (a.k_new) {
        for (const Node& w : AppendedCacheWrites(g, n)) {
          if (absl::StatusOr<TensorPtr> s = AppendToCache(w); !s.ok()) return s.status();
        }
      }
      // A rope prologue (the table): q is rotated first (attr style); before that, a head norm
      // prologue (its weight) normalises each head.
      const Tensor& k = *values_[static_cast<size_t>(a.k_cache)];
      const Tensor& v = *values_[static_cast<size_t>(a.v_cache)];
      const Tensor* sinks = a.sinks ? values_[static_cast<size_t>(*a.sinks)].get() : nullptr;
      if (!a.rope) return Attention(n, in(0), k, v, sinks, rows);
      const Tensor& table = *values_[static_cast<size_t>(*a.rope)];
      absl::StatusOr<TensorPtr> roped =
          Rope(n, a.q_norm ? *HeadNorm(n, in(0), *values_[static_cast<size_t>(*a.q_norm)]) : in(0), table, rows);
      if (!roped.ok()) return roped.status();
      return Attention(n, **roped, k, v, sinks, rows);
    }
    case OpKind::kTopK:
      return TopK(in(0), n.attrs.Int("k"));
    case OpKind::kRouteWeights:
      return RouteWeights(in(0), in(1), n.attrs.Str("weighting"));
    case OpKind::kExpertMatMul: {
      std::vector<const Tensor*> extras;
      for (size_t i = 3; i < n.inputs.size(); ++i) extras.push_back(&in(static_cast<int>(i)));
      return ExpertMatMul(n, in(0), in(1), in(2), extras);
    }
    case OpKind::kRouteSum:
      return RouteSum(in(0), in(1), n.inputs.size() > 2 ? &in(2) : nullptr);
    case OpKind::kClampedSwiglu: {
      TensorPtr out = NewF32(in(0).shape);
      const float alpha = static_cast<float>(n.attrs.Float("alpha")), limit = static_cast<float>(n.attrs.Float("limit"));
      for (size_t i = 0; i < out->f.size(); ++i) out->f[i] = ClampedSwiglu(in(0).f[i], in(1).f[i], alpha, limit);
      return out;
    }
    case OpKind::kLastRow: {
      const Tensor& x = in(0);
      const int64_t d = x.shape[1];
      return std::make_shared<Tensor>(
          Tensor::F32({1, d}, std::vector<float>(x.f.end() - d, x.f.end())));
    }
    case OpKind::kRecordTokens: {
      if (!rows.one_sequence()) return OpError(n, "records one sequence's tokens, not a row per sequence");
      const int64_t pos = rows.position(0);
      TensorPtr history = values_[static_cast<size_t>(n.inputs[0])];
      const int64_t ring = history->shape[0];
      for (int64_t t = 0; t < tokens; ++t) history->i[static_cast<size_t>((pos + t) % ring)] = in(1).i[static_cast<size_t>(t)];
      return history;
    }
    case OpKind::kRepeatPenalty: {
      // The tokens of positions max(0, p + 1 - R) .. p, p being the step's last position.
      if (!rows.one_sequence()) return OpError(n, "penalises one sequence's tokens, not a row per sequence");
      const Tensor& history = in(1);
      const int64_t ring = history.shape[0], last = rows.position(tokens - 1);
      auto out = std::make_shared<Tensor>(in(0));
      std::vector<bool> seen(out->f.size(), false);
      for (int64_t q = std::max<int64_t>(0, last + 1 - ring); q <= last; ++q) {
        const int32_t id = history.i[static_cast<size_t>(q % ring)];
        if (id < 0 || id >= static_cast<int32_t>(out->f.size()) || seen[static_cast<size_t>(id)]) continue;
        seen[static_cast<size_t>(id)] = true;
        out->f[static_cast<size_t>(id)] = Penalize(out->f[static_cast<size_t>(id)], n.attrs.Float("penalty"));
      }
      return out;
    }
    case OpKind::kSample: {
      if (!rows.one_sequence()) return OpError(n, "samples one sequence's token, not a row per sequence");
      const Tensor& x = in(0);
      SampleParams p{n.attrs.Float("temperature"), n.attrs.Int("top_k"), n.attrs.Float("top_p"),
                     n.attrs.Float("min_p"), static_cast<uint32_t>(n.attrs.Int("seed"))};
      return std::make_shared<Tensor>(
          Tensor::I32({1}, {SampleToken(x.f.data(), x.shape[1], p, static_cast<uint32_t>(rows.position(tokens - 1)))}));
    }
    case OpKind::kArgmax: {
      const Tensor& x = in(0);
      const int64_t rows = x.shape[0], cols = x.shape[1];
      auto out = std::make_shared<Tensor>(Tensor::I32({rows}, std::vector<int32_t>(static_cast<size_t>(rows))));
      for (int64_t r = 0; r < rows; ++r) {
        const float* row = &x.f[static_cast<size_t>(r * cols)];
        out->i[static_cast<size_t>(r)] = static_cast<int32_t>(std::max_element(row, row + cols) - row);
      }
      return out;
    }
  }
  return OpError(n, "unknown op");
}

absl::StatusOr<std::map<std::string, Tensor>> Interpreter::Run(const Graph& g,
                                                              const std::map<std::string, Tensor>& inputs,
                                                              int64_t pos) {
  if (g.paging().paged()) return absl::InvalidArgumentError("interpreter: a paged graph needs its step rows");
  return Run(g, inputs, StepRows::Contiguous(pos, StepTokens(g, inputs)));
}

absl::StatusOr<std::map<std::string, Tensor>> Interpreter::Run(const Graph& g,
                                                              const std::map<std::string, Tensor>& inputs,
                                                              const StepRows& rows) {
  const int64_t tokens = StepTokens(g, inputs);
  if (tokens <= 0) return absl::InvalidArgumentError("interpreter: no input gives the step's token count");
  if (rows.tokens() != tokens) {
    return absl::InvalidArgumentError(
        absl::StrCat("interpreter: step rows for ", rows.tokens(), " tokens, inputs of ", tokens));
  }
  if (rows.paging() != g.paging()) {
    return absl::InvalidArgumentError(absl::StrCat("interpreter: step rows paged as '", ToString(rows.paging()),
                                                   "', the graph as '", ToString(g.paging()), "'"));
  }
  values_.assign(static_cast<size_t>(g.size()), nullptr);
  for (const Node& n : g.nodes()) {
    absl::StatusOr<TensorPtr> v = Eval(g, n, inputs, rows);
    if (!v.ok()) return v.status();
    values_[static_cast<size_t>(n.id)] = *std::move(v);
  }
  std::map<std::string, Tensor> out;
  for (const auto& [name, id] : g.outputs()) out[name] = *values_[static_cast<size_t>(id)];
  return out;
}

}  // namespace doppler::graph
