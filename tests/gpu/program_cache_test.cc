// The program cache (gpu/program_cache.h): a second engine loads the
// binaries the first built, corrupt entries are rebuilt, and a build
// failure carries the compiler's log.
#include "gpu/program_cache.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "gpu/opencl_engine.h"
#include "tests/opencl_test_util.h"
#include "tests/sort_check.h"

namespace sortd::gpu {
namespace {

using sortd::testing::CheckSort;
using sortd::testing::Extra;
using sortd::testing::Shape;
using ::testing::HasSubstr;

TEST(ProgramCache, SecondEngineLoadsBinariesAndCorruptEntriesAreRebuilt) {
  const std::string dir = TempDir("kernel_cache");
  auto first = OpenClEngine::Create(CpuDeviceWithCache(dir));
  ASSERT_TRUE(first.ok()) << first.status();
  const int programs = (*first)->cache_stats().built_from_source;
  EXPECT_GE(programs, 9);  // radix and bitonic per width and index, transpose
  EXPECT_EQ((*first)->cache_stats().loaded_from_disk, 0);

  auto second = OpenClEngine::Create(CpuDeviceWithCache(dir));
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ((*second)->cache_stats().built_from_source, 0);
  EXPECT_EQ((*second)->cache_stats().loaded_from_disk, programs);

  // Corrupt every entry in a different way: truncate, flip a byte, garbage.
  int i = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    const std::string path = entry.path().string();
    const auto size = std::filesystem::file_size(path);
    if (i % 3 == 0) {
      std::filesystem::resize_file(path, size / 2);
    } else if (i % 3 == 1) {
      std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
      f.seekp(size - 10);
      f.put('\x5a');
    } else {
      std::ofstream(path, std::ios::binary | std::ios::trunc) << "garbage";
    }
    ++i;
  }
  ASSERT_EQ(i, programs);
  auto third = OpenClEngine::Create(CpuDeviceWithCache(dir));
  ASSERT_TRUE(third.ok()) << third.status();
  EXPECT_EQ((*third)->cache_stats().disk_entries_rejected, programs);
  EXPECT_EQ((*third)->cache_stats().built_from_source, programs);
  // It still sorts correctly, and the rewritten entries load again.
  CheckSort(**third, sortd::testing::Generate<float>(Shape::kSpecial, 3000, 3),
            false, Extra::kPermutation, "after corruption");
  auto fourth = OpenClEngine::Create(CpuDeviceWithCache(dir));
  ASSERT_TRUE(fourth.ok());
  EXPECT_EQ((*fourth)->cache_stats().loaded_from_disk, programs);
  std::filesystem::remove_all(dir);
}

TEST(ProgramCache, BuildFailureCarriesTheBuildLog) {
  auto device = FindDevice(CpuDevice().kind);
  ASSERT_TRUE(device.ok()) << device.status();
  cl::Context context(device->device);
  ProgramCache cache(context, *device, "", {});
  // radix_sort.cl needs RADIX_BITS, WG, ITEMS and HAS_INDEX too.
  auto program = cache.Get("radix_sort", "-DKEY_BITS=32");
  ASSERT_FALSE(program.ok());
  EXPECT_EQ(program.status().code(), absl::StatusCode::kInternal);
  EXPECT_THAT(program.status().message(), HasSubstr("building radix_sort.cl"));
  EXPECT_THAT(program.status().message(), HasSubstr("RADIX_BITS"));
  EXPECT_EQ(cache.Get("no_such_kernel", "").status().code(),
            absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace sortd::gpu
