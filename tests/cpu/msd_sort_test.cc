// The CPU sort's MSD passes then buckets in cache (SortMsdThenLsd,
// cpu/msd_sort.cc), with buckets made small so that small arrays take
// every step: buckets split again, buckets short enough for insertion,
// one bucket holding everything; every key type, order and payload
// against the reference.
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

TEST(MsdSort, MatchesTheReferenceWithSmallBuckets) {
  for (size_t bucket_keys : {size_t{16}, size_t{1000}}) {
    const cpu_sort::Split split{
        .threads = 2, .msd_from_bytes = 0, .bucket_keys = bucket_keys};
    CpuPathSorter sorter([split](const SortJob& job, CpuScratchPool& pool) {
      cpu_sort::SortMsdThenLsd(job, split, pool);
    });
    testing::ForEachKeyType([&]<typename K>() {
      for (size_t n : {size_t{100}, size_t{50000}}) {
        for (Shape shape : {Shape::kRandom, Shape::kAllEqual,
                            Shape::kFewDistinct, Shape::kSpecial}) {
          const std::vector<K> keys = testing::Generate<K>(shape, n, n + 3);
          for (bool desc : {false, true}) {
            testing::CheckSort(
                sorter, keys, desc,
                desc ? Extra::kU32Values : Extra::kU64ValuesAndPermutation,
                std::to_string(bucket_keys) + "-key buckets, " +
                    std::to_string(n) + " " + ShapeName(shape));
          }
        }
      }
    });
  }
}

}  // namespace
}  // namespace sortd
