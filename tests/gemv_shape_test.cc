// The matrix-vector kernels' shapes (codegen/tuning/gemv_shape.h) hold what the kernels rely on,
// for every known device class and products of many sizes (none a multiple of a workgroup): every
// output column is some workgroup's, workgroups and teams fit the device and divide evenly, x's
// staging covers K in segments that fit shared memory, and loads in flight never exceed the
// iterations. (That each shape computes the right values: the kernel tests against the
// interpreter, quant_kernel_test.cc and tuning_test.cc.)
#include "codegen/tuning/gemv_shape.h"

#include <gtest/gtest.h>

#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "codegen/known_targets.h"
#include "tests/support/scoped_tune.h"

namespace doppler {
namespace {

using codegen::TargetCaps;
namespace tuning = codegen::tuning;

std::vector<std::pair<std::string, TargetCaps>> AllCaps() {
  return {{"nvidia", codegen::H100LikeCaps()},     {"lavapipe", codegen::LavapipeCaps()},
          {"amd", codegen::AmdLikeCaps()},         {"intel", codegen::IntelArcLikeCaps()},
          {"generic", codegen::GenericCaps()}};
}

// Products of K a multiple of 256 (every block format's superblock), some rows and columns.
std::vector<tuning::GemvProblem> Problems(int64_t part_values, graph::DType dtype = graph::DType::kQ4_K) {
  std::vector<tuning::GemvProblem> out;
  for (int64_t k : {256, 768, 2304, 4352, 6912, 14336}) {
    for (int64_t n : {37, 1001, 5003, 128257}) {
      for (int64_t gates : {1, 2}) {
        for (int64_t m : {1, 3, 13}) {
          out.push_back({m, k, n, gates, dtype, part_values, k / part_values, gates == 1});
        }
      }
    }
  }
  return out;
}

std::string Name(const std::string& caps, const tuning::GemvProblem& p) {
  return absl::StrCat(caps, " m", p.m, " k", p.k, " n", p.n, " g", p.gates, " pv", p.part_values);
}

TEST(GemvShape, TheFloatKernelCoversEveryColumnWithinTheDevice) {
  std::vector<tuning::GemvProblem> problems = Problems(16);
  for (const tuning::GemvProblem& p : Problems(8, graph::DType::kF16)) problems.push_back(p);
  for (const auto& [name, caps] : AllCaps()) {
    for (const tuning::GemvProblem& p : problems) {
      absl::StatusOr<tuning::GemvConfig> config = tuning::ChooseGemv(p.m, p.part_values);
      ASSERT_TRUE(config.ok()) << config.status();
      const tuning::GemvShape s = tuning::ChooseGemvShape(caps, p, *config);
      const std::string at = Name(name, p);
      EXPECT_GE(int64_t{s.row_blocks} * s.tm, p.m) << at;
      EXPECT_GE(int64_t{s.groups} * s.rn, p.n) << at;
      EXPECT_LT(int64_t{s.groups - 1} * s.rn, p.n) << at << ": a workgroup past the last column";
      EXPECT_LE(s.wg, caps.max_workgroup_invocations) << at;
      EXPECT_EQ(s.wg & (s.wg - 1), 0u) << at << ": the reductions take powers of two";
      // The reductions' sums (OUTS floats an invocation) fit shared memory, down to 32 invocations.
      const int64_t outs = s.tm * s.rn * p.gates + (p.norm ? s.tm : 0);
      if (s.wg > 32) EXPECT_LE(4 * outs * s.wg, caps.max_shared_memory) << at;
    }
  }
}

TEST(GemvShape, TheQ8KernelCoversEveryColumnAndStagesXWithinTheDevice) {
  for (const auto& [name, caps] : AllCaps()) {
    for (int64_t part_values : {32, 64}) {
      for (const tuning::GemvProblem& p : Problems(part_values)) {
        absl::StatusOr<tuning::GemvConfig> config = tuning::ChooseGemvQ8(p.m, p.k);
        ASSERT_TRUE(config.ok()) << config.status();
        for (bool argmax : {false, true}) {
          const tuning::GemvQ8Extras extras{.decoder_shared_bytes = 1024, .argmax_tail = argmax,
                                            .shuffle_blocks = caps.subgroup_shuffle && caps.min_subgroup_size >= 8};
          absl::StatusOr<tuning::GemvQ8Shape> s = tuning::ChooseGemvQ8Shape(caps, p, extras, *config);
          const std::string at = absl::StrCat(Name(name, p), argmax ? " argmax" : "");
          ASSERT_TRUE(s.ok()) << at << ": " << s.status();
          EXPECT_GE(int64_t{s->row_blocks} * s->tm, p.m) << at;
          EXPECT_LE(s->wg, caps.max_workgroup_invocations) << at;
          EXPECT_EQ(s->wg % 8, 0u) << at << ": x is staged by blocks of 8 invocations";
          EXPECT_EQ(s->wg % s->team, 0u) << at;
          if (s->subgroup_teams) EXPECT_EQ(s->team, s->subs * caps.subgroup_size) << at;
          EXPECT_EQ(s->row_groups, (p.n + s->rn - 1) / s->rn) << at;
          EXPECT_GE(int64_t{s->workgroups} * (s->wg / s->team) * s->rg_per_team, s->row_groups) << at;
          // x in segments of whole superblocks (or all of K), staged (9/8 bytes a value) in what
          // shared memory the decoder's tables leave.
          EXPECT_GE(s->seg * s->segments, p.k) << at;
          EXPECT_LT(s->seg * (s->segments - 1), p.k) << at;
          EXPECT_TRUE(s->seg == p.k || s->seg % 256 == 0) << at;
          EXPECT_LE(s->tm * s->seg * 9 / 8 + extras.decoder_shared_bytes, caps.max_shared_memory) << at;
          EXPECT_GE(int64_t{s->steps} * 4 * s->wg, s->seg) << at;
          EXPECT_LE(s->batch, s->steps) << at;
          EXPECT_LE(s->depth, s->iters) << at;
          EXPECT_LE(s->flat_depth, s->flat_iters) << at;
          if (s->flat) EXPECT_EQ(s->segments, 1) << at;
        }
      }
    }
  }
}

// A norm the kernel computes as it reads x needs x in one segment: where the rows do not fit, the
// shape says so, naming the shared memory.
TEST(GemvShape, ARestatedNormNeedsXInOneSegment) {
  const TargetCaps caps = codegen::GenericCaps();  // 16 KiB of shared memory
  const tuning::GemvProblem p{4, 14336, 1000, 1, graph::DType::kQ4_K, 32, 14336 / 32, false};
  absl::StatusOr<tuning::GemvConfig> config = tuning::ChooseGemvQ8(p.m, p.k);
  ASSERT_TRUE(config.ok()) << config.status();
  absl::StatusOr<tuning::GemvQ8Shape> plain = tuning::ChooseGemvQ8Shape(caps, p, {}, *config);
  ASSERT_TRUE(plain.ok()) << plain.status();
  ASSERT_GT(plain->segments, 1);
  absl::StatusOr<tuning::GemvQ8Shape> restated = tuning::ChooseGemvQ8Shape(caps, p, {.restate = true}, *config);
  ASSERT_FALSE(restated.ok());
  EXPECT_NE(restated.status().message().find("bytes of shared memory cannot stage"), std::string::npos)
      << restated.status();
}

// DOPPLER_TUNE's gemv_q8.depth sets the iterations a lane keeps in flight, plain and flat, at most
// the iterations there are.
TEST(GemvShape, DepthOverrideSetsTheLoadsInFlight) {
  const TargetCaps caps = codegen::H100LikeCaps();
  for (const int64_t k : {int64_t{4096}, int64_t{14336}}) {
    const tuning::GemvProblem p{1, k, 4096, 2, graph::DType::kQ4_0, 32, k / 32, false};
    for (const int64_t depth : {int64_t{1}, int64_t{3}, int64_t{8}}) {
      test::ScopedTune tune(absl::StrCat("gemv_q8.depth=", depth).c_str());
      absl::StatusOr<tuning::GemvConfig> config = tuning::ChooseGemvQ8(p.m, p.k, {p.w_dtype, true});
      ASSERT_TRUE(config.ok()) << config.status();
      EXPECT_EQ(config->depth, depth);
      absl::StatusOr<tuning::GemvQ8Shape> s = tuning::ChooseGemvQ8Shape(caps, p, {}, *config);
      ASSERT_TRUE(s.ok()) << s.status();
      EXPECT_EQ(s->depth, std::min<int64_t>(depth, s->iters)) << k;
      EXPECT_EQ(s->flat_depth, std::min<int64_t>(depth, s->flat_iters)) << k;
    }
  }
}

// Float weights for one row of x take workgroups as wide as a row's 16-byte loads of weights allow
// (up to 256), one half as wide where the last round over a row would leave more than an eighth
// idle, whatever the values a part (four or eight); quantized weights and more rows keep the
// invocation target's.
TEST(GemvShape, FloatWeightsForOneRowTakeWorkgroupsAsWideAsTheRow) {
  const TargetCaps caps = codegen::H100LikeCaps();
  struct Case {
    int64_t m, k, n;
    graph::DType dtype;
    uint32_t wg;
  };
  for (const Case& c : std::vector<Case>{{1, 4096, 6144, graph::DType::kF16, 256},
                                         {1, 4096, 128256, graph::DType::kF16, 256},
                                         {1, 14336, 4096, graph::DType::kBF16, 256},
                                         {1, 2880, 5120, graph::DType::kF16, 128},  // 360 parts: 3 rounds of 128
                                         {1, 1000, 4096, graph::DType::kF16, 128},  // 125 parts
                                         {8, 4096, 6144, graph::DType::kF16, 64},
                                         {1, 4096, 6144, graph::DType::kQ4_K, 128}}) {
    for (const int64_t pv : graph::IsFloat(c.dtype) ? std::vector<int64_t>{4, 8} : std::vector<int64_t>{16}) {
      const tuning::GemvProblem p{c.m, c.k, c.n, 1, c.dtype, pv, c.k / pv, false};
      absl::StatusOr<tuning::GemvConfig> config = tuning::ChooseGemv(p.m, p.part_values);
      ASSERT_TRUE(config.ok()) << config.status();
      EXPECT_EQ(tuning::ChooseGemvShape(caps, p, *config).wg, c.wg) << Name("nvidia", p) << " " << graph::Name(c.dtype);
    }
  }
}

// A matrix of fewer columns than kMinWorkgroups (at the rule's columns a workgroup) takes one a
// workgroup and an invocation a part of the row, in powers of two up to 1,024 and the device's
// limit; one of more columns keeps the rule's shape.
TEST(GemvShape, FewColumnsTakeOneAWorkgroupAndAnInvocationAPart) {
  struct Case {
    const char* caps;
    int64_t m, k, n, part_values;
    int64_t rn;
    uint32_t wg;
  };
  for (const Case& c : std::vector<Case>{{"nvidia", 1, 2880, 32, 8, 1, 512},   // GPT-OSS-20B's router
                                         {"nvidia", 1, 2880, 32, 4, 1, 1024},  // 720 parts
                                         {"nvidia", 16, 2880, 32, 8, 1, 512},
                                         {"nvidia", 1, 2048, 128, 8, 1, 256},  // Qwen3-30B-A3B's: 64 groups of 2
                                         {"nvidia", 1, 4096, 8, 8, 1, 512},    // Mixtral's
                                         {"nvidia", 1, 72, 5, 8, 1, 32},       // 9 parts: the narrowest
                                         {"generic", 1, 2880, 32, 8, 1, 256},  // the device's limit
                                         {"nvidia", 1, 2880, 300, 8, 2, 256}}) {  // 150 groups of 2: the rule
    TargetCaps caps;
    for (const auto& [name, cs] : AllCaps()) {
      if (name == c.caps) caps = cs;
    }
    const tuning::GemvProblem p{c.m, c.k, c.n, 1, graph::DType::kF32, c.part_values, c.k / c.part_values, true};
    absl::StatusOr<tuning::GemvConfig> config = tuning::ChooseGemv(p.m, p.part_values);
    ASSERT_TRUE(config.ok()) << config.status();
    const tuning::GemvShape s = tuning::ChooseGemvShape(caps, p, *config);
    EXPECT_EQ(s.rn, c.rn) << Name(c.caps, p);
    EXPECT_EQ(s.groups, c.n / c.rn) << Name(c.caps, p);
    EXPECT_EQ(s.wg, c.wg) << Name(c.caps, p);
  }
}

// 16-bit float weights take parts of four values at one row of x, but where the kernel computes a
// residual norm of x as it reads it; f32 weights and more rows take parts of eight; DOPPLER_TUNE's
// gemv.float_part says otherwise (4 or 8, anything else an error naming it).
TEST(GemvShape, SixteenBitFloatPartsAreFourValuesAtOneRow) {
  struct Case {
    int64_t m;
    graph::DType dtype;
    bool restated;
    int64_t values;
  };
  for (const Case& c : std::vector<Case>{{1, graph::DType::kF16, false, 4},
                                         {1, graph::DType::kBF16, false, 4},
                                         {1, graph::DType::kF16, true, 8},
                                         {1, graph::DType::kF32, false, 8},
                                         {2, graph::DType::kF16, false, 8},
                                         {16, graph::DType::kBF16, false, 8}}) {
    absl::StatusOr<int64_t> got = tuning::GemvFloatPart(c.m, c.dtype, c.restated);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(*got, c.values) << c.m << " " << graph::Name(c.dtype) << " " << c.restated;
  }
  {
    test::ScopedTune tune("gemv.float_part=8");
    absl::StatusOr<int64_t> got = tuning::GemvFloatPart(1, graph::DType::kF16, false);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(*got, 8);
  }
  test::ScopedTune tune("gemv.float_part=6");
  absl::StatusOr<int64_t> bad = tuning::GemvFloatPart(1, graph::DType::kF16, false);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("gemv.float_part"), std::string::npos) << bad.status();
}

TEST(GemvShape, FloatColumnsAndWorkgroupOverridesSetTheShape) {
  const TargetCaps caps = codegen::H100LikeCaps();
  const tuning::GemvProblem p{1, 2880, 5120, 1, graph::DType::kF16, 8, 360, false};
  // {cols, wg, the workgroup made}: the reductions' shared memory (4 bytes an output an
  // invocation) halves one that would not fit it (16 · 1,024 · 4 bytes > 48 KiB).
  for (const auto& [cols, wg, made] : {std::tuple<int64_t, int64_t, uint32_t>{1, 64, 64}, {8, 256, 256}, {16, 1024, 512}}) {
    test::ScopedTune tune(absl::StrCat("gemv.cols=", cols, ",gemv.wg=", wg).c_str());
    absl::StatusOr<tuning::GemvConfig> config = tuning::ChooseGemv(p.m, p.part_values);
    ASSERT_TRUE(config.ok()) << config.status();
    const tuning::GemvShape s = tuning::ChooseGemvShape(caps, p, *config);
    EXPECT_EQ(s.rn, cols);
    EXPECT_EQ(s.groups, (5120 + cols - 1) / cols);
    EXPECT_EQ(s.wg, made) << cols;
  }
  for (const char* bad : {"gemv.cols=3", "gemv.wg=48"}) {
    test::ScopedTune tune(bad);
    absl::StatusOr<tuning::GemvConfig> config = tuning::ChooseGemv(1, 8);
    ASSERT_FALSE(config.ok()) << bad;
    EXPECT_NE(config.status().message().find(bad), std::string::npos) << config.status();
  }
}

}  // namespace
}  // namespace doppler
