// End to end, the real sortd: every byte it holds for a client is admitted
// against --max_held_bytes before it is held, and what a client leaves
// hanging is ended and released. Each test is an attack: streams that never
// half-close, a stream left idle, parts padded with unknown fields, a part
// from another host naming someone else's array, a part group that never
// completes. The bytes held are read from sortd_held_bytes.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "sortd/v1/sortd.pb.h"
#include "tests/byte_buffer.h"
#include "tests/http_get.h"
#include "tests/raw_grpc.h"
#include "tests/reference.h"
#include "tests/server_process.h"

namespace sortd {
namespace {

using ::testing::HasSubstr;
using testing::ServerProcess;
using testing::Unary;
using testing::UnaryResult;

constexpr size_t kMiB = size_t{1} << 20;

// A channel of its own (its own connection) to `address`.
std::shared_ptr<grpc::Channel> OwnChannel(const std::string& address) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  return grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(),
                                   args);
}

// A metric's value now (-1: not exported).
double Metric(const ServerProcess& server, const std::string& name) {
  return MetricValue(HttpGet(server.metrics_address(), "/metrics"), name);
}

// Waits (60 s at most, scraping) until `name` reads `want`; every scrape
// of sortd_held_bytes on the way must be within `held_bound`. Returns the
// last value read.
double WaitForMetricValue(const ServerProcess& server, const std::string& name,
                          double want, double held_bound = 0) {
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(60);
  double v = -1;
  while (std::chrono::steady_clock::now() < deadline) {
    const std::string m = HttpGet(server.metrics_address(), "/metrics");
    if (held_bound > 0) {
      EXPECT_LE(MetricValue(m, "sortd_held_bytes"), held_bound);
    }
    v = MetricValue(m, name);
    if (v == want) return v;
    std::this_thread::yield();
  }
  return v;
}

// Waits (60 s at most, scraping) until the metrics contain `text`.
bool WaitForMetricText(const ServerProcess& server, const std::string& text) {
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < deadline) {
    if (HttpGet(server.metrics_address(), "/metrics").find(text) !=
        std::string::npos) {
      return true;
    }
    std::this_thread::yield();
  }
  return false;
}

// A SortStream that sends the messages it is given and never half-closes
// (unless told to): what a client that holds a stream open does. With
// `read_answers` false it never reads an answer either.
class OpenStream final
    : public grpc::ClientBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  explicit OpenStream(grpc::GenericStub& stub, bool read_answers = true) {
    context_.set_deadline(std::chrono::system_clock::now() +
                          std::chrono::seconds(120));
    stub.PrepareBidiStreamingCall(&context_, "/sortd.v1.SortService/SortStream",
                                  {}, this);
    if (read_answers) StartRead(&in_);
    // Writes start from the test's thread, outside any reaction: gRPC may
    // end the call (and free its call object) only once the hold is gone,
    // so a write never reaches an ended call.
    AddHold();
    StartCall();
  }

  // The reactor outlives its call: a test that stops early cancels it.
  ~OpenStream() override {
    Cancel();
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait(l, [this] { return done_; });
  }

  // Sends `message` and waits until gRPC took it; false once a write has
  // failed (the call is ending) or the hold is gone.
  bool Send(const std::string& message) {
    std::unique_lock<std::mutex> l(mu_);
    if (!held_) return false;
    grpc::Slice slice(message);
    out_ = grpc::ByteBuffer(&slice, 1);
    writing_ = true;
    StartWrite(&out_);
    cv_.wait(l, [this] { return !writing_; });
    if (!write_ok_) ReleaseLocked();
    return write_ok_;
  }
  void Cancel() {
    context_.TryCancel();
    Release();
  }
  // Half-closes: the array is complete.
  void Close() {
    {
      std::lock_guard<std::mutex> l(mu_);
      if (held_) StartWritesDone();
    }
    Release();
  }

  // The call's status once it ends, within `timeout`. Sends no more.
  std::optional<grpc::Status> Await(std::chrono::seconds timeout) {
    Release();
    std::unique_lock<std::mutex> l(mu_);
    if (!cv_.wait_for(l, timeout, [this] { return done_; })) return {};
    return status_;
  }

  void OnWriteDone(bool ok) override {
    std::lock_guard<std::mutex> l(mu_);
    writing_ = false;
    write_ok_ = ok;
    cv_.notify_all();
  }
  void OnReadDone(bool ok) override {
    if (ok) StartRead(&in_);
  }
  void OnDone(const grpc::Status& s) override {
    std::lock_guard<std::mutex> l(mu_);
    status_ = s;
    done_ = true;
    cv_.notify_all();
  }

 private:
  void Release() {
    std::lock_guard<std::mutex> l(mu_);
    ReleaseLocked();
  }
  void ReleaseLocked() {
    if (!held_) return;
    held_ = false;
    RemoveHold();
  }

  grpc::ClientContext context_;
  grpc::ByteBuffer out_, in_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool held_ = true, writing_ = false, write_ok_ = false, done_ = false;
  grpc::Status status_;
};

// A message of `n` random u32 keys (as a stream message or a Sort request).
std::string KeysMessage(size_t n, uint64_t seed) {
  const std::vector<uint32_t> keys =
      testing::Generate<uint32_t>(testing::Shape::kRandom, n, seed);
  v1::SortRequest r;
  r.set_u32_keys(
      std::string(reinterpret_cast<const char*>(keys.data()), keys.size() * 4));
  return r.SerializeAsString();
}

// What sortd charges a stream of `messages` messages of 1 MiB of u32 keys
// (server/held_bytes.h): each message's bytes, its keys once more (the
// joined array), the sorted keys and the radix scratch (two copies of the
// keys); with the first, one answer chunk (--stream_chunk_bytes).
size_t StreamCharge(size_t messages) {
  const size_t message = KeysMessage(kMiB / 4, 0).size();
  return messages * (message + kMiB + kMiB + 2 * kMiB) + 2 * kMiB;
}

// Echo sorts nothing and answers from the buffer its request was read
// into: it is charged its request alone, not a sort's answer and scratch.
// An array whose Sort would pass the budget (here the share of one call)
// is echoed back whole, and what it held is released.
TEST(HeldBytes, AnEchoIsChargedItsRequestNotASortsWork) {
  ServerProcess server(
      {"--device=cpu", "--cpu_threads=2", "--metrics_listen=127.0.0.1:0",
       "--max_request_bytes=8388608", "--max_held_bytes=16777216",
       "--max_call_bytes=16777216", "--max_client_held_bytes=16777216"});
  ASSERT_TRUE(server.Start()) << server.Output();
  grpc::GenericStub stub(OwnChannel(server.address()));
  // 1M u32 keys: a Sort holds the 4 MiB message, 4 MiB of answer and 8 of
  // scratch (server/held_bytes.h), past 16 MiB; an Echo the message alone.
  const std::string request = KeysMessage(kMiB, 3);
  const UnaryResult refused = Unary(stub, "Sort", request);
  EXPECT_EQ(refused.status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(refused.status.error_message(), HasSubstr("--max_call_bytes"));
  const UnaryResult echoed = Unary(stub, "Echo", request);
  ASSERT_TRUE(echoed.status.ok()) << echoed.status.error_message();
  v1::SortResponse answer;
  ASSERT_TRUE(answer.ParseFromString(echoed.response));
  v1::SortRequest sent;
  ASSERT_TRUE(sent.ParseFromString(request));
  EXPECT_EQ(answer.u32_keys(), sent.u32_keys());
  EXPECT_EQ(WaitForMetricValue(server, "sortd_held_bytes", 0, 16.0 * kMiB), 0)
      << server.Output();
  EXPECT_EQ(server.Terminate(), 0) << server.Output();
}

// Four streams that never half-close, each of 27 MiB of charge: once two
// hold theirs, a third's next message passes --max_held_bytes=64 MiB and
// it is ended RESOURCE_EXHAUSTED, releasing what it held; so is a unary
// Sort that needs more than is left; sortd_held_bytes never passes the
// bound. (Before the budget, such streams held 2.36 GB while new Sorts
// were admitted.)
TEST(HeldBytes, StreamsThatNeverHalfCloseCannotHoldMoreThanTheBudget) {
  ServerProcess server(
      {"--device=cpu", "--cpu_threads=2", "--metrics_listen=127.0.0.1:0",
       "--max_request_bytes=16777216", "--max_held_bytes=67108864",
       "--max_call_bytes=33554432",
       // One client here: the bound under test is the budget of all.
       "--max_client_held_bytes=67108864"});
  ASSERT_TRUE(server.Start()) << server.Output();
  const double bound = 64.0 * kMiB;
  EXPECT_EQ(Metric(server, "sortd_max_held_bytes"), bound);
  grpc::GenericStub stub(OwnChannel(server.address()));
  const std::string chunk = KeysMessage(kMiB / 4, 1);
  std::vector<std::unique_ptr<OpenStream>> streams;
  for (int i = 0; i < 2; ++i) {
    streams.push_back(std::make_unique<OpenStream>(stub));
    for (int m = 0; m < 5; ++m) ASSERT_TRUE(streams.back()->Send(chunk));
    ASSERT_EQ(WaitForMetricValue(server, "sortd_held_bytes",
                                 static_cast<double>((i + 1) * StreamCharge(5)),
                                 bound),
              static_cast<double>((i + 1) * StreamCharge(5)))
        << server.Output();
  }
  // 54 MiB held: the next two streams are ended at their second message.
  for (int i = 2; i < 4; ++i) {
    streams.push_back(std::make_unique<OpenStream>(stub));
    for (int m = 0; m < 5 && streams.back()->Send(chunk); ++m) {
    }
    const std::optional<grpc::Status> s =
        streams.back()->Await(std::chrono::seconds(60));
    ASSERT_TRUE(s.has_value());
    EXPECT_EQ(s->error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
    EXPECT_THAT(s->error_message(), HasSubstr("--max_held_bytes"));
    EXPECT_THAT(s->error_message(), HasSubstr("stream message"));
  }
  EXPECT_EQ(WaitForMetricValue(server, "sortd_held_bytes",
                               static_cast<double>(2 * StreamCharge(5)), bound),
            static_cast<double>(2 * StreamCharge(5)));
  // A Sort of 4 MiB of keys needs 20 MiB (server/held_bytes.h): refused
  // while the streams hold theirs...
  const std::string sort = KeysMessage(kMiB, 2);
  const UnaryResult refused = Unary(stub, "Sort", sort);
  EXPECT_EQ(refused.status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(refused.status.error_message(), HasSubstr("--max_held_bytes"));
  // ... and served once one has gone, its bytes released.
  streams[0]->Cancel();
  ASSERT_TRUE(streams[0]->Await(std::chrono::seconds(60)).has_value());
  EXPECT_EQ(WaitForMetricValue(server, "sortd_held_bytes",
                               static_cast<double>(StreamCharge(5)), bound),
            static_cast<double>(StreamCharge(5)));
  const UnaryResult served = Unary(stub, "Sort", sort);
  ASSERT_TRUE(served.status.ok()) << served.status.error_message();
  v1::SortResponse r;
  ASSERT_TRUE(r.ParseFromString(served.response));
  std::vector<uint32_t> want =
      testing::Generate<uint32_t>(testing::Shape::kRandom, kMiB, 2);
  std::sort(want.begin(), want.end());
  EXPECT_EQ(
      r.u32_keys(),
      std::string(reinterpret_cast<const char*>(want.data()), want.size() * 4));
  streams[1]->Cancel();
  ASSERT_TRUE(streams[1]->Await(std::chrono::seconds(60)).has_value());
  EXPECT_EQ(WaitForMetricValue(server, "sortd_held_bytes", 0), 0);
}

// A stream on which the client stops sending is ended once
// --stream_idle_timeout passes, and what it held is released.
TEST(HeldBytes, AnIdleStreamIsEndedAndReleased) {
  ServerProcess server({"--device=cpu", "--cpu_threads=2",
                        "--metrics_listen=127.0.0.1:0",
                        "--stream_idle_timeout=1s"});
  ASSERT_TRUE(server.Start()) << server.Output();
  grpc::GenericStub stub(OwnChannel(server.address()));
  OpenStream stream(stub);
  ASSERT_TRUE(stream.Send(KeysMessage(kMiB / 4, 3)));
  const std::optional<grpc::Status> s = stream.Await(std::chrono::seconds(60));
  ASSERT_TRUE(s.has_value()) << "the idle stream was never ended";
  EXPECT_EQ(s->error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_THAT(s->error_message(), HasSubstr("--stream_idle_timeout"));
  EXPECT_EQ(WaitForMetricValue(server, "sortd_held_bytes", 0), 0);
  // The server goes on serving streams that keep sending.
  testing::RawStream* live = new testing::RawStream(
      stub, {KeysMessage(1000, 4), KeysMessage(1000, 5)});
  EXPECT_TRUE(live->Await().ok());
  delete live;
}

// A client that sends its array and never reads the answer: once sortd's
// writes have waited --stream_idle_timeout for the client, the call is
// cancelled and the answer's bytes released.
TEST(HeldBytes, AStreamWhoseAnswerIsNotReadIsCancelledAndReleased) {
  ServerProcess server({"--device=cpu", "--cpu_threads=2",
                        "--metrics_listen=127.0.0.1:0",
                        "--stream_idle_timeout=1s"});
  ASSERT_TRUE(server.Start()) << server.Output();
  grpc::GenericStub stub(OwnChannel(server.address()));
  OpenStream stream(stub, /*read_answers=*/false);
  // 64 MiB of keys: far more answer than the connection's windows take.
  for (uint64_t m = 0; m < 16; ++m) {
    ASSERT_TRUE(stream.Send(KeysMessage(kMiB, 30 + m)));
  }
  stream.Close();
  // The server's side: the call ends DEADLINE_EXCEEDED (the client, not
  // reading, may not hear of it until it reads) and its bytes go.
  const std::string ended =
      "sortd_requests_total{code=\"DEADLINE_EXCEEDED\",method=\"SortStream\","
      "path=\"none\"} 1";
  EXPECT_TRUE(WaitForMetricText(server, ended)) << server.Output();
  EXPECT_EQ(WaitForMetricValue(server, "sortd_held_bytes", 0), 0);
  stream.Cancel();
  EXPECT_TRUE(stream.Await(std::chrono::seconds(60)).has_value());
}

// A Sort call carrying part `index` of `count` of array `group`, with `n`
// keys and `padding` bytes of an unknown field.
std::string PartMessage(const std::string& group, uint32_t index,
                        uint32_t count, size_t n, uint64_t seed,
                        size_t padding = 0) {
  const std::vector<uint32_t> keys =
      testing::Generate<uint32_t>(testing::Shape::kRandom, n, seed);
  v1::SortRequest r;
  r.set_u32_keys(
      std::string(reinterpret_cast<const char*>(keys.data()), n * 4));
  r.mutable_part()->set_group(group);
  r.mutable_part()->set_index(index);
  r.mutable_part()->set_count(count);
  std::string bytes = r.SerializeAsString();
  if (padding > 0) {
    // Field 1000, length-delimited: tag 1000 << 3 | 2, as a varint.
    std::string pad = "\xc2\x3e";
    size_t len = padding;
    while (len >= 0x80) {
      pad.push_back(static_cast<char>((len & 0x7f) | 0x80));
      len >>= 7;
    }
    pad.push_back(static_cast<char>(len));
    pad.append(padding, 'p');
    bytes += pad;
  }
  return bytes;
}

// Parts of one key and 12 MiB of unknown-field padding each: charged by
// their messages' bytes, the fifth passes --max_held_bytes=64 MiB and is
// refused, however few keys they carry. (Before, waiting parts were
// charged by their arrays: ten such held 2.4 GB.)
TEST(HeldBytes, PaddedPartsAreChargedByTheirMessageBytes) {
  ServerProcess server(
      {"--device=cpu", "--cpu_threads=2", "--metrics_listen=127.0.0.1:0",
       "--max_request_bytes=33554432", "--max_held_bytes=67108864",
       "--max_call_bytes=33554432", "--part_timeout=8s",
       // One client here: the bound under test is the budget of all.
       "--max_client_held_bytes=67108864"});
  ASSERT_TRUE(server.Start()) << server.Output();
  const double bound = 64.0 * kMiB;
  const std::string group(16, 'G');
  std::vector<std::string> messages;
  for (uint32_t i = 0; i < 5; ++i) {
    messages.push_back(PartMessage(group, i, 10, 1, i, 12 * kMiB));
  }
  std::vector<std::unique_ptr<grpc::GenericStub>> stubs;
  std::vector<std::future<UnaryResult>> waiting;
  for (size_t i = 0; i < 4; ++i) {
    stubs.push_back(
        std::make_unique<grpc::GenericStub>(OwnChannel(server.address())));
    grpc::GenericStub* stub = stubs.back().get();
    const std::string& m = messages[i];
    waiting.push_back(std::async(
        std::launch::async, [stub, &m] { return Unary(*stub, "Sort", m); }));
    ASSERT_EQ(WaitForMetricValue(server, "sortd_waiting_parts",
                                 static_cast<double>(i + 1), bound),
              static_cast<double>(i + 1));
  }
  double sent = 0;
  for (size_t i = 0; i < 4; ++i)
    sent += static_cast<double>(messages[i].size());
  EXPECT_EQ(Metric(server, "sortd_waiting_part_bytes"), sent);
  EXPECT_GE(Metric(server, "sortd_held_bytes"), sent);
  grpc::GenericStub fifth(OwnChannel(server.address()));
  const UnaryResult refused = Unary(fifth, "Sort", messages[4]);
  EXPECT_EQ(refused.status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(refused.status.error_message(), HasSubstr("--max_held_bytes"));
  EXPECT_LE(Metric(server, "sortd_held_bytes"), bound);
  // The group never completes: its parts time out and their bytes go.
  for (auto& w : waiting) {
    EXPECT_EQ(w.get().status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  }
  EXPECT_EQ(WaitForMetricValue(server, "sortd_held_bytes", 0), 0);
  EXPECT_EQ(Metric(server, "sortd_waiting_part_bytes"), 0);
}

// A client on another host that learns an array's group name sends a part
// of it: it waits in a group of its own and times out, never seeing the
// array's keys, while the owner's parts, over two connections of its host,
// come together. The hosts: 127.0.0.1 and ::1, sortd listening on both.
TEST(HeldBytes, APartFromAnotherHostNeverJoinsTheArray) {
  ServerProcess server({"--device=cpu", "--cpu_threads=2",
                        "--metrics_listen=127.0.0.1:0", "--listen=[::]:0",
                        "--part_timeout=3s"});
  ASSERT_TRUE(server.Start()) << server.Output();
  const std::string port =
      server.address().substr(server.address().rfind(':') + 1);
  grpc::GenericStub owner_a(OwnChannel("127.0.0.1:" + port)),
      owner_b(OwnChannel("127.0.0.1:" + port)),
      other(OwnChannel("[::1]:" + port));
  {
    const UnaryResult probe = Unary(other, "Sort", KeysMessage(1, 0));
    if (probe.status.error_code() == grpc::StatusCode::UNAVAILABLE) {
      GTEST_SKIP() << "no IPv6 loopback here: " << probe.status.error_message();
    }
    ASSERT_TRUE(probe.status.ok()) << probe.status.error_message();
  }
  const std::string group = "0123456789abcdef0123";
  const std::string first = PartMessage(group, 0, 2, 1000, 10);
  const std::string second = PartMessage(group, 1, 2, 1000, 11);
  const std::string intruder = PartMessage(group, 1, 2, 1000, 12);
  std::future<UnaryResult> owner_first = std::async(
      std::launch::async, [&] { return Unary(owner_a, "Sort", first); });
  ASSERT_EQ(WaitForMetricValue(server, "sortd_waiting_parts", 1), 1);
  std::future<UnaryResult> intruding = std::async(
      std::launch::async, [&] { return Unary(other, "Sort", intruder); });
  // The intruder's part waits too, in a group of its own.
  ASSERT_EQ(WaitForMetricValue(server, "sortd_waiting_parts", 2), 2);
  const UnaryResult owner_second = Unary(owner_b, "Sort", second);
  const UnaryResult owner_first_result = owner_first.get();
  ASSERT_TRUE(owner_first_result.status.ok())
      << owner_first_result.status.error_message();
  ASSERT_TRUE(owner_second.status.ok()) << owner_second.status.error_message();
  // The owner's array, sorted: its own keys only.
  std::vector<uint32_t> want =
      testing::Generate<uint32_t>(testing::Shape::kRandom, 1000, 10);
  const std::vector<uint32_t> more =
      testing::Generate<uint32_t>(testing::Shape::kRandom, 1000, 11);
  want.insert(want.end(), more.begin(), more.end());
  std::sort(want.begin(), want.end());
  v1::SortResponse r0, r1;
  ASSERT_TRUE(r0.ParseFromString(owner_first_result.response));
  ASSERT_TRUE(r1.ParseFromString(owner_second.response));
  EXPECT_EQ(
      r0.u32_keys() + r1.u32_keys(),
      std::string(reinterpret_cast<const char*>(want.data()), want.size() * 4));
  const UnaryResult intruder_result = intruding.get();
  EXPECT_EQ(intruder_result.status.error_code(),
            grpc::StatusCode::DEADLINE_EXCEEDED)
      << intruder_result.status.error_message();
  EXPECT_TRUE(intruder_result.response.empty());
}

// A group that never completes is dropped at --part_timeout: its callers
// get DEADLINE_EXCEEDED saying so, and the bytes its parts held go.
TEST(HeldBytes, AStalledPartGroupTimesOutAndReleasesItsBytes) {
  ServerProcess server({"--device=cpu", "--cpu_threads=2",
                        "--metrics_listen=127.0.0.1:0", "--part_timeout=1s"});
  ASSERT_TRUE(server.Start()) << server.Output();
  grpc::GenericStub stub(OwnChannel(server.address()));
  const std::string part =
      PartMessage("stalled-group-0123", 0, 3, kMiB / 4, 20);
  std::future<UnaryResult> waiting =
      std::async(std::launch::async, [&] { return Unary(stub, "Sort", part); });
  ASSERT_EQ(WaitForMetricValue(server, "sortd_waiting_part_bytes",
                               static_cast<double>(part.size())),
            static_cast<double>(part.size()));
  EXPECT_GT(Metric(server, "sortd_held_bytes"), 0);
  const UnaryResult r = waiting.get();
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_THAT(r.status.error_message(), HasSubstr("--part_timeout"));
  EXPECT_EQ(WaitForMetricValue(server, "sortd_held_bytes", 0), 0);
  EXPECT_EQ(Metric(server, "sortd_waiting_parts"), 0);
  EXPECT_EQ(Metric(server, "sortd_waiting_part_bytes"), 0);
}

}  // namespace
}  // namespace sortd
