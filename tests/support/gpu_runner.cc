#include "tests/support/gpu_runner.h"

#include <algorithm>

#include <cmath>
#include <cstring>
#include <random>
#include <set>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "models/synthetic.h"
#include "quant/float_codec.h"
#include "quant/quant.h"
#include "runtime/plan_compile.h"

namespace doppler::test {

std::vector<float> RandomFloats(size_t n, uint32_t seed, float lo, float hi) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

RandomParams::RandomParams(const graph::Graph& g, uint32_t seed) {
  for (const graph::Node& n : g.nodes()) {
    if (n.kind != graph::OpKind::kParam) continue;
    const std::string& name = n.attrs.Str("name");
    std::vector<float> v = RandomFloats(static_cast<size_t>(graph::NumElements(n.type.shape, 0)), seed++);
    if (graph::IsBlockFormat(n.type.dtype)) {
      // Quantized rows; the interpreter sees their dequantization, exactly what the GPU decodes.
      // A shape the format cannot hold leaves no values, so Float32 reports it.
      const int64_t cols = n.type.shape.empty() ? 0 : n.type.shape.back().value;
      const int64_t rows = cols > 0 ? static_cast<int64_t>(v.size()) / cols : 0;
      // Formats without a quantizer (Q2_K, Q3_K...) get random blocks (models/synthetic.h).
      absl::StatusOr<std::vector<uint8_t>> q = quant::QuantizeRows(n.type.dtype, v.data(), rows, cols);
      if (!q.ok() && cols > 0 && cols % graph::Info(n.type.dtype).block_elems == 0) {
        q = std::vector<uint8_t>(graph::ByteSize(n.type.dtype, rows * cols));
        models::FillRandom(n.type.dtype, rows, cols, seed, 0.0f, 0.5f, q->data());
      }
      bytes_[name] = q.ok() ? *std::move(q) : std::vector<uint8_t>();
      if (!q.ok()) continue;
      std::vector<float> d(v.size());
      if (!quant::DequantizeRow(n.type.dtype, bytes_[name].data(), static_cast<int64_t>(d.size()), d.data()).ok()) {
        continue;
      }
      values_[name] = std::move(d);
      continue;
    }
    bytes_[name] = quant::EncodeFloats(n.type.dtype, v);
    values_[name] = quant::DecodeFloats(n.type.dtype, bytes_[name]);
  }
}

absl::StatusOr<std::vector<float>> RandomParams::Float32(const graph::Node& param) const {
  auto it = values_.find(param.attrs.Str("name"));
  if (it == values_.end()) return absl::NotFoundError(absl::StrCat("no random values for ", param.attrs.Str("name")));
  return it->second;
}

absl::StatusOr<std::unique_ptr<GpuRunner>> GpuRunner::Create(vk::Context& ctx, const graph::Graph& g, int64_t bucket,
                                                             const RandomParams& params,
                                                             std::optional<codegen::TargetCaps> caps) {
  std::unique_ptr<GpuRunner> r(new GpuRunner(ctx, g));
  absl::Status s = runtime::CreateResources(
      ctx, g, [&](const graph::Node& n) { return params.bytes(n.attrs.Str("name")); }, r->resources_);
  if (!s.ok()) return s;
  std::map<graph::ValueId, vk::Buffer*> external = runtime::BindResources(g, r->resources_);
  for (const graph::Node& n : g.nodes()) {
    if (n.kind != graph::OpKind::kInput) continue;
    const size_t bytes = graph::ByteSize(n.type.dtype, graph::NumElements(n.type.shape, bucket));
    absl::StatusOr<std::unique_ptr<vk::Buffer>> b = ctx.CreateBuffer(bytes, vk::BufferKind::kHostVisible, n.label);
    if (!b.ok()) return b.status();
    external[n.id] = b->get();
    r->inputs_[n.id] = *std::move(b);
  }
  if (!caps) caps = vk::TargetCapsOf(ctx.info());
  std::set<graph::ValueId> outside;
  for (const auto& [id, buffer] : external) outside.insert(id);
  absl::StatusOr<runtime::LoweredStep> step = runtime::LowerStep(g, *caps, bucket, outside);
  if (!step.ok()) return step.status();
  absl::StatusOr<std::unique_ptr<vk::Plan>> plan =
      vk::Plan::Build(ctx, r->pipelines_, g, bucket, std::move(step->dispatches), external,
                      vk::ArenaLayout{step->memory.arena_bytes, step->memory.offset}, "test");
  if (!plan.ok()) return plan.status();
  r->plan_ = *std::move(plan);
  return r;
}

absl::StatusOr<std::map<std::string, graph::Tensor>> GpuRunner::Run(
    const std::map<std::string, graph::Tensor>& inputs, uint32_t pos) {
  uint32_t tokens = 0;
  for (const graph::Node& n : g_.nodes()) {
    if (n.kind != graph::OpKind::kInput) continue;
    const graph::Tensor& t = inputs.at(n.attrs.Str("name"));
    tokens = static_cast<uint32_t>(t.shape[0]);
    const void* src = t.dtype == graph::DType::kI32 ? static_cast<const void*>(t.i.data()) : t.f.data();
    std::memcpy(inputs_.at(n.id)->mapped(), src, static_cast<size_t>(t.numel()) * 4);
  }
  if (absl::Status s = plan_->Run(tokens, pos); !s.ok()) return s;
  std::map<std::string, graph::Tensor> out;
  for (const auto& [name, id] : g_.outputs()) {
    const graph::Node& n = g_.node(id);
    graph::Tensor t;
    t.dtype = n.type.dtype;
    t.shape = graph::Resolve(n.type.shape, tokens);
    const size_t count = static_cast<size_t>(t.numel());
    void* dst;
    if (t.dtype == graph::DType::kI32) {
      t.i.resize(count);
      dst = t.i.data();
    } else {
      t.f.resize(count);
      dst = t.f.data();
    }
    if (absl::Status s = ctx_.Download(*plan_->slice(id).buffer, plan_->slice(id).offset, dst, count * 4); !s.ok()) return s;
    out[name] = std::move(t);
  }
  return out;
}

double RelativeError(const std::vector<float>& a, const std::vector<float>& b) {
  double diff = 0.0, scale = 1e-30;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    diff = std::max(diff, std::abs(static_cast<double>(a[i]) - b[i]));
    scale = std::max(scale, std::abs(static_cast<double>(b[i])));
  }
  return a.size() == b.size() ? diff / scale : 1e30;
}

double ToleranceFor(const vk::Plan& plan, double f32_tolerance) {
  for (const auto& d : plan.dispatches()) {
    if (d.variant.find("coop.") != std::string::npos || d.variant.find(".half") != std::string::npos) {
      return std::max(f32_tolerance, 3e-3);
    }
  }
  return f32_tolerance;
}

}  // namespace doppler::test

namespace doppler::test {

void ExpectOutputsMatch(const std::map<std::string, graph::Tensor>& got,
                        const std::map<std::string, graph::Tensor>& want, double tolerance, size_t step) {
  for (const auto& [name, ref] : want) {
    const graph::Tensor& t = got.at(name);
    ASSERT_EQ(t.shape, ref.shape) << name;
    if (ref.dtype == graph::DType::kI32) {
      EXPECT_EQ(t.i, ref.i) << name << " step " << step;
    } else {
      EXPECT_LE(RelativeError(t.f, ref.f), tolerance) << name << " step " << step;
    }
  }
}

}  // namespace doppler::test
