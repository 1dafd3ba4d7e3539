// Sampling on the GPU: the kernels against the interpreter, reproducibility, and a chi-square test
// that drawn tokens follow softmax(logits / T) restricted to the top-k / top-p set.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cmath>
#include <numeric>

#include "graph/builder.h"
#include "tests/support/gpu_runner.h"
#include "tests/support/vk_test_env.h"

namespace doppler {
namespace {

using graph::Dim;
using graph::DType;
using graph::GraphBuilder;
using graph::Tensor;
using graph::ValueId;

struct Sampler {
  double temperature = 1.0, top_p = 1.0, min_p = 0.0, penalty = 1.0;
  int64_t top_k = 0, seed = 7, ring = 16;
};

// ids i32[T] and logits f32[T, V] in; the token drawn from the last row out.
graph::Graph SamplerGraph(int64_t vocab, const Sampler& s) {
  GraphBuilder b;
  ValueId ids = b.Input("ids", {DType::kI32, {Dim::Tokens()}});
  ValueId x = b.LastRow(b.Input("x", {DType::kF32, {Dim::Tokens(), Dim::Static(vocab)}}));
  if (s.penalty != 1.0) {
    ValueId history = b.RecordTokens(b.State("history", {DType::kI32, {Dim::Static(s.ring)}}), ids);
    x = b.RepeatPenalty(x, history, s.penalty);
    b.Output("penalized", x);
  }
  b.Output("token", b.Sample(x, s.temperature, s.top_k, s.top_p, s.min_p, s.seed));
  return *std::move(b).Finish();
}

Tensor Ids(std::vector<int32_t> ids) {
  const int64_t n = static_cast<int64_t>(ids.size());
  return Tensor::I32({n}, std::move(ids));
}

class SamplingTest : public vk::VkTest {
 protected:
  // Draws at positions pos0, pos0+1, ... with one-token steps; returns the tokens.
  std::vector<int32_t> Draw(const graph::Graph& g, const std::vector<float>& logits, int count, uint32_t pos0 = 0) {
    test::RandomParams params(g, 1);
    auto gpu = test::GpuRunner::Create(ctx(), g, 4, params);
    EXPECT_TRUE(gpu.ok()) << gpu.status();
    std::vector<int32_t> out;
    const int64_t vocab = static_cast<int64_t>(logits.size());
    for (int i = 0; i < count && gpu.ok(); ++i) {
      auto r = (*gpu)->Run({{"ids", Ids({3})}, {"x", Tensor::F32({1, vocab}, logits)}}, pos0 + static_cast<uint32_t>(i));
      EXPECT_TRUE(r.ok()) << r.status();
      if (!r.ok()) break;
      out.push_back(r->at("token").i[0]);
    }
    return out;
  }
};

TEST_F(SamplingTest, KernelsMatchTheInterpreter) {
  const int64_t vocab = 3001;  // not a multiple of the workgroup
  for (const Sampler& s : {Sampler{1.0, 1.0, 0.0, 1.0, 0}, Sampler{0.7, 0.9, 0.0, 1.0, 50}, Sampler{1.3, 0.5, 0.05, 1.0, 0},
                           Sampler{0.9, 0.95, 0.0, 1.3, 40}, Sampler{0.0, 1.0, 0.0, 1.5, 0}}) {
    graph::Graph g = SamplerGraph(vocab, s);
    test::RandomParams params(g, 1);
    auto gpu = test::GpuRunner::Create(ctx(), g, 8, params);
    ASSERT_TRUE(gpu.ok()) << gpu.status();
    graph::Interpreter interp(params);
    int mismatches = 0;
    for (uint32_t step = 0; step < 24; ++step) {
      // Steps of 1 to 3 tokens; token ids repeat so the penalty has work to do.
      const int64_t tokens = 1 + step % 3;
      std::vector<int32_t> ids;
      for (int64_t t = 0; t < tokens; ++t) ids.push_back(static_cast<int32_t>((step * 7 + t * 13) % 40));
      std::vector<float> x = test::RandomFloats(static_cast<size_t>(tokens * vocab), 100 + step, -4.0f, 4.0f);
      std::map<std::string, Tensor> in = {{"ids", Ids(ids)}, {"x", Tensor::F32({tokens, vocab}, x)}};
      const uint32_t pos = step * 3;
      auto want = interp.Run(g, in, pos);
      ASSERT_TRUE(want.ok()) << want.status();
      auto got = (*gpu)->Run(in, pos);
      ASSERT_TRUE(got.ok()) << got.status();
      if (want->count("penalized")) EXPECT_EQ(got->at("penalized").f, want->at("penalized").f) << "step " << step;
      mismatches += got->at("token").i[0] != want->at("token").i[0];
    }
    // Float sums differ in order between the two; a draw may only differ when it lands within
    // rounding of a boundary, which these inputs never do.
    EXPECT_EQ(mismatches, 0) << "temperature " << s.temperature << " top_k " << s.top_k << " top_p " << s.top_p;
  }
}

// Long rows (many values per invocation) through both of the kernel's paths: top-k's candidates
// listed in shared memory (run's defaults), and the general path for a k past the bound's 256
// groups, for top-k off, and for logits with so many ties at the boundary that the candidates do
// not fit the list.
struct LongRowCase {
  const char* name;
  int64_t vocab;
  Sampler sampler;
  int levels;  // logits rounded to this many distinct values (0: not rounded)
};

class SamplingLongRowTest : public SamplingTest, public ::testing::WithParamInterface<LongRowCase> {};

TEST_P(SamplingLongRowTest, MatchesTheInterpreter) {
  const LongRowCase& c = GetParam();
  graph::Graph g = SamplerGraph(c.vocab, c.sampler);
  test::RandomParams params(g, 1);
  auto gpu = test::GpuRunner::Create(ctx(), g, 1, params);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  graph::Interpreter interp(params);
  std::vector<int32_t> tokens;
  for (uint32_t step = 0; step < 6; ++step) {
    std::vector<float> x = test::RandomFloats(static_cast<size_t>(c.vocab), 300 + step, -6.0f, 6.0f);
    if (c.levels > 0) {
      for (float& v : x) v = std::round(v * static_cast<float>(c.levels) / 12.0f) * 12.0f / static_cast<float>(c.levels);
    }
    std::map<std::string, Tensor> in = {{"ids", Ids({1})}, {"x", Tensor::F32({1, c.vocab}, x)}};
    auto want = interp.Run(g, in, step);
    ASSERT_TRUE(want.ok()) << want.status();
    auto got = (*gpu)->Run(in, step);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(got->at("token").i[0], want->at("token").i[0]) << "step " << step;
    tokens.push_back(got->at("token").i[0]);
  }
  std::sort(tokens.begin(), tokens.end());
  EXPECT_GT(std::unique(tokens.begin(), tokens.end()) - tokens.begin(), 1);  // the draws vary
}

INSTANTIATE_TEST_SUITE_P(
    Paths, SamplingLongRowTest,
    ::testing::Values(LongRowCase{"listed_defaults", 40000, Sampler{0.8, 0.95, 0.05, 1.0, 40}, 0},
                      LongRowCase{"listed_top_k_only", 151936, Sampler{1.2, 1.0, 0.0, 1.0, 200}, 0},
                      LongRowCase{"general_large_k", 40000, Sampler{1.5, 0.9, 0.0, 1.0, 300}, 0},
                      LongRowCase{"general_no_top_k", 40000, Sampler{2.0, 0.5, 0.0, 1.0, 0}, 0},
                      LongRowCase{"general_ties", 40000, Sampler{0.9, 0.95, 0.0, 1.0, 40}, 6}),
    [](const ::testing::TestParamInfo<LongRowCase>& i) { return std::string(i.param.name); });

TEST_F(SamplingTest, SameSeedSameTokensOtherSeedOtherTokens) {
  const std::vector<float> logits = test::RandomFloats(500, 3, -2.0f, 2.0f);
  Sampler s;
  const std::vector<int32_t> a = Draw(SamplerGraph(500, s), logits, 40);
  EXPECT_EQ(Draw(SamplerGraph(500, s), logits, 40), a);
  s.seed = 8;
  EXPECT_NE(Draw(SamplerGraph(500, s), logits, 40), a);
}

TEST_F(SamplingTest, TopKOneIsGreedy) {
  const std::vector<float> logits = test::RandomFloats(777, 4, -2.0f, 2.0f);
  const int32_t greedy = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  Sampler s;
  s.top_k = 1;
  for (int32_t t : Draw(SamplerGraph(777, s), logits, 20)) EXPECT_EQ(t, greedy);
}

// The expected distribution straight from the definition: sort by logit, keep the top k, softmax
// at temperature T, keep the smallest prefix whose probability reaches top_p, renormalise.
std::vector<double> Expected(const std::vector<float>& logits, double temperature, size_t top_k, double top_p) {
  std::vector<size_t> order(logits.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return logits[a] > logits[b]; });
  order.resize(std::min(top_k, order.size()));
  std::vector<double> p(logits.size(), 0.0);
  double z = 0.0;
  for (size_t i : order) z += std::exp(logits[i] / temperature);
  double mass = 0.0;
  size_t kept = 0;
  while (kept < order.size() && mass < top_p) mass += std::exp(logits[order[kept++]] / temperature) / z;
  for (size_t k = 0; k < kept; ++k) p[order[k]] = std::exp(logits[order[k]] / temperature) / z / mass;
  return p;
}

struct ChiSquareCase {
  double temperature;
  int64_t top_k;
  double top_p;
  int kept;         // tokens the truncation keeps for these logits
  double critical;  // the 0.999 quantile of chi-square with kept - 1 degrees of freedom
};

class SamplingDistributionTest : public SamplingTest, public ::testing::WithParamInterface<ChiSquareCase> {};

TEST_P(SamplingDistributionTest, FrequenciesFollowTheTruncatedSoftmax) {
  const ChiSquareCase& c = GetParam();
  const std::vector<float> logits = {1.0f, 2.5f, 0.3f, -1.0f, 2.0f, 0.0f, 1.7f, -0.5f, 3.0f, 0.8f, -2.0f, 1.2f};
  Sampler s;
  s.temperature = c.temperature;
  s.top_k = c.top_k;
  s.top_p = c.top_p;
  s.seed = 2026;
  constexpr int kDraws = 6000;
  const std::vector<int32_t> tokens = Draw(SamplerGraph(12, s), logits, kDraws);
  ASSERT_EQ(tokens.size(), static_cast<size_t>(kDraws));
  const std::vector<double> p = Expected(logits, s.temperature, c.top_k > 0 ? static_cast<size_t>(c.top_k) : 12, s.top_p);
  std::vector<int> counts(logits.size(), 0);
  for (int32_t t : tokens) ++counts[static_cast<size_t>(t)];
  double chi2 = 0.0;
  int cells = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    if (p[i] == 0.0) {
      EXPECT_EQ(counts[i], 0) << "token " << i << " is outside the top-k/top-p set";
      continue;
    }
    const double e = p[i] * kDraws;
    chi2 += (counts[i] - e) * (counts[i] - e) / e;
    ++cells;
  }
  EXPECT_EQ(cells, c.kept);
  EXPECT_LT(chi2, c.critical) << "chi-square " << chi2;
  std::printf("chi-square %.2f over %d cells, %d draws\n", chi2, cells, kDraws);
}

// For these logits at T 0.8 the top 4 hold 0.876 of the mass and the top 5 0.922, so top-p 0.9
// keeps 5 (of top-k 8); top-k 3 alone keeps 3; no truncation keeps all 12.
INSTANTIATE_TEST_SUITE_P(Truncations, SamplingDistributionTest,
                         ::testing::Values(ChiSquareCase{0.8, 8, 0.9, 5, 18.47}, ChiSquareCase{0.8, 3, 1.0, 3, 13.82},
                                           ChiSquareCase{1.5, 0, 1.0, 12, 31.26}));

}  // namespace
}  // namespace doppler
