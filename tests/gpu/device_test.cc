// Discovery of OpenCL devices (gpu/device.h) on the test device (PoCL's CPU
// device in CI; a GPU with SORTD_TEST_DEVICE=gpu): what is read about
// each, the index past the last refused, extensions matched whole, and a
// device split into parts of so many compute units where it partitions
// equally.
#include "gpu/device.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tests/opencl_test_util.h"

namespace sortd::gpu {
namespace {

using ::testing::HasSubstr;

TEST(Device, FoundDevicesDescribeThemselves) {
  const DeviceKind kind = CpuDevice().kind;
  absl::StatusOr<std::vector<Device>> all = FindDevices(kind);
  ASSERT_TRUE(all.ok()) << all.status();
  ASSERT_FALSE(all->empty());
  for (const Device& d : *all) {
    const DeviceInfo& info = d.info;
    EXPECT_EQ(info.is_gpu, kind == DeviceKind::kGpu) << info.name;
    EXPECT_FALSE(info.name.empty());
    EXPECT_FALSE(info.platform.empty());
    EXPECT_GT(info.compute_units, 0u) << info.name;
    EXPECT_GT(info.local_mem_bytes, 0u) << info.name;
    EXPECT_GE(info.global_mem_bytes, info.max_alloc_bytes) << info.name;
    EXPECT_GT(info.max_alloc_bytes, 0u) << info.name;
    EXPECT_GT(info.max_work_group, 0u) << info.name;
    const std::string line = info.ToString();
    EXPECT_THAT(line, HasSubstr(info.name));
    EXPECT_THAT(line, HasSubstr(absl::StrCat(info.compute_units, " CUs")));
  }
  absl::StatusOr<Device> first = FindDevice(kind);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->info.name, all->front().info.name);
  absl::StatusOr<Device> past = FindDevice(kind, all->size());
  EXPECT_EQ(past.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(past.status().message(),
              HasSubstr(absl::StrCat("there are ", all->size())));
}

TEST(Device, ExtensionsMatchWholeNames) {
  DeviceInfo info;
  info.extensions = "cl_khr_fp64 cl_khr_subgroups cl_intel_subgroups";
  EXPECT_TRUE(info.HasExtension("cl_khr_fp64"));
  EXPECT_TRUE(info.HasExtension("cl_intel_subgroups"));
  EXPECT_FALSE(info.HasExtension("cl_khr_fp6"));
  EXPECT_FALSE(info.HasExtension("subgroups"));
  EXPECT_FALSE(info.HasExtension("cl_khr_subgroup"));
  info.nv_compute_major = 9;
  info.name = "GPU";
  EXPECT_THAT(info.ToString(), HasSubstr(", compute 9)"));
}

TEST(Device, SplitIntoPartsOfSoManyComputeUnits) {
  absl::StatusOr<Device> device = FindDevice(CpuDevice().kind);
  ASSERT_TRUE(device.ok()) << device.status();
  const unsigned units = device->info.compute_units;
  // Not split: no size asked, or parts as large as the whole.
  for (unsigned asked : {0u, units, units + 1}) {
    const std::vector<Device> whole = SplitDevice(*device, false, asked);
    ASSERT_EQ(whole.size(), 1u) << asked;
    EXPECT_EQ(whole[0].info.name, device->info.name);
  }
  std::vector<cl_device_partition_property> kinds;
  device->device.getInfo(CL_DEVICE_PARTITION_PROPERTIES, &kinds);
  const bool equally = std::find(kinds.begin(), kinds.end(),
                                 CL_DEVICE_PARTITION_EQUALLY) != kinds.end();
  if (!equally || units < 2) {
    EXPECT_EQ(SplitDevice(*device, false, 1).size(), 1u);
    GTEST_SKIP() << device->info.name << " does not partition equally into "
                 << "parts of one compute unit";
  }
  const std::vector<Device> parts = SplitDevice(*device, false, 1);
  ASSERT_EQ(parts.size(), units);
  for (size_t i = 0; i < parts.size(); ++i) {
    EXPECT_EQ(parts[i].info.compute_units, 1u);
    EXPECT_EQ(parts[i].info.name, absl::StrCat(device->info.name, " [part ",
                                               i + 1, "/", units, "]"));
  }
}

}  // namespace
}  // namespace sortd::gpu
