// Runs any graph on the GPU and on the interpreter with the same random weights, so a kernel test
// is: build a small graph, run both, compare.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "backend_vk/context.h"
#include "backend_vk/pipeline_cache.h"
#include "backend_vk/plan.h"
#include "graph/interpreter.h"
#include "runtime/resources.h"

namespace doppler::test {

// Random weights in [-1, 1) for every param of a graph, already rounded to the param's dtype
// (block formats: quantized with QuantizeRows, the interpreter seeing their dequantization): the
// interpreter and the GPU see the same values.
class RandomParams : public graph::ParamSource {
 public:
  RandomParams(const graph::Graph& g, uint32_t seed);
  absl::StatusOr<std::vector<float>> Float32(const graph::Node& param) const override;
  const std::vector<uint8_t>& bytes(const std::string& name) const { return bytes_.at(name); }
  // Replaces a param's bytes and the values the interpreter sees (e.g. a fixture's quantized rows).
  void Set(const std::string& name, std::vector<uint8_t> bytes, std::vector<float> values) {
    bytes_[name] = std::move(bytes);
    values_[name] = std::move(values);
  }

 private:
  std::map<std::string, std::vector<float>> values_;
  std::map<std::string, std::vector<uint8_t>> bytes_;
};

std::vector<float> RandomFloats(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f);

// One plan of `g` for a token bucket; states persist across Run calls like a KV cache.
class GpuRunner {
 public:
  // `caps` replaces what the device reports (to test the code generated for other devices).
  static absl::StatusOr<std::unique_ptr<GpuRunner>> Create(vk::Context& ctx, const graph::Graph& g, int64_t bucket,
                                                           const RandomParams& params,
                                                           std::optional<codegen::TargetCaps> caps = std::nullopt);
  // Inputs by name (their first dimension is the step's token count); returns every output.
  absl::StatusOr<std::map<std::string, graph::Tensor>> Run(const std::map<std::string, graph::Tensor>& inputs,
                                                           uint32_t pos);
  const vk::Plan& plan() const { return *plan_; }

 private:
  GpuRunner(vk::Context& ctx, const graph::Graph& g) : ctx_(ctx), g_(g), pipelines_(ctx) {}
  vk::Context& ctx_;
  const graph::Graph& g_;
  vk::PipelineCache pipelines_;
  runtime::Resources resources_;                                   // params, consts, states
  std::map<graph::ValueId, std::unique_ptr<vk::Buffer>> inputs_;  // host-visible step inputs
  std::unique_ptr<vk::Plan> plan_;
};

// max |a - b| / max(1e-30, max |b|) over all elements.
double RelativeError(const std::vector<float>& a, const std::vector<float>& b);

// Step `step`'s outputs on the GPU against the interpreter's, by name (gtest assertions): the same
// shapes (a fatal failure), i32 values equal, float values within `tolerance` (RelativeError).
void ExpectOutputsMatch(const std::map<std::string, graph::Tensor>& got,
                        const std::map<std::string, graph::Tensor>& want, double tolerance, size_t step);

// The relative error a plan's results may carry against the interpreter: `f32_tolerance`, or 3e-3
// where a matmul runs on the cooperative-matrix units, which multiply f16-rounded operands (2^-11
// relative each), or an expert product in f16 pairs (experts.half), which also adds them in f16.
double ToleranceFor(const vk::Plan& plan, double f32_tolerance);

}  // namespace doppler::test
