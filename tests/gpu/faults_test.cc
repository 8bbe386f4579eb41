// Injected faults travel as Status: every enqueue, a lost device, and the
// --inject_faults spec; the environment injects nothing.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/transpose.h"
#include "cpu/cpu_sorter.h"
#include "gpu/opencl_engine.h"
#include "tests/opencl_test_util.h"
#include "tests/sort_check.h"

namespace sortd::gpu {
namespace {

using sortd::testing::CheckSort;
using sortd::testing::Extra;
using sortd::testing::KeyOf;
using sortd::testing::Shape;
using ::testing::HasSubstr;

TEST(FaultInjection, EveryEnqueueFailureTravelsAsStatus) {
  // Count the enqueues of one sort with payload and permutation, then fail
  // each of them in turn on a fresh engine.
  const std::vector<int64_t> keys =
      sortd::testing::Generate<int64_t>(Shape::kRandom, 3000, 8);
  std::vector<uint64_t> values(keys.size(), 7);
  auto run = [&](OpenClEngine& engine) {
    std::vector<int64_t> out(keys.size());
    std::vector<uint64_t> vout(keys.size());
    std::vector<uint32_t> perm(keys.size());
    SortJob job{.key_type = KeyType::kI64,
                .count = keys.size(),
                .keys = reinterpret_cast<const std::byte*>(keys.data()),
                .value_type = ValueType::kU64,
                .values = reinterpret_cast<const std::byte*>(values.data()),
                .keys_out = reinterpret_cast<std::byte*>(out.data()),
                .values_out = reinterpret_cast<std::byte*>(vout.data()),
                .permutation_out = reinterpret_cast<std::byte*>(perm.data())};
    return engine.Sort(job);
  };
  int failures = 0;
  // The engines share a kernel cache: each is built once, not per engine.
  const std::string cache = TempDir("fault_cache");
  for (long at = 1; at < 200; ++at) {
    OpenClEngine::Options options = CpuDeviceWithCache(cache);
    options.faults.enqueue = at;
    auto engine = OpenClEngine::Create(options);
    ASSERT_TRUE(engine.ok()) << engine.status();
    absl::Status s = run(**engine);
    if (s.ok()) break;  // past the last enqueue of this sort
    ++failures;
    EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
    EXPECT_THAT(s.message(), HasSubstr("injected fault at enqueue"));
    // The engine stays usable after a failed run.
    EXPECT_TRUE(run(**engine).ok()) << "after fault at " << at;
  }
  EXPECT_GT(failures, 10);
}

TEST(FaultInjection, LostDeviceMakesTheEngineUnhealthy) {
  OpenClEngine::Options options = CpuDevice();
  options.faults.device_lost = 2;
  auto engine = OpenClEngine::Create(options);
  ASSERT_TRUE(engine.ok()) << engine.status();
  const auto keys = sortd::testing::Generate<uint32_t>(Shape::kRandom, 3000, 1);
  CheckSort(**engine, keys, false, Extra::kNone, "before the loss");
  EXPECT_TRUE((*engine)->healthy());
  std::vector<uint32_t> out(keys.size());
  SortJob job{.key_type = KeyType::kU32,
              .count = keys.size(),
              .keys = reinterpret_cast<const std::byte*>(keys.data()),
              .keys_out = reinterpret_cast<std::byte*>(out.data())};
  absl::Status s = (*engine)->Sort(job);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_THAT(s.message(), HasSubstr("CL_DEVICE_NOT_AVAILABLE"));
  EXPECT_FALSE((*engine)->healthy());
}

// Fault injection is set through Options (sortd: --inject_faults) only:
// the environment variables that once armed it do nothing.
TEST(FaultInjection, TheEnvironmentInjectsNothing) {
  const char* vars[] = {"SORTD_FAULT_ENQUEUE", "SORTD_FAULT_DEVICE_LOST",
                        "SORTD_FAULT_OOM"};
  for (const char* v : vars) setenv(v, "1", 1);
  setenv("SORTD_FAULT_ENQUEUE_STICKY", "1", 1);
  auto engine = OpenClEngine::Create(CpuDevice());
  setenv("SORTD_FAULT_BUILD", "1", 1);
  auto built = OpenClEngine::Create(CpuDevice());
  for (const char* v : vars) unsetenv(v);
  unsetenv("SORTD_FAULT_ENQUEUE_STICKY");
  unsetenv("SORTD_FAULT_BUILD");
  ASSERT_TRUE(engine.ok()) << engine.status();
  EXPECT_TRUE(built.ok()) << built.status();
  const auto keys = sortd::testing::Generate<uint32_t>(Shape::kRandom, 3000, 2);
  for (int i = 0; i < 3; ++i) {
    CheckSort(**engine, keys, i == 1, Extra::kPermutation, "env faults");
  }
  EXPECT_TRUE((*engine)->healthy());
}

TEST(FaultInjection, SpecParsesIntoOptions) {
  FaultSpec o;
  ASSERT_TRUE(ParseFaultSpec("", &o).ok());
  EXPECT_FALSE(o.any());
  ASSERT_TRUE(
      ParseFaultSpec(
          "enqueue=2,stage=upload,sticky,device_lost=3,oom=4,build=1", &o)
          .ok());
  EXPECT_EQ(o.enqueue, 2);
  EXPECT_EQ(o.stage, "upload");
  EXPECT_TRUE(o.sticky);
  EXPECT_EQ(o.device_lost, 3);
  EXPECT_EQ(o.oom, 4);
  EXPECT_TRUE(o.build);
  EXPECT_TRUE(o.any());
  ASSERT_TRUE(ParseFaultSpec("oom=7", &o).ok());  // replaces, not adds
  EXPECT_EQ(o.enqueue, 0);
  EXPECT_FALSE(o.sticky);
  EXPECT_TRUE(o.stage.empty());
  EXPECT_EQ(o.oom, 7);
  EXPECT_TRUE(o.any());
  ASSERT_TRUE(ParseFaultSpec("host_oom=2", &o).ok());
  EXPECT_EQ(o.host_oom, 2);
  EXPECT_EQ(o.oom, 0);
  EXPECT_EQ(o.device, -1);  // every engine
  EXPECT_TRUE(o.any());
  ASSERT_TRUE(ParseFaultSpec("enqueue=1,sticky,device=1", &o).ok());
  EXPECT_EQ(o.device, 1);
  ASSERT_TRUE(ParseFaultSpec("device=0,device_lost=2", &o).ok());
  EXPECT_EQ(o.device, 0);
  EXPECT_EQ(o.device_lost, 2);
  for (const char* bad :
       {"enqueue", "enqueue=0", "enqueue=x", "enqueue=-1", "sticky=1",
        "stage=", "build=2", "lost=1", "sticky", "stage=upload", "host_oom=0",
        "device=1", "oom=1,device=-1", "oom=1,device=x", "oom=1,device="}) {
    FaultSpec b;
    const absl::Status s = ParseFaultSpec(bad, &b);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(s.message(), HasSubstr("--inject_faults")) << bad;
    EXPECT_FALSE(b.any()) << bad;
  }
}

}  // namespace
}  // namespace sortd::gpu
