// The 32x32 bit-matrix transpose (gpu/passes/transpose.h) against the
// reference, in every variant the device builds.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "gpu/opencl_engine.h"
#include "tests/engine_checks.h"
#include "tests/opencl_test_util.h"

namespace sortd::gpu {
namespace {

TEST(OpenClEngine, TransposeMatchesReference) {
  for (size_t count :
       {size_t{1}, size_t{15}, size_t{16}, size_t{17}, size_t{5000}}) {
    StageTimes stages;
    CheckTranspose(Engine(), count, static_cast<unsigned>(count), &stages);
    ASSERT_FALSE(stages.empty());
    EXPECT_EQ(stages[1].stage, "transpose");
  }
}

// Each transpose kernel the device can run, against the reference; the
// sub-group one is skipped (and says so) where the device has no sub-group
// shuffles, as on PoCL 3 in CI.
TEST(OpenClEngine, EveryTransposeVariantMatchesReference) {
  using T = OpenClEngine::Options::Transpose;
  for (T variant : {T::kPortable, T::kSubgroup}) {
    OpenClEngine::Options options = CpuDevice();
    options.transpose = variant;
    auto engine = OpenClEngine::Create(options);
    if (variant == T::kSubgroup && !engine.ok()) {
      EXPECT_EQ(engine.status().code(), absl::StatusCode::kFailedPrecondition);
      std::printf("sub-group transpose not available here: %s\n",
                  std::string(engine.status().message()).c_str());
      continue;
    }
    ASSERT_TRUE(engine.ok()) << engine.status();
    std::printf("transpose kernel under test: %s\n",
                (*engine)->transpose_kernel());
    EXPECT_STREQ((*engine)->transpose_kernel(),
                 variant == T::kSubgroup ? "subgroup" : "portable");
    for (size_t count : {size_t{1}, size_t{2}, size_t{63}, size_t{64},
                         size_t{65}, size_t{3001}}) {
      CheckTranspose(**engine, count, static_cast<unsigned>(count) + 77);
    }
  }
}

}  // namespace
}  // namespace sortd::gpu
