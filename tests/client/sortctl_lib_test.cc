// sortctl's parsing and its verifier (client/sortctl_lib.h); the verifier
// must reject wrong answers, or --verify would prove nothing. The bench's
// parts have their tests beside it (bench*_test.cc).
#include "client/sortctl_lib.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "tests/reference.h"

namespace sortd::cli {
namespace {

using ::testing::HasSubstr;

TEST(ParseKeys, ParsesEveryTypeAndRejectsGarbage) {
  auto f = ParseKeys(KeyType::kF32, " 1.5\n-2e3\tnan -inf +4 ");
  ASSERT_TRUE(f.ok()) << f.status();
  auto fv = testing::FromBytes<float>(*f);
  ASSERT_EQ(fv.size(), 5u);
  EXPECT_EQ(fv[0], 1.5f);
  EXPECT_EQ(fv[1], -2000.0f);
  EXPECT_TRUE(std::isnan(fv[2]));
  EXPECT_EQ(fv[3], -INFINITY);
  EXPECT_EQ(fv[4], 4.0f);

  auto i = ParseKeys(KeyType::kI64, "-9223372036854775808 0x10 7");
  ASSERT_TRUE(i.ok()) << i.status();
  EXPECT_EQ(testing::FromBytes<int64_t>(*i),
            (std::vector<int64_t>{INT64_MIN, 16, 7}));

  EXPECT_FALSE(ParseKeys(KeyType::kU32, "1 2 x").ok());
  EXPECT_FALSE(ParseKeys(KeyType::kU32, "4294967296").ok());  // overflow
  EXPECT_FALSE(ParseKeys(KeyType::kU32, "-1").ok());
  EXPECT_THAT(ParseKeys(KeyType::kI32, "1 2.5").status().message(),
              HasSubstr("number 2"));
}

v1::SortRequest MakeRequest(const std::vector<int32_t>& keys, bool desc) {
  v1::SortRequest r;
  r.set_i32_keys(testing::Bytes(keys));
  std::vector<uint32_t> values(keys.size());
  for (size_t i = 0; i < values.size(); ++i) values[i] = 100 + i;
  r.set_u32_values(testing::Bytes(values));
  r.set_return_permutation(true);
  r.set_order(desc ? v1::ORDER_DESCENDING : v1::ORDER_ASCENDING);
  return r;
}

TEST(VerifySort, AcceptsTheStableAnswerAndRejectsOthers) {
  const v1::SortRequest req = MakeRequest({3, 1, 3, -2}, false);
  v1::SortResponse good;
  good.set_i32_keys(testing::Bytes(std::vector<int32_t>{-2, 1, 3, 3}));
  good.set_u32_values(
      testing::Bytes(std::vector<uint32_t>{103, 101, 100, 102}));
  good.set_permutation(testing::Bytes(std::vector<uint32_t>{3, 1, 0, 2}));
  EXPECT_TRUE(VerifySort(req, good).ok());

  v1::SortResponse unstable = good;  // equal keys swapped
  unstable.set_u32_values(
      testing::Bytes(std::vector<uint32_t>{103, 101, 102, 100}));
  unstable.set_permutation(testing::Bytes(std::vector<uint32_t>{3, 1, 2, 0}));
  EXPECT_THAT(VerifySort(req, unstable).message(), HasSubstr("position 2"));

  v1::SortResponse wrong_keys = good;
  wrong_keys.set_i32_keys(testing::Bytes(std::vector<int32_t>{1, -2, 3, 3}));
  EXPECT_FALSE(VerifySort(req, wrong_keys).ok());

  v1::SortResponse short_answer = good;
  short_answer.set_i32_keys(testing::Bytes(std::vector<int32_t>{-2, 1, 3}));
  EXPECT_FALSE(VerifySort(req, short_answer).ok());

  v1::SortResponse wrong_type = good;
  wrong_type.set_u32_keys(good.i32_keys());
  EXPECT_FALSE(VerifySort(req, wrong_type).ok());
}

TEST(VerifySort, DescendingIsStableNotReversed) {
  const v1::SortRequest req = MakeRequest({1, 5, 1}, true);
  v1::SortResponse good;
  good.set_i32_keys(testing::Bytes(std::vector<int32_t>{5, 1, 1}));
  good.set_u32_values(testing::Bytes(std::vector<uint32_t>{101, 100, 102}));
  good.set_permutation(testing::Bytes(std::vector<uint32_t>{1, 0, 2}));
  EXPECT_TRUE(VerifySort(req, good).ok());
  v1::SortResponse reversed = good;
  reversed.set_u32_values(testing::Bytes(std::vector<uint32_t>{101, 102, 100}));
  reversed.set_permutation(testing::Bytes(std::vector<uint32_t>{1, 2, 0}));
  EXPECT_FALSE(VerifySort(req, reversed).ok());
}

TEST(VerifyTranspose, RejectsAFlippedBit) {
  std::string in = RandomWords(64, 5);
  std::string out = in;  // transposed below by the definition
  auto rows = testing::FromBytes<uint32_t>(in);
  std::vector<uint32_t> t(rows.size(), 0);
  for (size_t m = 0; m < 2; ++m)
    for (int i = 0; i < 32; ++i)
      for (int j = 0; j < 32; ++j)
        t[m * 32 + j] |= ((rows[m * 32 + i] >> j) & 1u) << i;
  out = testing::Bytes(t);
  EXPECT_TRUE(VerifyTranspose(in, out).ok());
  out[200] ^= 4;
  EXPECT_FALSE(VerifyTranspose(in, out).ok());
}

TEST(RandomKeys, DeterministicAndSized) {
  EXPECT_EQ(RandomKeys(KeyType::kF64, 100, 9),
            RandomKeys(KeyType::kF64, 100, 9));
  EXPECT_NE(RandomKeys(KeyType::kF64, 100, 9),
            RandomKeys(KeyType::kF64, 100, 8));
  EXPECT_EQ(RandomKeys(KeyType::kI32, 100, 9).size(), 400u);
}

TEST(JsonString, Escapes) {
  EXPECT_EQ(JsonString("a\"b\\c\n"), "\"a\\\"b\\\\c\\u000a\"");
}

TEST(PathText, NamesEveryPath) {
  EXPECT_STREQ(PathText(v1::EXECUTION_PATH_CPU), "cpu");
  EXPECT_STREQ(PathText(v1::EXECUTION_PATH_GPU), "gpu");
  EXPECT_STREQ(PathText(v1::EXECUTION_PATH_OPENCL_CPU), "opencl-cpu");
  EXPECT_STREQ(PathText(v1::EXECUTION_PATH_UNSPECIFIED), "unknown");
  EXPECT_STREQ(PathText(static_cast<v1::ExecutionPath>(77)), "unknown");
}

// sortctl's restart with malloc on huge pages: added to what the caller
// set, never over a choice of the caller's own.
TEST(TunablesWithHugePages, AddsTheTunableUnlessTheCallerChose) {
  EXPECT_EQ(TunablesWithHugePages(nullptr), "glibc.malloc.hugetlb=1");
  EXPECT_EQ(TunablesWithHugePages(""), "glibc.malloc.hugetlb=1");
  EXPECT_EQ(TunablesWithHugePages("glibc.malloc.arena_max=2"),
            "glibc.malloc.arena_max=2:glibc.malloc.hugetlb=1");
  EXPECT_EQ(TunablesWithHugePages("glibc.malloc.hugetlb=0"), std::nullopt);
  EXPECT_EQ(
      TunablesWithHugePages("glibc.malloc.arena_max=2:glibc.malloc.hugetlb=2"),
      std::nullopt);
  // A name that only ends like the tunable's is another tunable.
  EXPECT_EQ(TunablesWithHugePages("x.glibc.malloc.hugetlb=0"),
            "x.glibc.malloc.hugetlb=0:glibc.malloc.hugetlb=1");
}

}  // namespace
}  // namespace sortd::cli
