#include "codegen/tuning/gemm.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "codegen/emitters.h"
#include "codegen/tuning/tuning.h"

namespace doppler::codegen::tuning {
namespace {

// Tiles 64 columns wide where the grid still has this many workgroups (about one per
// multiprocessor of a large GPU), else narrower: a narrow grid leaves most of the GPU idle
// (bench/RESULTS.md, "Tuning reasons moved out of the code": 11.0 → 8.6 ms on the H100).
constexpr int64_t kMinWideTiles = 128;

}  // namespace

int64_t GemmSharedBytes(const GemmConfig& config, int64_t gates) {
  const int64_t bk = config.bk, bn = config.bn;
  return 16 * bk * (64 / 4 + 1) + 16 * gates * bk * (bn / 4 + 1) + (bn < 64 ? 4 * 64 * bn * gates : 0) +
         4 * 64 * (bk / 8);
}

absl::StatusOr<GemmConfig> ChooseGemm(const TargetCaps& caps, int64_t m, int64_t n, int64_t gates) {
  GemmConfig c;
  const int64_t row_tiles = CeilDiv(m, 64);
  // Width: 64 unless the grid would be small (kMinWideTiles).
  while (c.bn > 16 && int64_t{CeilDiv(n, c.bn)} * row_tiles < kMinWideTiles) c.bn /= 2;
  // A narrow tile's groups' sums must fit in shared memory beside slices of 16; else the next width.
  while (c.bn < 64 && GemmSharedBytes({c.bn, 16}, gates) > caps.max_shared_memory) c.bn *= 2;
  // Slices of 32 where shared memory has room: half the rounds of staging, each waiting on its loads.
  c.bk = GemmSharedBytes({c.bn, 32}, gates) <= caps.max_shared_memory ? 32 : 16;

  absl::StatusOr<std::optional<int64_t>> bn = Override("gemm", "bn");
  if (!bn.ok()) return bn.status();
  absl::StatusOr<std::optional<int64_t>> bk = Override("gemm", "bk");
  if (!bk.ok()) return bk.status();
  if (*bn) {
    if (**bn != 16 && **bn != 32 && **bn != 64) {
      return absl::InvalidArgumentError(absl::StrCat("DOPPLER_TUNE: gemm.bn=", **bn, " is not 16, 32 or 64"));
    }
    c.bn = **bn;
  }
  if (*bk) {
    if (**bk != 16 && **bk != 32) {
      return absl::InvalidArgumentError(absl::StrCat("DOPPLER_TUNE: gemm.bk=", **bk, " is not 16 or 32"));
    }
    c.bk = **bk;
  }
  if (GemmSharedBytes(c, gates) > caps.max_shared_memory) {
    return absl::InvalidArgumentError(absl::StrCat("DOPPLER_TUNE: gemm.bn=", c.bn, ", gemm.bk=", c.bk, " need ",
                                                   GemmSharedBytes(c, gates), " bytes of shared memory; the device has ",
                                                   caps.max_shared_memory));
  }
  return c;
}

}  // namespace doppler::codegen::tuning
