// Shared Vulkan context for tests: created once per process (instance + device creation with the
// validation layer costs ~100 ms on lavapipe, too much per test), always with validation on,
// synchronization validation included (DOPPLER_SYNC_VALIDATION=0 leaves that out).
//
// Use the VkTest fixture: it fails the test cleanly when no context can be created, and checks
// after each test that the validation layer reported nothing during it.
#pragma once

#include "absl/status/statusor.h"
#include "backend_vk/context.h"
#include "codegen/kernel.h"
#include "gtest/gtest.h"

namespace doppler::vk {

// The process-wide context, or the error that prevented creating it (the same on every call).
absl::StatusOr<Context*> SharedTestContext();

// The process-wide context. Precondition: creation succeeded (VkTest::SetUp asserts that); if it
// did not, this prints the error and aborts, since there is no reference to return.
Context& TestContext();

// Fails the current test if `ctx` reported validation messages since `baseline`.
#define EXPECT_NO_VALIDATION_MESSAGES_SINCE(ctx, baseline) \
  EXPECT_EQ((ctx).validation_messages() - (baseline), 0)   \
      << "the Vulkan validation layer reported problems during this test (see stderr)"

class VkTest : public ::testing::Test {
 protected:
  void SetUp() override;
  void TearDown() override;
  Context& ctx() { return TestContext(); }
  // This device's capabilities but subgroup arithmetic: the kernels' portable variants.
  codegen::TargetCaps WithoutSubgroupArithmetic();

 private:
  int baseline_ = 0;
  bool have_context_ = false;
};

}  // namespace doppler::vk
