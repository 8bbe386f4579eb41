// sortctl bench's requests (client/bench_inputs.cc): a few distinct random
// inputs per size class, the same for the same seed, fewer of the large
// ones, of the key type and coding asked for; and the key bytes of a
// request and an answer.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "client/bench.h"
#include "client/bench_internal.h"
#include "core/key_fields.h"

namespace sortd::cli {
namespace {

TEST(MakeInputs, DistinctVariantsOfTheSizeAndTypeSameForTheSameSeed) {
  BenchOptions o;
  o.key_type = KeyType::kI64;
  o.variants = 3;
  const bench_internal::Inputs in = bench_internal::MakeInputs(o, 1000, 0);
  EXPECT_EQ(in.size, 1000u);
  ASSERT_EQ(in.sorts.size(), 3u);
  EXPECT_TRUE(in.transposes.empty());
  std::set<std::string> distinct;
  for (const v1::SortRequest& r : in.sorts) {
    EXPECT_EQ(key_fields::TypeOf(r), KeyType::kI64);
    EXPECT_EQ(bench_internal::RequestKeys(r).size(), 1000u * 8);
    EXPECT_EQ(r.response_key_coding(), v1::KEY_CODING_RAW);
    distinct.insert(bench_internal::RequestKeys(r));
  }
  EXPECT_EQ(distinct.size(), 3u);
  // The same seed and class: the same requests; another class: others.
  const bench_internal::Inputs again = bench_internal::MakeInputs(o, 1000, 0);
  EXPECT_EQ(bench_internal::RequestKeys(again.sorts[1]),
            bench_internal::RequestKeys(in.sorts[1]));
  const bench_internal::Inputs other = bench_internal::MakeInputs(o, 1000, 1);
  EXPECT_NE(bench_internal::RequestKeys(other.sorts[0]),
            bench_internal::RequestKeys(in.sorts[0]));
}

TEST(MakeInputs, LargeSizesHaveAtMostTwoVariantsAndCompactIsAsked) {
  BenchOptions o;
  o.variants = 4;
  o.compact_keys = true;
  const bench_internal::Inputs large =
      bench_internal::MakeInputs(o, uint64_t{1} << 22, 0);
  ASSERT_EQ(large.sorts.size(), 2u);
  EXPECT_EQ(large.sorts[0].response_key_coding(), v1::KEY_CODING_COMPACT);
  o.op = BenchOp::kTranspose;
  const bench_internal::Inputs matrices = bench_internal::MakeInputs(o, 10, 0);
  ASSERT_EQ(matrices.transposes.size(), 4u);
  EXPECT_TRUE(matrices.sorts.empty());
  EXPECT_EQ(matrices.transposes[0].matrices().size(), 10u * 32 * 4);
}

TEST(RequestKeys, TheKeyBytesOfARequestAndOfAnAnswer) {
  v1::SortRequest r;
  EXPECT_EQ(bench_internal::RequestKeys(r), "");
  r.set_f32_keys("abcd");
  EXPECT_EQ(bench_internal::RequestKeys(r), "abcd");
  v1::SortResponse answer;
  answer.set_f64_keys("x");
  bench_internal::SetAnswerKeys("12345678", &answer);
  EXPECT_EQ(answer.f64_keys(), "12345678");
  v1::SortResponse empty;
  bench_internal::SetAnswerKeys("1234", &empty);
  EXPECT_EQ(empty.u32_keys(), "1234");
}

}  // namespace
}  // namespace sortd::cli
