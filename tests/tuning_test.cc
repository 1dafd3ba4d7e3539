// Tuning as data (codegen/tuning/): DOPPLER_TUNE's entries, checked against the keys the families
// know; the tiled matmul's choice and its overrides, whose kernels still compute what the
// interpreter does.
#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <optional>
#include <string>

#include "codegen/kernel.h"
#include "codegen/tuning/gemm.h"
#include "codegen/tuning/tuning.h"
#include "graph/builder.h"
#include "graph/interpreter.h"
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
           {"gemm.bm=32", "unknown key 'gemm.bm' (known: gemm.bn, gemm.bk)"},
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

}  // namespace
}  // namespace doppler
