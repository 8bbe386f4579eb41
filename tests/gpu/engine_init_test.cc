// The OpenCL engine's set-up (gpu/engine_init.cc): policy overrides
// applied after the policy is chosen, and the path it names.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "gpu/opencl_engine.h"
#include "tests/opencl_test_util.h"
#include "tests/sort_check.h"

namespace sortd::gpu {
namespace {

using sortd::testing::CheckSort;
using sortd::testing::Extra;
using sortd::testing::Shape;
using ::testing::HasSubstr;

// Knobs changed after the policy is chosen (sortd's
// --kernel_policy_overrides); a bad one stops the engine with its name.
TEST(OpenClEngine, PolicyOverridesApplyAfterThePolicyIsChosen) {
  OpenClEngine::Options options = CpuDevice();
  options.policy_name = "cpu";
  // Sorts below 100000 keys run every pass, shared digits or not.
  options.policy_overrides =
      "radix.lookback=3,radix.pass=three-launch,radix.skip_check_min=100000";
  auto engine = OpenClEngine::Create(options);
  ASSERT_TRUE(engine.ok()) << engine.status();
  EXPECT_EQ((*engine)->policy().radix.lookback, 3);
  EXPECT_EQ((*engine)->policy().radix.skip_check_min, 100000u);
  EXPECT_THAT((*engine)->policy().name, HasSubstr("cpu"));
  for (Shape shape : {Shape::kRandom, Shape::kAllEqual, Shape::kFewDistinct}) {
    CheckSort(**engine, sortd::testing::Generate<uint32_t>(shape, 5000, 4),
              true, Extra::kPermutation, "overridden policy");
    CheckSort(**engine, sortd::testing::Generate<int64_t>(shape, 3000, 5),
              false, Extra::kU64ValuesAndPermutation, "overridden policy");
  }
  options.policy_overrides = "radix.no_such_knob=1";
  const absl::Status s = OpenClEngine::Create(options).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("no_such_knob"));
}

// An engine on the OpenCL CPU device says so: its work is not labelled as
// a GPU's.
TEST(OpenClEngine, PathNamesTheKindOfDevice) {
  EXPECT_EQ(Engine().path(), Engine().info().is_gpu
                                 ? ExecutionPath::kGpu
                                 : ExecutionPath::kOpenClCpu);
  if (!Engine().info().is_gpu) {
    EXPECT_STREQ(PathName(Engine().path()), "opencl-cpu");
  }
}

}  // namespace
}  // namespace sortd::gpu
