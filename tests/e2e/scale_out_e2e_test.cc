// End to end, scale-out: replicas of the real sortd behind one DNS name,
// as a Kubernetes headless Service gives them. The client library's
// defaults (round_robin over every address, retries of UNAVAILABLE) and
// sortd's maximum connection age together make a replica added during a
// load get a share of the calls within about one connection age, with no
// call failing on the way.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/client.h"
#include "tests/fake_dns.h"
#include "tests/reference.h"
#include "tests/server_process.h"

namespace sortd {
namespace {

using testing::FakeDns;
using testing::ServerProcess;

constexpr char kName[] = "sortd-replicas.test";

// A replica on `ip` (a loopback address of its own), port `port` (0: any),
// logging each request so that the calls it answered can be seen.
std::unique_ptr<ServerProcess> Replica(const std::string& ip, int port) {
  return std::make_unique<ServerProcess>(std::vector<std::string>{
      "--device=cpu", absl::StrCat("--listen=", ip, ":", port),
      "--metrics_listen=", "--log_requests", "--cpu_threads=1",
      "--request_threads=1", "--grpc_max_connection_age=1s",
      "--grpc_max_connection_age_grace=30s"});
}

// Sorts from `threads` callers until stopped, counting what failed.
class Load {
 public:
  Load(Client& client, int threads) {
    for (int t = 0; t < threads; ++t) {
      callers_.emplace_back([this, &client, t] { Run(client, t); });
    }
  }
  ~Load() { Stop(); }

  void Stop() {
    stop_ = true;
    for (std::thread& t : callers_) {
      if (t.joinable()) t.join();
    }
  }
  int answered() const { return answered_; }
  std::map<std::string, int> failures() {
    std::lock_guard<std::mutex> lock(mu_);
    return failures_;
  }

 private:
  void Run(Client& client, int seed) {
    const std::vector<uint32_t> keys =
        testing::Generate<uint32_t>(testing::Shape::kRandom, 1000, seed);
    std::vector<uint32_t> sorted = keys;
    std::sort(sorted.begin(), sorted.end());
    while (!stop_) {
      auto result = client.Sort<uint32_t>(keys);
      if (result.ok() && result->keys == sorted) {
        ++answered_;
        continue;
      }
      std::lock_guard<std::mutex> lock(mu_);
      ++failures_[result.ok() ? "wrong answer" : result.status().ToString()];
    }
  }

  std::atomic<bool> stop_{false};
  std::atomic<int> answered_{0};
  std::mutex mu_;
  std::map<std::string, int> failures_;
  std::vector<std::thread> callers_;
};

TEST(ScaleOut, AReplicaAddedBehindTheNameGetsCallsAndNoneFail) {
  FakeDns dns(kName);
  ASSERT_NE(dns.port(), 0);
  auto a = Replica("127.0.0.2", 0);
  ASSERT_TRUE(a->Start()) << a->Output();
  const std::string port = a->address().substr(a->address().rfind(':') + 1);
  auto b = Replica("127.0.0.3", std::stoi(port));
  ASSERT_TRUE(b->Start()) << b->Output();
  dns.SetAddresses({"127.0.0.2", "127.0.0.3"});

  // The library's defaults, but for how soon it may resolve again (gRPC's
  // 30 s would make the test wait that long).
  ClientOptions options;
  options.min_resolve_interval = absl::Milliseconds(200);
  auto client = Client::Create(
      absl::StrCat("dns://127.0.0.1:", dns.port(), "/", kName, ":", port),
      options);
  ASSERT_TRUE(client.ok()) << client.status();
  Load load(**client, 4);
  constexpr auto kWait = std::chrono::seconds(60);
  ASSERT_TRUE(a->WaitForLine("end Sort OK", kWait)) << a->Output();
  ASSERT_TRUE(b->WaitForLine("end Sort OK", kWait)) << b->Output();

  // A third replica, then the name names it too: within a connection age
  // (and a re-resolution) it answers calls.
  auto c = Replica("127.0.0.4", std::stoi(port));
  ASSERT_TRUE(c->Start()) << c->Output();
  const int queries_before = dns.queries();
  dns.SetAddresses({"127.0.0.2", "127.0.0.3", "127.0.0.4"});
  EXPECT_TRUE(c->WaitForLine("end Sort OK", kWait)) << c->Output();
  // And keeps getting them: a share, not one stray call.
  EXPECT_GE(c->WaitForLines("end Sort OK", 20, kWait).size(), 20u);
  load.Stop();

  EXPECT_GT(dns.queries(), queries_before) << "the client resolved again";
  EXPECT_GT(load.answered(), 0);
  EXPECT_THAT(load.failures(), ::testing::IsEmpty());
  for (auto* replica : {a.get(), b.get(), c.get()}) {
    EXPECT_EQ(replica->Terminate(), 0) << replica->Output();
  }
}

}  // namespace
}  // namespace sortd
