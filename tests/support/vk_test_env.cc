#include "support/vk_test_env.h"

#include "backend_vk/plan.h"

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

namespace doppler::vk {

absl::StatusOr<Context*> SharedTestContext() {
  // Deliberately never destroyed: tearing a device down from a static destructor races with the
  // validation layer's own static teardown at exit. The OS reclaims it.
  static const absl::StatusOr<Context*> ctx = []() -> absl::StatusOr<Context*> {
    ContextOptions options;
    options.validation = true;
    // Synchronization validation catches a missing barrier on lavapipe, where the CPU happens to
    // run dispatches in order and the bug would otherwise only show on a GPU.
    // DOPPLER_SYNC_VALIDATION=0 turns it off if it ever gets in the way.
    const char* sync = std::getenv("DOPPLER_SYNC_VALIDATION");
    options.sync_validation = sync == nullptr || std::string(sync) != "0";
    absl::StatusOr<std::unique_ptr<Context>> c = Context::Create(options);
    if (!c.ok()) return c.status();
    return c->release();
  }();
  return ctx;
}

Context& TestContext() {
  absl::StatusOr<Context*> ctx = SharedTestContext();
  if (!ctx.ok()) {
    std::fprintf(stderr, "no Vulkan test context: %s\n",
                 std::string(ctx.status().message()).c_str());
    std::abort();
  }
  return **ctx;
}

void VkTest::SetUp() {
  absl::StatusOr<Context*> c = SharedTestContext();
  ASSERT_TRUE(c.ok()) << "cannot create the Vulkan test context: " << c.status();
  have_context_ = true;
  baseline_ = (*c)->validation_messages();
}

void VkTest::TearDown() {
  if (have_context_) {
    EXPECT_NO_VALIDATION_MESSAGES_SINCE(TestContext(), baseline_);
  }
}

}  // namespace doppler::vk

namespace doppler::vk {

codegen::TargetCaps VkTest::WithoutSubgroupArithmetic() {
  codegen::TargetCaps caps = TargetCapsOf(ctx().info());
  caps.subgroup_arithmetic = false;
  return caps;
}

}  // namespace doppler::vk
