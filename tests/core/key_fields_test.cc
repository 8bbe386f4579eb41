// The proto's key fields against the key types: every type round-trips
// through requests and responses, field numbers included.
#include "core/key_fields.h"

#include <gtest/gtest.h>

#include "sortd/v1/sortd.pb.h"

namespace sortd {
namespace {

TEST(KeyFields, EveryKeyTypeRoundTripsThroughRequestsAndResponses) {
  for (KeyType type : kAllKeyTypes) {
    SCOPED_TRACE(static_cast<int>(type));
    EXPECT_EQ(key_fields::TypeOfRaw(key_fields::Raw(type)), type);
    v1::SortRequest request;
    *key_fields::MutableKeys(&request, type) = "abcd";
    EXPECT_EQ(static_cast<int>(request.keys_case()), key_fields::Raw(type));
    EXPECT_EQ(key_fields::TypeOf(request), type);
    ASSERT_NE(key_fields::Keys(request), nullptr);
    EXPECT_EQ(*key_fields::Keys(request), "abcd");
    v1::SortResponse response;
    *key_fields::MutableKeys(&response, type) = "efgh";
    EXPECT_EQ(key_fields::TypeOf(response), type);
    EXPECT_EQ(*key_fields::Keys(response), "efgh");
    KeyType compact_type = KeyType::kF64;
    EXPECT_EQ(key_fields::CompactKeys(response, &compact_type), nullptr);
  }
  EXPECT_EQ(key_fields::Raw<float>(), 3);
  EXPECT_EQ(key_fields::Raw<int64_t>(), 5);
  EXPECT_FALSE(key_fields::TypeOfRaw(0));
  EXPECT_FALSE(key_fields::TypeOfRaw(7));
}

TEST(KeyFields, UnsetKeysAreNone) {
  v1::SortRequest request;
  EXPECT_FALSE(key_fields::TypeOf(request));
  EXPECT_EQ(key_fields::Keys(request), nullptr);
}

TEST(KeyFields, CompactKeysAreThe32BitTypesOnly) {
  EXPECT_EQ(key_fields::Compact(KeyType::kU32), 12);
  EXPECT_EQ(key_fields::Compact(KeyType::kI32), 13);
  EXPECT_EQ(key_fields::Compact(KeyType::kF32), 14);
  EXPECT_EQ(key_fields::Compact(KeyType::kU64), 0);
  EXPECT_EQ(key_fields::TypeOfCompact(13), KeyType::kI32);
  EXPECT_FALSE(key_fields::TypeOfCompact(15));
  v1::SortResponse response;
  response.mutable_compact_f32_keys()->set_count(7);
  KeyType type = KeyType::kU32;
  const v1::CompactKeys* c = key_fields::CompactKeys(response, &type);
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->count(), 7u);
  EXPECT_EQ(type, KeyType::kF32);
  // Raw keys of that response: none.
  EXPECT_EQ(key_fields::Keys(response), nullptr);
}

}  // namespace
}  // namespace sortd
