// Tuning as data (codegen/tuning/): DOPPLER_TUNE's entries, checked against the keys the families
// know; the tiled and matrix-vector matmuls' choices and their overrides, whose kernels still
// compute what the interpreter does.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "codegen/attention_keys.h"
#include "codegen/kernel.h"
#include "codegen/known_targets.h"
#include "codegen/tuning/attention.h"
#include "codegen/tuning/coop.h"
#include "codegen/tuning/coop_rows.h"
#include "codegen/tuning/device_choices.h"
#include "codegen/tuning/experts.h"
#include "codegen/tuning/gemm.h"
#include "codegen/tuning/gemv.h"
#include "codegen/tuning/matmul.h"
#include "codegen/tuning/tuning.h"
#include "graph/builder.h"
#include "graph/interpreter.h"
#include "tests/support/compiled_kernel.h"
#include "graph/verifier.h"
#include "passes/pass.h"
#include "tests/support/gpu_runner.h"
#include "tests/support/graph_values.h"
#include "tests/support/scoped_tune.h"
#include "tests/support/vk_test_env.h"

namespace doppler {
namespace {

using codegen::tuning::ChooseExpertGemv;
using codegen::tuning::ChooseGemm;
using codegen::tuning::ChooseGemv;
using codegen::tuning::ChooseGemvQ8;
using codegen::tuning::ExpertGemvConfig;
using codegen::tuning::GemmConfig;
using codegen::tuning::GemvConfig;
using codegen::tuning::Override;
using test::ScopedTune;

codegen::TargetCaps Caps(uint32_t shared_memory) {
  codegen::TargetCaps caps;
  caps.max_shared_memory = shared_memory;
  return caps;
}

TEST(Tuning, OverridesAreReadByFamilyAndKey) {
  ScopedTune tune("gemm.bn=32, gemm.bk=16");
  absl::StatusOr<std::optional<int64_t>> bn = Override("gemm", "bn"), bk = Override("gemm", "bk");
  ASSERT_TRUE(bn.ok() && bk.ok()) << bn.status() << bk.status();
  EXPECT_EQ(*bn, std::optional<int64_t>(32));
  EXPECT_EQ(*bk, std::optional<int64_t>(16));
  absl::StatusOr<GemmConfig> c = ChooseGemm(Caps(32768), 256, 8192, 1);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->bn, 32);
  EXPECT_EQ(c->bk, 16);
}

TEST(Tuning, BadEntriesAreErrorsNamingThem) {
  for (const auto& [tune, says] : std::map<std::string, std::string>{
           {"gemm.bn", "'gemm.bn' is not family.key=integer"},
           {"gemm.bn=wide", "'gemm.bn=wide' is not family.key=integer"},
           {"gemm.bm=32", "unknown key 'gemm.bm' (known: gemm.bn, gemm.bk, coop.bm"},
           {"gemm.bn=48", "gemm.bn=48 is not 16, 32 or 64"},
           {"gemm.bk=64", "gemm.bk=64 is not 16 or 32"},
           // Narrow gated tiles with slices of 32 need 23,040 bytes.
           {"gemm.bn=16,gemm.bk=32", "need 23040 bytes of shared memory; the device has 16384"}}) {
    ScopedTune scoped(tune.c_str());
    absl::StatusOr<GemmConfig> c = ChooseGemm(Caps(16384), 64, 512, 2);
    ASSERT_FALSE(c.ok()) << tune;
    EXPECT_NE(c.status().message().find(says), std::string::npos) << c.status();
    EXPECT_EQ(c.status().message().rfind("DOPPLER_TUNE: ", 0), 0u) << c.status();
  }
}

// Without an override the choice follows the grid and the shared memory (the golden file pins
// every fixture model's kernels; these are the rules).
TEST(Tuning, GemmFollowsTheGridAndTheSharedMemory) {
  unsetenv("DOPPLER_TUNE");
  struct Case {
    int64_t m, n, gates;
    uint32_t shared;
    int64_t bn, bk;
  };
  for (const Case& c : {Case{256, 8192, 1, 32768, 64, 32},   // 128 tiles of 64: wide, slices of 32
                        Case{64, 4096, 1, 32768, 32, 32},    // 64 tiles of 64: half as wide
                        Case{64, 512, 2, 16384, 16, 16},     // narrow gated tiles: slices of 16 fit
                        Case{64, 4096, 2, 32768, 32, 16},    // gated, 32 wide: slices of 32 do not fit
                        Case{64, 4096, 2, 16384, 64, 16}}) {  // 16 KiB: a narrow tile's sums do not fit
    absl::StatusOr<GemmConfig> got = ChooseGemm(Caps(c.shared), c.m, c.n, c.gates);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(got->bn, c.bn) << c.m << "x" << c.n;
    EXPECT_EQ(got->bk, c.bk) << c.m << "x" << c.n;
  }
}

// The matrix-vector kernels' rows of x a workgroup: the float one's as many as a part's x values
// of every row fit 64 registers, the q8 one's as many as fit one 36 KiB segment of staged x (9/8
// bytes a value), in blocks of about as many rows each.
TEST(Tuning, GemvRowsFollowTheRegistersAndTheStaging) {
  unsetenv("DOPPLER_TUNE");
  struct Case {
    int64_t m, k_or_part_values, rows;
  };
  for (const Case& c : {Case{16, 16, 4}, Case{16, 8, 8}, Case{16, 4, 16}, Case{3, 16, 3}, Case{1, 8, 1}}) {
    absl::StatusOr<GemvConfig> got = ChooseGemv(c.m, c.k_or_part_values);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(got->rows, c.rows) << "float, " << c.m << " rows of parts of " << c.k_or_part_values;
  }
  for (const Case& c : {Case{16, 2048, 16}, Case{16, 4096, 8}, Case{8, 4096, 8}, Case{13, 6144, 5}, Case{16, 14336, 2},
                        Case{5, 14336, 2}, Case{1, 100000, 1}, Case{16, 256, 16}}) {
    absl::StatusOr<GemvConfig> got = ChooseGemvQ8(c.m, c.k_or_part_values);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(got->rows, c.rows) << "q8, " << c.m << " rows of " << c.k_or_part_values;
  }
}

// The expert matrix-vector kernel takes as many columns a workgroup, up to 4, as keep 2^18
// invocations in the dispatch (on an H100-like device, subgroups of 32): a decode step's gated
// product of 8 slots × 768 columns over 64 parts a row (workgroups of 64) takes one, GPT-OSS's of 4
// × 2,880 over 360 parts (128: 256 would leave 152 idle in its last round) four, its down product's
// weighted sum of 4 slots' 360 parts (2,880 columns, workgroups of 256) two; DOPPLER_TUNE's
// experts.cols overrides.
TEST(Tuning, ExpertGemvColumnsKeepTheDispatchFull) {
  unsetenv("DOPPLER_TUNE");
  const codegen::TargetCaps nvidia = codegen::H100LikeCaps();
  struct Case {
    int64_t items, column_workgroups;
    uint32_t workgroup;
    int64_t cols;
  };
  for (const Case& c : std::vector<Case>{{64, 8 * 768, 64, 4}, {360, 4 * 2880, 128, 4}, {4 * 360, 2880, 256, 4}, {64, 1536, 64, 2}, {24, 10, 32, 1}}) {
    EXPECT_EQ(codegen::tuning::ExpertGemvWorkgroup(nvidia, c.items, 1), c.workgroup) << c.items << " items";
    absl::StatusOr<ExpertGemvConfig> got = ChooseExpertGemv(nvidia, c.items, c.column_workgroups);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(got->cols, c.cols) << c.column_workgroups << " workgroups of " << c.workgroup;
  }
  {
    ScopedTune tune("experts.cols=8");
    absl::StatusOr<ExpertGemvConfig> got = ChooseExpertGemv(nvidia, 24, 10);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(got->cols, 8);
  }
  ScopedTune tune("experts.cols=3");
  EXPECT_FALSE(ChooseExpertGemv(nvidia, 24, 10).ok());
}

TEST(Tuning, ExpertGemvBlockPartIsTheRuleOrAnOverrideOf8Or32) {
  unsetenv("DOPPLER_TUNE");
  absl::StatusOr<int64_t> rule = codegen::tuning::ExpertGemvBlockPart();
  ASSERT_TRUE(rule.ok()) << rule.status();
  EXPECT_EQ(*rule, codegen::tuning::kExpertGemvBlockPart);
  {
    ScopedTune tune("experts.part=8");
    absl::StatusOr<int64_t> got = codegen::tuning::ExpertGemvBlockPart();
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(*got, 8);
  }
  ScopedTune tune("experts.part=16");
  absl::StatusOr<int64_t> bad = codegen::tuning::ExpertGemvBlockPart();
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("experts.part=16 is not one of 8, 32"), std::string::npos) << bad.status();
}

// MXFP4's parts take f16 pairs wherever the device has f16 arithmetic and float dots where it has
// none; experts.half=0 keeps float dots, experts.half=1 is an error naming shaderFloat16 on a device
// without it; other types' kernels are as they were either way.
TEST(Tuning, ExpertGemvHalfDotsFollowF16ArithmeticForMxfp4) {
  auto kernel = [](graph::DType dtype, const codegen::TargetCaps& caps) -> absl::StatusOr<codegen::Kernel> {
    graph::GraphBuilder b;
    graph::ValueId x = b.Input("x", test::Rows(96));
    graph::ValueId ids = b.TopK(b.Input("logits", test::Rows(4)), 2);
    b.Output("y", b.ExpertMatMul(x, b.Param("w", test::Matrix(4 * 40, 96, dtype)), ids, 4));
    absl::StatusOr<graph::Graph> g = std::move(b).Finish();
    if (!g.ok()) return g.status();
    return codegen::EmitKernel(*g, g->node(*g->output("y")), caps, 1);
  };
  auto half = [&](graph::DType dtype, const codegen::TargetCaps& caps) {
    absl::StatusOr<codegen::Kernel> k = kernel(dtype, caps);
    EXPECT_TRUE(k.ok()) << k.status();
    return k.ok() && k->variant.find(".half") != std::string::npos;
  };
  codegen::TargetCaps f16 = codegen::H100LikeCaps(), no_f16 = codegen::H100LikeCaps();
  no_f16.float16_arithmetic = false;
  EXPECT_TRUE(half(graph::DType::kMXFP4, f16));
  EXPECT_FALSE(half(graph::DType::kMXFP4, no_f16));
  EXPECT_FALSE(half(graph::DType::kQ4_0, f16));
  {
    ScopedTune tune("experts.half=0");
    EXPECT_FALSE(half(graph::DType::kMXFP4, f16));
  }
  ScopedTune tune("experts.half=1");
  EXPECT_TRUE(half(graph::DType::kMXFP4, f16));
  EXPECT_FALSE(half(graph::DType::kQ4_0, f16));
  absl::StatusOr<codegen::Kernel> none = kernel(graph::DType::kMXFP4, no_f16);
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("shaderFloat16"), std::string::npos) << none.status();
}

TEST(Tuning, GemvRowsOverridesAreCheckedAndUsedForAtMostTheBucket) {
  {
    ScopedTune tune("gemv.rows=16,gemv_q8.rows=3");
    absl::StatusOr<GemvConfig> f = ChooseGemv(16, 16), q = ChooseGemvQ8(16, 256), few = ChooseGemvQ8(2, 256);
    ASSERT_TRUE(f.ok() && q.ok() && few.ok()) << f.status() << q.status() << few.status();
    EXPECT_EQ(f->rows, 16);
    EXPECT_EQ(q->rows, 3);
    EXPECT_EQ(few->rows, 2);
  }
  for (const char* tune : {"gemv.rows=0", "gemv_q8.rows=17"}) {
    ScopedTune scoped(tune);
    absl::StatusOr<GemvConfig> f = ChooseGemv(4, 8), q = ChooseGemvQ8(4, 256);
    EXPECT_FALSE(f.ok() && q.ok()) << tune;
    const absl::Status& bad = f.ok() ? q.status() : f.status();
    EXPECT_NE(bad.message().find(absl::StrCat("DOPPLER_TUNE: ", tune, " is not between 1 and 16")), std::string::npos) << bad;
  }
}

// On an H100-like device (as in tests/process_replay_test.cc) Llama-3.1-8B's matrices stage their
// rows of x in one segment at 8 and 16 rows: gate+up (K = 4,096) as one block of 8 rows, or two,
// and the down projection (K = 14,336) in blocks of 2 (bench/RESULTS.md, "Matrix-vector kernels
// for up to 16 rows"). No device needed.
TEST(Tuning, GemvQ8StagesXInOneSegmentOnAnH100LikeDevice) {
  unsetenv("DOPPLER_TUNE");
  const codegen::TargetCaps nvidia = codegen::H100LikeCaps();
  struct Case {
    int64_t k, w_rows;
    const char* epilogue;
    int64_t bucket;
    const char* rows;  // in the variant
    int64_t blocks;
  };
  for (const Case& c : {Case{4096, 2 * 14336, "silu_mul", 8, ".t8x", 1}, Case{4096, 2 * 14336, "silu_mul", 16, ".t8x", 2},
                        Case{4096, 6144, "", 8, ".t8x", 1}, Case{14336, 4096, "add", 8, ".t2x", 4}}) {
    graph::GraphBuilder b;
    graph::ValueId x = b.Input("x", test::Rows(c.k));
    std::vector<graph::ValueId> extras;
    if (std::string(c.epilogue) == "add") extras.push_back(b.Input("r", test::Rows(c.w_rows)));
    const graph::ValueId w = b.Param("w", test::Matrix(c.w_rows, c.k, graph::DType::kQ4_K));
    graph::ValueId y = *c.epilogue ? b.MatMulFused(x, w, extras, c.epilogue) : b.MatMul(x, w);
    b.Output("y", y);
    absl::StatusOr<graph::Graph> g = std::move(b).Finish();
    ASSERT_TRUE(g.ok()) << g.status();
    graph::Node& node = g->mutable_node(*g->output("y"));
    node.attrs.Set("x_quant", std::string("q8"));
    absl::StatusOr<codegen::Kernel> kernel = codegen::EmitKernel(*g, node, nvidia, c.bucket);
    ASSERT_TRUE(kernel.ok()) << kernel.status();
    const codegen::Kernel& k = *kernel;
    std::printf("[ k%lld n%lld, bucket %lld ] %s, %u x %u x %u workgroups\n", static_cast<long long>(c.k),
                static_cast<long long>(c.w_rows), static_cast<long long>(c.bucket), k.variant.c_str(), k.groups[0],
                k.groups[1], k.groups[2]);
    EXPECT_EQ(k.variant.rfind("gemv_q8.q4_k", 0), 0u) << k.variant;
    EXPECT_NE(k.variant.find(c.rows), std::string::npos) << k.variant;
    EXPECT_EQ(k.variant.find(".seg"), std::string::npos) << k.variant;
    // Blocks interleaved along the grid's x.
    if (c.blocks > 1) {
      EXPECT_NE(k.variant.find(absl::StrCat(".blocks", c.blocks, "+")), std::string::npos) << k.variant;
    } else {
      EXPECT_EQ(k.variant.find(".blocks"), std::string::npos) << k.variant;
    }
    EXPECT_EQ(k.groups[2], 1u) << k.variant;
  }
}

// The q8 kernel's decoding of IQ4 and Q4_0 weights: IQ4's table of nibble pairs (16 replicas)
// where the device shuffles and the table fits one segment beside the rows' staging, else the
// nibble grids; Q4_0's quants signed; none of them for other types.
// No device needed.
TEST(Tuning, GemvQ8DecodingFollowsTheTypeAndTheStaging) {
  unsetenv("DOPPLER_TUNE");
  using graph::DType;
  struct Case {
    DType dtype;
    bool shuffles;
    int64_t m, k, pairs, q4_0_signed, iq4_xs_part;
  };
  for (const Case& c : {Case{DType::kIQ4_XS, true, 1, 4096, 16, 0, 32}, Case{DType::kIQ4_XS, true, 1, 14336, 16, 0, 32},
                        Case{DType::kIQ4_NL, true, 4, 4096, 16, 0, 32},
                        // 8 rows of 4,096 values take 36 KiB of staging: no room for the table.
                        Case{DType::kIQ4_XS, true, 8, 4096, 0, 0, 32}, Case{DType::kIQ4_XS, false, 1, 4096, 0, 0, 32},
                        Case{DType::kQ4_0, true, 1, 4096, 0, 1, 32}, Case{DType::kQ4_0, false, 16, 4096, 0, 1, 32},
                        Case{DType::kQ4_K, true, 1, 4096, 0, 0, 32}}) {
    absl::StatusOr<GemvConfig> got = ChooseGemvQ8(c.m, c.k, {c.dtype, c.shuffles});
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(got->iq4_pairs, c.pairs) << graph::Name(c.dtype) << " " << c.m << " rows of " << c.k;
    EXPECT_EQ(got->q4_0_signed, c.q4_0_signed) << graph::Name(c.dtype);
    EXPECT_EQ(got->iq4_xs_part, c.iq4_xs_part) << graph::Name(c.dtype);
    EXPECT_EQ(got->q4_0_part, 32) << graph::Name(c.dtype);
  }
}

TEST(Tuning, BadGemvQ8DecodingEntriesAreErrorsNamingThem) {
  for (const auto& [tune, says] : std::map<std::string, std::string>{
           {"gemv_q8.iq4_pairs=3", "gemv_q8.iq4_pairs=3 is not one of 0, 1, 2, 4, 8, 16, 32"},
           {"gemv_q8.iq4_pairs=64", "gemv_q8.iq4_pairs=64 is not one of 0, 1, 2, 4, 8, 16, 32"},
           {"gemv_q8.q4_0_signed=2", "gemv_q8.q4_0_signed=2 is not one of 0, 1"},
           {"gemv_q8.iq4_xs_part=128", "gemv_q8.iq4_xs_part=128 is not one of 32, 64"},
           {"gemv_q8.q4_0_part=48", "gemv_q8.q4_0_part=48 is not one of 32, 64"},
           {"gemv_q8.depth=9", "gemv_q8.depth=9 is not one of 1, 2, 3, 4, 5, 6, 7, 8"},
           {"gemv_q8.iq4_pairs=16", "gemv_q8.iq4_pairs=16 stages x in pairs through subgroup shuffles"}}) {
    ScopedTune scoped(tune.c_str());
    absl::StatusOr<GemvConfig> c = ChooseGemvQ8(1, 4096, {graph::DType::kIQ4_XS, false});
    ASSERT_FALSE(c.ok()) << tune;
    EXPECT_NE(c.status().message().find(says), std::string::npos) << c.status();
    EXPECT_EQ(c.status().message().rfind("DOPPLER_TUNE: ", 0), 0u) << c.status();
  }
  // Where the table does not apply, the override is only checked; Q4_0's parts of 64 values apply
  // to rows of a multiple of 64.
  ScopedTune scoped("gemv_q8.iq4_pairs=32,gemv_q8.q4_0_part=64");
  absl::StatusOr<GemvConfig> q4_k = ChooseGemvQ8(1, 4096, {graph::DType::kQ4_K, false});
  ASSERT_TRUE(q4_k.ok()) << q4_k.status();
  absl::StatusOr<GemvConfig> wide = ChooseGemvQ8(1, 4096, {graph::DType::kQ4_0, true});
  absl::StatusOr<GemvConfig> odd = ChooseGemvQ8(1, 4128, {graph::DType::kQ4_0, true});
  ASSERT_TRUE(wide.ok() && odd.ok()) << wide.status() << odd.status();
  EXPECT_EQ(wide->q4_0_part, 64);
  EXPECT_EQ(odd->q4_0_part, 32);
}

class TunedKernelTest : public vk::VkTest {};

// Every decoding of IQ4_XS, IQ4_NL and Q4_0 weights DOPPLER_TUNE may pick computes what the
// interpreter does, in rows of parts no multiple of a subgroup and columns no multiple of a
// team's, plain and with a norm prologue and a gated chain with a residual add, over several rows
// of x, and (IQ4_XS) with x staged in segments. IQ4's lookups give the same grid values whichever
// way, so where a table leaves the kernel's shape as it was (x in one segment: segments are shorter
// beside a table), its result is the nibble grids' to the bit. A table that leaves no room for x in the device's shared memory (32 replicas, 32 KiB, on a
// device of 32 KiB) is an error saying so.
TEST_F(TunedKernelTest, EveryGemvQ8DecodingMatchesTheInterpreter) {
  if (!ctx().info().int_dot_product) GTEST_FAIL() << "the device has no integer dot products";
  using graph::DType;
  struct Case {
    DType dtype;
    int64_t tokens, bucket, k, n;
    bool fused;
    std::vector<std::string> tunes;
  };
  const std::vector<std::string> iq4 = {"gemv_q8.iq4_pairs=0", "gemv_q8.iq4_pairs=1", "gemv_q8.iq4_pairs=2",
                                        "gemv_q8.iq4_pairs=4", "gemv_q8.iq4_pairs=8", "gemv_q8.iq4_pairs=16",
                                        "gemv_q8.iq4_pairs=32"};
  // IQ4_XS's tables in parts of one sub-block and of two.
  std::vector<std::string> iq4_xs;
  for (const char* part : {"gemv_q8.iq4_xs_part=32,", "gemv_q8.iq4_xs_part=64,"}) {
    for (const std::string& tune : iq4) iq4_xs.push_back(absl::StrCat(part, tune));
  }
  // Q4_0's quants unsigned and signed, in parts of one block and of two (rows of 160 values keep one).
  std::vector<std::string> q4_0;
  for (const char* part : {"gemv_q8.q4_0_part=32,", "gemv_q8.q4_0_part=64,"}) {
    for (const char* tune : {"gemv_q8.q4_0_signed=0", "gemv_q8.q4_0_signed=1"}) q4_0.push_back(absl::StrCat(part, tune));
  }
  // And with one and with three iterations' parts in flight (the value read below is the last entry's).
  for (const char* depth : {"gemv_q8.depth=1,", "gemv_q8.depth=3,"}) q4_0.push_back(absl::StrCat(depth, "gemv_q8.q4_0_signed=1"));
  for (const Case& c : {Case{DType::kIQ4_XS, 1, 1, 768, 37, false, iq4_xs}, Case{DType::kIQ4_XS, 3, 4, 1280, 13, true, iq4_xs},
                        Case{DType::kIQ4_NL, 1, 1, 96, 37, false, iq4}, Case{DType::kIQ4_NL, 3, 4, 160, 67, true, iq4},
                        Case{DType::kIQ4_XS, 1, 1, 23296, 5, false,
                             {"gemv_q8.iq4_xs_part=32,gemv_q8.iq4_pairs=0", "gemv_q8.iq4_xs_part=32,gemv_q8.iq4_pairs=16",
                              "gemv_q8.iq4_xs_part=64,gemv_q8.iq4_pairs=0", "gemv_q8.iq4_xs_part=64,gemv_q8.iq4_pairs=16"}},
                        Case{DType::kQ4_0, 1, 1, 160, 67, false, q4_0}, Case{DType::kQ4_0, 1, 1, 1088, 67, false, q4_0},
                        Case{DType::kQ4_0, 3, 4, 4160, 21, true, q4_0}}) {
    graph::GraphBuilder b;
    graph::ValueId x = b.Input("x", test::Rows(c.k));
    graph::ValueId w = b.Param("w", test::Matrix(c.fused ? 2 * c.n : c.n, c.k, c.dtype));
    b.Output("y", c.fused ? b.MatMulWithNorm(x, b.Param("gamma", test::Vector(c.k)), 1e-5, 1.0, w,
                                             {b.Input("r", test::Rows(c.n))}, "silu_mul,add")
                          : b.MatMul(x, w));
    absl::StatusOr<graph::Graph> g = std::move(b).Finish();
    ASSERT_TRUE(g.ok()) << g.status();
    absl::StatusOr<std::unique_ptr<passes::Pass>> pass = passes::MakePass("q8-activations");
    ASSERT_TRUE(pass.ok()) << pass.status();
    ASSERT_TRUE((*pass)->Run(*g).ok());
    test::RandomParams params(*g, 5);
    std::map<std::string, graph::Tensor> inputs = {{"x", test::RandomRows(c.tokens, c.k, 3)}};
    if (c.fused) inputs["r"] = test::RandomRows(c.tokens, c.n, 4);
    absl::StatusOr<std::map<std::string, graph::Tensor>> want = graph::Interpreter(params).Run(*g, inputs, 0);
    ASSERT_TRUE(want.ok()) << want.status();
    std::map<std::string, std::pair<std::string, std::vector<float>>> firsts;
    for (const std::string& tune_text : c.tunes) {
      const char* tune = tune_text.c_str();
      ScopedTune scoped(tune);
      absl::StatusOr<std::unique_ptr<test::GpuRunner>> gpu = test::GpuRunner::Create(ctx(), *g, c.bucket, params);
      const std::string value = std::string(tune).substr(std::string(tune).rfind('=') + 1);
      const bool part64 = std::string(tune).find("part=64") != std::string::npos && c.k % 64 == 0;
      const int64_t table_bytes = c.dtype == DType::kQ4_0 ? 0 : 1024 * std::stoll(value);
      if (table_bytes + 4096 > int64_t{ctx().info().max_shared_memory}) {
        ASSERT_FALSE(gpu.ok()) << tune;
        EXPECT_NE(gpu.status().message().find("bytes of shared memory cannot stage"), std::string::npos)
            << tune << ": " << gpu.status();
        std::printf("[ %s ] %s: %s\n", graph::Name(c.dtype), tune, std::string(gpu.status().message()).c_str());
        continue;
      }
      ASSERT_TRUE(gpu.ok()) << tune << ": " << gpu.status();
      ASSERT_EQ((*gpu)->plan().dispatches().size(), 1u) << tune;
      const std::string& variant = (*gpu)->plan().dispatches()[0].variant;
      const std::string decoding = c.dtype == DType::kQ4_0
                                       ? absl::StrCat(value == "1" ? ".signed" : "", part64 ? ".part64" : "")
                                       : absl::StrCat(value == "0" ? "" : ".pairs" + value, part64 ? ".part64" : "");
      EXPECT_EQ(variant.rfind(absl::StrCat("gemv_q8.", graph::Name(c.dtype), decoding, ".t"), 0), 0u) << tune << ": " << variant;
      if (c.k > 20000) {
        EXPECT_NE(variant.find(".seg"), std::string::npos) << tune << ": " << variant;
      }
      absl::StatusOr<std::map<std::string, graph::Tensor>> got = (*gpu)->Run(inputs, 0);
      ASSERT_TRUE(got.ok()) << got.status();
      const double err = test::RelativeError(got->at("y").f, want->at("y").f);
      std::printf("[ %s k%lld n%lld%s ] %s: relative error %.3g\n", graph::Name(c.dtype), static_cast<long long>(c.k),
                  static_cast<long long>(c.n), c.fused ? " fused" : "", variant.c_str(), err);
      // As tests/quant_kernel_test.cc's Q8MatMulTest: with a norm prologue the kernel rounds x·g / d.
      EXPECT_LE(err, c.fused ? 1e-3 : 2e-5) << tune << ": " << variant;
      if (c.dtype == DType::kQ4_0) continue;
      // The kernel's shape: its variant without the table (with IQ4_XS's parts).
      const std::string shape = absl::StrCat(part64 ? "part64" : "", variant.substr(variant.find(".t")));
      // The first run of each shape is the reference of the others'.
      if (!firsts.count(shape)) {
        firsts[shape] = {tune, got->at("y").f};
      } else if (shape.find(".seg") == std::string::npos) {
        EXPECT_EQ(got->at("y").f, firsts[shape].second) << tune << ": " << variant << " differs from " << firsts[shape].first;
      }
    }
  }
}

// Rows a matrix-vector workgroup that DOPPLER_TUNE may pick: 13 rows of a 16-row bucket as one
// block (x staged in segments, in the q8 kernel), and as blocks of 3, in the float and the q8
// kernels with a norm prologue and a gated chain with a residual add, against the interpreter.
TEST_F(TunedKernelTest, EveryGemvRowsOverrideMatchesTheInterpreter) {
  if (!ctx().info().int_dot_product) GTEST_FAIL() << "the device has no integer dot products";
  const int64_t k = 6144, n = 11;
  graph::GraphBuilder b;
  graph::ValueId x = b.Input("x", test::Rows(k));
  b.Output("y", b.MatMulWithNorm(x, b.Param("gamma", test::Vector(k)), 1e-5, 1.0,
                                 b.Param("w", test::Matrix(2 * n, k, graph::DType::kQ4_K)), {b.Input("r", test::Rows(n))},
                                 "silu_mul,add"));
  absl::StatusOr<graph::Graph> exact = std::move(b).Finish();
  ASSERT_TRUE(exact.ok()) << exact.status();
  graph::Graph rounded = *exact;
  absl::StatusOr<std::unique_ptr<passes::Pass>> pass = passes::MakePass("q8-activations");
  ASSERT_TRUE(pass.ok()) << pass.status();
  ASSERT_TRUE((*pass)->Run(rounded).ok());
  const std::map<std::string, graph::Tensor> inputs = {{"x", test::RandomRows(13, k, 3)}, {"r", test::RandomRows(13, n, 4)}};
  for (const auto& [tune, g, variant, tolerance] :
       {std::tuple<const char*, const graph::Graph*, const char*, double>{"gemv.rows=16", &*exact, "gemv.q4_k.t16x", 1e-5},
        {"gemv.rows=3", &*exact, "gemv.q4_k.t3x", 1e-5},
        {"gemv_q8.rows=16", &rounded, "gemv_q8.q4_k.t16x", 1e-3},
        {"gemv_q8.rows=3", &rounded, "gemv_q8.q4_k.t3x", 1e-3}}) {
    ScopedTune scoped(tune);
    test::RandomParams params(*g, 9);
    absl::StatusOr<std::map<std::string, graph::Tensor>> want = graph::Interpreter(params).Run(*g, inputs, 0);
    ASSERT_TRUE(want.ok()) << want.status();
    absl::StatusOr<std::unique_ptr<test::GpuRunner>> gpu = test::GpuRunner::Create(ctx(), *g, 16, params);
    ASSERT_TRUE(gpu.ok()) << tune << ": " << gpu.status();
    ASSERT_EQ((*gpu)->plan().dispatches().size(), 1u) << tune;
    const std::string& got_variant = (*gpu)->plan().dispatches()[0].variant;
    EXPECT_EQ(got_variant.rfind(variant, 0), 0u) << tune << ": " << got_variant;
    absl::StatusOr<std::map<std::string, graph::Tensor>> got = (*gpu)->Run(inputs, 0);
    ASSERT_TRUE(got.ok()) << got.status();
    // Through q8 the kernel rounds x·g / d where the interpreter rounds x·g/rms / (d/rms)
    // (tests/quant_kernel_test.cc, Q8MatMulTest).
    EXPECT_LE(test::RelativeError(got->at("y").f, want->at("y").f), tolerance) << tune << ": " << got_variant;
  }
}

// A row-wide op after a q8 matmul is computed by the matmul's kernel only where it takes the
// bucket as one block of rows: with gemv_q8.rows=4 a 16-row bucket's norm is a dispatch of its own,
// and both plans compute what the interpreter does.
TEST_F(TunedKernelTest, TheMatmulTakesTheNormTailOnlyAsOneBlockOfRows) {
  if (!ctx().info().int_dot_product) GTEST_FAIL() << "the device has no integer dot products";
  const int64_t k = 256, n = 300;
  graph::GraphBuilder b;
  graph::ValueId o = b.MatMul(b.Input("x", test::Rows(k)), b.Param("w", test::Matrix(n, k, graph::DType::kQ4_K)));
  graph::ValueId sum = b.Add(b.RmsNorm(o, b.Param("g1", test::Vector(n)), 1e-6, 1.0), b.Input("h", test::Rows(n)));
  b.Output("sum", sum);
  b.Output("normed", b.RmsNorm(sum, b.Param("g2", test::Vector(n)), 1e-6, 1.0));
  absl::StatusOr<graph::Graph> built = std::move(b).Finish();
  ASSERT_TRUE(built.ok()) << built.status();
  graph::Graph g = *built;
  for (const char* name : {"fuse-residual-rmsnorm", "q8-activations"}) {
    absl::StatusOr<std::unique_ptr<passes::Pass>> pass = passes::MakePass(name);
    ASSERT_TRUE(pass.ok() && (*pass)->Run(g).ok()) << name;
  }
  ASSERT_TRUE(graph::Verify(g).ok());
  test::RandomParams params(g, 8);
  const std::map<std::string, graph::Tensor> inputs = {{"x", test::RandomRows(13, k, 1)}, {"h", test::RandomRows(13, n, 2)}};
  absl::StatusOr<std::map<std::string, graph::Tensor>> want = graph::Interpreter(params).Run(g, inputs, 0);
  ASSERT_TRUE(want.ok()) << want.status();
  for (const auto& [tune, dispatches] : {std::pair<const char*, size_t>{"gemv_q8.rows=16", 1}, {"gemv_q8.rows=4", 2}}) {
    ScopedTune scoped(tune);
    absl::StatusOr<std::unique_ptr<test::GpuRunner>> gpu = test::GpuRunner::Create(ctx(), g, 16, params);
    ASSERT_TRUE(gpu.ok()) << tune << ": " << gpu.status();
    EXPECT_EQ((*gpu)->plan().dispatches().size(), dispatches) << tune;
    absl::StatusOr<std::map<std::string, graph::Tensor>> got = (*gpu)->Run(inputs, 0);
    ASSERT_TRUE(got.ok()) << got.status();
    for (const char* name : {"sum", "normed"}) {
      EXPECT_LE(test::RelativeError(got->at(name).f, want->at(name).f), 2e-5) << tune << ": " << name;
    }
  }
}

// On an H100-like device (48 KiB of shared memory) a gated, normed IQ4_XS matrix of 16 rows of x
// narrows its workgroups until the reductions leave room for the table of nibble pairs and x (a
// batched decode step's bucket). No device needed.
TEST(Tuning, IQ4TableAtSixteenRowsFitsAnH100LikeDevice) {
  unsetenv("DOPPLER_TUNE");
  graph::GraphBuilder b;
  graph::ValueId x = b.Input("x", test::Rows(256));
  graph::ValueId w = b.Param("w", test::Matrix(2 * 9, 256, graph::DType::kIQ4_XS));
  b.Output("y", b.MatMulWithNorm(x, b.Param("gamma", test::Vector(256)), 1e-5, 0.0, w, {}, "silu_mul"));
  absl::StatusOr<graph::Graph> g = std::move(b).Finish();
  ASSERT_TRUE(g.ok()) << g.status();
  graph::Node& node = g->mutable_node(*g->output("y"));
  node.attrs.Set("x_quant", std::string("q8"));
  absl::StatusOr<test::CompiledKernel> k = test::EmitAndCompile(*g, node, codegen::H100LikeCaps(), 16);
  ASSERT_TRUE(k.ok()) << k.status();
  EXPECT_EQ(k->kernel.variant.rfind("gemv_q8.iq4_xs.pairs16.t16", 0), 0u) << k->kernel.variant;
}

// On an H100-like device (as in tests/process_replay_test.cc) every IQ4 table and IQ4_XS part
// compiles for Llama-3.1-8B's decode matrices, and the choice (16 replicas, parts of 32 values)
// stages x in one segment: the output projection, gate+up with its norm, and the down projection
// (K = 14,336). No device needed.
TEST(Tuning, EveryIQ4TableCompilesForLlama8BOnAnH100LikeDevice) {
  const codegen::TargetCaps nvidia = codegen::H100LikeCaps();
  struct Case {
    int64_t n, k;
    bool gated;
  };
  for (const char* tune : {"", "gemv_q8.iq4_pairs=0", "gemv_q8.iq4_pairs=1", "gemv_q8.iq4_pairs=32",
                           "gemv_q8.iq4_xs_part=64,gemv_q8.iq4_pairs=0", "gemv_q8.iq4_xs_part=64,gemv_q8.iq4_pairs=16"}) {
    ScopedTune scoped(tune);
    for (const Case& c : {Case{4096, 4096, false}, Case{14336, 4096, true}, Case{4096, 14336, false}}) {
      graph::GraphBuilder b;
      graph::ValueId x = b.Input("x", test::Rows(c.k));
      graph::ValueId w = b.Param("w", test::Matrix(c.gated ? 2 * c.n : c.n, c.k, graph::DType::kIQ4_XS));
      b.Output("y", c.gated ? b.MatMulWithNorm(x, b.Param("gamma", test::Vector(c.k)), 1e-5, 0.0, w, {}, "silu_mul")
                            : b.MatMul(x, w));
      absl::StatusOr<graph::Graph> g = std::move(b).Finish();
      ASSERT_TRUE(g.ok()) << g.status();
      graph::Node& node = g->mutable_node(*g->output("y"));
      node.attrs.Set("x_quant", std::string("q8"));
      absl::StatusOr<test::CompiledKernel> k = test::EmitAndCompile(*g, node, nvidia, 1);
      ASSERT_TRUE(k.ok()) << tune << ": " << k.status();
      const std::string& variant = k->kernel.variant;
      std::printf("[ %s k%lld n%lld ] %s\n", *tune ? tune : "(the choice)", static_cast<long long>(c.k),
                  static_cast<long long>(c.n), variant.c_str());
      const char* pairs = *tune ? std::strrchr(tune, '=') + 1 : "16";
      EXPECT_EQ(variant.rfind(absl::StrCat("gemv_q8.iq4_xs", std::string(pairs) == "0" ? "" : absl::StrCat(".pairs", pairs),
                                           std::strstr(tune, "part=64") ? ".part64.t" : ".t"),
                              0),
                0u)
          << variant;
      if (!*tune) {
        EXPECT_EQ(variant.find(".seg"), std::string::npos) << variant;
      }
    }
  }
}

// Every width and slice DOPPLER_TUNE may pick computes what the interpreter does (rows and columns
// no multiple of a tile, K of Q8_0 blocks no multiple of 64; a norm prologue and a gated chain).
TEST_F(TunedKernelTest, EveryGemmConfigMatchesTheInterpreter) {
  graph::GraphBuilder b;
  graph::ValueId x = b.Input("x", test::Rows(224));
  b.Output("y", b.MatMulWithNorm(x, b.Param("gamma", test::Vector(224)), 1e-6, 0.0,
                                 b.Param("w", test::Matrix(2 * 75, 224, graph::DType::kQ8_0)), {}, "silu_mul"));
  absl::StatusOr<graph::Graph> g = std::move(b).Finish();
  ASSERT_TRUE(g.ok()) << g.status();
  test::RandomParams params(*g, 7);
  graph::Interpreter interp(params);
  const std::map<std::string, graph::Tensor> inputs = {{"x", test::RandomRows(37, 224, 3)}};
  absl::StatusOr<std::map<std::string, graph::Tensor>> want = interp.Run(*g, inputs, 5);
  ASSERT_TRUE(want.ok()) << want.status();
  for (const char* tune : {"gemm.bn=16,gemm.bk=16", "gemm.bn=16,gemm.bk=32", "gemm.bn=64,gemm.bk=16"}) {
    ScopedTune scoped(tune);
    codegen::TargetCaps caps = vk::TargetCapsOf(ctx().info());
    caps.coop_matrix_nv = false;
    absl::StatusOr<std::unique_ptr<test::GpuRunner>> gpu = test::GpuRunner::Create(ctx(), *g, 40, params, caps);
    ASSERT_TRUE(gpu.ok()) << tune << ": " << gpu.status();
    bool tiled = false;
    for (const vk::PlannedDispatch& d : (*gpu)->plan().dispatches()) tiled |= d.variant.rfind("gemm.", 0) == 0;
    EXPECT_TRUE(tiled) << tune;
    absl::StatusOr<std::map<std::string, graph::Tensor>> got = (*gpu)->Run(inputs, 5);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_LE(test::RelativeError(got->at("y").f, want->at("y").f), 1e-4) << tune;
  }
}


// --- the cooperative-matrix matmul (codegen/tuning/coop.h) ---------------------------------------

// Tile shapes DOPPLER_TUNE can pick (over the choice's), each fitting gated weights in NVIDIA's
// 48 KiB, and the shapes the choice makes for large grids.
const char* const kCoopTunes[] = {
    "",                                               // the choice
    "coop.bm=128",                                    // tall tiles on a small grid
    "coop.bn=128,coop.sn=64",                         // 128 x 128 tiles, 32 x 64 a subgroup
    "coop.bm=128,coop.bn=128,coop.sn=64",             //
    "coop.bm=256,coop.sm=64",                         // 256 x 64 tiles, 64 x 32 a subgroup
    "coop.bm=256,coop.sm=64,coop.prefetch=0",         // the choice for large plain products, gated ones of a wave
    "coop.bm=128,coop.bn=128",                        // the choice for normalised ones of one to two waves
    "coop.bm=128,coop.sm=64,coop.bk=32",              // the choice for large gated products
    "coop.bm=128,coop.sm=64,coop.bk=32,coop.prefetch=0",  // ... for large normalised ones
    "coop.bm=64,coop.bn=128,coop.sn=64",              // short tiles split over columns only (a batch)
    "coop.bn=128,coop.sn=16",                         // the choice for gated products of 64 rows, large grids
    "coop.bm=32,coop.sn=16",                          // the choice for gated products of 32 rows, large grids
    "coop.bm=32",                                     // 32-row tiles, 32 x 32 a subgroup
    "coop.sm=16,coop.sn=64",                          // 16 x 64 a subgroup
    "coop.prefetch=0",                                // no slice read ahead
};

codegen::TargetCaps NvidiaCaps() {
  codegen::TargetCaps caps = Caps(49152);
  caps.max_workgroup_invocations = 1024;
  caps.coop_matrix_nv = true;
  return caps;
}

TEST(Tuning, CoopFollowsTheGridAndTheSharedMemory) {
  unsetenv("DOPPLER_TUNE");
  struct Case {
    int64_t m, k, n, gates;
    bool norm;
    uint32_t shared;
    int64_t bm, bk, sm, sn, prefetch, bn = 64;
    int64_t level_n = 0;  // the columns of the products normalising the same x, this one's among them (0: n)
  };
  for (const Case& c : {
           Case{512, 4096, 16384, 2, true, 49152, 128, 32, 64, 32, 1},   // gated, 1,024 tall tiles: 64 x 32 blocks, slices of 32
           Case{64, 4096, 16384, 2, true, 49152, 64, 64, 32, 16, 1, 128},  // gated, 64 rows, 256 tiles of 64 columns: 128
           Case{64, 4096, 8192, 2, true, 49152, 64, 64, 32, 16, 1},    // ... 128 of them: short tiles, 32 x 16 blocks
           Case{64, 4096, 16384, 2, true, 24576, 64, 32, 32, 16, 1},   // ... 24 KiB: wide tiles do not fit
           Case{32, 4096, 16384, 2, true, 49152, 32, 64, 32, 16, 1},   // gated, 32 rows, 256 tiles: 32-row ones
           Case{32, 4096, 8192, 2, true, 49152, 64, 64, 32, 16, 1},    // ... 128 of them: as at 64 rows
           Case{512, 2048, 8192, 2, true, 49152, 256, 32, 64, 32, 0},    // gated, 256 tiles of 256 rows: those
           Case{512, 1152, 6912, 2, true, 49152, 256, 32, 64, 32, 0},    // ... 216 of them
           Case{512, 3072, 8192, 2, true, 49152, 128, 32, 64, 32, 1},    // ... K 3,072: 128 rows
           Case{384, 2048, 8192, 2, true, 49152, 128, 32, 64, 32, 1},    // ... 384 rows: a half-empty tile row
           Case{200, 2048, 8192, 2, true, 49152, 128, 32, 64, 32, 1},    // ... 128 of them: half a wave
           Case{512, 4096, 4096, 1, true, 49152, 128, 32, 64, 32, 0},    // normalised, 256 tall tiles: no read-ahead
           Case{512, 2048, 2560, 1, true, 49152, 128, 64, 32, 32, 1, 128},  // normalised, 160: 128 columns, one wave
           Case{512, 2048, 512, 1, true, 49152, 128, 64, 32, 32, 1, 128, 3072},  // ... a v beside a q+k of 2,560: theirs
           Case{512, 2048, 512, 1, true, 49152, 64, 64, 32, 32, 1, 64, 512},     // ... the v alone, 32 tall tiles: short
           Case{512, 4096, 2048, 1, true, 49152, 128, 64, 32, 32, 1},    // normalised, 128 tall tiles
           Case{512, 4096, 2048, 1, true, 24576, 128, 32, 32, 32, 1},    // ... slices of 64 do not fit in 24 KiB
           Case{512, 4096, 4096, 1, false, 49152, 256, 64, 64, 32, 0},   // plain, 128 tiles of 256 rows
           Case{512, 4096, 2048, 1, false, 49152, 128, 64, 32, 32, 1},   // plain, 64 of 256 rows: 128
           Case{512, 4096, 512, 1, false, 49152, 64, 64, 32, 32, 1},     // 32 tall tiles: short ones
           Case{64, 4096, 16384, 1, false, 49152, 64, 64, 32, 32, 1},    // 64 rows: no taller tiles
           Case{64, 4096, 4096, 1, true, 49152, 64, 64, 32, 16, 1},      // normalised, 64 rows: 32 x 16 blocks
           Case{128, 4096, 16384, 1, false, 49152, 128, 64, 32, 32, 1}}) {  // 128 rows: no taller tiles
    codegen::TargetCaps caps = NvidiaCaps();
    caps.max_shared_memory = c.shared;
    absl::StatusOr<codegen::tuning::CoopConfig> got =
        codegen::tuning::ChooseCoop(caps, c.m, c.k, c.n, c.gates, c.norm, c.level_n == 0 ? c.n : c.level_n);
    ASSERT_TRUE(got.ok()) << got.status();
    const std::string what =
        absl::StrCat(c.m, "x", c.n, " gates ", c.gates, " norm ", c.norm, " shared ", c.shared, " level ", c.level_n, " k ", c.k);
    EXPECT_EQ(got->bm, c.bm) << what;
    EXPECT_EQ(got->bn, c.bn) << what;
    EXPECT_EQ(got->bk, c.bk) << what;
    EXPECT_EQ(got->sm, c.sm) << what;
    EXPECT_EQ(got->sn, c.sn) << what;
    EXPECT_EQ(got->prefetch, c.prefetch) << what;
    EXPECT_LE(codegen::tuning::CoopSharedBytes(*got, c.gates), c.shared);
  }
}

TEST(Tuning, BadCoopEntriesAreErrorsNamingThem) {
  for (const auto& [tune, says] : std::map<std::string, std::string>{
           {"coop.bn=96", "coop.bn=96 is not one of 64, 128"},
           {"coop.prefetch=2", "coop.prefetch=2 is not one of 0, 1"},
           {"coop.bm=256,coop.sm=16,coop.bn=128,coop.sn=16", "make 4096 invocations; the device takes 1024"},
           {"coop.bm=64,coop.sm=16,coop.sn=16,coop.bk=32", "do not divide a slice's staging among 512 invocations"},
           {"coop.bm=128,coop.sm=128", "is not one of 16, 32, 64"},
           {"coop.bn=128,coop.bk=64", "bytes of shared memory; the device has 49152"}}) {
    ScopedTune scoped(tune.c_str());
    absl::StatusOr<codegen::tuning::CoopConfig> c = codegen::tuning::ChooseCoop(NvidiaCaps(), 512, 4096, 16384, 2, true, 16384);
    ASSERT_FALSE(c.ok()) << tune;
    EXPECT_NE(c.status().message().find(says), std::string::npos) << c.status();
    EXPECT_EQ(c.status().message().rfind("DOPPLER_TUNE: ", 0), 0u) << c.status();
  }
}

// A gated matmul with a norm prologue and a residual add, and a plain one, of one weight format
// (K an odd multiple of its block size, N no multiple of a tile).
absl::StatusOr<graph::Graph> CoopGraph(graph::DType dtype, int64_t k) {
  graph::GraphBuilder b;
  graph::ValueId x = b.Input("x", test::Rows(k));
  graph::ValueId r = b.Input("r", test::Rows(75));
  b.Output("y", b.MatMulWithNorm(x, b.Param("gamma", test::Vector(k)), 1e-6, 0.0,
                                 b.Param("wg", test::Matrix(2 * 75, k, dtype)), {r}, "silu_mul,add"));
  b.Output("z", b.MatMul(x, b.Param("w", test::Matrix(203, k, dtype))));
  return std::move(b).Finish();
}

// The weight formats the staged kernels decode, each its own way, but Q4_K (which the shapes' tests take).
constexpr graph::DType kOtherWeightFormats[] = {
    graph::DType::kF16,  graph::DType::kBF16, graph::DType::kQ8_0, graph::DType::kQ5_0,   graph::DType::kQ5_K,
    graph::DType::kQ6_K, graph::DType::kQ4_0, graph::DType::kQ4_1, graph::DType::kQ5_1,   graph::DType::kQ2_K,
    graph::DType::kQ3_K, graph::DType::kIQ4_NL, graph::DType::kIQ4_XS, graph::DType::kMXFP4};

// Every shape compiles to SPIR-V on any machine, gated and not, with its workgroup size.
TEST(Tuning, EveryCoopShapeCompilesForNvidia) {
  absl::StatusOr<graph::Graph> g = CoopGraph(graph::DType::kQ4_K, 768);
  ASSERT_TRUE(g.ok()) << g.status();
  for (const char* tune : kCoopTunes) {
    ScopedTune scoped(tune);
    for (int64_t bucket : {64, 640}) {
      for (const graph::Node& n : g->nodes()) {
        if (n.kind != graph::OpKind::kMatMul) continue;
        absl::StatusOr<test::CompiledKernel> compiled = test::EmitAndCompile(*g, n, NvidiaCaps(), bucket);
        ASSERT_TRUE(compiled.ok()) << tune << ": " << compiled.status();
        const std::string& variant = compiled->kernel.variant;
        ASSERT_EQ(variant.rfind("coop.q4_k.tile", 0), 0u) << variant;
        // One subgroup per block of the tile: "tile{bm}x{bn}.sg{sm}x{sn}".
        int bm = 0, bn = 0, sm = 0, sn = 0;
        ASSERT_EQ(std::sscanf(variant.c_str(), "coop.q4_k.tile%dx%d.sg%dx%d", &bm, &bn, &sm, &sn), 4) << variant;
        EXPECT_EQ(compiled->spirv.local_size[0], 32u * (bm / sm) * (bn / sn)) << tune << " " << variant;
      }
    }
  }
  // Every other weight format, each with its own slice decoding, in the chosen shapes.
  for (graph::DType dtype : kOtherWeightFormats) {
    absl::StatusOr<graph::Graph> other = CoopGraph(dtype, 768);
    ASSERT_TRUE(other.ok()) << other.status();
    for (const graph::Node& n : other->nodes()) {
      if (n.kind != graph::OpKind::kMatMul) continue;
      absl::StatusOr<test::CompiledKernel> compiled = test::EmitAndCompile(*other, n, NvidiaCaps(), 640);
      ASSERT_TRUE(compiled.ok()) << graph::Name(dtype) << ": " << compiled.status();
      EXPECT_EQ(compiled->kernel.variant.rfind(absl::StrCat("coop.", graph::Name(dtype), ".tile"), 0), 0u)
          << compiled->kernel.variant;
    }
  }
}

// `rows` random rows of x (width k) and of the residual r through `gpu` and through the
// interpreter over `reference` (the same products): y and z within 3e-3 relative error.
void ExpectChainMatches(test::GpuRunner& gpu, graph::Interpreter& interp, const graph::Graph& reference, int64_t rows,
                        int64_t k, const std::string& label) {
  const std::map<std::string, graph::Tensor> inputs = {{"x", test::RandomRows(rows, k, 3 + rows)},
                                                       {"r", test::RandomRows(rows, 75, 4 + rows)}};
  absl::StatusOr<std::map<std::string, graph::Tensor>> want = interp.Run(reference, inputs, 0);
  ASSERT_TRUE(want.ok()) << want.status();
  absl::StatusOr<std::map<std::string, graph::Tensor>> got = gpu.Run(inputs, 0);
  ASSERT_TRUE(got.ok()) << got.status();
  for (const char* out : {"y", "z"}) {
    EXPECT_LE(test::RelativeError(got->at(out).f, want->at(out).f), 3e-3) << label << " rows " << rows << " " << out;
  }
}

// Every shape computes what the interpreter does, for rows that fill no tile (33, 100, 517) and
// one that does (64), several weight formats, a gated chain with a norm prologue and a residual add.
// A device without cooperative matrices runs the same products through its own kernels (the coop
// overrides change nothing there, so only the choice runs).
TEST_F(TunedKernelTest, EveryCoopShapeMatchesTheInterpreter) {
  const bool has_coop = vk::TargetCapsOf(ctx().info()).coop_matrix_nv;
  const std::vector<const char*> tunes =
      has_coop ? std::vector<const char*>(std::begin(kCoopTunes), std::end(kCoopTunes)) : std::vector<const char*>{""};
  for (const auto& [dtype, k] : {std::pair{graph::DType::kQ4_K, int64_t{768}}, std::pair{graph::DType::kQ6_K, int64_t{768}},
                                  std::pair{graph::DType::kQ8_0, int64_t{224}}, std::pair{graph::DType::kF16, int64_t{200}}}) {
    absl::StatusOr<graph::Graph> g = CoopGraph(dtype, k);
    ASSERT_TRUE(g.ok()) << g.status();
    test::RandomParams params(*g, 11);
    graph::Interpreter interp(params);
    for (const char* tune : tunes) {
      ScopedTune scoped(tune);
      for (int64_t bucket : {64, 640}) {
        absl::StatusOr<std::unique_ptr<test::GpuRunner>> gpu = test::GpuRunner::Create(ctx(), *g, bucket, params);
        ASSERT_TRUE(gpu.ok()) << tune << ": " << gpu.status();
        int coop = 0;
        for (const vk::PlannedDispatch& d : (*gpu)->plan().dispatches()) coop += d.variant.rfind("coop.", 0) == 0;
        EXPECT_EQ(coop, has_coop ? 2 : 0) << tune;
        for (int64_t rows : bucket == 64 ? std::vector<int64_t>{33, 64} : std::vector<int64_t>{100, 517}) {
          ExpectChainMatches(**gpu, interp, *g, rows, k, absl::StrCat(graph::Name(dtype), " ", tune));
        }
      }
    }
  }
}

// --- the cooperative-matrix matmul for few rows (codegen/tuning/coop_rows.h) ---------------------

namespace coop_rows {

using codegen::tuning::ChooseCoopRows;
using codegen::tuning::CoopRowsConfig;
using codegen::tuning::CoopRowsFrom;
using codegen::tuning::CoopRowsTakeBatchedDecode;

// Shapes DOPPLER_TUNE can pick (over the choice's), each fitting gated weights in NVIDIA's 48 KiB.
// Each with coop_rows.from=2, so that buckets from 2 rows take the variant.
const char* const kCoopRowsTunes[] = {
    "coop_rows.from=2",                                                 // the choice
    "coop_rows.from=2,coop_rows.prefetch=0",                            // no reading ahead
    "coop_rows.from=2,coop_rows.subgroups=1",                           // one subgroup, no K split
    "coop_rows.from=2,coop_rows.subgroups=2,coop_rows.frags=4",         // two over K, 64 columns
    "coop_rows.from=2,coop_rows.subgroups=8",                           // eight over K (long K's choice)
    "coop_rows.from=2,coop_rows.subgroups=4,coop_rows.ksplit=2",        // two column groups of two
    "coop_rows.from=2,coop_rows.subgroups=4,coop_rows.ksplit=1",        // four column groups, K whole
    "coop_rows.from=2,coop_rows.bk=16",                                 // slices of 16
    "coop_rows.from=2,coop_rows.bk=64",                                 // slices of 64
    "coop_rows.from=2,coop_rows.bk=64,coop_rows.run_pairs=1",           // an odd run's words the even run's
    "coop_rows.from=2,coop_rows.run_pairs=0",                           // every run's words loaded
    "coop_rows.from=2,coop_rows.frags=2,coop_rows.prefetch=0",          // 32 columns a subgroup
    "coop_rows.from=2,coop_rows.w_direct=0",                            // weights staged
    "coop_rows.from=2,coop_rows.w_direct=0,coop_rows.x_direct=0",       // x staged at 16 and 32 rows too
    "coop_rows.from=2,coop_rows.kgroups=2",                             // two workgroups over K
    "coop_rows.from=2,coop_rows.kgroups=3,coop_rows.subgroups=4,coop_rows.ksplit=2",  // three, two column groups
    "coop_rows.from=2,coop_rows.kgroups=4,coop_rows.w_direct=0",        // four, weights staged
};

// A row-per-sequence step's graph (the batched engine's decode): a gated matmul with a norm
// prologue and a residual add, and a plain one, of one weight format (K an odd multiple of its
// block size, N no multiple of any workgroup's columns).
absl::StatusOr<graph::Graph> RowsGraph(graph::DType dtype, int64_t k, bool paged = true) {
  absl::StatusOr<graph::Graph> g = CoopGraph(dtype, k);
  if (!g.ok() || !paged) return g;
  g->set_paging(graph::Paging{16, 4, true, false});
  return g;
}

TEST(Tuning, CoopRowsFollowsTheShape) {
  unsetenv("DOPPLER_TUNE");
  struct Case {
    int64_t k, n, gates;
    int64_t subgroups, frags;
  };
  for (const Case& c : {Case{4096, 14336, 2, 4, 1},    // 8B gate+up: 896 workgroups of 16 columns
                        Case{14336, 4096, 1, 8, 1},    // 8B down (long K): 256, 8 subgroups
                        Case{4096, 6144, 1, 4, 1},     // 8B q/k/v: 384
                        Case{4096, 4096, 1, 8, 1},     // 8B o: 256, 8 subgroups
                        Case{4096, 1024, 1, 8, 1},     // 8B v alone: 64, 8 subgroups
                        Case{4096, 128256, 1, 4, 1}})  // 8B output: 8,016
  {
    absl::StatusOr<CoopRowsConfig> got = ChooseCoopRows(codegen::H100LikeCaps(), 8, c.k, c.n, c.gates);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(got->subgroups, c.subgroups) << c.k << "x" << c.n;
    EXPECT_EQ(got->ksplit, c.subgroups) << c.k << "x" << c.n;
    EXPECT_EQ(got->frags, c.frags) << c.k << "x" << c.n;
    EXPECT_EQ(got->bk, 64);  // 16 x 8 fragments decoded in place
    EXPECT_EQ(got->run_pairs, 1);  // an odd run's words the even run's
    EXPECT_EQ(got->prefetch, 1);
    EXPECT_LE(codegen::tuning::CoopRowsSharedBytes(*got, c.gates), 49152);
  }
  absl::StatusOr<CoopRowsConfig> two = ChooseCoopRows(codegen::H100LikeCaps(), 20, 4096, 14336, 2);
  ASSERT_TRUE(two.ok()) << two.status();
  EXPECT_EQ(two->x_frags, 2);
  // Two fragments of x: two of columns a subgroup share their staging (8 subgroups no longer fit
  // the long K's gated regions).
  EXPECT_EQ(two->frags, 2);
  EXPECT_EQ(two->subgroups, 4);
  EXPECT_LE(codegen::tuning::CoopRowsSharedBytes(*two, 2), 49152);
  // Four fragments of x decoded in place: slices of 64.
  absl::StatusOr<CoopRowsConfig> four = ChooseCoopRows(codegen::H100LikeCaps(), 64, 14336, 4096, 1);
  ASSERT_TRUE(four.ok()) << four.status();
  EXPECT_EQ(four->x_frags, 4);
  EXPECT_EQ(four->w_direct, 1);
  EXPECT_EQ(four->bk, 64);
  EXPECT_EQ(four->run_pairs, 0);  // measured slower at 64 rows
  {
    ScopedTune scoped("coop_rows.run_pairs=1");
    absl::StatusOr<CoopRowsConfig> paired = ChooseCoopRows(codegen::H100LikeCaps(), 64, 14336, 4096, 1);
    ASSERT_TRUE(paired.ok()) << paired.status();
    EXPECT_EQ(paired->run_pairs, 1);
    // Rounds of one run (slices of 32) have no odd run.
    absl::StatusOr<CoopRowsConfig> one_run = ChooseCoopRows(codegen::H100LikeCaps(), 16, 4096, 4096, 1);
    EXPECT_FALSE(one_run.ok());
    EXPECT_NE(one_run.status().message().find("coop_rows.run_pairs=1"), std::string::npos) << one_run.status();
  }
  EXPECT_EQ(four->kgroups, 2);  // two workgroups over K, two fragments of columns (a grid of 256 of one)
  EXPECT_EQ(four->frags, 2);
  // ... and where one fragment of columns would make at most 256 workgroups, two of them with two
  // workgroups over K, for products without gates or a norm.
  absl::StatusOr<CoopRowsConfig> two_long = ChooseCoopRows(codegen::H100LikeCaps(), 32, 14336, 4096, 1);
  ASSERT_TRUE(two_long.ok()) << two_long.status();
  EXPECT_EQ(two_long->frags, 2);
  EXPECT_EQ(two_long->kgroups, 2);
  EXPECT_EQ(two_long->subgroups, 8);
  EXPECT_EQ(two_long->prefetch, 0);  // and no read-ahead on such a grid
  EXPECT_EQ(codegen::tuning::CoopRowsScratchBytes(*two_long, 32, 4096, 1), 4 * (128 + 2 * 32 + 2 * 32 * 4096));
  absl::StatusOr<CoopRowsConfig> two_normed = ChooseCoopRows(codegen::H100LikeCaps(), 32, 4096, 1024, 1, true, /*norm=*/true);
  ASSERT_TRUE(two_normed.ok()) << two_normed.status();
  EXPECT_EQ(two_normed->frags, 1);
  EXPECT_EQ(two_normed->kgroups, 1);
  EXPECT_EQ(codegen::tuning::CoopRowsScratchBytes(*two_normed, 32, 1024, 1), 0);
  // Weights of more than 5 bits a value keep one fragment of columns at two fragments of x (the
  // Q6_K down products), two at four.
  absl::StatusOr<CoopRowsConfig> q6k = ChooseCoopRows(codegen::H100LikeCaps(), 32, 14336, 4096, 1, true, false, graph::DType::kQ6_K);
  ASSERT_TRUE(q6k.ok()) << q6k.status();
  EXPECT_EQ(q6k->frags, 1);
  EXPECT_EQ(q6k->kgroups, 2);
  q6k = ChooseCoopRows(codegen::H100LikeCaps(), 64, 14336, 4096, 1, true, false, graph::DType::kQ6_K);
  ASSERT_TRUE(q6k.ok()) << q6k.status();
  EXPECT_EQ(q6k->frags, 2);
  EXPECT_EQ(q6k->kgroups, 2);
  // At four fragments of x only a long K splits over workgroups (the down products, not the o ones).
  absl::StatusOr<CoopRowsConfig> four_short = ChooseCoopRows(codegen::H100LikeCaps(), 64, 4096, 4096, 1);
  ASSERT_TRUE(four_short.ok()) << four_short.status();
  EXPECT_EQ(four_short->kgroups, 1);
  EXPECT_EQ(four_short->frags, 1);
  absl::StatusOr<CoopRowsConfig> two_short = ChooseCoopRows(codegen::H100LikeCaps(), 32, 2048, 2048, 1);
  ASSERT_TRUE(two_short.ok()) << two_short.status();
  EXPECT_EQ(two_short->kgroups, 2);  // two fragments of x: any K
  absl::StatusOr<CoopRowsConfig> one_long = ChooseCoopRows(codegen::H100LikeCaps(), 16, 14336, 4096, 1);
  ASSERT_TRUE(one_long.ok()) << one_long.status();
  EXPECT_EQ(one_long->kgroups, 1);  // one fragment of x
  EXPECT_EQ(two->prefetch, 1);       // (the 8B's gate+up: 448 workgroups)
  absl::StatusOr<CoopRowsConfig> two_gated = ChooseCoopRows(codegen::H100LikeCaps(), 32, 2048, 8192, 2);
  ASSERT_TRUE(two_gated.ok()) << two_gated.status();
  EXPECT_EQ(two_gated->prefetch, 1);  // a gated product on 256 keeps it
  EXPECT_EQ(two_gated->kgroups, 1);
  absl::StatusOr<CoopRowsConfig> two_wide = ChooseCoopRows(codegen::H100LikeCaps(), 32, 4096, 4112, 1);
  ASSERT_TRUE(two_wide.ok()) << two_wide.status();
  EXPECT_EQ(two_wide->frags, 2);
  EXPECT_EQ(two_wide->kgroups, 1);   // 257 workgroups of one fragment
  EXPECT_EQ(two_wide->prefetch, 0);  // 129 workgroups of 32 columns
  absl::StatusOr<CoopRowsConfig> two_head = ChooseCoopRows(codegen::H100LikeCaps(), 32, 4096, 128256, 1);
  ASSERT_TRUE(two_head.ok()) << two_head.status();
  EXPECT_EQ(two_head->prefetch, 1);  // 4,008
  absl::StatusOr<CoopRowsConfig> one_small = ChooseCoopRows(codegen::H100LikeCaps(), 16, 4096, 4096, 1);
  ASSERT_TRUE(one_small.ok()) << one_small.status();
  EXPECT_EQ(one_small->prefetch, 1);  // one fragment of x keeps it
  EXPECT_LE(codegen::tuning::CoopRowsSharedBytes(*two_wide, 1), 49152);
  EXPECT_FALSE(ChooseCoopRows(codegen::H100LikeCaps(), 65, 4096, 4096, 1).ok());

  // Where the device's fragments do not keep the mma layout, the weights are staged, and x is read
  // into fragments from its buffer where that holds whole fragments of rows (a bucket of 16 or 32)
  // from its start and K is a multiple of 16, for gated weights; else it is staged too.
  codegen::TargetCaps staged = codegen::H100LikeCaps();
  staged.coop_fragments_mma = false;
  for (const auto& [m, k, gates, x_whole, direct] :
       {std::tuple{16, 4096, 2, true, 1}, std::tuple{16, 4096, 1, true, 0},
        std::tuple{32, 14336, 1, true, 0}, std::tuple{32, 4096, 2, true, 1}, std::tuple{16, 4096, 2, false, 0},
        std::tuple{32, 4096, 1, false, 0}, std::tuple{16, 4104, 2, true, 0}, std::tuple{20, 4096, 2, true, 0}}) {
    absl::StatusOr<CoopRowsConfig> c = ChooseCoopRows(staged, m, k, 14336, gates, x_whole);
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_EQ(c->w_direct, 0);
    EXPECT_EQ(c->x_direct, direct) << m << " rows, K " << k << ", " << gates << " gates" << (x_whole ? "" : ", a last row");
    EXPECT_LE(codegen::tuning::CoopRowsSharedBytes(*c, gates), 49152);
  }
  // At most 8 rows: x's rows as the columns of 16 x 8 fragments where the device has that shape,
  // read from x's buffer for gated weights where that holds 8 rows and K is a multiple of 16.
  for (const auto& [m, k, gates, x_whole, cols8, x8, direct] :
       {std::tuple{8, 4096, 2, true, true, 1, 1}, std::tuple{8, 14336, 1, true, true, 1, 0},
        std::tuple{8, 4104, 2, true, true, 1, 0}, std::tuple{8, 4096, 2, false, true, 1, 0},
        std::tuple{2, 4096, 2, true, true, 1, 0}, std::tuple{8, 4096, 2, true, false, 0, 0}}) {
    codegen::TargetCaps caps = staged;
    caps.coop_matrix_nv_16x8 = cols8;
    absl::StatusOr<CoopRowsConfig> c = ChooseCoopRows(caps, m, k, 14336, gates, x_whole);
    ASSERT_TRUE(c.ok()) << c.status();
    const std::string what = absl::StrCat(m, " rows, K ", k, ", ", gates, " gates", x_whole ? "" : ", a last row",
                                          cols8 ? "" : ", no 16x8x16");
    EXPECT_EQ(c->x8, x8) << what;
    EXPECT_EQ(c->x_direct, direct) << what;
    EXPECT_EQ(c->x_frags, 1);
    EXPECT_LE(codegen::tuning::CoopRowsSharedBytes(*c, gates), 49152);
  }
  // Where they do, the weights are decoded into fragments for any product whose K is a multiple of
  // 8 (x read by the lanes, a last row of a longer x too), x's fragments 16 x 8 ones at 8 rows.
  for (const auto& [m, k, gates, x_whole, w_direct, x8] :
       {std::tuple{8, 4096, 2, true, 1, 1}, std::tuple{8, 14336, 1, true, 1, 1}, std::tuple{2, 4096, 1, false, 1, 1},
        std::tuple{16, 4104, 2, true, 1, 0}, std::tuple{32, 4096, 1, false, 1, 0}, std::tuple{16, 130, 1, true, 0, 0},
        std::tuple{8, 130, 2, true, 0, 1}}) {
    absl::StatusOr<CoopRowsConfig> c = ChooseCoopRows(codegen::H100LikeCaps(), m, k, 14336, gates, x_whole);
    ASSERT_TRUE(c.ok()) << c.status();
    const std::string what = absl::StrCat(m, " rows, K ", k, ", ", gates, " gates", x_whole ? "" : ", a last row");
    EXPECT_EQ(c->w_direct, w_direct) << what;
    EXPECT_EQ(c->x8, x8) << what;
    EXPECT_EQ(c->bk, w_direct && x8 ? 64 : 32) << what;
    // 8 subgroups over K for one 16-row fragment decoded in place (the 8B's gate+up has 4 otherwise).
    if (w_direct && !x8) EXPECT_EQ(c->subgroups, m <= 16 ? 8 : 4) << what;
    if (w_direct) EXPECT_EQ(c->x_direct, 0) << what;
    EXPECT_LE(codegen::tuning::CoopRowsSharedBytes(*c, gates), 49152);
  }
  {
    // Slices of 16 keep the weights staged.
    ScopedTune scoped("coop_rows.bk=16");
    absl::StatusOr<CoopRowsConfig> c = ChooseCoopRows(codegen::H100LikeCaps(), 8, 4096, 14336, 2);
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_EQ(c->w_direct, 0);
  }
  {
    // x read into fragments at 8 rows: into 16 x 8 ones, for any product.
    ScopedTune scoped("coop_rows.x_direct=1");
    absl::StatusOr<CoopRowsConfig> c = ChooseCoopRows(codegen::H100LikeCaps(), 8, 4096, 14336, 1);
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_EQ(c->x8, 1);
    EXPECT_EQ(c->x_direct, 1);
  }
  {
    ScopedTune scoped("coop_rows.x8=1");
    absl::StatusOr<CoopRowsConfig> c = ChooseCoopRows(codegen::H100LikeCaps(), 16, 4096, 14336, 1);
    ASSERT_FALSE(c.ok());
    EXPECT_NE(c.status().message().find("coop_rows.x8=1 needs at most 8 rows"), std::string::npos) << c.status();
  }
}

// From 4 rows where the weights are decoded into fragments, from 8 where they are staged.
TEST(Tuning, BatchedDecodeTakesCoopRowsWhereTheDeviceHasThem) {
  unsetenv("DOPPLER_TUNE");
  codegen::TargetCaps staged_caps = codegen::H100LikeCaps();
  staged_caps.coop_fragments_mma = false;
  absl::StatusOr<codegen::tuning::DeviceChoice> nvidia = CoopRowsFrom(codegen::H100LikeCaps()),
                                                 staged = CoopRowsFrom(staged_caps),
                                                 lavapipe = CoopRowsFrom(codegen::LavapipeCaps());
  ASSERT_TRUE(nvidia.ok() && staged.ok() && lavapipe.ok()) << nvidia.status() << staged.status() << lavapipe.status();
  EXPECT_EQ(nvidia->value, 4);
  EXPECT_EQ(staged->value, 8);
  for (int64_t rows = 1; rows <= 64; ++rows) {
    EXPECT_EQ(CoopRowsTakeBatchedDecode(rows, nvidia->value), rows >= 4) << rows;
    EXPECT_EQ(CoopRowsTakeBatchedDecode(rows, staged->value), rows >= 8) << rows;
    EXPECT_FALSE(CoopRowsTakeBatchedDecode(rows, lavapipe->value)) << rows;
  }
  EXPECT_FALSE(CoopRowsTakeBatchedDecode(65, nvidia->value));
  // Above 32 rows only products without a norm prologue, whose weights are decoded into fragments;
  // from 17 rows no gated product with a norm prologue whose 64-column tiles are more than 128.
  for (const auto& [rows, n, gates, norm, mma, takes] :
       {std::tuple{32, 4096, 1, true, true, true}, std::tuple{32, 4096, 1, false, false, true},
        std::tuple{33, 4096, 1, false, true, true}, std::tuple{64, 4096, 1, false, true, true},
        std::tuple{33, 4096, 1, true, true, false}, std::tuple{64, 4096, 1, true, true, false},
        std::tuple{64, 4096, 1, false, false, false}, std::tuple{32, 14336, 2, true, true, false},
        std::tuple{17, 8256, 2, true, true, false}, std::tuple{32, 8192, 2, true, true, true},
        std::tuple{16, 14336, 2, true, true, true}, std::tuple{32, 14336, 1, true, true, true},
        std::tuple{32, 14336, 2, false, true, true}}) {
    codegen::TargetCaps caps = codegen::H100LikeCaps();
    caps.coop_fragments_mma = mma;
    absl::StatusOr<bool> got = codegen::tuning::CoopRowsTakesProduct(caps, rows, n, gates, norm);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(*got, takes) << rows << " rows, " << n << " columns, " << gates << " gates" << (norm ? ", a norm" : "")
                           << (mma ? "" : ", staged");
    absl::StatusOr<codegen::tuning::MatMulVariant> variant = codegen::tuning::ChooseMatMulVariant(
        caps, {.rows = rows, .n = n, .gates = gates, .w_dtype = graph::DType::kQ4_K, .row_per_sequence = true, .norm = norm});
    ASSERT_TRUE(variant.ok()) << variant.status();
    EXPECT_EQ(*variant, takes ? codegen::tuning::MatMulVariant::kCoopRows : codegen::tuning::MatMulVariant::kCoop) << rows;
  }
  for (const auto& [tune, rows, takes] : {std::tuple{"coop_rows.norm_upto=64", 64, true},
                                          std::tuple{"coop_rows.norm_upto=16", 16, true},
                                          std::tuple{"coop_rows.norm_upto=16", 32, false},
                                          std::tuple{"coop_rows.norm_upto=32", 32, true}}) {
    ScopedTune scoped(tune);
    absl::StatusOr<bool> got = codegen::tuning::CoopRowsTakesProduct(codegen::H100LikeCaps(), rows, 14336, 2, true);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(*got, takes) << tune << " " << rows;
  }
  {
    ScopedTune scoped("coop_rows.from=3");
    absl::StatusOr<codegen::tuning::DeviceChoice> from = CoopRowsFrom(codegen::H100LikeCaps());
    ASSERT_TRUE(from.ok()) << from.status();
    EXPECT_FALSE(CoopRowsTakeBatchedDecode(2, from->value));
    EXPECT_TRUE(CoopRowsTakeBatchedDecode(3, from->value));
  }
  {
    ScopedTune scoped("coop_rows.from=65");  // off: today's kernels for every bucket
    absl::StatusOr<codegen::tuning::DeviceChoice> from = CoopRowsFrom(codegen::H100LikeCaps());
    ASSERT_TRUE(from.ok()) << from.status();
    for (int64_t rows = 1; rows <= 64; ++rows) EXPECT_FALSE(CoopRowsTakeBatchedDecode(rows, from->value)) << rows;
  }
}

// Attention in a decode step on the subgroups variant (without the keys variant): each row's keys
// split over as many workgroups as make 512 (16 at most, and no more than a window lets take 4
// trips of keys each), of 8 subgroups each, whose runs take at least 4 trips of keys; from 512
// workgroups no split and 8 subgroups a (row, head) workgroup; between 256 and 512 no split and
// the device's most subgroups. DOPPLER_TUNE's attention.nsg, attention.splits and
// attention.split_keys set them.
TEST(Tuning, DecodeAttentionSplitsFewWorkgroupsAndTakesFewerSubgroupsForMany) {
  ScopedTune no_keys("attention.keys=0");
  using codegen::tuning::AttentionVariant;
  for (const auto& [tokens, heads, one_sequence, nsg, splits] :
       {std::tuple{1, 32, true, 8, 16}, std::tuple{1, 64, true, 8, 8}, std::tuple{1, 4, true, 8, 16},
        std::tuple{8, 32, false, 8, 2}, std::tuple{15, 32, false, 32, 1}, std::tuple{16, 32, false, 8, 1},
        std::tuple{64, 32, false, 8, 1}, std::tuple{64, 7, false, 32, 1}, std::tuple{100, 7, false, 8, 1}}) {
    absl::StatusOr<codegen::tuning::AttentionConfig> a = codegen::tuning::ChooseAttention(
        codegen::H100LikeCaps(), {.tokens = tokens, .heads = heads, .head_dim = 128, .f16_cache = true,
                                  .one_sequence = one_sequence});
    ASSERT_TRUE(a.ok()) << a.status();
    EXPECT_EQ(a->variant, AttentionVariant::kSubgroups);
    EXPECT_EQ(a->nsg, nsg) << tokens << " rows of " << heads << " heads";
    EXPECT_EQ(a->splits, splits) << tokens << " rows of " << heads << " heads";
    EXPECT_EQ(a->split_keys, 4 * nsg * a->kpi);
    EXPECT_EQ(a->wg, 32u * static_cast<uint32_t>(nsg));
  }
  // One token of 32 heads of 128 (runs of at least 64 keys), as DOPPLER_TUNE says.
  auto one_token = [](const char* tune, int64_t max_keys = 0) {
    ScopedTune scoped(tune);
    absl::StatusOr<codegen::tuning::AttentionConfig> a = codegen::tuning::ChooseAttention(
        codegen::H100LikeCaps(), {.tokens = 1, .heads = 32, .head_dim = 128, .f16_cache = true, .max_keys = max_keys});
    EXPECT_TRUE(a.ok()) << a.status();
    return a.value_or(codegen::tuning::AttentionConfig{});
  };
  EXPECT_EQ(one_token("", 100).splits, 2);  // a window of 100 keys
  EXPECT_EQ(one_token("", 64).splits, 1);
  EXPECT_EQ(one_token("", 64).nsg, 8);
  EXPECT_EQ(one_token("", 4096).splits, 16);
  EXPECT_EQ(one_token("attention.splits=1").splits, 1);
  EXPECT_EQ(one_token("attention.splits=1").nsg, 32);
  const codegen::tuning::AttentionConfig forced = one_token("attention.splits=3,attention.split_keys=5,attention.nsg=4", 7);
  EXPECT_EQ(forced.splits, 3);
  EXPECT_EQ(forced.split_keys, 5);
  EXPECT_EQ(forced.nsg, 4);
  {
    ScopedTune scoped("attention.nsg=2");
    absl::StatusOr<codegen::tuning::AttentionConfig> a = codegen::tuning::ChooseAttention(
        codegen::H100LikeCaps(), {.tokens = 8, .heads = 32, .head_dim = 128, .f16_cache = true, .one_sequence = false});
    ASSERT_TRUE(a.ok()) << a.status();
    EXPECT_EQ(a->nsg, 2);
  }
  for (const char* bad : {"attention.nsg=3", "attention.splits=0", "attention.splits=65", "attention.split_keys=0"}) {
    ScopedTune scoped(bad);
    absl::StatusOr<codegen::tuning::AttentionConfig> a =
        codegen::tuning::ChooseAttention(codegen::H100LikeCaps(), {.tokens = 8, .heads = 32, .head_dim = 128});
    ASSERT_FALSE(a.ok()) << bad;
    EXPECT_NE(a.status().message().find(std::string(bad).substr(0, std::string(bad).find('='))), std::string::npos)
        << a.status();
  }
}

// The keys variant of a batched step (groups of 4 query heads, 8 kv heads): runs of at least 4
// passes of its 8 subgroups (8 keys each), as many as make 512 workgroups, 4 at most.
TEST(Tuning, KeysAttentionSplitsABatchedStepOfFewWorkgroups) {
  using codegen::tuning::AttentionVariant;
  for (const auto& [rows, max_keys, splits] : {std::tuple{8, 0, 4}, std::tuple{16, 0, 4}, std::tuple{32, 0, 2},
                                               std::tuple{64, 0, 1}, std::tuple{8, 300, 2}, std::tuple{8, 256, 1}}) {
    absl::StatusOr<codegen::tuning::AttentionConfig> a = codegen::tuning::ChooseAttention(
        codegen::H100LikeCaps(), {.tokens = rows, .heads = 32, .kv_heads = 8, .head_dim = 128, .f16_cache = true,
                                  .one_sequence = false, .max_keys = max_keys});
    ASSERT_TRUE(a.ok()) << a.status();
    EXPECT_EQ(a->variant, AttentionVariant::kKeys) << rows << " rows";
    EXPECT_EQ(a->splits, splits) << rows << " rows, " << max_keys << " keys at most";
    EXPECT_EQ(a->split_keys, 4 * 8 * 8);
  }
  ScopedTune forced("attention.splits=7");
  absl::StatusOr<codegen::tuning::AttentionConfig> a = codegen::tuning::ChooseAttention(
      codegen::H100LikeCaps(), {.tokens = 64, .heads = 32, .kv_heads = 8, .head_dim = 128, .f16_cache = true,
                                .one_sequence = false});
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->variant, AttentionVariant::kKeys);
  EXPECT_EQ(a->splits, 7);
}

// A prefill bucket of one sequence takes the cooperative-matrix attention: in one pass over the
// keys (4 subgroups, chunks of 32) where the device's f32 fragments keep the mma layout and the head
// is at most 128 wide, else in two (chunks of 16); DOPPLER_TUNE's attention.coop_online and
// attention.coop_keys set them, and other values are errors naming the key.
TEST(Tuning, PrefillAttentionTakesOnePassWhereTheSumsKeepTheMmaLayout) {
  using codegen::tuning::AttentionVariant;
  auto choose = [](bool sums_mma, int64_t head_dim) {
    codegen::TargetCaps caps = codegen::H100LikeCaps();
    caps.coop_accumulators_mma = sums_mma;
    return codegen::tuning::ChooseAttention(
        caps, {.tokens = 512, .heads = 8, .kv_heads = 2, .head_dim = head_dim, .f16_cache = true, .one_sequence = true});
  };
  for (const auto& [sums_mma, head_dim, online] :
       {std::tuple{true, 64, true}, std::tuple{true, 128, true}, std::tuple{true, 80, true}, std::tuple{true, 256, false},
        std::tuple{false, 128, false}}) {
    absl::StatusOr<codegen::tuning::AttentionConfig> a = choose(sums_mma, head_dim);
    ASSERT_TRUE(a.ok()) << a.status();
    EXPECT_EQ(a->variant, AttentionVariant::kCoop) << head_dim;
    EXPECT_EQ(a->coop_online, online) << head_dim << (sums_mma ? " (mma sums)" : "");
    EXPECT_EQ(a->coop_keys, online ? 32 : 16) << head_dim;
    if (online) EXPECT_EQ(a->wg, 128u);
  }
  {
    ScopedTune scoped("attention.coop_online=0");
    absl::StatusOr<codegen::tuning::AttentionConfig> a = choose(true, 128);
    ASSERT_TRUE(a.ok()) << a.status();
    EXPECT_FALSE(a->coop_online);
  }
  {
    ScopedTune scoped("attention.coop_keys=64");
    absl::StatusOr<codegen::tuning::AttentionConfig> a = choose(true, 128);
    ASSERT_TRUE(a.ok()) << a.status();
    EXPECT_TRUE(a->coop_online);
    EXPECT_EQ(a->coop_keys, 64);
  }
  for (const char* bad : {"attention.coop_keys=48", "attention.coop_online=2"}) {
    ScopedTune scoped(bad);
    absl::StatusOr<codegen::tuning::AttentionConfig> a = choose(true, 128);
    ASSERT_FALSE(a.ok()) << bad;
    EXPECT_NE(a.status().message().find(std::string(bad).substr(0, std::string(bad).find('='))), std::string::npos)
        << a.status();
  }
}

// A batched decode step of at least 64 workgroups of the keys variant (kv heads × rows; 128 where
// a lane's dimensions of the head are not a quad) takes it
// (8 subgroups, 4 lanes a key, 8 keys a pass) where the device shuffles, the group has 4 to 8
// heads and the head splits into quads for each of a key's lanes; DOPPLER_TUNE's attention.keys
// and attention.key_lanes set it.
TEST(Tuning, BatchedAttentionTakesKeysForManyWorkgroupsOfGroupsOfFour) {
  unsetenv("DOPPLER_TUNE");
  using codegen::tuning::AttentionVariant;
  auto choose = [](const codegen::TargetCaps& caps, int64_t tokens, int64_t heads, int64_t kv_heads, int64_t head_dim,
                   bool one_sequence = false) {
    absl::StatusOr<codegen::tuning::AttentionConfig> a = codegen::tuning::ChooseAttention(
        caps, {.tokens = tokens, .heads = heads, .kv_heads = kv_heads, .head_dim = head_dim, .f16_cache = true,
               .one_sequence = one_sequence});
    EXPECT_TRUE(a.ok()) << a.status();
    return a.value_or(codegen::tuning::AttentionConfig{});
  };
  const codegen::TargetCaps h100 = codegen::H100LikeCaps();
  for (int64_t tokens : {8, 32, 40, 64}) {
    const codegen::tuning::AttentionConfig a = choose(h100, tokens, 32, 8, 128);
    EXPECT_EQ(a.variant, AttentionVariant::kKeys) << tokens;
    EXPECT_EQ(a.nsg, 8);
    EXPECT_EQ(a.key_lanes, 4);
    EXPECT_EQ(a.wg, 256u);
    EXPECT_TRUE(a.consec);
  }
  EXPECT_EQ(choose(h100, 7, 32, 8, 128).variant, AttentionVariant::kSubgroups);    // 56 workgroups
  EXPECT_EQ(choose(h100, 4, 64, 16, 128).variant, AttentionVariant::kKeys);        // 64
  EXPECT_EQ(choose(h100, 64, 4, 1, 256).variant, AttentionVariant::kKeys);         // 64 (Gemma-3-1B)
  EXPECT_EQ(choose(h100, 32, 4, 1, 256).variant, AttentionVariant::kSubgroups);    // 32
  // Heads of 64 (two dimensions a lane of 32): from 128 workgroups.
  EXPECT_EQ(choose(h100, 8, 32, 8, 64).variant, AttentionVariant::kSubgroups);
  EXPECT_EQ(choose(h100, 16, 32, 8, 64).variant, AttentionVariant::kKeys);
  EXPECT_EQ(choose(h100, 64, 16, 8, 128).variant, AttentionVariant::kSubgroups);   // a group of 2
  EXPECT_EQ(choose(h100, 1, 32, 8, 128, true).variant, AttentionVariant::kSubgroups);
  EXPECT_EQ(choose(h100, 64, 64, 8, 96).variant, AttentionVariant::kKeys);        // a group of 8
  EXPECT_FALSE(choose(h100, 64, 64, 8, 96).consec);                               // 96 is no 4 x 32 dims
  EXPECT_EQ(choose(h100, 64, 128, 8, 128).variant, AttentionVariant::kSubgroups);  // a group of 16
  // A group of 8 heads of 256: 8 subgroups' partial outputs would pass 48 KiB of shared memory.
  EXPECT_EQ(choose(h100, 64, 64, 8, 256).variant, AttentionVariant::kKeys);
  EXPECT_EQ(choose(h100, 64, 64, 8, 256).nsg, 4);
  EXPECT_LE(codegen::KeysAttentionSharedBytes(128, 32, 4, 8, 256), 49152);
  EXPECT_GT(codegen::KeysAttentionSharedBytes(256, 32, 4, 8, 256), 49152);
  EXPECT_EQ(choose(h100, 64, 32, 8, 88).key_lanes, 2);                            // 88 is 2 x 11 quads
  EXPECT_EQ(choose(h100, 64, 32, 8, 88).variant, AttentionVariant::kKeys);
  EXPECT_EQ(choose(h100, 64, 32, 8, 36).variant, AttentionVariant::kSubgroups);   // 9 quads
  codegen::TargetCaps no_shuffle = h100;
  no_shuffle.subgroup_shuffle = false;
  EXPECT_EQ(choose(no_shuffle, 64, 32, 8, 128).variant, AttentionVariant::kSubgroups);
  codegen::TargetCaps small_subgroups = h100;  // lavapipe's 8 lanes: 4 a key, 2 keys a pass
  small_subgroups.min_subgroup_size = small_subgroups.subgroup_size = 8;
  EXPECT_EQ(choose(small_subgroups, 64, 32, 8, 128).key_lanes, 4);
  EXPECT_EQ(choose(small_subgroups, 64, 32, 8, 128).wg, 64u);
  {
    ScopedTune scoped("attention.keys=1,attention.key_lanes=8");
    const codegen::tuning::AttentionConfig a = choose(h100, 2, 32, 8, 128);
    EXPECT_EQ(a.variant, AttentionVariant::kKeys);
    EXPECT_EQ(a.key_lanes, 8);
  }
  {
    ScopedTune scoped("attention.keys=0");
    EXPECT_EQ(choose(h100, 64, 32, 8, 128).variant, AttentionVariant::kSubgroups);
  }
  ScopedTune scoped("attention.key_lanes=3");
  EXPECT_FALSE(codegen::tuning::ChooseAttention(h100, {.tokens = 64, .heads = 32, .kv_heads = 8, .head_dim = 128}).ok());
}

// The choices that follow the device come from its capabilities whatever its class; the class
// only says whether they were measured there (NVIDIA's were, on the H100 and H200) or are the
// portable default.
TEST(Tuning, DeviceChoicesFollowTheCapabilitiesAndSayWhereTheyWereMeasured) {
  unsetenv("DOPPLER_TUNE");
  using codegen::DeviceClass;
  using codegen::tuning::ChooseAttentionCoopFrom;
  using codegen::tuning::ChooseCoopFrom;
  using codegen::tuning::DeviceChoice;
  using codegen::tuning::kNever;
  auto choices = [](const codegen::TargetCaps& caps) {
    absl::StatusOr<DeviceChoice> coop_rows = CoopRowsFrom(caps);
    EXPECT_TRUE(coop_rows.ok()) << coop_rows.status();
    return std::vector<DeviceChoice>{ChooseCoopFrom(caps, false), ChooseCoopFrom(caps, true),
                                     ChooseAttentionCoopFrom(caps), coop_rows.value_or(DeviceChoice{})};
  };
  const std::vector<DeviceChoice> nvidia = choices(codegen::H100LikeCaps());
  EXPECT_EQ(nvidia[0].value, codegen::tuning::kCoopMinRows);
  EXPECT_EQ(nvidia[1].value, codegen::tuning::kGemvRowsLimit + 1);
  EXPECT_EQ(nvidia[2].value, codegen::tuning::kCoopMinRows);
  EXPECT_EQ(nvidia[3].value, 4);
  for (const DeviceChoice& c : nvidia) EXPECT_EQ(c.reason.rfind("measured on nvidia: bench/RESULTS.md, \"", 0), 0u) << c.reason;
  for (DeviceClass other : {DeviceClass::kAmd, DeviceClass::kIntel, DeviceClass::kLavapipe, DeviceClass::kGeneric}) {
    codegen::TargetCaps caps = codegen::H100LikeCaps();
    caps.device_class = other;
    const std::vector<DeviceChoice> got = choices(caps);
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_EQ(got[i].value, nvidia[i].value) << codegen::DeviceClassName(other) << " " << i;
      EXPECT_EQ(got[i].reason.rfind(absl::StrCat("portable default, not measured on ", codegen::DeviceClassName(other)), 0),
                0u)
          << got[i].reason;
    }
  }
  for (const codegen::TargetCaps& caps : {codegen::LavapipeCaps(), codegen::AmdLikeCaps(), codegen::IntelArcLikeCaps(),
                                          codegen::GenericCaps()}) {
    const std::vector<DeviceChoice> got = choices(caps);
    EXPECT_EQ(got[0].value, kNever);
    EXPECT_EQ(got[1].value, kNever);
    EXPECT_EQ(got[2].value, kNever);
    EXPECT_EQ(got[3].value, codegen::tuning::kCoopRowsMaxRows + 1);
    for (const DeviceChoice& c : got) EXPECT_EQ(c.reason, "the device has no cooperative matrices");
  }
  absl::StatusOr<std::string> described = codegen::tuning::DescribeDeviceChoices(codegen::H100LikeCaps());
  ASSERT_TRUE(described.ok()) << described.status();
  EXPECT_EQ(described->rfind("device class nvidia\n", 0), 0u) << *described;
  EXPECT_NE(described->find("  matmul cooperative-matrix tiles: from 64 rows (measured on nvidia: "), std::string::npos)
      << *described;
  EXPECT_NE(described->find("  coop_rows in batched decode: from 4 rows to 64, products with a norm prologue to 32 (gated ones to 16 where their 64-column "
                              "tiles are more than 128) ("), std::string::npos) << *described;
  EXPECT_NE(described->find("  attention keys variant in batched decode: from 64 workgroups (kv heads x rows) of 4 to 8 "
                            "query heads a kv head, from 128 where a lane's dimensions are not a quad (measured on nvidia: "),
            std::string::npos)
      << *described;
  EXPECT_NE(described->find("  MXFP4 expert products in packed f16: yes (measured on nvidia: "), std::string::npos)
      << *described;
  described = codegen::tuning::DescribeDeviceChoices(codegen::AmdLikeCaps());
  ASSERT_TRUE(described.ok()) << described.status();
  EXPECT_NE(described->find("device class amd\n  matmul cooperative-matrix tiles: none (the device has no cooperative "
                            "matrices)"),
            std::string::npos)
      << *described;
  codegen::TargetCaps no_f16 = codegen::AmdLikeCaps();
  no_f16.float16_arithmetic = false;
  described = codegen::tuning::DescribeDeviceChoices(no_f16);
  ASSERT_TRUE(described.ok()) << described.status();
  EXPECT_NE(described->find("  MXFP4 expert products in packed f16: no (the device has no f16 arithmetic)\n"),
            std::string::npos)
      << *described;
}

TEST(Tuning, BadCoopRowsEntriesAreErrorsNamingThem) {
  for (const auto& [tune, says] : std::map<std::string, std::string>{
           {"coop_rows.frags=3", "coop_rows.frags=3 is not one of 1, 2, 4"},
           {"coop_rows.bk=8", "coop_rows.bk=8 is not one of 16, 32, 64"},
           {"coop_rows.subgroups=2,coop_rows.ksplit=4", "split K among subgroups that do not divide the workgroup's"},
           {"coop_rows.subgroups=8,coop_rows.frags=4,coop_rows.bk=64,coop_rows.w_direct=0",
            "bytes of shared memory; the device has 49152"},
           {"coop_rows.w_direct=1,coop_rows.bk=16", "decode the weights into fragments 32 values of K at a time"},
           {"coop_rows.w_direct=1,coop_rows.x_direct=1", "coop_rows.w_direct=1 reads x into fragments itself"},
           {"coop_rows.w_direct=2", "coop_rows.w_direct=2 is not one of 0, 1"},
           {"coop_rows.x_direct=1,coop_rows.x8=0", "coop_rows.x_direct=1 needs x's buffer to hold whole fragments of rows"},
           {"coop_rows.x_direct=2", "coop_rows.x_direct=2 is not one of 0, 1"},
           {"coop_rows.x8=2", "coop_rows.x8=2 is not one of 0, 1"},
           {"coop_rows.kgroups=5", "coop_rows.kgroups=5 is not one of 1, 2, 3, 4"}}) {
    ScopedTune scoped(tune.c_str());
    absl::StatusOr<CoopRowsConfig> c = ChooseCoopRows(codegen::H100LikeCaps(), 8, 4096, 14336, 2);
    ASSERT_FALSE(c.ok()) << tune;
    EXPECT_NE(c.status().message().find(says), std::string::npos) << c.status();
    EXPECT_EQ(c.status().message().rfind("DOPPLER_TUNE: ", 0), 0u) << c.status();
  }
  ScopedTune scoped("coop_rows.from=1");
  absl::StatusOr<codegen::tuning::DeviceChoice> from = CoopRowsFrom(codegen::H100LikeCaps());
  ASSERT_FALSE(from.ok());
  EXPECT_NE(from.status().message().find("coop_rows.from=1 is below 2"), std::string::npos) << from.status();
}

// Every shape compiles to SPIR-V on any machine, for every weight format the tiled coop kernel
// takes (the choice) and Q4_K (every override), with its workgroup size; a single row, buckets
// below the choice's 4 rows and the overrides' coop_rows.from=65 keep today's kernels.
TEST(Tuning, EveryCoopRowsShapeCompilesForNvidia) {
  auto check = [](const graph::Graph& g, const char* tune, std::vector<int64_t> buckets) {
    ScopedTune scoped(tune);
    for (int64_t bucket : buckets) {
      for (const graph::Node& n : g.nodes()) {
        if (n.kind != graph::OpKind::kMatMul) continue;
        absl::StatusOr<test::CompiledKernel> compiled = test::EmitAndCompile(g, n, codegen::H100LikeCaps(), bucket);
        ASSERT_TRUE(compiled.ok()) << tune << " bucket " << bucket << ": " << compiled.status();
        const std::string& variant = compiled->kernel.variant;
        const std::string prefix = absl::StrCat("coop_rows.", graph::Name(g.node(n.inputs[1]).type.dtype), ".sg");
        ASSERT_EQ(variant.rfind(prefix, 0), 0u) << variant;
        int sg = 0, ks = 0, f = 0, bk = 0, kg = 1;
        ASSERT_EQ(std::sscanf(variant.c_str() + prefix.size(), "%d.ks%d.f%d.k%d", &sg, &ks, &f, &bk), 4) << variant;
        if (const size_t at = variant.find(".kg"); at != std::string::npos) {
          ASSERT_EQ(std::sscanf(variant.c_str() + at, ".kg%d", &kg), 1) << variant;
        }
        EXPECT_EQ(compiled->spirv.local_size[0], 32u * sg) << tune << " " << variant;
        const int64_t blocks = (n.type.shape[1].value + 16 * f * (sg / ks) - 1) / (16 * f * (sg / ks));
        EXPECT_EQ(compiled->kernel.groups[0], blocks * kg) << variant;
        // A K split over workgroups: a counter a block, and every workgroup's sums and rows' sums of squares.
        const int64_t gates = g.node(n.inputs[1]).type.shape[0].value / n.type.shape[1].value;
        EXPECT_EQ(compiled->kernel.scratch_bytes,
                  kg == 1 ? 0u : static_cast<uint64_t>(4 * (blocks + kg * bucket + kg * gates * bucket * n.type.shape[1].value)))
            << variant;
      }
    }
  };
  absl::StatusOr<graph::Graph> q4k = RowsGraph(graph::DType::kQ4_K, 768);
  ASSERT_TRUE(q4k.ok()) << q4k.status();
  for (const char* tune : kCoopRowsTunes) check(*q4k, tune, {2, 5, 16, 20, 32});
  check(*q4k, "coop_rows.from=2,coop_rows.x_direct=1", {16, 32});  // x read into fragments for every product
  check(*q4k, "", {8});                                              // x's 8 rows as 16 x 8 fragments
  check(*q4k, "coop_rows.norm_upto=64", {40, 64});                   // four fragments of x, every product
  check(*q4k, "coop_rows.norm_upto=64,coop_rows.frags=2", {64});
  check(*q4k, "coop_rows.x_direct=1", {8});                          // ... read from x's buffer for every product
  check(*q4k, "coop_rows.x8=0", {8});                                // 16-row fragments
  check(*q4k, "coop_rows.w_direct=0", {8});                          // weights staged
  check(*q4k, "coop_rows.w_direct=0,coop_rows.x8=0", {8});
  for (graph::DType dtype : kOtherWeightFormats) {
    absl::StatusOr<graph::Graph> g = RowsGraph(dtype, 768);
    ASSERT_TRUE(g.ok()) << g.status();
    check(*g, "", {8});
  }
  // K not a multiple of 4 (x staged from single values) or of a slice.
  absl::StatusOr<graph::Graph> odd = RowsGraph(graph::DType::kBF16, 130);
  ASSERT_TRUE(odd.ok()) << odd.status();
  check(*odd, "", {8});
  check(*odd, "coop_rows.from=2,coop_rows.bk=64,coop_rows.frags=1", {3});

  for (const auto& [tune, bucket] : {std::pair{"", int64_t{1}}, std::pair{"", int64_t{2}}, std::pair{"coop_rows.from=65", int64_t{8}},
                                     std::pair{"coop_rows.from=9", int64_t{8}}}) {
    ScopedTune scoped(tune);
    for (const graph::Node& n : q4k->nodes()) {
      if (n.kind != graph::OpKind::kMatMul) continue;
      absl::StatusOr<test::CompiledKernel> compiled = test::EmitAndCompile(*q4k, n, codegen::H100LikeCaps(), bucket);
      ASSERT_TRUE(compiled.ok()) << tune << ": " << compiled.status();
      EXPECT_EQ(compiled->kernel.variant.rfind("gemv.", 0), 0u) << tune << " " << compiled->kernel.variant;
    }
  }
  // Without a row per sequence (a prefill chunk of a few rows), the matrix-vector kernels too.
  absl::StatusOr<graph::Graph> unpaged = RowsGraph(graph::DType::kQ4_K, 768, /*paged=*/false);
  ASSERT_TRUE(unpaged.ok()) << unpaged.status();
  for (const graph::Node& n : unpaged->nodes()) {
    if (n.kind != graph::OpKind::kMatMul) continue;
    absl::StatusOr<test::CompiledKernel> compiled = test::EmitAndCompile(*unpaged, n, codegen::H100LikeCaps(), 8);
    ASSERT_TRUE(compiled.ok()) << compiled.status();
    EXPECT_EQ(compiled->kernel.variant.rfind("gemv.", 0), 0u) << compiled->kernel.variant;
  }
}

// Every shape computes what the interpreter does, for rows 1 .. 32 (1, 2, 5, 8, 13, 16, 3, 17, 32 in
// buckets of 2, 8, 16 and 32), several weight formats, a gated chain with a norm prologue and a residual add, K
// and N no multiple of any workgroup's. A device without cooperative matrices runs the same
// products through its own kernels (the overrides change nothing there, so only the choice runs).
TEST_F(TunedKernelTest, EveryCoopRowsShapeMatchesTheInterpreter) {
  const bool has_coop = vk::TargetCapsOf(ctx().info()).coop_matrix_nv;
  const std::vector<const char*> tunes = has_coop ? std::vector<const char*>(std::begin(kCoopRowsTunes),
                                                                             std::end(kCoopRowsTunes))
                                                  : std::vector<const char*>{""};
  for (const auto& [dtype, k] : {std::pair{graph::DType::kQ4_K, int64_t{768}}, std::pair{graph::DType::kQ6_K, int64_t{768}},
                                  std::pair{graph::DType::kQ8_0, int64_t{224}}, std::pair{graph::DType::kF16, int64_t{200}}}) {
    absl::StatusOr<graph::Graph> g = RowsGraph(dtype, k), plain = RowsGraph(dtype, k, /*paged=*/false);
    ASSERT_TRUE(g.ok() && plain.ok()) << g.status() << plain.status();
    test::RandomParams params(*g, 11);
    graph::Interpreter interp(params);
    // `products`: the chain's matmuls coop_rows takes on a device with cooperative matrices.
    const auto check = [&](const char* tune, int64_t bucket, std::vector<int64_t> rows_list, int products = 2) {
      ScopedTune scoped(tune);
      absl::StatusOr<std::unique_ptr<test::GpuRunner>> gpu = test::GpuRunner::Create(ctx(), *g, bucket, params);
      ASSERT_TRUE(gpu.ok()) << tune << ": " << gpu.status();
      int coop_rows = 0;
      for (const vk::PlannedDispatch& d : (*gpu)->plan().dispatches()) coop_rows += d.variant.rfind("coop_rows.", 0) == 0;
      EXPECT_EQ(coop_rows, has_coop ? products : 0) << tune;
      for (int64_t rows : rows_list) {
        ExpectChainMatches(**gpu, interp, *plain, rows, k, absl::StrCat(graph::Name(dtype), " ", tune));
      }
    };
    for (const char* tune : tunes) {
      check(tune, 2, {1, 2});
      check(tune, 8, {5, 8});
      check(tune, 16, {13, 16});
      check(tune, 32, {3, 17, 32});
    }
    // x read into fragments for every product, where the buckets and K allow it (x's 8 rows as 16 x 8
    // fragments where the device has them).
    if (has_coop && k % 16 == 0) {
      check("coop_rows.from=2,coop_rows.x_direct=1", 16, {13, 16});
      check("coop_rows.from=2,coop_rows.x_direct=1", 32, {3, 17, 32});
      if (vk::TargetCapsOf(ctx().info()).coop_matrix_nv_16x8) check("coop_rows.x_direct=1", 8, {5, 8});
    }
    // x's rows in 16-row fragments where 16 x 8 ones would take them; 16 x 8 ones staged.
    if (has_coop) {
      check("coop_rows.x8=0", 8, {5, 8});
      check("coop_rows.from=2,coop_rows.x8=0", 2, {1, 2});
      check("coop_rows.w_direct=0", 8, {5, 8});
      check("coop_rows.w_direct=0,coop_rows.x8=0", 8, {5, 8});
    }
    // Four fragments of x (the product with a norm too): one fragment of columns a subgroup, two,
    // and the weights staged.
    if (vk::TargetCapsOf(ctx().info()).coop_fragments_mma) {
      check("", 64, {40}, 1);  // the rule: the gated product with its norm on the tiles
      check("coop_rows.norm_upto=64", 64, {33, 64});
      check("coop_rows.norm_upto=64,coop_rows.frags=2", 64, {64});
      check("coop_rows.norm_upto=64,coop_rows.w_direct=0", 64, {47});
    }
  }
}

}  // namespace coop_rows

}  // namespace
}  // namespace doppler
