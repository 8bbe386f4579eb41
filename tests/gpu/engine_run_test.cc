// One run of the OpenCL engine (gpu/engine_run.cc): the device times of
// one run an interval, every stage's time, the kernel span, and runs on
// several lanes at once kept apart.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gpu/opencl_engine.h"
#include "gpu/sort_plan.h"
#include "tests/engine_checks.h"
#include "tests/opencl_test_util.h"
#include "tests/sort_check.h"

namespace sortd::gpu {
namespace {

using sortd::testing::CheckSort;
using sortd::testing::Extra;
using sortd::testing::Shape;

// Sorts u32 keys on `engine` asking for its stage times (and its kernel
// span where `span` is set), checks the answer, and returns the stages.
StageTimes TimedSort(sortd::Sorter& engine, std::vector<uint32_t> keys,
                     double* span = nullptr) {
  std::vector<uint32_t> out(keys.size());
  StageTimes stages;
  SortJob job{.key_type = KeyType::kU32,
              .count = keys.size(),
              .keys = reinterpret_cast<const std::byte*>(keys.data()),
              .keys_out = reinterpret_cast<std::byte*>(out.data()),
              .stages = &stages,
              .kernel_span_seconds = span};
  EXPECT_TRUE(engine.Sort(job).ok());
  std::sort(keys.begin(), keys.end());
  EXPECT_EQ(out, keys);
  return stages;
}

// A run is timed by the device when none of its kind was within the
// profile interval; the others report only their host times, and sort as
// well. A run asked for its kernel span is always timed.
TEST(OpenClEngine, ProfilesOneRunAnInterval) {
  const int runs = 5;
  for (auto [interval, want] :
       {std::pair{absl::ZeroDuration(), runs},  // every run
        {absl::Hours(1), 1},                    // the first alone
        {absl::InfiniteDuration(), 0}}) {       // none
    OpenClEngine::Options options = CpuDevice();
    options.profile_interval = interval;
    auto engine = OpenClEngine::Create(options);
    ASSERT_TRUE(engine.ok()) << engine.status();
    int profiled = 0;
    for (int r = 0; r < runs; ++r) {
      SCOPED_TRACE(absl::StrCat(absl::FormatDuration(interval), " run ", r));
      // A radix sort on every policy (its passes report "scatter").
      const StageTimes stages = TimedSort(
          **engine,
          sortd::testing::Generate<uint32_t>(Shape::kRandom, 50000, 10 + r));
      std::map<std::string, int> seen;
      for (const StageTime& st : stages) ++seen[st.stage];
      EXPECT_EQ(seen["host_enqueue"], 1);
      EXPECT_EQ(seen["host_wait"], 1);
      const bool timed = seen.count("device_span") > 0;
      EXPECT_EQ(timed, seen.count("scatter") > 0) << "run " << r;
      EXPECT_EQ(timed, seen.count("upload") > 0) << "run " << r;
      profiled += timed;
    }
    EXPECT_EQ(profiled, want) << interval;

    // Asked for a span: timed whatever the interval.
    double span = -1;
    TimedSort(**engine,
              sortd::testing::Generate<uint32_t>(Shape::kRandom, 5000, 99),
              &span);
    EXPECT_GT(span, 0.0) << interval;
  }
}

// Each algorithm reports its own stages, from profiling events.
TEST(OpenClEngine, ReportsStageTimes) {
  using A = sortd::gpu::SortAlgorithm;
  // Radix keys-only sorts have no transform stage: the first pass orders
  // the raw keys as it reads them and the last stores them raw.
  for (auto [algorithm, kernel_stages] :
       {std::pair{A::kRadix,
                  std::vector<std::string>{"histogram", "scan", "scatter"}},
        {A::kBitonic,
         std::vector<std::string>{"transform", "local_sort", "merge"}}}) {
    OpenClEngine::Options options = CpuDevice();
    options.algorithm = algorithm;
    auto engine = OpenClEngine::Create(options);
    ASSERT_TRUE(engine.ok()) << engine.status();
    const StageTimes stages = TimedSort(
        **engine, sortd::testing::Generate<uint32_t>(Shape::kRandom, 10000, 1));
    std::vector<std::string> names;
    for (const StageTime& st : stages) {
      names.push_back(st.stage);
      EXPECT_GE(st.seconds, 0.0);
    }
    std::vector<std::string> want = {"upload", "download"};
    want.insert(want.end(), kernel_stages.begin(), kernel_stages.end());
    EXPECT_THAT(names, ::testing::IsSupersetOf(want));
    if (algorithm == A::kRadix) {
      EXPECT_THAT(names, ::testing::Not(::testing::Contains("transform")));
    }
    // The run's own times: the host's wall time encloses the device's span
    // of every command, which encloses the commands of one in-order queue.
    std::map<std::string, double> t;
    for (const StageTime& st : stages) t[st.stage] += st.seconds;
    ASSERT_TRUE(t.count("host_enqueue") && t.count("host_wait") &&
                t.count("device_span"));
    double commands = 0;
    for (const auto& [name, secs] : t) {
      if (name.rfind("host_", 0) != 0 && name != "device_span") {
        commands += secs;
      }
    }
    EXPECT_GT(t["device_span"], 0.0);
    EXPECT_GE(t["device_span"] * 1.01, commands);
    EXPECT_GE((t["host_enqueue"] + t["host_wait"]) * 1.01, t["device_span"]);
  }
}

// The kernel span runs from the first kernel's start to the last one's
// end: at least the kernels' summed durations on an in-order queue, at
// most the call's wall time; left alone without stage times.
TEST(OpenClEngine, ReportsKernelSpan) {
  const auto keys =
      sortd::testing::Generate<uint32_t>(Shape::kRandom, 200000, 3);
  std::vector<uint32_t> out(keys.size());
  StageTimes stages;
  double span = -1;
  SortJob job{.key_type = KeyType::kU32,
              .count = keys.size(),
              .keys = reinterpret_cast<const std::byte*>(keys.data()),
              .keys_out = reinterpret_cast<std::byte*>(out.data()),
              .kernel_span_seconds = &span};
  ASSERT_TRUE(Engine().Sort(job).ok());
  EXPECT_EQ(span, -1);
  job.stages = &stages;
  const absl::Time start = absl::Now();
  ASSERT_TRUE(Engine().Sort(job).ok());
  const double wall = absl::ToDoubleSeconds(absl::Now() - start);
  double kernels = 0;
  for (const StageTime& st : stages) {
    // The commands other than transfers (not the run's host times or its
    // span of every command).
    if (st.stage != "upload" && st.stage != "download" &&
        st.stage.rfind("host_", 0) != 0 && st.stage != "device_span") {
      kernels += st.seconds;
    }
  }
  EXPECT_GT(kernels, 0);
  EXPECT_GE(span, kernels * 0.999);
  EXPECT_LE(span, wall);
  EXPECT_TRUE(std::is_sorted(out.begin(), out.end()));
}

// Runs from several threads at once share the engine's lanes (queues,
// staging rings, kernel objects): every answer is still right.
TEST(OpenClEngine, ConcurrentRunsOnSeveralLanesAreIndependent) {
  OpenClEngine::Options options = CpuDevice();
  options.lanes = 3;
  auto engine = OpenClEngine::Create(options);
  ASSERT_TRUE(engine.ok()) << engine.status();
  std::vector<std::thread> threads;
  for (int t = 0; t < 6; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 4; ++i) {
        const size_t n = 1000 + 3001 * ((t + i) % 4);
        const auto keys =
            testing::Generate<float>(testing::Shape::kRandom, n, t * 10 + i);
        CheckSort(**engine, keys, (t + i) % 2, Extra::kU64ValuesAndPermutation,
                  absl::StrCat("thread ", t, " run ", i));
        const auto wide =
            testing::Generate<int64_t>(testing::Shape::kFewDistinct, n, t + i);
        CheckSegmented(**engine, wide,
                       {0, static_cast<uint32_t>(n / 5),
                        static_cast<uint32_t>(n / 2), static_cast<uint32_t>(n)},
                       t % 2, true);
      }
    });
  }
  for (std::thread& t : threads) t.join();
}

}  // namespace
}  // namespace sortd::gpu
