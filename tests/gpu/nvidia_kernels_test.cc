// The kernels production runs on NVIDIA GPUs compiled here, without a GPU:
// every radix and bitonic build that the nvidia-ptx policy makes, with the
// engine's own build options, through clang's OpenCL C front end to NVPTX
// assembly. This is what catches an edit that breaks the PTX paths
// (ballots, shuffles, warp barriers, the status prefetch), which PoCL never
// compiles. Whether the PTX runs correctly is for the kernel suite on a GPU
// (bench/device-run.sh).
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gpu/kernel_sources.h"
#include "gpu/policy.h"
#include "gtest/gtest.h"
#include "tests/clang_kernels.h"
#include "tests/fake_devices.h"

namespace sortd::gpu {
namespace {

class NvidiaKernels : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!testing::ClangKernels::Available()) {
      GTEST_SKIP() << "clang is not installed (scripts/install-deps.sh "
                      "installs it)";
    }
    clang_ = std::make_unique<testing::ClangKernels>("sortd-nvptx");
  }

  // The PTX of program `name` built with `options`; fails the test (and
  // returns "") when clang refuses it. -fasm: the kernels' inline PTX;
  // -fgnu89-inline: every `inline` function gets a definition of its own,
  // so the PTX of those clang does not inline is there to check too.
  std::string CompileToPtx(const std::string& name,
                           const std::string& options) {
    return clang_->Compile(name,
                           "-cl-std=CL1.2 -target nvptx64-nvidia-nvcl -Xclang "
                           "-finclude-default-header -fasm -fgnu89-inline -S",
                           options, ".ptx");
  }

  std::unique_ptr<testing::ClangKernels> clang_;
};

TEST_F(NvidiaKernels, EveryRadixBuildOfTheNvidiaPolicyCompilesToPtx) {
  const EnginePolicy p = EnginePolicy::For(H100Info());
  ASSERT_EQ(p.name, "nvidia-ptx");
  ASSERT_TRUE(p.CheckFits(H100Info()).ok()) << p.CheckFits(H100Info());
  for (int bits : {32, 64}) {
    for (bool with_index : {false, true}) {
      for (int items : {p.radix.Items(bits, with_index), p.radix.small_items}) {
        const std::string options =
            RadixBuildOptions(p.radix, bits, with_index, items);
        SCOPED_TRACE(options);
        const std::string ptx = CompileToPtx("radix_sort", options);
        // The PTX paths are in: warp barriers and shuffles everywhere,
        // ballots where the policy ranks by them, the status prefetch.
        std::vector<std::string> want = {"bar.warp.sync", "shfl.sync",
                                         "prefetch.global.L2"};
        if (p.radix.ranking == TileRanking::kWarpBallots) {
          want.push_back("vote.sync.ballot");
        }
        for (const char* kernel :
             {"radix_encode", "radix_onesweep", "radix_scatter",
              "radix_segments", "radix_decode", "scan_blocks"}) {
          want.push_back(absl::StrCat(".entry ", kernel));
        }
        // The ranked pass with the late walk back: 32-bit keys only.
        if (p.radix.LateRanked(bits, with_index)) {
          want.push_back(".entry radix_late_onesweep");
        } else {
          EXPECT_FALSE(absl::StrContains(ptx, ".entry radix_late_onesweep"));
        }
        for (const std::string& w : want) {
          EXPECT_TRUE(absl::StrContains(ptx, w)) << "no " << w << " in the PTX";
        }
      }
    }
  }
  EXPECT_TRUE(p.radix.LateRanked(32, false));
  // The build of streaming key loads, for long arrays of 32-bit keys: the
  // same kernels, the passes' key loads with the hint.
  ASSERT_GT(p.radix.stream_keys_32_min, 0u);
  const std::string plain = CompileToPtx(
      "radix_sort",
      RadixBuildOptions(p.radix, 32, false, p.radix.Items(32, false)));
  const std::string stream = CompileToPtx(
      "radix_sort",
      RadixBuildOptions(p.radix, 32, false, p.radix.Items(32, false), true));
  EXPECT_FALSE(absl::StrContains(plain, "ld.global.cs"));
  for (const char* w :
       {"ld.global.cs.u32", ".entry radix_onesweep",
        ".entry radix_late_onesweep", ".entry radix_unordered_onesweep"}) {
    EXPECT_TRUE(absl::StrContains(stream, w)) << "no " << w << " in the PTX";
  }
}

TEST_F(NvidiaKernels, BitonicAndTransposeBuildsCompileToPtx) {
  const EnginePolicy p = EnginePolicy::For(H100Info());
  for (int bits : {32, 64}) {
    for (bool with_index : {false, true}) {
      const std::string ptx = CompileToPtx(
          "bitonic_sort", BitonicBuildOptions(p.bitonic, bits, with_index));
      EXPECT_TRUE(absl::StrContains(ptx, ".entry bitonic_sort_blocks"));
    }
  }
  EXPECT_TRUE(absl::StrContains(
      CompileToPtx("transpose", TransposeBuildOptions(p.transpose, "")),
      ".entry transpose32"));
}

}  // namespace
}  // namespace sortd::gpu
