// The SortStream RPC (server/sort_stream.cc), served in process: an array
// that comes in many small messages is sorted as one, for every key type;
// a stream that stops sending is ended once it has been idle too long.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "client/client.h"
#include "core/key_fields.h"
#include "tests/in_process_service.h"
#include "tests/reference.h"

namespace sortd {
namespace {

using ::testing::HasSubstr;

// Keys of type K with u32 values, in messages of 4 KiB, against the
// reference's stable order.
template <typename K>
void ExpectStreamSorted(Client& client, size_t n, bool desc) {
  SCOPED_TRACE(::testing::Message()
               << sizeof(K) << "-byte keys, n=" << n << (desc ? " desc" : ""));
  const std::vector<K> keys =
      testing::Generate<K>(testing::Shape::kSpecial, n, 11);
  std::vector<uint32_t> values(n);
  for (size_t i = 0; i < n; ++i) values[i] = static_cast<uint32_t>(i * 7);
  v1::SortRequest request;
  *key_fields::MutableKeys(&request, key_fields::TypeOf<K>()) =
      PackArray<K>(keys);
  request.set_u32_values(PackArray<uint32_t>(values));
  request.set_order(desc ? v1::ORDER_DESCENDING : v1::ORDER_ASCENDING);
  request.set_return_permutation(true);
  absl::StatusOr<v1::SortResponse> sorted = client.SortStream(request);
  ASSERT_TRUE(sorted.ok()) << sorted.status();
  const std::vector<uint32_t> perm = testing::RefPermutation(keys, desc);
  EXPECT_EQ(UnpackArray<uint32_t>(sorted->permutation()), perm);
  const std::vector<K> got = UnpackArray<K>(*key_fields::Keys(*sorted));
  const std::vector<uint32_t> got_values =
      UnpackArray<uint32_t>(sorted->u32_values());
  ASSERT_EQ(got.size(), n);
  ASSERT_EQ(got_values.size(), n);
  for (size_t i = 0; i < n; ++i) {
    ASSERT_EQ(0, std::memcmp(&got[i], &keys[perm[i]], sizeof(K))) << i;
    ASSERT_EQ(got_values[i], values[perm[i]]) << i;
  }
}

TEST(SortStream, SortsEveryKeyTypeSentInManyMessages) {
  testing::InProcessService sortd;
  ASSERT_TRUE(sortd.Start().ok());
  ClientOptions options = testing::OneAttempt();
  options.stream_chunk_bytes = 4096;
  std::unique_ptr<Client> client = sortd.Connect(options);
  ASSERT_NE(client, nullptr);
  for (size_t n : {size_t{0}, size_t{5}, size_t{20000}}) {
    for (bool desc : {false, true}) {
      ExpectStreamSorted<uint32_t>(*client, n, desc);
      ExpectStreamSorted<int32_t>(*client, n, desc);
      ExpectStreamSorted<float>(*client, n, desc);
      ExpectStreamSorted<uint64_t>(*client, n, desc);
      ExpectStreamSorted<int64_t>(*client, n, desc);
      ExpectStreamSorted<double>(*client, n, desc);
    }
  }
  EXPECT_THAT(
      sortd.MetricsText(),
      HasSubstr("sortd_requests_total{code=\"OK\",method=\"SortStream\""));
}

// A client that opens a stream and sends nothing holds a call: the server
// ends it after --stream_idle_timeout, saying so.
TEST(SortStream, AStreamIdleTooLongIsEnded) {
  testing::InProcessService::Options options;
  options.service.stream_idle_timeout = absl::Milliseconds(200);
  testing::InProcessService sortd(std::move(options));
  ASSERT_TRUE(sortd.Start().ok());
  auto stub = v1::SortService::NewStub(sortd.Channel());
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::seconds(30));
  const auto start = std::chrono::steady_clock::now();
  auto stream = stub->SortStream(&context);
  v1::SortResponse response;
  EXPECT_FALSE(stream->Read(&response));
  const grpc::Status status = stream->Finish();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED)
      << status.error_message();
  EXPECT_THAT(status.error_message(), HasSubstr("--stream_idle_timeout"));
  EXPECT_GE(seconds, 0.2);
  EXPECT_LT(seconds, 20);
}

}  // namespace
}  // namespace sortd
