// Test support: input generators over the shapes that break sorts, and an
// independent reference (std::stable_sort with comparators on values, not
// on the engines' bit transforms).
#ifndef SORTD_TESTS_REFERENCE_H_
#define SORTD_TESTS_REFERENCE_H_

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "core/reference_sort.h"

namespace sortd::testing {

enum class Shape {
  kRandom,
  kSorted,
  kReversed,
  kAllEqual,
  kFewDistinct,
  kSpecial
};

inline const char* ShapeName(Shape s) {
  switch (s) {
    case Shape::kRandom:
      return "random";
    case Shape::kSorted:
      return "sorted";
    case Shape::kReversed:
      return "reversed";
    case Shape::kAllEqual:
      return "all_equal";
    case Shape::kFewDistinct:
      return "few_distinct";
    case Shape::kSpecial:
      return "special";
  }
  return "?";
}

inline constexpr Shape kAllShapes[] = {Shape::kRandom,      Shape::kSorted,
                                       Shape::kReversed,    Shape::kAllEqual,
                                       Shape::kFewDistinct, Shape::kSpecial};

// The reference order and stable permutation (core/reference_sort.h).
template <typename K>
bool RefLess(K a, K b) {
  return TotalOrderLess(a, b);
}
template <typename K>
std::vector<uint32_t> RefPermutation(const std::vector<K>& keys, bool desc) {
  return StablePermutation(keys.data(), keys.size(), desc);
}

// Values that stress a type's ordering: extremes, signed zeros, infinities,
// NaNs of both signs with different payloads, denormals.
template <typename K>
std::vector<K> SpecialValues() {
  using L = std::numeric_limits<K>;
  std::vector<K> v = {L::lowest(), L::max(), K(0), K(1), K(2)};
  if constexpr (std::is_signed_v<K>) v.push_back(K(-1));
  if constexpr (std::is_integral_v<K>) {
    v.push_back(L::min());
    v.push_back(static_cast<K>(L::max() / 2));
  } else {
    using U = std::conditional_t<sizeof(K) == 4, uint32_t, uint64_t>;
    const U kSign = U{1} << (sizeof(U) * 8 - 1);
    v.insert(v.end(), {-K(0), L::infinity(), -L::infinity(), L::quiet_NaN(),
                       -L::quiet_NaN(), L::denorm_min(), -L::denorm_min(),
                       L::min(), K(-1.5), K(0.1)});
    // NaNs with other payloads, both signs.
    v.push_back(std::bit_cast<K>(std::bit_cast<U>(L::quiet_NaN()) | U{1}));
    v.push_back(
        std::bit_cast<K>(std::bit_cast<U>(L::quiet_NaN()) | U{1} | kSign));
  }
  return v;
}

template <typename K>
K RandomKey(std::mt19937_64& rng) {
  uint64_t r = rng();
  if constexpr (std::is_floating_point_v<K>) {
    // Mostly finite values over a wide range of exponents; random bit
    // patterns would be NaN too rarely to matter or too often to be real.
    double mag = std::ldexp(static_cast<double>(r >> 11) * 0x1p-53,
                            static_cast<int>(r % 60) - 30);
    return static_cast<K>((r & 1) ? -mag : mag);
  } else {
    return static_cast<K>(r);
  }
}

template <typename K>
std::vector<K> Generate(Shape shape, size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed * 7919 + n);
  std::vector<K> v(n);
  switch (shape) {
    case Shape::kRandom:
    case Shape::kSorted:
    case Shape::kReversed:
      for (K& k : v) k = RandomKey<K>(rng);
      if (shape != Shape::kRandom) {
        std::stable_sort(v.begin(), v.end(), RefLess<K>);
        if (shape == Shape::kReversed) std::reverse(v.begin(), v.end());
      }
      break;
    case Shape::kAllEqual: {
      K k = RandomKey<K>(rng);
      std::fill(v.begin(), v.end(), k);
      break;
    }
    case Shape::kFewDistinct: {
      K pool[4] = {RandomKey<K>(rng), RandomKey<K>(rng), RandomKey<K>(rng),
                   RandomKey<K>(rng)};
      for (K& k : v) k = pool[rng() % 4];
      break;
    }
    case Shape::kSpecial: {
      std::vector<K> specials = SpecialValues<K>();
      for (K& k : v) k = specials[rng() % specials.size()];
      break;
    }
  }
  return v;
}

template <typename T>
std::string Bytes(const std::vector<T>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()),
                     v.size() * sizeof(T));
}

template <typename T>
std::vector<T> FromBytes(const std::string& s) {
  std::vector<T> v(s.size() / sizeof(T));
  if (!v.empty()) std::memcpy(v.data(), s.data(), v.size() * sizeof(T));
  return v;
}

// Lengths around every boundary the engines care about: tiny, insertion
// sort cut-off, block sizes, powers of two +-1, primes.
inline std::vector<size_t> BoundaryLengths() {
  std::vector<size_t> n = {0, 1, 2, 3, 7, 31, 32, 33, 97, 255, 256, 257, 1009};
  for (int k : {12, 14, 15, 16}) {
    n.push_back((size_t{1} << k) - 1);
    n.push_back(size_t{1} << k);
    n.push_back((size_t{1} << k) + 1);
  }
  n.push_back(65537);
  n.push_back(100003);
  return n;
}

}  // namespace sortd::testing

#endif  // SORTD_TESTS_REFERENCE_H_
