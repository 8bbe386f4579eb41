// Sorting in runs (server/runs.h): every key type, both orders, payloads
// and permutations, over generated shapes and run counts, against the
// reference stable sort; and an engine error on any run fails the sort.
#include "server/runs.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cpu/cpu_sorter.h"
#include "tests/reference.h"
#include "tests/sort_check.h"

namespace sortd {
namespace {

using testing::Shape;

// The CPU path as the "device", counting its calls and able to fail the
// n-th one.
class CountingSorter : public Sorter {
 public:
  ExecutionPath path() const override { return ExecutionPath::kGpu; }
  std::string device_name() const override { return "counting"; }
  absl::Status Sort(const SortJob& job) override {
    const int call = ++calls;
    size_t seen = largest.load();
    while (job.count > seen &&
           !largest.compare_exchange_weak(seen, job.count)) {
    }
    if (call == fail_at) return absl::ResourceExhaustedError("injected");
    return cpu_.Sort(job);
  }
  absl::Status Transpose(const TransposeJob& job) override {
    return cpu_.Transpose(job);
  }
  CpuSorter cpu_{{.threads = 2}};
  std::atomic<int> calls{0};
  std::atomic<size_t> largest{0};
  int fail_at = 0;
};

template <typename K>
void CheckRuns(Shape shape, size_t n, size_t run_keys, bool desc, bool values) {
  SCOPED_TRACE(absl::StrCat(sizeof(K), "-byte ", testing::ShapeName(shape),
                            " n=", n, " runs of ", run_keys,
                            desc ? " desc" : "", values ? " values" : ""));
  const std::vector<K> keys = testing::Generate<K>(shape, n, n + run_keys);
  std::vector<uint64_t> vals(n);
  for (size_t i = 0; i < n; ++i) vals[i] = i * 0x9E3779B97F4A7C15ull;
  std::vector<K> out(n);
  std::vector<uint64_t> vals_out(n);
  std::vector<uint32_t> perm(n);
  SortJob job;
  job.key_type = testing::KeyTypeOf<K>();
  job.order = desc ? Order::kDescending : Order::kAscending;
  job.count = n;
  job.keys = reinterpret_cast<const std::byte*>(keys.data());
  job.keys_out = reinterpret_cast<std::byte*>(out.data());
  if (values) {
    job.value_type = ValueType::kU64;
    job.values = reinterpret_cast<const std::byte*>(vals.data());
    job.values_out = reinterpret_cast<std::byte*>(vals_out.data());
  }
  job.permutation_out = reinterpret_cast<std::byte*>(perm.data());
  StageTimes stages;
  job.stages = &stages;
  CountingSorter engine;
  int runs = 0;
  ASSERT_TRUE(SortInRuns(engine, job, run_keys, &runs).ok());
  const size_t want_runs = n <= run_keys ? 1 : (n + run_keys - 1) / run_keys;
  EXPECT_EQ(runs, static_cast<int>(want_runs));
  EXPECT_EQ(engine.calls.load(), static_cast<int>(want_runs));
  EXPECT_LE(engine.largest.load(), std::max(run_keys, size_t{1}));
  const std::vector<uint32_t> ref = testing::RefPermutation(keys, desc);
  ASSERT_EQ(perm, ref);
  for (size_t i = 0; i < n; ++i) {
    ASSERT_EQ(0, std::memcmp(&out[i], &keys[ref[i]], sizeof(K))) << i;
    if (values) {
      ASSERT_EQ(vals_out[i], vals[ref[i]]) << i;
    }
  }
  if (want_runs > 1) {
    ASSERT_FALSE(stages.empty());
    EXPECT_EQ(stages.back().stage, "host_merge");
  }
}

TEST(SortInRuns, EveryKeyTypeShapeAndOrderMatchesTheReference) {
  for (Shape shape : testing::kAllShapes) {
    for (bool desc : {false, true}) {
      CheckRuns<uint32_t>(shape, 100'003, 10'000, desc, false);
      CheckRuns<int32_t>(shape, 65'536, 16'384, desc, true);
      CheckRuns<float>(shape, 50'000, 7'777, desc, true);
      CheckRuns<uint64_t>(shape, 40'000, 9'999, desc, false);
      CheckRuns<int64_t>(shape, 30'001, 3'000, desc, true);
      CheckRuns<double>(shape, 33'333, 4'096, desc, true);
    }
  }
}

TEST(SortInRuns, BoundaryLengthsAndRunSizes) {
  for (size_t n : {size_t{0}, size_t{1}, size_t{2}, size_t{3}, size_t{17},
                   size_t{255}, size_t{256}, size_t{257}, size_t{262'145}}) {
    for (size_t run :
         {size_t{1}, size_t{2}, size_t{16}, size_t{256}, size_t{1} << 20}) {
      if (run == 1 && n > 300) continue;  // a run per key: slow, not new
      CheckRuns<uint32_t>(Shape::kFewDistinct, n, run, false, true);
      CheckRuns<double>(Shape::kSpecial, n, run, true, false);
    }
  }
}

TEST(SortInRuns, AnEngineErrorOnAnyRunFailsTheSort) {
  const size_t n = 10'000;
  std::vector<uint32_t> keys =
      testing::Generate<uint32_t>(Shape::kRandom, n, 1);
  std::vector<uint32_t> out(n);
  SortJob job;
  job.count = n;
  job.keys = reinterpret_cast<const std::byte*>(keys.data());
  job.keys_out = reinterpret_cast<std::byte*>(out.data());
  for (int fail_at = 1; fail_at <= 5; ++fail_at) {
    CountingSorter engine;
    engine.fail_at = fail_at;
    absl::Status s = SortInRuns(engine, job, 2'000, nullptr, 2);
    EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << fail_at;
  }
}

// Keys alone (no payload, no permutation) take the merges of keys alone:
// of two runs (MergeTwo, cut by SplitTwo) and of more. Past 2^18 keys the
// merge is cut into pieces at interior ranks, where equal keys straddle
// the cuts.
template <typename K>
void CheckKeysOnly(Shape shape, size_t n, size_t run_keys, bool desc) {
  SCOPED_TRACE(absl::StrCat(sizeof(K), "-byte keys alone ",
                            testing::ShapeName(shape), " n=", n, " runs of ",
                            run_keys, desc ? " desc" : ""));
  const std::vector<K> keys = testing::Generate<K>(shape, n, n ^ run_keys);
  std::vector<K> out(n);
  SortJob job;
  job.key_type = testing::KeyTypeOf<K>();
  job.order = desc ? Order::kDescending : Order::kAscending;
  job.count = n;
  job.keys = reinterpret_cast<const std::byte*>(keys.data());
  job.keys_out = reinterpret_cast<std::byte*>(out.data());
  CountingSorter engine;
  ASSERT_TRUE(SortInRuns(engine, job, run_keys).ok());
  EXPECT_EQ(engine.calls.load(),
            static_cast<int>((n + run_keys - 1) / run_keys));
  const std::vector<uint32_t> ref = testing::RefPermutation(keys, desc);
  for (size_t i = 0; i < n; ++i) {
    ASSERT_EQ(0, std::memcmp(&out[i], &keys[ref[i]], sizeof(K))) << i;
  }
}

TEST(SortInRuns, KeysAloneBeyondOnePieceOfTheMerge) {
  constexpr size_t n = 3 * (size_t{1} << 18) + 5;
  for (Shape shape : {Shape::kRandom, Shape::kFewDistinct, Shape::kAllEqual}) {
    for (bool desc : {false, true}) {
      CheckKeysOnly<uint32_t>(shape, n, n / 2 + 1, desc);  // two runs
      CheckKeysOnly<uint64_t>(shape, n, n / 3 + 1, desc);  // three runs
    }
  }
}

// Runs that are not sorted (a device that answered wrongly) must not make
// the merge read or write outside the arrays: it refuses them with the
// outputs untouched, or writes exactly the input's keys in some order.
// Under AddressSanitizer an access out of bounds fails the test.
TEST(MergeRuns, UnsortedRunsStayWithinTheArrays) {
  constexpr size_t n = 3 * (size_t{1} << 18) + 5;
  int refused = 0;
  for (size_t runs : {2, 3}) {
    for (Shape shape : {Shape::kRandom, Shape::kSorted, Shape::kReversed}) {
      for (bool keys_only : {true, false}) {
        SCOPED_TRACE(absl::StrCat(runs, " runs ", testing::ShapeName(shape),
                                  keys_only ? " keys" : " values"));
        // Runs given unsorted, as if sorted.
        std::vector<uint32_t> keys =
            testing::Generate<uint32_t>(shape, n, runs);
        if (shape == Shape::kSorted) {
          std::reverse(keys.begin(), keys.begin() + n / runs);
        }
        std::vector<uint32_t> vals(n), out(n, 0xABABABABu),
            vals_out(n, 0xABABABABu);
        for (size_t i = 0; i < n; ++i) vals[i] = static_cast<uint32_t>(i);
        SortJob in;
        in.key_type = KeyType::kU32;
        in.count = n;
        in.keys = reinterpret_cast<const std::byte*>(keys.data());
        SortJob to = in;
        to.keys_out = reinterpret_cast<std::byte*>(out.data());
        if (!keys_only) {
          in.value_type = to.value_type = ValueType::kU32;
          in.values = reinterpret_cast<const std::byte*>(vals.data());
          to.values_out = reinterpret_cast<std::byte*>(vals_out.data());
        }
        std::vector<size_t> bounds(runs + 1);
        for (size_t r = 0; r <= runs; ++r) bounds[r] = n * r / runs;
        const absl::Status s = MergeRuns(in, nullptr, bounds, to);
        if (!s.ok()) {
          ++refused;
          EXPECT_EQ(s.code(), absl::StatusCode::kInternal) << s;
          ASSERT_EQ(std::count(out.begin(), out.end(), 0xABABABABu),
                    static_cast<long>(n));
          continue;
        }
        std::vector<uint32_t> want = keys, got = out;
        std::sort(want.begin(), want.end());
        std::sort(got.begin(), got.end());
        ASSERT_EQ(got, want);
        if (!keys_only) {
          for (size_t i = 0; i < n; ++i) ASSERT_EQ(out[i], keys[vals_out[i]]);
        }
      }
    }
  }
  // Unsorted runs are refused where their cuts show it.
  EXPECT_GT(refused, 0);
}

}  // namespace
}  // namespace sortd
