// UsableCores: the affinity mask capped by cgroup CPU quotas, over fake
// cgroup trees (v2 nested paths, v1's cpu controller) and malformed files.
#include "server/usable_cores.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace sortd {
namespace {

TEST(UsableCores, CpuMaxRoundsQuotasUp) {
  EXPECT_EQ(CoresOfCpuMax("400000 100000\n"), 4);
  EXPECT_EQ(CoresOfCpuMax("150000 100000"), 2);
  EXPECT_EQ(CoresOfCpuMax("50000 100000"), 1);
  EXPECT_EQ(CoresOfCpuMax("max 100000\n"), std::nullopt);
  EXPECT_EQ(CoresOfCpuMax(""), std::nullopt);
  EXPECT_EQ(CoresOfCpuMax("100000"), std::nullopt);
  EXPECT_EQ(CoresOfCpuMax("-5 100000"), std::nullopt);
  EXPECT_EQ(CoresOfCpuMax("100000 0"), std::nullopt);
  EXPECT_EQ(CoresOfCfsQuota("200000\n", "100000\n"), 2);
  EXPECT_EQ(CoresOfCfsQuota("-1", "100000"), std::nullopt);
  EXPECT_EQ(CoresOfCfsQuota("x", "100000"), std::nullopt);
}

TEST(UsableCores, CgroupV2PathIsTheUnifiedLine) {
  EXPECT_EQ(CgroupV2Path("0::/kubepods/pod1/c1\n"), "/kubepods/pod1/c1");
  EXPECT_EQ(CgroupV2Path("0::/\n"), "/");
  EXPECT_EQ(CgroupV2Path("12:cpu,cpuacct:/docker/ab\n1:name=systemd:/\n"),
            std::nullopt);
}

class FakeCgroups : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = ::testing::TempDir() + "/usable_cores_" + std::to_string(getpid());
    std::filesystem::remove_all(root_);
    std::filesystem::create_directories(root_);
  }
  void TearDown() override { std::filesystem::remove_all(root_); }
  void Write(const std::string& rel, const std::string& text) {
    const std::filesystem::path p = root_ + rel;
    std::filesystem::create_directories(p.parent_path());
    std::ofstream(p) << text;
  }
  std::string root_;
};

TEST_F(FakeCgroups, TheTightestLimitOfThePathAndItsAncestorsWins) {
  Write("/cpu.max", "max 100000\n");
  Write("/kubepods/cpu.max", "800000 100000\n");
  Write("/kubepods/pod1/cpu.max", "300000 100000\n");
  Write("/kubepods/pod1/c1/cpu.max", "max 100000\n");
  EXPECT_EQ(UsableCoresUnder(root_, 64, "0::/kubepods/pod1/c1\n"), 3);
  // The affinity mask is tighter still.
  EXPECT_EQ(UsableCoresUnder(root_, 2, "0::/kubepods/pod1/c1\n"), 2);
  // Inside a container's cgroup namespace: the limit at the root.
  Write("/cpu.max", "250000 100000\n");
  EXPECT_EQ(UsableCoresUnder(root_, 64, "0::/\n"), 3);
}

TEST_F(FakeCgroups, NoQuotaOrNoFilesLeaveTheAffinity) {
  EXPECT_EQ(UsableCoresUnder(root_, 16, "0::/a/b\n"), 16);
  Write("/a/cpu.max", "garbage");
  EXPECT_EQ(UsableCoresUnder(root_, 16, "0::/a/b\n"), 16);
  EXPECT_EQ(UsableCoresUnder(root_, 0, ""), 1);
}

TEST_F(FakeCgroups, CgroupV1QuotaOfTheCpuController) {
  Write("/cpu/cpu.cfs_quota_us", "600000\n");
  Write("/cpu/cpu.cfs_period_us", "100000\n");
  EXPECT_EQ(UsableCoresUnder(root_, 32, "4:cpu,cpuacct:/docker/x\n"), 6);
  Write("/cpu/cpu.cfs_quota_us", "-1\n");
  EXPECT_EQ(UsableCoresUnder(root_, 32, "4:cpu,cpuacct:/docker/x\n"), 32);
  // The process's own cgroup under the controller, also on a hybrid host
  // whose unified line names a cgroup without cpu.max.
  Write("/cpu/docker/x/cpu.cfs_quota_us", "300000\n");
  Write("/cpu/docker/x/cpu.cfs_period_us", "100000\n");
  EXPECT_EQ(CgroupV1CpuPath("4:cpu,cpuacct:/docker/x\n0::/user.slice\n"),
            "/docker/x");
  EXPECT_EQ(
      UsableCoresUnder(root_, 32, "4:cpu,cpuacct:/docker/x\n0::/user.slice\n"),
      3);
}

TEST(UsableCores, ThisProcessHasAtLeastOne) {
  EXPECT_GE(UsableCores(), 1);
  EXPECT_LE(UsableCores(), static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN)));
}

}  // namespace
}  // namespace sortd
