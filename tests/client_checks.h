// Test support: a sort through the client library checked against the
// reference: keys of every shape with a payload and the permutation, the
// keys bit for bit in the reference's stable order, and the path that
// served them. For any server a test reaches: a started sortd or the
// service in process.
//
//   ExpectSorted<float>(*client, 1000, /*desc=*/true);
#ifndef SORTD_TESTS_CLIENT_CHECKS_H_
#define SORTD_TESTS_CLIENT_CHECKS_H_

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/client.h"
#include "tests/reference.h"

namespace sortd {

template <typename K>
void ExpectSorted(Client& client, size_t n, bool desc,
                  v1::ExecutionPath path = v1::EXECUTION_PATH_CPU) {
  SCOPED_TRACE(
      absl::StrCat(sizeof(K), "-byte keys, n=", n, desc ? " desc" : ""));
  const std::vector<K> keys =
      testing::Generate<K>(testing::Shape::kSpecial, n, 4);
  std::vector<uint64_t> values(n);
  for (size_t i = 0; i < n; ++i) values[i] = ~uint64_t{i};
  auto result = client.SortPairs<K, uint64_t>(
      keys, values, {.descending = desc, .return_permutation = true});
  ASSERT_TRUE(result.ok()) << result.status();
  const std::vector<uint32_t> perm = testing::RefPermutation(keys, desc);
  ASSERT_EQ(result->keys.size(), n);
  ASSERT_EQ(result->permutation, perm);
  for (size_t i = 0; i < n; ++i) {
    ASSERT_EQ(0, std::memcmp(&result->keys[i], &keys[perm[i]], sizeof(K)));
    ASSERT_EQ(result->values[i], values[perm[i]]);
  }
  EXPECT_EQ(result->served_by.path(), path);
  if (path == v1::EXECUTION_PATH_CPU) {
    EXPECT_THAT(result->served_by.device(), ::testing::HasSubstr("oneTBB"));
  }
  EXPECT_GE(result->served_by.compute_ns(), 0);
}

}  // namespace sortd

#endif  // SORTD_TESTS_CLIENT_CHECKS_H_
