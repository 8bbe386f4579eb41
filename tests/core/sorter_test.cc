// The engine interface's shared parts (core/sorter.h): the checks of
// segment offsets and of batches made of parts, and the segmented sort
// every engine has by default, one Sort a segment.
#include "core/sorter.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "core/reference_sort.h"

namespace sortd {
namespace {

using ::testing::HasSubstr;

TEST(SegmentOffsets, MustRunFromZeroToTheCountWithoutDecreasing) {
  EXPECT_TRUE(CheckSegmentOffsets(5, std::vector<uint32_t>{0, 3, 3, 5}).ok());
  EXPECT_TRUE(CheckSegmentOffsets(0, std::vector<uint32_t>{0}).ok());
  for (const std::vector<uint32_t>& bad :
       {std::vector<uint32_t>{}, {1, 5}, {0, 4}, {0, 6}}) {
    const absl::Status s = CheckSegmentOffsets(5, bad);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(s.message(), HasSubstr("key count 5"));
  }
  const absl::Status s =
      CheckSegmentOffsets(5, std::vector<uint32_t>{0, 4, 2, 5});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("decrease at entry 2"));
}

TEST(Parts, EveryPartMustBeOfTheBatchsShapeAndAddUp) {
  std::vector<std::byte> in(64), out(64);
  SortJob a{.count = 3, .keys = in.data(), .keys_out = out.data()};
  SortJob b{.count = 2, .keys = in.data() + 12, .keys_out = out.data() + 12};
  std::vector<const SortJob*> parts = {&a, &b};
  SortJob batch{.count = 5, .keys = in.data(), .keys_out = out.data()};
  batch.parts = parts;
  EXPECT_TRUE(CheckParts(batch).ok());

  batch.count = 6;
  EXPECT_THAT(CheckParts(batch).message(), HasSubstr("parts of 5"));
  batch.count = 5;
  b.key_type = KeyType::kU64;
  EXPECT_EQ(CheckParts(batch).code(), absl::StatusCode::kInvalidArgument);
  b.key_type = KeyType::kU32;
  b.keys_out = nullptr;
  EXPECT_EQ(CheckParts(batch).code(), absl::StatusCode::kInvalidArgument);
  b.keys_out = out.data() + 12;
  parts[1] = nullptr;
  EXPECT_THAT(CheckParts(batch).message(), HasSubstr("missing"));
}

// Sorts u32 keys (with u32 values and the permutation) by the reference.
class ReferenceSorter : public Sorter {
 public:
  ExecutionPath path() const override { return ExecutionPath::kCpu; }
  std::string device_name() const override { return "reference"; }
  absl::Status Transpose(const TransposeJob&) override {
    return absl::UnimplementedError("no transposes");
  }
  absl::Status Sort(const SortJob& job) override {
    ++sorts;
    std::vector<uint32_t> keys(job.count);
    std::memcpy(keys.data(), job.keys, job.count * 4);
    const std::vector<uint32_t> perm =
        StablePermutation(keys.data(), job.count, false);
    for (size_t i = 0; i < job.count; ++i) {
      std::memcpy(job.keys_out + 4 * i, job.keys + 4 * perm[i], 4);
      if (job.values_out != nullptr) {
        std::memcpy(job.values_out + 4 * i, job.values + 4 * perm[i], 4);
      }
      if (job.permutation_out != nullptr) {
        std::memcpy(job.permutation_out + 4 * i, &perm[i], 4);
      }
    }
    return absl::OkStatus();
  }
  int sorts = 0;
};

TEST(SortSegments, ByDefaultEachSegmentIsSortedAloneWithGlobalIndices) {
  std::mt19937 rng(7);
  const std::vector<uint32_t> offsets = {0, 100, 100, 357, 1000};
  std::vector<uint32_t> keys(1000), values(1000);
  for (uint32_t i = 0; i < 1000; ++i) {
    keys[i] = rng() % 50;
    values[i] = i;
  }
  std::vector<uint32_t> keys_out(1000), values_out(1000), perm(1000);
  const SortJob job{
      .count = 1000,
      .keys = reinterpret_cast<const std::byte*>(keys.data()),
      .value_type = ValueType::kU32,
      .values = reinterpret_cast<const std::byte*>(values.data()),
      .keys_out = reinterpret_cast<std::byte*>(keys_out.data()),
      .values_out = reinterpret_cast<std::byte*>(values_out.data()),
      .permutation_out = reinterpret_cast<std::byte*>(perm.data())};
  ReferenceSorter sorter;
  ASSERT_TRUE(sorter.SortSegments(job, offsets).ok());
  EXPECT_EQ(sorter.sorts, 4);
  for (size_t s = 0; s + 1 < offsets.size(); ++s) {
    const std::vector<uint32_t> expected = StablePermutation(
        keys.data() + offsets[s], offsets[s + 1] - offsets[s], false);
    for (size_t i = offsets[s]; i < offsets[s + 1]; ++i) {
      const uint32_t from = offsets[s] + expected[i - offsets[s]];
      ASSERT_EQ(perm[i], from) << "segment " << s << " place " << i;
      ASSERT_EQ(keys_out[i], keys[from]);
      ASSERT_EQ(values_out[i], from);
    }
  }
  // Bad offsets, and batches of parts, are refused before any sort.
  EXPECT_EQ(sorter.SortSegments(job, std::vector<uint32_t>{0, 999}).code(),
            absl::StatusCode::kInvalidArgument);
  const SortJob* part = &job;
  SortJob parts_job = job;
  parts_job.parts = absl::MakeConstSpan(&part, 1);
  EXPECT_EQ(sorter.SortSegments(parts_job, offsets).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(sorter.sorts, 4);
}

}  // namespace
}  // namespace sortd
