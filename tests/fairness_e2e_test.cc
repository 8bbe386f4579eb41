// End to end, the real sortd: one client's SortStream far larger than the
// admission budget runs while other clients' small sorts keep being
// answered as quickly as without it. Timed, so it runs alone (RUN_SERIAL).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "sortd/v1/sortd.pb.h"
#include "tests/raw_grpc.h"
#include "tests/server_process.h"

namespace sortd {
namespace {

using testing::Channel;
using testing::Clock;
using testing::RawStream;
using testing::ServerProcess;
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

}  // namespace
}  // namespace sortd
