// End to end, the real sortd over the real gRPC stack, driven with raw
// bytes the way a client in any language can send them: an answer is
// complete or absent. Malformed messages, unary or inside a stream, are
// refused with INVALID_ARGUMENT saying what was wrong and nothing is
// sorted; a stream's later messages follow the contract; one huge call
// does not starve other clients.
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
#include "tests/server_process.h"

namespace sortd {
namespace {

using ::testing::HasSubstr;
using testing::ServerProcess;
using Clock = std::chrono::steady_clock;

std::string U32Bytes(std::initializer_list<uint32_t> keys) {
  std::string s;
  for (uint32_t k : keys) s.append(reinterpret_cast<const char*>(&k), 4);
  return s;
}

std::string Flatten(const grpc::ByteBuffer& buffer) {
  std::vector<grpc::Slice> slices;
  (void)buffer.Dump(&slices);
  std::string out;
  for (const grpc::Slice& s : slices) {
    out.append(reinterpret_cast<const char*>(s.begin()), s.size());
  }
  return out;
}

std::shared_ptr<grpc::Channel> Channel(const ServerProcess& server) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);
  return grpc::CreateCustomChannel(server.address(),
                                   grpc::InsecureChannelCredentials(), args);
}

struct UnaryResult {
  grpc::Status status;
  std::string response;
};

UnaryResult Unary(grpc::GenericStub& stub, const std::string& method,
                  const std::string& bytes) {
  grpc::Slice slice(bytes);
  grpc::ByteBuffer request(&slice, 1), response;
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::seconds(30));
  std::promise<grpc::Status> done;
  stub.UnaryCall(&context, "/sortd.v1.SortService/" + method, {}, &request,
                 &response, [&](grpc::Status s) { done.set_value(s); });
  UnaryResult r;
  r.status = done.get_future().get();
  r.response = Flatten(response);
  return r;
}

// One SortStream call with raw messages: sends them in order, half-closes,
// reads every answer chunk. Records when the half-close was sent and when
// the first answer arrived.
class RawStream final
    : public grpc::ClientBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  RawStream(grpc::GenericStub& stub, std::vector<std::string> messages)
      : messages_(std::move(messages)) {
    context_.set_deadline(std::chrono::system_clock::now() +
                          std::chrono::seconds(300));
    stub.PrepareBidiStreamingCall(&context_, "/sortd.v1.SortService/SortStream",
                                  {}, this);
    StartRead(&in_);
    WriteNextOrClose();
    StartCall();
  }

  void OnWriteDone(bool ok) override {
    if (ok) WriteNextOrClose();
  }
  void OnWritesDoneDone(bool) override {
    std::lock_guard<std::mutex> l(mu_);
    closed_at_ = Clock::now();
  }
  void OnReadDone(bool ok) override {
    if (!ok) return;
    {
      std::lock_guard<std::mutex> l(mu_);
      if (responses_.empty()) first_answer_at_ = Clock::now();
      responses_.push_back(Flatten(in_));
    }
    StartRead(&in_);
  }
  void OnDone(const grpc::Status& s) override {
    std::lock_guard<std::mutex> l(mu_);
    status_ = s;
    done_ = true;
    cv_.notify_all();
  }

  // Waits for the end of the call.
  grpc::Status Await() {
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait(l, [this] { return done_; });
    return status_;
  }
  // Call after Await().
  const std::vector<std::string>& responses() const { return responses_; }
  Clock::time_point closed_at() const { return closed_at_; }
  Clock::time_point first_answer_at() const { return first_answer_at_; }

 private:
  void WriteNextOrClose() {
    if (next_ < messages_.size()) {
      out_ = grpc::ByteBuffer();
      grpc::Slice slice(messages_[next_]);
      out_ = grpc::ByteBuffer(&slice, 1);
      ++next_;
      StartWrite(&out_);
    } else {
      StartWritesDone();
    }
  }

  grpc::ClientContext context_;
  std::vector<std::string> messages_;
  size_t next_ = 0;
  grpc::ByteBuffer out_, in_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  grpc::Status status_;
  std::vector<std::string> responses_;
  Clock::time_point closed_at_, first_answer_at_;
};

class IntegrityTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    server_ = new ServerProcess({"--device=cpu", "--cpu_threads=2"});
    ASSERT_TRUE(server_->Start()) << server_->Output();
  }
  static void TearDownTestSuite() {
    EXPECT_EQ(server_->Terminate(), 0) << server_->Output();
    delete server_;
  }
  void SetUp() override {
    ASSERT_NE(server_, nullptr);
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

  static ServerProcess* server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<grpc::GenericStub> stub_;
};

ServerProcess* IntegrityTest::server_ = nullptr;

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

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * v.size()))];
}

// One client's SortStream far larger than the whole admission budget runs
// while other clients' 1k-key sorts keep being answered, quickly.
TEST(FairnessTest, SmallSortsAreServedWhileAHugeStreamRuns) {
  ServerProcess server(
      {"--device=cpu", "--cpu_threads=2", "--max_queued_keys=4194304"});
  ASSERT_TRUE(server.Start()) << server.Output();
  std::mt19937 rng(3);
  std::string small_keys(4096, '\0');
  for (char& c : small_keys) c = static_cast<char>(rng());
  const std::string small = "\x0a\x80\x20" + small_keys;  // 1024 u32 keys
  auto small_channel = Channel(server);
  grpc::GenericStub small_stub(small_channel);

  // Idle: the same calls, one at a time.
  std::vector<double> idle;
  for (int i = 0; i < 200; ++i) {
    const auto t0 = Clock::now();
    ASSERT_TRUE(Unary(small_stub, "Sort", small).status.ok());
    idle.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  const double idle_p99 = Percentile(idle, 0.99);

  // The stream: 32M keys (128 MiB, 8x the budget) in 2 MiB messages.
  constexpr size_t kStreamKeys = size_t{32} << 20, kPerMessage = 512 << 10;
  std::vector<std::string> messages;
  std::mt19937_64 big(11);
  for (size_t at = 0; at < kStreamKeys; at += kPerMessage) {
    std::string keys(kPerMessage * 4, '\0');
    for (size_t i = 0; i < keys.size(); i += 8) {
      const uint64_t x = big();
      std::memcpy(&keys[i], &x, 8);
    }
    v1::SortRequest m;
    m.set_u32_keys(std::move(keys));
    messages.push_back(m.SerializeAsString());
  }
  auto stream_channel = Channel(server);
  grpc::GenericStub stream_stub(stream_channel);

  struct Call {
    Clock::time_point start, end;
    grpc::StatusCode code;
  };
  std::mutex mu;
  std::vector<Call> calls;
  std::atomic<bool> stop{false};
  std::vector<std::thread> clients;
  for (int c = 0; c < 2; ++c) {
    clients.emplace_back([&] {
      while (!stop) {
        const auto t0 = Clock::now();
        const grpc::Status s = Unary(small_stub, "Sort", small).status;
        std::lock_guard<std::mutex> l(mu);
        calls.push_back({t0, Clock::now(), s.error_code()});
      }
    });
  }
  RawStream stream(stream_stub, std::move(messages));
  const grpc::Status s = stream.Await();
  stop = true;
  for (std::thread& t : clients) t.join();
  ASSERT_TRUE(s.ok()) << s.error_message();
  ASSERT_EQ(stream.responses().size(), 64u);

  // The calls made entirely while the stream's sort was admitted: from its
  // half-close to its first answer.
  std::vector<double> during;
  std::map<grpc::StatusCode, int> codes;
  for (const Call& c : calls) {
    if (c.start < stream.closed_at() || c.end > stream.first_answer_at()) {
      continue;
    }
    ++codes[c.code];
    during.push_back(std::chrono::duration<double>(c.end - c.start).count());
  }
  EXPECT_EQ(codes[grpc::StatusCode::RESOURCE_EXHAUSTED], 0);
  EXPECT_EQ(codes[grpc::StatusCode::OK], static_cast<int>(during.size()));
  ASSERT_GE(during.size(), 20u) << "too few calls overlapped the sort";
  const double p99 = Percentile(during, 0.99);
  std::printf(
      "1k-key sorts: idle p99 %.3f ms; during the stream p99 %.3f ms "
      "over %zu calls\n",
      idle_p99 * 1e3, p99 * 1e3, during.size());
  EXPECT_LE(p99, 10 * idle_p99)
      << "idle p99 " << idle_p99 * 1e3 << " ms, during the stream " << p99 * 1e3
      << " ms over " << during.size() << " calls";
  EXPECT_EQ(server.Terminate(), 0) << server.Output();
}

}  // namespace
}  // namespace sortd
