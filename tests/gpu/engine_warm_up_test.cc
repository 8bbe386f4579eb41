// The engine's warm-up (gpu/engine_warm_up.cc): kernels that do not sort
// are refused before the engine serves.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <optional>

#include "gpu/opencl_engine.h"
#include "tests/opencl_test_util.h"

namespace sortd::gpu {
namespace {

using ::testing::HasSubstr;

// Create() verifies every warm-up answer against the reference whatever the
// build options: kernels that leave keys unsorted (-DITEMS=2: tiles shorter
// than the host's, in every build, the small-array one too) or sort keys but
// not their permutation (-DHAS_INDEX=0) are refused. Under the test device's
// policy and under the Intel policy (where the device has no sub-groups,
// its portable twin), whose one-launch passes and small-array tiles differ.
TEST(WarmUp, KernelsThatDoNotSortAreRefused) {
  const DeviceInfo& info = Engine().info();
  absl::StatusOr<EnginePolicy> intel =
      EnginePolicy::Named("intel-subgroups", info);
  ASSERT_TRUE(intel.ok()) << intel.status();
  if (!BestSubgroupOps(info)) intel->radix.ranking = TileRanking::kWarpEmulated;
  for (const std::optional<EnginePolicy>& policy :
       {std::optional<EnginePolicy>(), std::optional<EnginePolicy>(*intel)}) {
    for (const char* extra : {"-DITEMS=2", "-DHAS_INDEX=0"}) {
      SCOPED_TRACE(policy ? policy->name : "the device's policy");
      OpenClEngine::Options options = CpuDevice();
      options.policy = policy;
      options.kernel_diagnostics.extra_options = extra;
      auto engine = OpenClEngine::Create(options);
      ASSERT_FALSE(engine.ok()) << extra;
      EXPECT_EQ(engine.status().code(), absl::StatusCode::kInternal) << extra;
      EXPECT_THAT(engine.status().message(), HasSubstr("warm-up")) << extra;
      EXPECT_THAT(engine.status().message(),
                  HasSubstr("differs from the reference"))
          << extra;
      EXPECT_THAT(engine.status().message(), HasSubstr(extra));
    }
  }
}

}  // namespace
}  // namespace sortd::gpu
