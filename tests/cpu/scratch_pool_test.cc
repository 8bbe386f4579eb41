// The CPU path's scratch pool (cpu/scratch_pool.h), through the sorter that
// takes its blocks: large sorts reuse scratch until trimmed, idle scratch
// stays within its budget, and concurrent sorts of mixed sizes share one
// pool.
#include "cpu/scratch_pool.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "cpu/cpu_sorter.h"
#include "tests/sort_check.h"

namespace sortd {
namespace {

using testing::CheckSort;
using testing::Extra;
using testing::Shape;

constexpr size_t kMiB = size_t{1} << 20;

// A sort's scratch (keys twice, and indices twice when there is a payload
// or a permutation) of 1 MiB or more comes from the sorter's pool and is
// reused by later sorts of the same or a somewhat smaller size; Trim frees
// it.
TEST(CpuSorterScratch, LargeSortsReuseScratchUntilTrimmed) {
  CpuSorter sorter({.threads = 2});
  auto stats = [&] { return sorter.scratch_stats(); };
  const std::vector<uint32_t> u32 =
      testing::Generate<uint32_t>(Shape::kRandom, kMiB, 31);
  // 2^20 u32 keys: 8 MiB of scratch.
  CheckSort(sorter, u32, false, Extra::kNone, "first 2^20");
  EXPECT_EQ(stats().allocated, 1u);
  EXPECT_EQ(stats().reused, 0u);
  EXPECT_EQ(stats().idle_bytes, 8 * kMiB);
  EXPECT_EQ(stats().in_use_bytes, 0u);
  CheckSort(sorter, u32, true, Extra::kNone, "second 2^20");
  EXPECT_EQ(stats().allocated, 1u);
  EXPECT_EQ(stats().reused, 1u);
  // 600,000 keys (under 5 MiB) take the 8 MiB block; 1000 keys (8 KB)
  // come from the allocator.
  CheckSort(sorter, testing::Generate<uint32_t>(Shape::kRandom, 600'000, 32),
            false, Extra::kNone, "600,000");
  CheckSort(sorter, testing::Generate<uint32_t>(Shape::kRandom, 1000, 33),
            false, Extra::kNone, "1000");
  EXPECT_EQ(stats().allocated, 1u);
  EXPECT_EQ(stats().reused, 2u);
  // 2^20 u64 keys with a permutation: 16 + 8 MiB, a new block.
  CheckSort(sorter, testing::Generate<uint64_t>(Shape::kRandom, kMiB, 34),
            false, Extra::kPermutation, "2^20 u64 with permutation");
  EXPECT_EQ(stats().allocated, 2u);
  EXPECT_EQ(stats().idle_bytes, 32 * kMiB);
  sorter.Trim();
  EXPECT_EQ(stats().idle_bytes, 0u);
  EXPECT_EQ(stats().in_use_bytes, 0u);
  CheckSort(sorter, u32, false, Extra::kNone, "2^20 after the trim");
  EXPECT_EQ(stats().allocated, 3u);
  EXPECT_EQ(stats().idle_bytes, 8 * kMiB);
}

// Idle scratch stays within its budget: a block larger than the budget is
// freed when its sort ends, and the blocks idle longest make room for one
// just returned.
TEST(CpuSorterScratch, IdleScratchStaysWithinItsBudget) {
  CpuSorter sorter({.threads = 2, .scratch_max_idle_bytes = 16 * kMiB});
  auto stats = [&] { return sorter.scratch_stats(); };
  const std::vector<uint32_t> u32 =
      testing::Generate<uint32_t>(Shape::kRandom, kMiB, 41);
  const std::vector<uint64_t> u64 =
      testing::Generate<uint64_t>(Shape::kRandom, kMiB, 42);
  CheckSort(sorter, u32, false, Extra::kNone, "u32, 8 MiB");
  EXPECT_EQ(stats().idle_bytes, 8 * kMiB);
  CheckSort(sorter, u64, false, Extra::kPermutation, "u64 perm, 24 MiB");
  EXPECT_EQ(stats().allocated, 2u);
  EXPECT_EQ(stats().idle_bytes, 8 * kMiB);
  CheckSort(sorter, u64, false, Extra::kNone, "u64, 16 MiB");
  EXPECT_EQ(stats().allocated, 3u);
  EXPECT_EQ(stats().idle_bytes, 16 * kMiB);  // the 8 MiB block made room
  CheckSort(sorter, u32, true, Extra::kNone, "u32 in the 16 MiB block");
  EXPECT_EQ(stats().allocated, 3u);
  EXPECT_EQ(stats().reused, 1u);
  EXPECT_EQ(stats().in_use_bytes, 0u);
}

// Clients sorting several sizes and types back to back through one sorter,
// at once: every concurrent sort has scratch of its own (pooled from 64 KiB
// here, so that most do, in a budget that makes returns free blocks too),
// and every result matches the reference.
TEST(CpuSorterScratch, ConcurrentSortsOfMixedSizesAndTypesShareOnePool) {
  CpuSorter sorter({.threads = 2,
                    .scratch_min_bytes = 64 << 10,
                    .scratch_max_idle_bytes = 40 * kMiB});
  const std::vector<size_t> sizes = {1000,    5000,    40'000,
                                     150'001, 300'007, 1'100'000};
  std::vector<std::thread> clients;
  for (int c = 0; c < 6; ++c) {
    clients.emplace_back([&, c] {
      for (int round = 0; round < 2; ++round) {
        for (size_t i = 0; i < sizes.size(); ++i) {
          const size_t n = sizes[(i + c) % sizes.size()] + c;
          const uint64_t seed = 100 + 10 * c + round;
          const bool desc = (c + round) % 2 == 1;
          const std::string what = "client " + std::to_string(c) +
                                   " n=" + std::to_string(n) + " round " +
                                   std::to_string(round);
          switch ((c + i + round) % 4) {
            case 0:
              CheckSort(sorter,
                        testing::Generate<uint32_t>(Shape::kRandom, n, seed),
                        desc, Extra::kNone, what);
              break;
            case 1:
              CheckSort(sorter,
                        testing::Generate<uint64_t>(Shape::kRandom, n, seed),
                        desc, Extra::kU64ValuesAndPermutation, what);
              break;
            case 2:
              CheckSort(sorter,
                        testing::Generate<float>(Shape::kRandom, n, seed), desc,
                        Extra::kPermutation, what);
              break;
            default:
              CheckSort(sorter,
                        testing::Generate<int64_t>(Shape::kRandom, n, seed),
                        desc, Extra::kU32Values, what);
          }
        }
      }
    });
  }
  for (std::thread& t : clients) t.join();
  const CpuSorter::ScratchStats stats = sorter.scratch_stats();
  EXPECT_EQ(stats.in_use_bytes, 0u);
  EXPECT_GT(stats.reused, 0u);
  EXPECT_LE(stats.idle_bytes, 40 * kMiB);
  sorter.Trim();
  EXPECT_EQ(sorter.scratch_stats().idle_bytes, 0u);
}

}  // namespace
}  // namespace sortd
