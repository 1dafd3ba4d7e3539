// The CPU reference interpreter: the meaning of every op, in float32 (sums in double).
//
// It is the oracle that every GPU kernel and every fusion is tested against, and it lets a user
// bisect a numerical divergence node by node (value() exposes every node of the last run).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "graph/graph.h"

namespace doppler::graph {

struct Tensor {
  DType dtype = DType::kF32;  // kF32 (data in f) or kI32 (data in i)
  std::vector<int64_t> shape;
  std::vector<float> f;
  std::vector<int32_t> i;

  static Tensor F32(std::vector<int64_t> shape, std::vector<float> data);
  static Tensor I32(std::vector<int64_t> shape, std::vector<int32_t> data);
  int64_t numel() const;
};

// Supplies weights as float32 (the values the stored representation decodes to).
class ParamSource {
 public:
  virtual ~ParamSource() = default;
  virtual absl::StatusOr<std::vector<float>> Float32(const Node& param) const = 0;
};

class Interpreter {
 public:
  explicit Interpreter(const ParamSource& params) : params_(params) {}

  // Runs one step of `g`: `inputs` by input name; the step's tokens sit at absolute positions
  // pos, pos+1, ... States (KV caches) persist across calls and across graphs, by name.
  absl::StatusOr<std::map<std::string, Tensor>> Run(const Graph& g, const std::map<std::string, Tensor>& inputs,
                                                   int64_t pos);
  // Runs one step of a paged graph (graph/paging.h): each row at the position, and its keys in the
  // cache rows, that `rows` gives.
  absl::StatusOr<std::map<std::string, Tensor>> Run(const Graph& g, const std::map<std::string, Tensor>& inputs,
                                                   const StepRows& rows);

  // The value of a node in the last run.
  const Tensor& value(ValueId id) const { return *values_[static_cast<size_t>(id)]; }
  // Forget all states (a new sequence).
  void Reset() { states_.clear(); }

 private:
  absl::StatusOr<std::shared_ptr<Tensor>> Eval(const Graph& g, const Node& n,
                                               const std::map<std::string, Tensor>& inputs, const StepRows& rows);

  const ParamSource& params_;
  std::map<std::string, std::shared_ptr<Tensor>> param_cache_;
  std::map<std::string, std::shared_ptr<Tensor>> states_;
  std::vector<std::shared_ptr<Tensor>> values_;
};

}  // namespace doppler::graph
