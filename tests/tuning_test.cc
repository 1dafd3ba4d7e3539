// Tuning as data (codegen/tuning/): DOPPLER_TUNE's entries, checked against the keys the families
// know; the tiled matmul's choice and its overrides, whose kernels still compute what the
// interpreter does.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "codegen/kernel.h"
#include "codegen/tuning/coop.h"
#include "codegen/tuning/gemm.h"
#include "codegen/tuning/tuning.h"
#include "graph/builder.h"
#include "graph/interpreter.h"
#include "tests/support/compiled_kernel.h"
#include "tests/support/gpu_runner.h"
#include "tests/support/graph_values.h"
#include "tests/support/vk_test_env.h"

namespace doppler {
namespace {

using codegen::tuning::ChooseGemm;
using codegen::tuning::GemmConfig;
using codegen::tuning::Override;

// Sets DOPPLER_TUNE for one scope and restores the environment after.
class ScopedTune {
 public:
  explicit ScopedTune(const char* value) {
    if (const char* old = std::getenv("DOPPLER_TUNE")) old_ = old;
    setenv("DOPPLER_TUNE", value, 1);
  }
  ~ScopedTune() {
    if (old_) {
      setenv("DOPPLER_TUNE", old_->c_str(), 1);
    } else {
      unsetenv("DOPPLER_TUNE");
    }
  }

 private:
  std::optional<std::string> old_;
};

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

class TunedKernelTest : public vk::VkTest {};

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
    "coop.bm=256,coop.sm=64,coop.prefetch=0",         // the choice for large plain products
    "coop.bm=128,coop.sm=64,coop.bk=32",              // the choice for large gated products
    "coop.bm=128,coop.sm=64,coop.bk=32,coop.prefetch=0",  // ... for large normalised ones
    "coop.bm=64,coop.bn=128,coop.sn=64",              // short tiles split over columns only (a batch)
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
    int64_t m, n, gates;
    bool norm;
    uint32_t shared;
    int64_t bm, bk, sm, prefetch;
  };
  for (const Case& c : {
           Case{512, 16384, 2, true, 49152, 128, 32, 64, 1},   // gated, 1,024 tall tiles: 64 x 32 blocks, slices of 32
           Case{64, 16384, 2, true, 49152, 64, 64, 32, 1},     // gated, 64 rows: short tiles
           Case{512, 4096, 1, true, 49152, 128, 32, 64, 0},    // normalised, 256 tall tiles: no read-ahead
           Case{512, 2048, 1, true, 49152, 128, 64, 32, 1},    // normalised, 128 tall tiles
           Case{512, 2048, 1, true, 24576, 128, 32, 32, 1},    // ... slices of 64 do not fit in 24 KiB
           Case{512, 4096, 1, false, 49152, 256, 64, 64, 0},   // plain, 128 tiles of 256 rows
           Case{512, 2048, 1, false, 49152, 128, 64, 32, 1},   // plain, 64 of 256 rows: 128
           Case{512, 512, 1, false, 49152, 64, 64, 32, 1},     // 32 tall tiles: short ones
           Case{64, 16384, 1, false, 49152, 64, 64, 32, 1},    // 64 rows: no taller tiles
           Case{128, 16384, 1, false, 49152, 128, 64, 32, 1}}) {  // 128 rows: no taller tiles
    codegen::TargetCaps caps = NvidiaCaps();
    caps.max_shared_memory = c.shared;
    absl::StatusOr<codegen::tuning::CoopConfig> got = codegen::tuning::ChooseCoop(caps, c.m, c.n, c.gates, c.norm);
    ASSERT_TRUE(got.ok()) << got.status();
    const std::string what = absl::StrCat(c.m, "x", c.n, " gates ", c.gates, " norm ", c.norm, " shared ", c.shared);
    EXPECT_EQ(got->bm, c.bm) << what;
    EXPECT_EQ(got->bk, c.bk) << what;
    EXPECT_EQ(got->sm, c.sm) << what;
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
    absl::StatusOr<codegen::tuning::CoopConfig> c = codegen::tuning::ChooseCoop(NvidiaCaps(), 512, 16384, 2, true);
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
}

// Every shape computes what the interpreter does, for rows that fill no tile (33, 100, 517) and
// one that does (64), several weight formats, a gated chain with a norm prologue and a residual add.
TEST_F(TunedKernelTest, EveryCoopShapeMatchesTheInterpreter) {
  if (!vk::TargetCapsOf(ctx().info()).coop_matrix_nv) GTEST_SKIP() << "no VK_NV_cooperative_matrix";
  for (const auto& [dtype, k] : {std::pair{graph::DType::kQ4_K, int64_t{768}}, std::pair{graph::DType::kQ6_K, int64_t{768}},
                                  std::pair{graph::DType::kQ8_0, int64_t{224}}, std::pair{graph::DType::kF16, int64_t{200}}}) {
    absl::StatusOr<graph::Graph> g = CoopGraph(dtype, k);
    ASSERT_TRUE(g.ok()) << g.status();
    test::RandomParams params(*g, 11);
    graph::Interpreter interp(params);
    for (const char* tune : kCoopTunes) {
      ScopedTune scoped(tune);
      for (int64_t bucket : {64, 640}) {
        absl::StatusOr<std::unique_ptr<test::GpuRunner>> gpu = test::GpuRunner::Create(ctx(), *g, bucket, params);
        ASSERT_TRUE(gpu.ok()) << tune << ": " << gpu.status();
        int coop = 0;
        for (const vk::PlannedDispatch& d : (*gpu)->plan().dispatches()) coop += d.variant.rfind("coop.", 0) == 0;
        EXPECT_EQ(coop, 2) << tune;
        for (int64_t rows : bucket == 64 ? std::vector<int64_t>{33, 64} : std::vector<int64_t>{100, 517}) {
          const std::map<std::string, graph::Tensor> inputs = {{"x", test::RandomRows(rows, k, 3 + rows)},
                                                               {"r", test::RandomRows(rows, 75, 4 + rows)}};
          absl::StatusOr<std::map<std::string, graph::Tensor>> want = interp.Run(*g, inputs, 0);
          ASSERT_TRUE(want.ok()) << want.status();
          absl::StatusOr<std::map<std::string, graph::Tensor>> got = (*gpu)->Run(inputs, 0);
          ASSERT_TRUE(got.ok()) << got.status();
          for (const char* out : {"y", "z"}) {
            EXPECT_LE(test::RelativeError(got->at(out).f, want->at(out).f), 3e-3)
                << graph::Name(dtype) << " " << tune << " rows " << rows << " " << out;
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace doppler
