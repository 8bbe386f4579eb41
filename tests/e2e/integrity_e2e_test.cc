// End to end, the real sortd over the real gRPC stack, driven with raw
// bytes the way a client in any language can send them: an answer is
// complete or absent. Malformed messages, unary or inside a stream, are
// refused with INVALID_ARGUMENT saying what was wrong and nothing is
// sorted; a stream's later messages follow the contract; the C++ client's
// reused answers hold only the latest answer.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <future>
#include <map>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "client/client.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "sortd/v1/sortd.pb.h"
#include "tests/raw_grpc.h"
#include "tests/server_fixture.h"
#include "tests/server_process.h"

namespace sortd {
namespace {

using testing::Channel;
using testing::Flatten;
using ::testing::HasSubstr;
using testing::RawStream;
using testing::ServerProcess;
using testing::U32Bytes;
using testing::Unary;
using testing::UnaryResult;

class IntegrityTest : public testing::SharedServerTest<IntegrityTest> {
 public:
  static std::vector<std::string> ServerArgs() {
    return {"--device=cpu", "--cpu_threads=2"};
  }

 protected:
  void SetUp() override {
    SharedServerTest::SetUp();
    channel_ = Channel(*server_);
    stub_ = std::make_unique<grpc::GenericStub>(channel_);
  }

  // A valid call answers correctly: the server still serves.
  void ExpectServing() {
    const UnaryResult r =
        Unary(*stub_, "Sort", "\x0a\x0c" + U32Bytes({5, 4, 3}));
    ASSERT_TRUE(r.status.ok()) << r.status.error_message();
    v1::SortResponse response;
    ASSERT_TRUE(response.ParseFromString(r.response));
    EXPECT_EQ(response.u32_keys(), U32Bytes({3, 4, 5}));
  }

  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<grpc::GenericStub> stub_;
};

const std::string kFirst =  // u32_keys [5,4,3], return_permutation
    "\x0a\x0c" + U32Bytes({5, 4, 3}) + std::string("\x50\x01", 2);
const std::string kThird = "\x0a\x0c" + U32Bytes({2, 1, 0});

TEST_F(IntegrityTest, AnUnparseableStreamMessageFailsTheWholeStream) {
  v1::SortRequest truncated;
  truncated.set_u32_keys(U32Bytes({9, 8, 7, 6}));
  std::string cut = truncated.SerializeAsString();
  cut.resize(cut.size() - 3);
  for (const std::string& bad : {std::string(16, '\xff'), cut}) {
    RawStream stream(*stub_, {kFirst, bad, kThird});
    const grpc::Status s = stream.Await();
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(s.error_message(), HasSubstr("stream message 2"));
    EXPECT_THAT(s.error_message(), HasSubstr("did not parse"));
    EXPECT_TRUE(stream.responses().empty()) << "nothing may be sorted";
  }
  ExpectServing();
}

TEST_F(IntegrityTest, AnUnparseableFirstStreamMessageSaysSo) {
  RawStream stream(*stub_, {std::string(16, '\xff'), kThird});
  const grpc::Status s = stream.Await();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("stream message 1"));
  EXPECT_THAT(s.error_message(), HasSubstr("did not parse"));
  EXPECT_THAT(s.error_message(), ::testing::Not(HasSubstr("ended before")));
  EXPECT_TRUE(stream.responses().empty());
}

TEST_F(IntegrityTest, UnparseableUnaryRequestsAreInvalidArguments) {
  struct Case {
    const char* name;
    std::string bytes;
    const char* says;
  };
  std::mt19937_64 rng(5);
  std::string random(64, '\0');
  for (char& c : random) c = static_cast<char>(rng() | 0x80);
  const Case cases[] = {
      {"random bytes", random, "did not parse"},
      {"a length prefix past the end", "\x0a\x0c\x01", "claims 12 bytes"},
      {"field number 0", std::string("\x02\x00", 2), "field number 0"},
      {"an unterminated varint", "\x0a\x80", "unterminated varint"},
      {"a truncated message", "\x0a\x0c" + U32Bytes({1, 2}),
       "claims 12 bytes but only 8 remain"},
  };
  for (const char* method : {"Sort", "Echo", "Transpose"}) {
    for (const Case& c : cases) {
      SCOPED_TRACE(std::string(method) + ": " + c.name);
      const UnaryResult r = Unary(*stub_, method, c.bytes);
      EXPECT_EQ(r.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
      EXPECT_THAT(r.status.error_message(), HasSubstr(c.says));
      EXPECT_THAT(
          r.status.error_message(),
          HasSubstr(std::string(method) == "Transpose" ? "TransposeRequest"
                                                       : "SortRequest"));
      EXPECT_TRUE(r.response.empty());
    }
  }
  ExpectServing();
}

// sortd.proto: `order` and `return_permutation` are read from the first
// message of a stream and ignored in later ones.
TEST_F(IntegrityTest, LaterStreamMessagesDoNotChangeTheOrder) {
  const std::string unknown_order = kThird + std::string("\x38\x07", 2);
  const std::string descending_first =
      "\x0a\x0c" + U32Bytes({5, 9, 3}) + std::string("\x38\x01", 2);
  struct Case {
    std::vector<std::string> messages;
    std::string keys;
  };
  const Case cases[] = {
      {{kFirst, unknown_order}, U32Bytes({0, 1, 2, 3, 4, 5})},
      {{descending_first, kThird}, U32Bytes({9, 5, 3, 2, 1, 0})},
  };
  for (const Case& c : cases) {
    RawStream stream(*stub_, c.messages);
    const grpc::Status s = stream.Await();
    ASSERT_TRUE(s.ok()) << s.error_message();
    std::string keys;
    for (const std::string& chunk : stream.responses()) {
      v1::SortResponse response;
      ASSERT_TRUE(response.ParseFromString(chunk));
      keys += response.u32_keys();
    }
    EXPECT_EQ(keys, c.keys);
  }
}

// The C++ client's answer buffers are reused from call to call; a field the
// next answer lacks is cleared, never left over from the previous one.
TEST_F(IntegrityTest, ReusedAnswerMessagesHoldOnlyTheLatestAnswer) {
  auto client = Client::Create(server_->address());
  ASSERT_TRUE(client.ok()) << client.status();
  v1::SortRequest pairs;
  pairs.set_u64_keys(std::string(8, '\x02') + std::string(8, '\x01'));
  pairs.set_u32_values(U32Bytes({7, 8}));
  pairs.set_return_permutation(true);
  v1::SortResponse answer;
  ASSERT_TRUE((*client)->Sort(pairs, &answer).ok());
  EXPECT_EQ(answer.u64_keys(), std::string(8, '\x01') + std::string(8, '\x02'));
  EXPECT_EQ(answer.u32_values(), U32Bytes({8, 7}));
  EXPECT_EQ(answer.permutation(), U32Bytes({1, 0}));

  v1::SortRequest keys_only;
  keys_only.set_f32_keys(U32Bytes({0x40000000, 0x3f800000}));  // 2.0, 1.0
  ASSERT_TRUE((*client)->Sort(keys_only, &answer).ok());
  EXPECT_EQ(answer.keys_case(), v1::SortResponse::kF32Keys);
  EXPECT_EQ(answer.f32_keys(), U32Bytes({0x3f800000, 0x40000000}));
  EXPECT_EQ(answer.values_case(), v1::SortResponse::VALUES_NOT_SET);
  EXPECT_TRUE(answer.permutation().empty());
  EXPECT_EQ(answer.served_by().route(), "cpu");

  // A refused call leaves no answer behind.
  v1::SortRequest bad;
  bad.set_u32_keys("abc");
  EXPECT_FALSE((*client)->Echo(bad, &answer).ok());
  EXPECT_EQ(answer.keys_case(), v1::SortResponse::KEYS_NOT_SET);
  EXPECT_FALSE(answer.has_served_by());
}

}  // namespace
}  // namespace sortd
