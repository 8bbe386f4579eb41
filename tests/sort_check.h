// Test support: runs one sort through any Sorter and checks every output
// (keys bit for bit, payload, permutation) against the reference.
#ifndef SORTD_TESTS_SORT_CHECK_H_
#define SORTD_TESTS_SORT_CHECK_H_

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "core/sorter.h"
#include "tests/reference.h"

namespace sortd::testing {

template <KeyType T>
using KeyOf = KeyCType<T>;

enum class Extra { kNone, kU32Values, kU64ValuesAndPermutation, kPermutation };

inline const char* ExtraName(Extra e) {
  switch (e) {
    case Extra::kNone:
      return "keys";
    case Extra::kU32Values:
      return "u32values";
    case Extra::kU64ValuesAndPermutation:
      return "u64values_perm";
    case Extra::kPermutation:
      return "perm";
  }
  return "?";
}

template <typename K>
constexpr KeyType KeyTypeOf() {
  if constexpr (std::is_same_v<K, uint32_t>) return KeyType::kU32;
  if constexpr (std::is_same_v<K, int32_t>) return KeyType::kI32;
  if constexpr (std::is_same_v<K, float>) return KeyType::kF32;
  if constexpr (std::is_same_v<K, uint64_t>) return KeyType::kU64;
  if constexpr (std::is_same_v<K, int64_t>) return KeyType::kI64;
  return KeyType::kF64;
}

template <typename K>
void CheckSort(Sorter& sorter, const std::vector<K>& keys, bool desc,
               Extra extra, const std::string& what) {
  SCOPED_TRACE(what);
  const size_t n = keys.size();
  const std::string in = Bytes(keys);
  std::vector<uint64_t> values(n);
  for (size_t i = 0; i < n; ++i) values[i] = i * 0x9E3779B97F4A7C15ull;
  std::vector<uint32_t> values32(values.begin(), values.end());
  const std::string v32 = Bytes(values32), v64 = Bytes(values);

  std::string out(in.size(), '\xAB');
  std::string vout(n * 8, '\xAB');
  std::string pout(n * 4, '\xAB');
  SortJob job;
  job.key_type = KeyTypeOf<K>();
  job.order = desc ? Order::kDescending : Order::kAscending;
  job.count = n;
  job.keys = reinterpret_cast<const std::byte*>(in.data());
  job.keys_out = reinterpret_cast<std::byte*>(out.data());
  if (extra == Extra::kU32Values) {
    job.value_type = ValueType::kU32;
    job.values = reinterpret_cast<const std::byte*>(v32.data());
    job.values_out = reinterpret_cast<std::byte*>(vout.data());
  } else if (extra == Extra::kU64ValuesAndPermutation) {
    job.value_type = ValueType::kU64;
    job.values = reinterpret_cast<const std::byte*>(v64.data());
    job.values_out = reinterpret_cast<std::byte*>(vout.data());
  }
  if (extra == Extra::kPermutation ||
      extra == Extra::kU64ValuesAndPermutation) {
    job.permutation_out = reinterpret_cast<std::byte*>(pout.data());
  }
  ASSERT_TRUE(sorter.Sort(job).ok());

  const std::vector<uint32_t> perm = testing::RefPermutation(keys, desc);
  const std::vector<K> got = FromBytes<K>(out);
  const std::vector<uint32_t> got_perm = FromBytes<uint32_t>(pout);
  for (size_t i = 0; i < n; ++i) {
    // Bit-exact: NaN payloads and the sign of zero must survive.
    ASSERT_EQ(0, std::memcmp(&got[i], &keys[perm[i]], sizeof(K)))
        << "key at " << i << " should be input[" << perm[i] << "]";
    if (extra == Extra::kU32Values) {
      uint32_t v;
      std::memcpy(&v, vout.data() + 4 * i, 4);
      ASSERT_EQ(v, values32[perm[i]]) << "value at " << i;
    } else if (extra == Extra::kU64ValuesAndPermutation) {
      uint64_t v;
      std::memcpy(&v, vout.data() + 8 * i, 8);
      ASSERT_EQ(v, values[perm[i]]) << "value at " << i;
    }
    if (job.permutation_out != nullptr) {
      ASSERT_EQ(got_perm[i], perm[i]) << "permutation at " << i;
    }
  }
}

}  // namespace sortd::testing

#endif  // SORTD_TESTS_SORT_CHECK_H_
