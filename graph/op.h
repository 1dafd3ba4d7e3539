// Operator kinds, their attributes, and the one-line meaning of each.
// The full meaning of every op is its implementation in interpreter.cc.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace doppler::graph {

enum class OpKind : uint8_t {
  // Sources.
  kInput,  // runtime input, attr name: token ids i32[T]
  kParam,  // weight tensor, attr name (tensor name in the weight store); optional attrs source,
           // source_rows, row_offset (and row_stride, source_experts, expert, in_out): the param lies
           // inside the stored tensor `source` (graph/param_slice.h: rows of a fused checkpoint tensor,
           // one expert's of a stacked one), `name` then only identifies it
  kConst,  // constant computed when the graph is built (e.g. rope cos/sin tables), attr name
  kState,  // persistent buffer that outlives a step (KV cache), attr name
  // Compute.
  kEmbedding,   // (table[V, D], ids i32[T]) -> f32[T, D]: row gather
  kMatMul,      // (x[T, K], w[N, K], ...) -> f32[T, N]: x · wᵀ, then the optional epilogue chain
                // (attr epilogue, graph/epilogue.h); optional attr split. The inputs after w (a norm
                // prologue's weight, the epilogue's): graph/matmul_inputs.h.
                // Optional attr x_quant = "q8": x (after a norm prologue) is first rounded in blocks of
                // 32 along K to 8-bit integers times a per-block scale (graph::RoundThroughQ8), so that
                // a kernel may take integer dot products
  kAdd,         // (a[R, C], b) -> a + b; b is [R, C], or a vector [C] broadcast over the rows (a bias)
  kMul,         // (a[R, C], b) -> a * b; b as for add
  kSilu,        // x -> x * sigmoid(x)
  kRmsNorm,     // (x[T, D], w[G]) -> x / sqrt(mean(x²) + eps) * (w + weight_offset) over each group of G
                // consecutive values of a row; attrs eps, weight_offset, optional group G (absent: G = D;
                // G = head_dim normalises each head). With attr residual = 1 it normalises s = x + r and
                // returns [T, 2D] = [s | norm(s)], stored split "D,D" (graph/layout.h); the inputs by
                // role: graph/rms_norm_inputs.h.
  kRope,        // (x[T, H*d], table[P, d/2, 2]) -> rotated x at positions pos..pos+T-1; attrs heads, head_dim, style
  kCacheWrite,  // (state[C, W], x[T, W]) -> state with x[t] in row (pos + t) % C: a cache of C rows
                // is a ring holding the last C positions (a cache of the whole context never wraps);
                // its prologues' inputs: graph/cache_write_inputs.h
  kAttention,   // (q[T, H*d], k[C, Hkv*d], v[C, Hkv*d]) -> f32[T, H*d]: causal softmax(q·kᵀ·scale)·v,
                // key j read from row j % C; attrs heads, kv_heads, head_dim, scale, window (0 = unlimited).
                // With attr sinks = 1 the last input is f32[H], a logit per head that joins each of the
                // head's softmaxes as a key of value 0 (GPT-OSS's attention sinks): it adds exp(sink - max)
                // to the denominator and nothing to the sum of values (graph/attention_inputs.h)
  kLastRow,     // x[T, D] -> x[T-1 : T, D] for the step's actual T
  kArgmax,      // x[R, N] -> i32[R]: index of the first maximum of each row
  kRecordTokens,   // (history i32[R], ids i32[T]) -> history with ids[t] at row (pos + t) % R
  kRepeatPenalty,  // (logits[1, V], history i32[R]) -> logits with every token of the last R positions
                   // penalised (graph::Penalize: x > 0 ? x / penalty : x * penalty); attr penalty
  kSample,         // logits[1, V] -> i32[1]: temperature, top-k, top-p, min-p, then a draw with the
                   // counter-based generator keyed by (seed, position); attrs temperature, top_k, top_p,
                   // min_p, seed. Temperature 0 is argmax.
  kGeluTanh,  // x -> 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x³))) (gelu_pytorch_tanh)
  kScale,     // x -> x * factor, factor rounded to float32; attr factor
  kPart,        // x (a split value) -> its column group `index`, [rows, w_index]; no kernel: a view
  kConcatRows,  // (w0, w1, ...) -> the weights' rows stacked: a weight transform done once at load
                // (inputs are params, consts or concat_rows; all of one dtype and row length)
  // Mixture of experts. A stacked expert weight is [E*N, K]: expert e's matrix is rows e*N..e*N+N-1
  // (per-expert checkpoint tensors stacked by concat_rows, or a stored stacked tensor such as a
  // GGUF's ffn_*_exps as a param; attr experts = E).
  kTopK,  // x[T, E] -> i32[T, k]: each row's indices of its k largest values, largest first, ties to the
          // lower index; attr k (1 <= k <= E)
  kRouteWeights,  // (logits[T, E], ids i32[T, k]) -> f32[T, k]: the chosen experts' weights; attr weighting:
                  // "softmax_chosen" softmax over the k chosen logits (Mixtral; GPT-OSS, of biased logits;
                  // Qwen3-MoE with norm_topk_prob, whose softmax-then-renormalise is this), "softmax_all"
                  // softmax over all E logits, read at the chosen (Qwen3-MoE without norm_topk_prob)
  kExpertMatMul,  // (x, w[E*N, K], ids i32[T, k]) -> each token's chosen experts
                  // applied to it: slot j's y_j = x_j · W[ids[t, j]]ᵀ, x_j = x[t] when x is [T, K] (one
                  // input for every slot, as gate/up read) or x[t, j*K..] when x is [T, k*K] (a slot's own
                  // input, as down reads). Then the optional attr epilogue per slot (graph/epilogue.h:
                  // gated steps take each expert's rows as [gate | up], silu, gelu_tanh). The value is
                  // [T, k*N'] (slot j in columns j*N'.., N' = N, or N/2 gated). The epilogue's bias
                  // steps take per-expert biases, slot j adding its expert's. Attr experts = E.
                  // Optional attr x_quant = "q8", as matmul's: each x_j is rounded through q8 blocks
                  // first. The inputs by role: graph/matmul_inputs.h
  kClampedSwiglu,  // (gate[R, C], up[R, C]) -> (clamp(up, -limit, limit) + 1) * g * sigmoid(alpha * g) with
                   // g = min(gate, limit) (GPT-OSS's experts; graph::ClampedSwiglu); attrs alpha, limit
  kRouteSum,  // (y f32[T, k*N], weights f32[T, k]) -> f32[T, N]: each token's slots weighted and summed,
              // sum_j weights[t, j] * y[t, j*N..], in f32, slot 0 first (an expert product's slots)
};

const char* OpName(OpKind kind);

using AttrValue = std::variant<int64_t, double, std::string>;

// Named, typed attributes of a node. Missing or mistyped attributes are caught by the verifier;
// the accessors assume a verified graph.
class Attrs {
 public:
  Attrs() = default;
  Attrs(std::initializer_list<std::pair<const std::string, AttrValue>> init) : values_(init) {}

  void Set(const std::string& name, AttrValue value) { values_[name] = std::move(value); }
  bool Has(std::string_view name) const { return values_.find(std::string(name)) != values_.end(); }
  void Erase(std::string_view name) { values_.erase(std::string(name)); }
  int64_t Int(std::string_view name) const;
  double Float(std::string_view name) const;
  const std::string& Str(std::string_view name) const;
  const std::map<std::string, AttrValue>& values() const { return values_; }
  bool operator==(const Attrs&) const = default;

 private:
  std::map<std::string, AttrValue> values_;
};

enum class AttrType { kInt, kFloat, kString };

struct OpDef {
  OpKind kind;
  const char* name;
  int num_inputs;
  std::vector<std::pair<const char*, AttrType>> attrs;  // required attributes
  // The op updates its first input (a state) in place and returns it: its output is that buffer.
  bool updates_input0 = false;
  // num_inputs is then a minimum: attributes decide how many more inputs the node has.
  bool variadic = false;
};

const OpDef& GetOpDef(OpKind kind);

}  // namespace doppler::graph
