// The CPU sort on the calling thread alone (SortSerial, cpu/serial_sort.cc):
// every key type, order and payload against the reference, from just past
// the insertion sort's reach across the switch to wide digits.
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

TEST(SerialSort, MatchesTheReferenceAcrossItsDigitWidths) {
  CpuPathSorter sorter([](const SortJob& job, CpuScratchPool& pool) {
    cpu_sort::SortSerial(job, pool);
  });
  // Longer than the insertion sort's reach, as the caller sends them.
  const std::vector<size_t> lengths = {
      cpu_sort::kInsertionUpTo + 1,  255,  4095, 4096,
      cpu_sort::kWideDigitsFrom + 1, 20000};
  testing::ForEachKeyType([&]<typename K>() {
    for (size_t n : lengths) {
      for (Shape shape :
           {Shape::kRandom, Shape::kFewDistinct, Shape::kSpecial}) {
        const std::vector<K> keys = testing::Generate<K>(shape, n, n + 1);
        for (bool desc : {false, true}) {
          testing::CheckSort(
              sorter, keys, desc,
              desc ? Extra::kU64ValuesAndPermutation : Extra::kU32Values,
              std::to_string(n) + " " + ShapeName(shape));
        }
      }
    }
  });
}

}  // namespace
}  // namespace sortd
