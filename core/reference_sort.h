// The reference order and stable sort that answers are checked against
// (sortctl --verify, the tests): std::stable_sort with a comparator on the
// values themselves, independent of the engines' bit transforms. Floats
// follow IEEE-754 totalOrder (-NaN < -inf < ... < -0 < +0 < ... < +inf <
// +NaN, NaNs by payload), compared on their sign-magnitude encoding.
//
//   std::vector<uint32_t> perm = StablePermutation(keys, n, descending);
#ifndef SORTD_CORE_REFERENCE_SORT_H_
#define SORTD_CORE_REFERENCE_SORT_H_

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <numeric>
#include <type_traits>
#include <vector>

namespace sortd {

// a before b in ascending order.
template <typename K>
bool TotalOrderLess(K a, K b) {
  if constexpr (std::is_floating_point_v<K>) {
    using S = std::conditional_t<sizeof(K) == 4, int32_t, int64_t>;
    S sa = std::bit_cast<S>(a), sb = std::bit_cast<S>(b);
    // Negative encodings count down as the magnitude grows: flip them.
    if (sa < 0) sa ^= std::numeric_limits<S>::max();
    if (sb < 0) sb ^= std::numeric_limits<S>::max();
    return sa < sb;
  } else {
    return a < b;
  }
}

// The stable permutation that sorts keys[0, n): position i of the sorted
// array holds keys[perm[i]].
template <typename K>
std::vector<uint32_t> StablePermutation(const K* keys, size_t n,
                                        bool descending) {
  std::vector<uint32_t> perm(n);
  std::iota(perm.begin(), perm.end(), 0u);
  std::stable_sort(perm.begin(), perm.end(), [&](uint32_t a, uint32_t b) {
    return descending ? TotalOrderLess(keys[b], keys[a])
                      : TotalOrderLess(keys[a], keys[b]);
  });
  return perm;
}

}  // namespace sortd

#endif  // SORTD_CORE_REFERENCE_SORT_H_
