// Sorts cut across several devices (server/split_sort.h): every key type,
// both orders, payloads and permutations, over generated shapes and device
// counts, against the reference stable sort; balanced parts whatever the
// keys; and a part that fails leaves the outputs as they were.
#include "server/split_sort.h"

#include <gtest/gtest.h>
#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cpu/cpu_sorter.h"
#include "tests/reference.h"
#include "tests/sort_check.h"

namespace sortd {
namespace {

using testing::Extra;
using testing::Shape;

// The CPU path as a "device": counts its calls and the keys of its
// largest, and fails every call when told to.
class PartDevice : public Sorter {
 public:
  ExecutionPath path() const override { return ExecutionPath::kGpu; }
  std::string device_name() const override { return "part"; }
  absl::Status Sort(const SortJob& job) override {
    ++calls;
    size_t seen = largest.load();
    while (job.count > seen &&
           !largest.compare_exchange_weak(seen, job.count)) {
    }
    if (fail) return absl::UnavailableError("injected part failure");
    if (job.stages != nullptr) job.stages->push_back({"upload", 0.001});
    absl::Status s = cpu_.Sort(job);
    if (s.ok() && wrong) {
      // A device's wrong answer: its keys (u32 here) in reverse order.
      auto* out = reinterpret_cast<uint32_t*>(job.keys_out);
      std::reverse(out, out + job.count);
    }
    return s;
  }
  absl::Status Transpose(const TransposeJob& job) override {
    return cpu_.Transpose(job);
  }
  CpuSorter cpu_{{.threads = 1}};
  std::atomic<int> calls{0};
  std::atomic<size_t> largest{0};
  bool fail = false;
  bool wrong = false;
};

// Every sort cut across `devices` PartDevices, as one Sorter, so that the
// shared checks (tests/sort_check.h) apply.
class SplitSorter : public Sorter {
 public:
  explicit SplitSorter(size_t devices) {
    for (size_t i = 0; i < devices; ++i) {
      devices_.push_back(std::make_unique<PartDevice>());
      engines_.push_back(devices_.back().get());
    }
  }
  ExecutionPath path() const override { return ExecutionPath::kGpu; }
  std::string device_name() const override { return "split"; }
  absl::Status Sort(const SortJob& job) override {
    SortJob with_stages = job;
    StageTimes unused;
    with_stages.stages = &unused;
    absl::Status s = SplitSort(engines_, with_stages, &report, cache);
    if (s.ok() && job.count > 0) {
      EXPECT_EQ(report.parts_sorted, engines_.size());
      for (const StageTimes& st : report.stages) EXPECT_EQ(st.size(), 1u);
    }
    return s;
  }
  absl::Status Transpose(const TransposeJob&) override {
    return absl::UnimplementedError("not here");
  }
  PartDevice& device(size_t i) { return *devices_[i]; }
  SplitReport report;
  SplitScratchCache* cache = nullptr;

 private:
  std::vector<std::unique_ptr<PartDevice>> devices_;
  std::vector<Sorter*> engines_;
};

template <typename K>
void CheckShapes(size_t devices, size_t n) {
  for (Shape shape : {Shape::kRandom, Shape::kSorted, Shape::kReversed,
                      Shape::kAllEqual, Shape::kFewDistinct, Shape::kSpecial}) {
    const std::vector<K> keys = testing::Generate<K>(shape, n, n + devices);
    for (bool desc : {false, true}) {
      for (Extra extra : {Extra::kNone, Extra::kU64ValuesAndPermutation}) {
        SplitSorter split(devices);
        testing::CheckSort(
            split, keys, desc, extra,
            absl::StrCat(sizeof(K), "-byte ", testing::ShapeName(shape),
                         " n=", n, " devices=", devices, desc ? " desc" : "",
                         " ", testing::ExtraName(extra)));
        // Each device sorted one part, of its share and no more.
        for (size_t d = 0; d < devices; ++d) {
          EXPECT_EQ(split.device(d).calls.load(), 1);
          EXPECT_LE(split.device(d).largest.load(),
                    (n + devices - 1) / devices);
        }
      }
    }
  }
}

TEST(SplitSort, EveryKeyTypeShapeAndOrderMatchesTheReference) {
  for (size_t devices : {2, 3}) {
    CheckShapes<uint32_t>(devices, 20011);
    CheckShapes<int32_t>(devices, 5003);
    CheckShapes<float>(devices, 5003);
    CheckShapes<uint64_t>(devices, 5003);
    CheckShapes<int64_t>(devices, 5003);
    CheckShapes<double>(devices, 5003);
  }
}

TEST(SplitSort, TinyArraysAndManyDevices) {
  for (size_t devices : {1, 2, 4, 8}) {
    for (size_t n : {0, 1, 2, 3, 7, 8, 9, 1000}) {
      const std::vector<uint32_t> keys =
          testing::Generate<uint32_t>(Shape::kFewDistinct, n, n);
      SplitSorter split(devices);
      testing::CheckSort(split, keys, false, Extra::kNone,
                         absl::StrCat("n=", n, " devices=", devices));
      testing::CheckSort(split, keys, true, Extra::kPermutation,
                         absl::StrCat("n=", n, " devices=", devices, " perm"));
    }
  }
}

TEST(SplitSort, PartsAreBalancedWhateverTheCount) {
  for (size_t parts : {1, 2, 3, 5, 8}) {
    for (size_t count : {0u, 1u, 2u, 7u, 8u, 1000u, 1001u, 1u << 20}) {
      EXPECT_EQ(SplitBound(count, parts, 0), 0u);
      EXPECT_EQ(SplitBound(count, parts, parts), count);
      for (size_t i = 0; i < parts; ++i) {
        const size_t len =
            SplitBound(count, parts, i + 1) - SplitBound(count, parts, i);
        EXPECT_GE(len, count / parts) << count << " " << parts << " " << i;
        EXPECT_LE(len, (count + parts - 1) / parts);
      }
    }
  }
}

TEST(SplitSort, ScratchIsOneCopyOfTheOutputs) {
  std::byte dummy{};
  SortJob job{.key_type = KeyType::kU32, .count = 1000};
  EXPECT_EQ(SplitScratchBytes(job), 4000u);
  job.key_type = KeyType::kF64;
  job.value_type = ValueType::kU32;
  job.permutation_out = &dummy;
  EXPECT_EQ(SplitScratchBytes(job), 16000u);
}

// A part that fails fails the sort, and nothing has been written to the
// outputs: the caller can sort the array again elsewhere.
TEST(SplitSort, AFailedPartLeavesTheOutputsUntouched) {
  constexpr size_t n = 30000;
  const std::vector<uint32_t> keys =
      testing::Generate<uint32_t>(Shape::kRandom, n, 5);
  for (size_t failing = 0; failing < 3; ++failing) {
    SplitSorter split(3);
    split.device(failing).fail = true;
    std::vector<uint32_t> out(n, 0xABABABABu), perm(n, 0xABABABABu);
    SortJob job{.key_type = KeyType::kU32,
                .count = n,
                .keys = reinterpret_cast<const std::byte*>(keys.data()),
                .keys_out = reinterpret_cast<std::byte*>(out.data()),
                .permutation_out = reinterpret_cast<std::byte*>(perm.data())};
    SplitReport report;
    std::vector<Sorter*> engines = {&split.device(0), &split.device(1),
                                    &split.device(2)};
    const absl::Status s = SplitSort(engines, job, &report);
    EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
    EXPECT_EQ(report.parts_sorted, 2u);
    for (size_t i = 0; i < n; ++i) {
      ASSERT_EQ(out[i], 0xABABABABu) << i;
      ASSERT_EQ(perm[i], 0xABABABABu) << i;
    }
  }
}

// Arrays in a shared-memory region lie at any offset: inputs and outputs
// off every alignment still merge right (the streaming stores of the
// merge align themselves).
TEST(SplitSort, ArraysAtAnyAlignment) {
  constexpr size_t n = 50021;
  for (size_t shift : {1, 3, 4, 12}) {
    for (bool desc : {false, true}) {
      const std::vector<uint64_t> keys =
          testing::Generate<uint64_t>(Shape::kRandom, n, shift);
      std::vector<std::byte> in(n * 8 + 16), out(n * 8 + 16);
      std::memcpy(in.data() + shift, keys.data(), n * 8);
      SortJob job{.key_type = KeyType::kU64,
                  .order = desc ? Order::kDescending : Order::kAscending,
                  .count = n,
                  .keys = in.data() + shift,
                  .keys_out = out.data() + 16 - shift};
      SplitSorter split(2);
      ASSERT_TRUE(split.Sort(job).ok());
      std::vector<uint64_t> want = keys, got(n);
      std::sort(want.begin(), want.end());
      if (desc) std::reverse(want.begin(), want.end());
      std::memcpy(got.data(), out.data() + 16 - shift, n * 8);
      ASSERT_EQ(got, want) << "shift " << shift << (desc ? " desc" : "");
    }
  }
}

std::byte* Map(size_t bytes) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  EXPECT_NE(p, MAP_FAILED);
  return static_cast<std::byte*>(p);
}

// The cache keeps one mapping within its bound, the larger of two, and
// hands it out only for sorts it fits without holding more than twice
// what they need.
TEST(SplitScratchCache, KeepsOneMappingWithinItsBound) {
  constexpr size_t kMiB = size_t{1} << 20;
  SplitScratchCache cache(8 * kMiB);
  EXPECT_EQ(cache.Take(kMiB).first, nullptr);
  std::byte* four = Map(4 * kMiB);
  cache.Give(four, 4 * kMiB);
  EXPECT_EQ(cache.idle_bytes(), 4 * kMiB);
  EXPECT_EQ(cache.Take(5 * kMiB).first, nullptr);  // too small
  EXPECT_EQ(cache.Take(kMiB).first, nullptr);      // over twice as large
  const auto taken = cache.Take(3 * kMiB);
  EXPECT_EQ(taken.first, four);
  EXPECT_EQ(taken.second, 4 * kMiB);
  EXPECT_EQ(cache.idle_bytes(), 0u);
  EXPECT_EQ(cache.reused(), 1u);
  cache.Give(taken.first, taken.second);
  cache.Give(Map(16 * kMiB), 16 * kMiB);  // beyond the bound: unmapped
  EXPECT_EQ(cache.idle_bytes(), 4 * kMiB);
  cache.Give(Map(2 * kMiB), 2 * kMiB);  // smaller: unmapped
  EXPECT_EQ(cache.idle_bytes(), 4 * kMiB);
  cache.Give(Map(8 * kMiB), 8 * kMiB);  // larger: kept instead
  EXPECT_EQ(cache.idle_bytes(), 8 * kMiB);
  cache.Trim();
  EXPECT_EQ(cache.idle_bytes(), 0u);
  SplitScratchCache none(0);
  none.Give(Map(kMiB), kMiB);
  EXPECT_EQ(none.idle_bytes(), 0u);
}

// Sorts one after the other take the same scratch again, and sort right
// in it whatever the last sort left there.
TEST(SplitSort, ScratchIsTakenAgainFromTheCache) {
  SplitScratchCache cache(size_t{64} << 20);
  SplitSorter split(2);
  split.cache = &cache;
  for (uint64_t seed : {1, 2, 3}) {
    const std::vector<uint32_t> keys =
        testing::Generate<uint32_t>(Shape::kRandom, 100000, seed);
    testing::CheckSort(split, keys, seed == 2, Extra::kNone,
                       absl::StrCat("seed ", seed));
  }
  EXPECT_EQ(cache.reused(), 2u);
  EXPECT_EQ(cache.idle_bytes(), 400000u);
}

// Past 2^18 keys the host merge is cut into pieces at interior ranks
// (SplitTwo for two parts): many equal keys straddle every cut, and the
// payloads and permutation must follow their keys, in the stable order.
TEST(SplitSort, TwoPartsCutAtInteriorRanksAmongTies) {
  constexpr size_t n = 3 * (size_t{1} << 18) + 5;
  for (Shape shape : {Shape::kFewDistinct, Shape::kAllEqual}) {
    const std::vector<uint32_t> keys = testing::Generate<uint32_t>(shape, n, 7);
    for (Extra extra :
         {Extra::kU32Values, Extra::kU64ValuesAndPermutation, Extra::kNone}) {
      SplitSorter split(2);
      testing::CheckSort(split, keys, extra == Extra::kU32Values, extra,
                         absl::StrCat(testing::ShapeName(shape), " ",
                                      testing::ExtraName(extra)));
    }
  }
}

// No thread for a part or for faulting the scratch in (std::bad_alloc, or
// std::system_error) is no failure: the parts run in the caller's thread.
TEST(SplitSort, PartsRunInTheCallersThreadWithoutThreads) {
  const std::vector<uint32_t> keys =
      testing::Generate<uint32_t>(Shape::kRandom, 30011, 3);
  for (int refused : {1, 2, 3, 100}) {
    SplitSorter split(4);
    SetSplitThreadFailuresForTesting(refused);
    testing::CheckSort(split, keys, false, Extra::kU32Values,
                       absl::StrCat(refused, " thread starts refused"));
    SetSplitThreadFailuresForTesting(0);
    for (size_t d = 0; d < 4; ++d) EXPECT_EQ(split.device(d).calls.load(), 1);
  }
}

// A device that answers its part wrongly (not sorted) cannot make the
// merge read or write outside the arrays: the sort fails (INTERNAL, the
// outputs untouched, the caller sorts again elsewhere) or its output holds
// exactly the input's keys.
TEST(SplitSort, AnUnsortedPartStaysWithinTheArrays) {
  constexpr size_t n = 3 * (size_t{1} << 18) + 5;
  const std::vector<uint32_t> keys =
      testing::Generate<uint32_t>(Shape::kRandom, n, 11);
  for (size_t wrong = 0; wrong < 2; ++wrong) {
    SplitSorter split(2);
    split.device(wrong).wrong = true;
    std::vector<uint32_t> out(n, 0xABABABABu);
    SortJob job{.key_type = KeyType::kU32,
                .count = n,
                .keys = reinterpret_cast<const std::byte*>(keys.data()),
                .keys_out = reinterpret_cast<std::byte*>(out.data())};
    SplitReport report;
    std::vector<Sorter*> engines = {&split.device(0), &split.device(1)};
    const absl::Status s = SplitSort(engines, job, &report);
    if (!s.ok()) {
      EXPECT_EQ(s.code(), absl::StatusCode::kInternal) << s;
      ASSERT_EQ(std::count(out.begin(), out.end(), 0xABABABABu),
                static_cast<long>(n));
      continue;
    }
    std::vector<uint32_t> want = keys;
    std::sort(want.begin(), want.end());
    std::sort(out.begin(), out.end());
    ASSERT_EQ(out, want) << "part " << wrong << " wrong";
  }
}

TEST(SplitSort, NoDeviceIsRefused) {
  SortJob job{.key_type = KeyType::kU32, .count = 10};
  SplitReport report;
  EXPECT_EQ(SplitSort({}, job, &report).code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace sortd
