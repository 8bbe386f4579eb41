// The CPU sort's LSD passes in blocks (SortLsdInBlocks, cpu/lsd_sort.cc):
// every key type, order and payload against the reference, on one thread
// and several, from one block to many.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/cpu_paths.h"
#include "tests/sort_check.h"

namespace sortd {
namespace {

using testing::CpuPathSorter;
using testing::Extra;
using testing::Shape;

TEST(LsdSort, MatchesTheReferenceOnOneThreadAndSeveral) {
  const std::vector<size_t> lengths = {1, cpu_sort::kInsertionUpTo,
                                       cpu_sort::kMinBlock - 1,
                                       cpu_sort::kMinBlock * 5 + 3};
  for (int threads : {1, 3}) {
    CpuPathSorter sorter([threads](const SortJob& job, CpuScratchPool& pool) {
      cpu_sort::SortLsdInBlocks(job, threads, pool);
    });
    testing::ForEachKeyType([&]<typename K>() {
      for (size_t n : lengths) {
        for (Shape shape :
             {Shape::kRandom, Shape::kReversed, Shape::kSpecial}) {
          const std::vector<K> keys = testing::Generate<K>(shape, n, n + 7);
          testing::CheckSort(sorter, keys, shape == Shape::kReversed,
                             Extra::kPermutation,
                             std::to_string(threads) + " threads, " +
                                 std::to_string(n) + " " + ShapeName(shape));
        }
      }
    });
  }
}

}  // namespace
}  // namespace sortd
