// End to end, the real sortd: one client's SortStream far larger than the
// admission budget runs while other clients' small sorts keep being
// answered as quickly as without it; one client's large sorts and backlog
// of small ones do not hold another client's small sorts. Timed, so it runs
// alone (RUN_SERIAL).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <future>
#include <map>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "sortd/v1/sortd.pb.h"
#include "tests/http_get.h"
#include "tests/raw_grpc.h"
#include "tests/server_process.h"
#include "tests/test_certs.h"

namespace sortd {
namespace {

using testing::Channel;
using testing::Clock;
using testing::RawStream;
using testing::ServerProcess;
using testing::TestCertificates;
using testing::Unary;

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

  // The small sorts' load: two clients calling back to back, each call
  // recorded.
  struct Call {
    Clock::time_point start, end;
    grpc::StatusCode code;
  };
  // Each client stops after `limit` calls (0: none) or once `stop` is set.
  auto load = [&](std::atomic<bool>& stop, std::vector<Call>& calls,
                  std::mutex& mu, int limit) {
    std::vector<std::thread> clients;
    for (int c = 0; c < 2; ++c) {
      clients.emplace_back([&, limit] {
        for (int i = 0; !stop && (limit == 0 || i < limit); ++i) {
          const auto t0 = Clock::now();
          const grpc::Status s = Unary(small_stub, "Sort", small).status;
          std::lock_guard<std::mutex> l(mu);
          calls.push_back({t0, Clock::now(), s.error_code()});
        }
      });
    }
    return clients;
  };
  auto seconds = [](const Call& c) {
    return std::chrono::duration<double>(c.end - c.start).count();
  };

  // Idle: the same load alone, for 400 calls.
  std::vector<double> idle;
  {
    std::atomic<bool> stop{false};
    std::vector<Call> calls;
    std::mutex mu;
    std::vector<std::thread> clients = load(stop, calls, mu, 200);
    for (std::thread& t : clients) t.join();
    for (const Call& c : calls) {
      ASSERT_EQ(c.code, grpc::StatusCode::OK);
      idle.push_back(seconds(c));
    }
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

  std::mutex mu;
  std::vector<Call> calls;
  std::atomic<bool> stop{false};
  std::vector<std::thread> clients = load(stop, calls, mu, 0);
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
    during.push_back(seconds(c));
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

// A gauge's value from sortd's metrics page (-1 when absent).
double Gauge(const std::string& page, const std::string& name) {
  const size_t at = page.find("\n" + name + " ");
  if (at == std::string::npos) return -1;
  return std::strtod(page.c_str() + at + name.size() + 2, nullptr);
}

// Sends `per_channel` 1-key sorts at once on each channel and counts
// their answers.
class Burst {
 public:
  Burst(const std::vector<std::shared_ptr<grpc::Channel>>& channels,
        int per_channel) {
    for (const auto& channel : channels) {
      stubs_.push_back(std::make_unique<grpc::GenericStub>(channel));
    }
    for (auto& stub : stubs_) {
      for (int i = 0; i < per_channel; ++i) Issue(stub.get());
    }
  }
  ~Burst() { Wait(); }

  // Waits for every answer.
  void Wait() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return outstanding_ == 0; });
  }
  int answered() {
    std::lock_guard<std::mutex> lock(mu_);
    return answered_;
  }
  int failed() {
    std::lock_guard<std::mutex> lock(mu_);
    return failed_;
  }

 private:
  struct Call {
    grpc::ClientContext context;
    grpc::ByteBuffer request, response;
  };
  void Issue(grpc::GenericStub* stub) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++outstanding_;
    }
    auto* call = new Call;
    call->context.set_deadline(std::chrono::system_clock::now() +
                               std::chrono::seconds(120));
    grpc::Slice slice(std::string("\x0a\x04\x07\x00\x00\x00", 6));
    call->request = grpc::ByteBuffer(&slice, 1);
    stub->UnaryCall(&call->context, "/sortd.v1.SortService/Sort", {},
                    &call->request, &call->response,
                    [this, call](grpc::Status s) {
                      delete call;
                      std::lock_guard<std::mutex> lock(mu_);
                      ++(s.ok() ? answered_ : failed_);
                      --outstanding_;
                      cv_.notify_all();
                    });
  }

  std::vector<std::unique_ptr<grpc::GenericStub>> stubs_;
  std::mutex mu_;
  std::condition_variable cv_;
  int outstanding_ = 0, answered_ = 0, failed_ = 0;
};

// Sends one request again and again, each answer followed by the next
// call, until Stop(), which cancels the call outstanding.
class Repeater {
 public:
  Repeater(grpc::GenericStub& stub, std::string request)
      : thread_([this, &stub, request = std::move(request)] {
          Run(stub, request);
        }) {}
  ~Repeater() { Stop(); }

  void Stop() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
      if (current_ != nullptr) current_->TryCancel();
    }
    if (thread_.joinable()) thread_.join();
  }
  int answered() {
    std::lock_guard<std::mutex> lock(mu_);
    return answered_;
  }
  // Calls that failed other than by Stop's cancellation.
  int failed() {
    std::lock_guard<std::mutex> lock(mu_);
    return failed_;
  }

 private:
  void Run(grpc::GenericStub& stub, const std::string& bytes) {
    for (;;) {
      grpc::ClientContext context;
      context.set_deadline(std::chrono::system_clock::now() +
                           std::chrono::seconds(120));
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (stop_) return;
        current_ = &context;
      }
      grpc::Slice slice(bytes);
      grpc::ByteBuffer request(&slice, 1), response;
      std::promise<grpc::Status> done;
      stub.UnaryCall(&context, "/sortd.v1.SortService/Sort", {}, &request,
                     &response, [&](grpc::Status s) { done.set_value(s); });
      const grpc::Status s = done.get_future().get();
      std::lock_guard<std::mutex> lock(mu_);
      current_ = nullptr;
      if (s.ok()) {
        ++answered_;
      } else if (!stop_) {
        ++failed_;
      }
    }
  }

  std::mutex mu_;
  bool stop_ = false;
  grpc::ClientContext* current_ = nullptr;
  int answered_ = 0, failed_ = 0;
  std::thread thread_;
};

// Client A (one certificate) keeps four sorts of 16M keys queued on the
// CPU path (each answer followed by the next) after a burst of 4000 1-key
// sorts; client B (another certificate) sorts one key at a time meanwhile,
// and is answered within 50 ms at p99. First in, first out, B's sorts
// waited for A's large ones (p99 of seconds).
TEST(FairnessTest, OneClientsBacklogDoesNotHoldAnothersSmallSorts) {
  TestCertificates certs;
  ASSERT_TRUE(certs.Make({"client a", "client b"})) << certs.error();
  // A's backlog (4000 requests) is deeper than one client's default share
  // of the queue (2048, --max_client_queued_requests): the share is
  // lifted, so that the backlog is queued and the queues' fairness, not
  // admission, is what this measures.
  std::vector<std::string> flags = {"--device=cpu", "--cpu_threads=2",
                                    "--metrics_listen=127.0.0.1:0",
                                    "--max_client_queued_requests=4096"};
  for (const std::string& f : certs.ServerFlags()) flags.push_back(f);
  ServerProcess server(flags);
  ASSERT_TRUE(server.Start()) << server.Output();

  // A's large sorts: 16M random u32 keys each.
  constexpr size_t kLargeKeys = size_t{16} << 20;
  std::string large;
  {
    std::string keys(kLargeKeys * 4, '\0');
    std::mt19937_64 rng(5);
    for (size_t i = 0; i < keys.size(); i += 8) {
      const uint64_t x = rng();
      std::memcpy(&keys[i], &x, 8);
    }
    v1::SortRequest m;
    m.set_u32_keys(std::move(keys));
    large = m.SerializeAsString();
  }
  auto a_large = certs.Channel(server.address(), 0);
  grpc::GenericStub a_large_stub(a_large);
  std::vector<std::unique_ptr<Repeater>> large_sorts;
  // Four: first in, first out, two ran and two waited, so that a large
  // sort was always queued ahead of B even while another was re-sent.
  for (int i = 0; i < 4; ++i) {
    large_sorts.push_back(std::make_unique<Repeater>(a_large_stub, large));
  }
  // A's small sorts: 250 at once on each of 16 connections (each takes
  // 256 calls at a time).
  std::vector<std::shared_ptr<grpc::Channel>> a_small;
  for (int i = 0; i < 16; ++i) {
    a_small.push_back(certs.Channel(server.address(), 0));
  }
  Burst burst(a_small, 250);

  // Until a large sort waits in sortd's queue (the others run or wait).
  const auto give_up = Clock::now() + std::chrono::seconds(60);
  bool queued = false;
  while (!queued && Clock::now() < give_up) {
    const std::string page = HttpGet(server.metrics_address(), "/metrics");
    queued = Gauge(page, "sortd_queued_keys") >= double{kLargeKeys};
    if (!queued) std::this_thread::yield();
  }
  ASSERT_TRUE(queued) << "A's large sorts never queued";

  // B's 1-key sorts, one at a time, for three seconds of A's load.
  auto b = certs.Channel(server.address(), 1);
  grpc::GenericStub b_stub(b);
  const std::string one_key("\x0a\x04\x2a\x00\x00\x00", 6);
  std::vector<double> during, queue_waits;
  // Three seconds at least, and until one of A's large sorts is answered
  // (A is served too).
  const auto end = Clock::now() + std::chrono::seconds(3);
  const auto last = Clock::now() + std::chrono::seconds(60);
  auto large_answered = [&] {
    int n = 0;
    for (auto& r : large_sorts) n += r->answered();
    return n;
  };
  while ((Clock::now() < end || large_answered() == 0) && Clock::now() < last) {
    const auto t0 = Clock::now();
    const testing::UnaryResult r = Unary(b_stub, "Sort", one_key);
    ASSERT_TRUE(r.status.ok()) << r.status.error_message();
    during.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
    v1::SortResponse answer;
    ASSERT_TRUE(answer.ParseFromString(r.response));
    queue_waits.push_back(answer.served_by().queue_wait_ns() * 1e-9);
  }
  for (auto& r : large_sorts) r->Stop();
  const int large_done = large_answered();
  for (auto& r : large_sorts) EXPECT_EQ(r->failed(), 0);
  burst.Wait();
  EXPECT_EQ(burst.answered(), 4000);

  const double p99 = Percentile(during, 0.99);
  std::printf(
      "B's 1-key sorts under A's load: p99 %.3f ms, max %.3f ms over %zu "
      "calls (in sortd's queue: p99 %.3f ms); A's large sorts answered: "
      "%d\n",
      p99 * 1e3, Percentile(during, 1.0) * 1e3, during.size(),
      Percentile(queue_waits, 0.99) * 1e3, large_done);
  EXPECT_LE(p99, 0.050) << "over " << during.size() << " calls";
  EXPECT_GE(large_done, 1) << "none of A's large sorts was answered";
  EXPECT_EQ(server.Terminate(), 0) << server.Output();
}

}  // namespace
}  // namespace sortd
