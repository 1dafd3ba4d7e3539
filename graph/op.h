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
  kParam,  // weight tensor, attr name (tensor name in the weight store)
  kConst,  // constant computed when the graph is built (e.g. rope cos/sin tables), attr name
  kState,  // persistent buffer that outlives a step (KV cache), attr name
  // Compute.
  kEmbedding,   // (table[V, D], ids i32[T]) -> f32[T, D]: row gather
  kMatMul,      // (x[T, K], w[N, K]) -> f32[T, N]: x · wᵀ
  kAdd,         // (a, b) -> a + b, same shape
  kMul,         // (a, b) -> a * b, same shape
  kSilu,        // x -> x * sigmoid(x)
  kRmsNorm,     // (x[T, D], w[D]) -> x / sqrt(mean(x²) + eps) * (w + weight_offset); attrs eps, weight_offset
  kRope,        // (x[T, H*d], table[P, d/2, 2]) -> rotated x at positions pos..pos+T-1; attrs heads, head_dim, style
  kCacheWrite,  // (state[C, W], x[T, W]) -> state with rows pos..pos+T-1 replaced by x
  kAttention,   // (q[T, H*d], k[C, Hkv*d], v[C, Hkv*d]) -> f32[T, H*d]: causal softmax(q·kᵀ·scale)·v;
                // attrs heads, kv_heads, head_dim, scale, window (0 = unlimited)
  kLastRow,     // x[T, D] -> x[T-1 : T, D] for the step's actual T
  kArgmax,      // x[R, N] -> i32[R]: index of the first maximum of each row
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
};

const OpDef& GetOpDef(OpKind kind);

}  // namespace doppler::graph
