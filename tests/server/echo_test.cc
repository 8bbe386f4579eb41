// Echo (server/echo.cc): Sort's path less the sort. The arrays come back as
// they were sent, with the identity permutation, through the same
// validation as Sort; what Echo is not for is refused saying why.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "client/client.h"
#include "core/key_fields.h"
#include "tests/in_process_service.h"
#include "tests/reference.h"

namespace sortd {
namespace {

using ::testing::HasSubstr;

// Keys of every type, with values of both types, come back in the order
// they were sent, and say how they were served.
TEST(Echo, AnswersEachKeyTypeUnsortedWithTheIdentityPermutation) {
  testing::InProcessService sortd;
  ASSERT_TRUE(sortd.Start().ok());
  std::unique_ptr<Client> client = sortd.Connect();
  ASSERT_NE(client, nullptr);
  const std::vector<uint64_t> wide =
      testing::Generate<uint64_t>(testing::Shape::kRandom, 3000, 4);
  std::vector<uint32_t> narrow(wide.size());
  for (size_t i = 0; i < wide.size(); ++i) narrow[i] = wide[i] >> 7;
  v1::SortRequest request;
  request.set_return_permutation(true);
  for (KeyType type : {KeyType::kU32, KeyType::kI32, KeyType::kF32,
                       KeyType::kU64, KeyType::kI64, KeyType::kF64}) {
    const bool four_bytes = KeySize(type) == 4;
    const std::string keys =
        four_bytes ? PackArray<uint32_t>(narrow) : PackArray<uint64_t>(wide);
    *key_fields::MutableKeys(&request, type) = keys;
    const int field = key_fields::Raw(type);
    if (four_bytes) {
      request.set_u64_values(PackArray<uint64_t>(wide));
    } else {
      request.set_u32_values(PackArray<uint32_t>(narrow));
    }
    absl::StatusOr<v1::SortResponse> echo = client->Echo(request);
    ASSERT_TRUE(echo.ok()) << field << ": " << echo.status();
    ASSERT_EQ(key_fields::TypeOf(*echo), type) << field;
    EXPECT_EQ(*key_fields::Keys(*echo), keys) << field;
    EXPECT_EQ(echo->u32_values(), request.u32_values()) << field;
    EXPECT_EQ(echo->u64_values(), request.u64_values()) << field;
    const std::vector<uint32_t> permutation =
        UnpackArray<uint32_t>(echo->permutation());
    ASSERT_EQ(permutation.size(), wide.size());
    for (uint32_t i = 0; i < permutation.size(); ++i) {
      ASSERT_EQ(permutation[i], i) << field << " at " << i;
    }
    EXPECT_EQ(echo->served_by().route(), "echo");
    EXPECT_EQ(echo->served_by().path(), v1::EXECUTION_PATH_CPU);
    EXPECT_EQ(echo->served_by().device(), "echo (no sort)");
    request.clear_u32_values();
    request.clear_u64_values();
  }
}

// Compact key coding is Sort's encoder: the client decodes the same keys.
TEST(Echo, CompactKeysComeBackAsTheyWereSent) {
  testing::InProcessService sortd;
  ASSERT_TRUE(sortd.Start().ok());
  std::unique_ptr<Client> client = sortd.Connect();
  ASSERT_NE(client, nullptr);
  const std::vector<uint32_t> keys =
      testing::Generate<uint32_t>(testing::Shape::kRandom, 20000, 2);
  v1::SortRequest request;
  request.set_u32_keys(PackArray<uint32_t>(keys));
  request.set_response_key_coding(v1::KEY_CODING_COMPACT);
  absl::StatusOr<v1::SortResponse> echo = client->Echo(request);
  ASSERT_TRUE(echo.ok()) << echo.status();
  EXPECT_EQ(UnpackArray<uint32_t>(echo->u32_keys()), keys);
}

// Sort's validation, and what only Sort takes, refused with what was wrong;
// an Echo server with Echo turned off says which flag did it.
TEST(Echo, RefusesWhatSortRefusesAndWhatIsOnlySorts) {
  testing::InProcessService sortd;
  ASSERT_TRUE(sortd.Start().ok());
  std::unique_ptr<Client> client = sortd.Connect();
  ASSERT_NE(client, nullptr);
  v1::SortRequest bad;
  bad.set_u32_keys("abcde");
  absl::StatusOr<v1::SortResponse> refused = client->Echo(bad);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(refused.status().message(), HasSubstr("not a multiple"));

  // (Sent as raw bytes: the client library sends no part with Echo.)
  v1::SortRequest part;
  part.set_u32_keys(PackArray<uint32_t>(std::vector<uint32_t>{2, 1}));
  part.mutable_part()->set_group("echo-part-group-");
  part.mutable_part()->set_count(2);
  const auto [status, answer] = sortd.RawCall("Echo", part.SerializeAsString());
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("`part` is for Sort"));

  // This service has no shared-memory regions.
  v1::SortRequest shared;
  shared.set_u32_keys("");
  shared.mutable_shared()->set_region("r1");
  refused = client->Echo(shared);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition)
      << refused.status();
  EXPECT_THAT(refused.status().message(), HasSubstr("--shm_socket"));

  testing::InProcessService::Options off;
  off.service.echo = false;
  testing::InProcessService no_echo(std::move(off));
  ASSERT_TRUE(no_echo.Start().ok());
  std::unique_ptr<Client> to_no_echo = no_echo.Connect();
  ASSERT_NE(to_no_echo, nullptr);
  v1::SortRequest good;
  good.set_u32_keys(PackArray<uint32_t>(std::vector<uint32_t>{2, 1}));
  refused = to_no_echo->Echo(good);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(refused.status().message(), HasSubstr("--echo"));
}

}  // namespace
}  // namespace sortd
