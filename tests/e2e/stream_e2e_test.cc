// End to end, SortStream: arrays far beyond the unary limit in chunks, and
// malformed streams refused with a clear status.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <thread>

#include "absl/strings/str_cat.h"
#include "client/client.h"
#include "tests/e2e_util.h"
#include "tests/reference.h"
#include "tests/server_process.h"

namespace sortd {
namespace {

using ::testing::HasSubstr;
using testing::RunCommand;
using testing::ServerProcess;

// A server whose unary limit is 1 MiB; SortStream takes arrays far beyond.
class E2EStream : public ::testing::Test {
 protected:
  static constexpr size_t kUnary = size_t{1} << 20;
  void SetUp() override {
    server_ = std::make_unique<ServerProcess>(std::vector<std::string>{
        "--device=cpu", "--cpu_threads=2",
        "--metrics_listen=", absl::StrCat("--max_request_bytes=", kUnary),
        absl::StrCat("--max_stream_bytes=", 16 * kUnary),
        "--stream_chunk_bytes=262144"});
    ASSERT_TRUE(server_->Start()) << server_->Output();
    ClientOptions o;
    o.max_unary_bytes = kUnary;
    auto c = Client::Create(server_->address(), o);
    ASSERT_TRUE(c.ok()) << c.status();
    client_ = std::move(*c);
  }
  void TearDown() override {
    EXPECT_EQ(server_->Terminate(), 0) << server_->Output();
  }
  std::unique_ptr<ServerProcess> server_;
  std::unique_ptr<Client> client_;
};

TEST_F(E2EStream, SortsAnArrayEightTimesTheUnaryLimit) {
  // 8 MiB of keys plus 4 MiB of values: 12x the unary limit.
  const size_t n = 8 * kUnary / sizeof(int64_t) + 123;
  const std::vector<int64_t> keys =
      testing::Generate<int64_t>(testing::Shape::kFewDistinct, n, 8);
  std::vector<uint32_t> values(n);
  std::iota(values.begin(), values.end(), 7u);
  auto sorted = client_->SortPairs<int64_t, uint32_t>(
      keys, values, {.descending = true, .return_permutation = true});
  ASSERT_TRUE(sorted.ok()) << sorted.status();
  const std::vector<uint32_t> perm = testing::RefPermutation(keys, true);
  ASSERT_EQ(sorted->permutation, perm);
  for (size_t i = 0; i < n; ++i) {
    ASSERT_EQ(sorted->keys[i], keys[perm[i]]) << i;
    ASSERT_EQ(sorted->values[i], values[perm[i]]) << i;
  }
  EXPECT_EQ(sorted->served_by.path(), v1::EXECUTION_PATH_CPU);
  // As one message the same array is refused: the stream was needed.
  ClientOptions unary;
  unary.max_unary_bytes = SIZE_MAX;
  auto one = Client::Create(server_->address(), unary);
  ASSERT_TRUE(one.ok());
  auto refused = (*one)->SortPairs<int64_t, uint32_t>(keys, values);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);

  // sortctl streams on its own above --max_unary_bytes, and verifies.
  auto r = RunCommand(Sortctl(*server_,
                              "sort --type=f32 --random=2500000 --verify "
                              "--max_unary_bytes=1048576 --json"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("\"stream\":true"));
  EXPECT_THAT(r.out, HasSubstr("\"verified\":true"));
}

TEST_F(E2EStream, BadStreamsGetAClearStatus) {
  auto channel = grpc::CreateChannel(server_->address(),
                                     grpc::InsecureChannelCredentials());
  auto stub = v1::SortService::NewStub(channel);
  auto run = [&](const std::vector<v1::SortRequest>& messages) {
    grpc::ClientContext context;
    auto stream = stub->SortStream(&context);
    for (const v1::SortRequest& m : messages) {
      if (!stream->Write(m)) break;
    }
    stream->WritesDone();
    v1::SortResponse response;
    size_t answers = 0;
    while (stream->Read(&response)) ++answers;
    grpc::Status s = stream->Finish();
    EXPECT_TRUE(s.ok() || answers == 0) << "an error after answers";
    return s;
  };
  v1::SortRequest u32, u64, with_values;
  u32.set_u32_keys(PackArray<uint32_t>(std::vector<uint32_t>{3, 1, 2}));
  u64.set_u64_keys(PackArray<uint64_t>(std::vector<uint64_t>{3, 1}));
  with_values = u32;
  with_values.set_u32_values(
      PackArray<uint32_t>(std::vector<uint32_t>{0, 1, 2}));

  grpc::Status s = run({u32, u64});
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("message 2 sets u64_keys"));
  s = run({u32, with_values});
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("same fields"));
  s = run({});
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("before its first message"));
  v1::SortRequest partial;
  partial.set_u32_keys("12345");
  s = run({u32, partial});
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("stream message 2"));
  // Beyond --max_stream_bytes (16 MiB): refused, and the server serves on.
  v1::SortRequest big;
  big.set_u32_keys(std::string(kUnary - 64, '\x01'));
  std::vector<v1::SortRequest> many(17, big);
  s = run(many);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(s.error_message(), HasSubstr("--max_stream_bytes"));
  EXPECT_TRUE(run({u32, u32}).ok());
  // An empty array streams back as one empty answer.
  v1::SortRequest empty;
  empty.set_f64_keys("");
  EXPECT_TRUE(run({empty}).ok());
}

}  // namespace
}  // namespace sortd
