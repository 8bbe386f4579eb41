// Verified soak: the real sortd on the OpenCL CPU device (PoCL) under many
// concurrent clients sending mixed sorts (every key type, both orders,
// payloads, permutations, sizes from 1 key to beyond the device's memory
// budget) and transposes, some with deadlines that expire mid-call and some
// cancelled at a random moment; every answer is verified against the
// reference. Then SIGTERM arrives during load and must drain cleanly.
//
// Figures (requests, keys, outcomes by code, peak and late RSS of sortd) are
// printed as one JSON line. SORTD_SOAK_SECONDS sets the length (default 60;
// README says how to run it longer).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <fstream>
#include <future>
#include <map>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/sortctl_lib.h"
#include "grpcpp/grpcpp.h"
#include "sortd/v1/sortd.grpc.pb.h"
#include "tests/http_get.h"
#include "tests/server_process.h"

namespace sortd {
namespace {

using testing::RssBytes;
using testing::ServerProcess;

struct Outcomes {
  std::mutex mu;
  std::condition_variable ended_cv;
  std::map<std::string, uint64_t> by_code;
  uint64_t started = 0, ended = 0, verified = 0, wrong = 0, unexpected = 0;
  uint64_t keys = 0;
  std::string first_problem;
  void Problem(const std::string& what, bool is_wrong) {
    std::lock_guard<std::mutex> lock(mu);
    (is_wrong ? wrong : unexpected) += 1;
    if (first_problem.empty()) first_problem = what;
  }
};

// One client thread: random calls until `stop`, each verified or with an
// outcome its own deadline or cancel explains.
void Client(int id, v1::SortService::Stub* stub, std::atomic<bool>* stop,
            bool drain_phase, Outcomes* out) {
  std::mt19937_64 rng(1234 + id * 7919 + drain_phase);
  while (!stop->load()) {
    const uint64_t r = rng();
    const bool transpose = r % 5 == 0;
    // Sizes: mostly small (CPU path, batches), some medium (alone on the
    // device), a few beyond the device budget (runs merged on the CPU).
    size_t n;
    const uint64_t pick = (r >> 8) % 100;
    if (pick < 70) {
      n = (r >> 16) % 4097;
    } else if (pick < 97) {
      n = 4097 + (r >> 16) % 200'000;
    } else {
      n = 1'200'000 + (r >> 16) % 800'000;
    }
    // 10%: a deadline that may expire mid-call; 5%: cancelled at a random
    // moment. The rest have a generous deadline.
    const uint64_t mode = (r >> 40) % 100;
    const bool short_deadline = !drain_phase && mode < 10;
    const bool cancel = !drain_phase && mode >= 10 && mode < 15;
    grpc::ClientContext context;
    context.set_deadline(
        std::chrono::system_clock::now() +
        (short_deadline ? std::chrono::microseconds(200 + (r >> 48) % 20'000)
                        : std::chrono::microseconds(120'000'000)));
    std::promise<grpc::Status> done;
    v1::SortRequest sort;
    v1::TransposeRequest trans;
    v1::SortResponse sort_out;
    v1::TransposeResponse trans_out;
    if (transpose) {
      trans.set_matrices(cli::RandomWords((n % 3000) * 32, r));
      stub->async()->Transpose(&context, &trans, &trans_out,
                               [&](grpc::Status s) { done.set_value(s); });
    } else {
      const KeyType type = static_cast<KeyType>((r >> 20) % 6);
      cli::SetKeys(type, cli::RandomKeys(type, n, r), &sort);
      sort.set_order((r >> 23) % 2 ? v1::ORDER_DESCENDING
                                   : v1::ORDER_ASCENDING);
      switch ((r >> 24) % 3) {
        case 1:
          sort.set_u32_values(cli::RandomValues(ValueType::kU32, n, r));
          break;
        case 2:
          sort.set_u64_values(cli::RandomValues(ValueType::kU64, n, r));
          break;
      }
      sort.set_return_permutation((r >> 26) % 2);
      stub->async()->Sort(&context, &sort, &sort_out,
                          [&](grpc::Status s) { done.set_value(s); });
    }
    {
      std::lock_guard<std::mutex> lock(out->mu);
      ++out->started;
    }
    std::future<grpc::Status> result = done.get_future();
    if (cancel) {
      // The cancel lands at a random point of the call: before it is
      // admitted, while it queues or runs, or after it is answered.
      if (result.wait_for(std::chrono::microseconds((r >> 50) % 5000)) !=
          std::future_status::ready) {
        context.TryCancel();
      }
    }
    const grpc::Status s = result.get();
    const std::string code =
        absl::StatusCodeToString(static_cast<absl::StatusCode>(s.error_code()));
    {
      std::lock_guard<std::mutex> lock(out->mu);
      ++out->ended;
      ++out->by_code[code];
      if (s.ok()) out->keys += transpose ? trans.matrices().size() / 128 : n;
    }
    out->ended_cv.notify_all();
    if (s.ok()) {
      const absl::Status v =
          transpose
              ? cli::VerifyTranspose(trans.matrices(), trans_out.matrices())
              : cli::VerifySort(sort, sort_out);
      if (!v.ok()) {
        out->Problem(absl::StrCat(transpose ? "transpose" : "sort", " of ", n,
                                  ": ", v.message()),
                     true);
      } else {
        std::lock_guard<std::mutex> lock(out->mu);
        ++out->verified;
      }
      continue;
    }
    // A deadline or a cancel may reach the client as either code (the
    // server sees both as the call ending).
    const bool cut_short =
        s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED ||
        s.error_code() == grpc::StatusCode::CANCELLED;
    // During the drain, calls that arrive as sortd shuts down are refused:
    // UNAVAILABLE from sortd or from gRPC, or CANCELLED from gRPC itself for
    // a call caught by the server's shutdown (its bare message "CANCELLED";
    // every CANCELLED of sortd's own says why). Seen once, in the ASan
    // stage, where everything is slower; such a call still ends.
    const bool refused_at_shutdown =
        drain_phase && (s.error_code() == grpc::StatusCode::UNAVAILABLE ||
                        (s.error_code() == grpc::StatusCode::CANCELLED &&
                         s.error_message() == "CANCELLED"));
    const bool explained =
        (cut_short && (short_deadline || cancel)) || refused_at_shutdown;
    if (!explained) {
      out->Problem(
          absl::StrCat("call of ", n, " ended ", code, ": ", s.error_message()),
          false);
    }
  }
}

// sortd's count of idle heap trims (-1 when it cannot be read).
double Trims(const ServerProcess& server) {
  return MetricValue(HttpGet(server.metrics_address(), "/metrics"),
                     "sortd_heap_trims_total");
}

TEST(Soak, MixedVerifiedLoadWithCancelsDeadlinesAndDrain) {
  const char* env = std::getenv("SORTD_SOAK_SECONDS");
  const int seconds = env != nullptr ? std::max(4, std::atoi(env)) : 60;
  ServerProcess server(
      {"--device=opencl-cpu", "--kernel_cache_dir=", "--warm_up_keys=0",
       "--cpu_max_keys=512", "--solo_min_keys=65536",
       "--transpose_cpu_max_matrices=16", "--transpose_solo_min_matrices=2048",
       "--device_memory_bytes=67108864", "--max_request_bytes=67108864",
       "--metrics_listen=127.0.0.1:0", "--idle_trim_interval=250ms"});
  ASSERT_TRUE(server.Start()) << server.Output();
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);  // answers carry permutations too
  auto channel = grpc::CreateCustomChannel(
      server.address(), grpc::InsecureChannelCredentials(), args);
  auto stub = v1::SortService::NewStub(channel);

  // Three phases of load; after each, with every call answered, sortd's
  // resident memory at rest. The first phase warms pools and caches; a
  // leak shows as growth from the second rest to the third.
  Outcomes out;
  constexpr int kClients = 12;
  std::vector<size_t> rest;
  size_t peak = 0;
  for (int phase = 0; phase < 3; ++phase) {
    std::atomic<bool> stop{false};
    std::vector<std::thread> clients;
    for (int i = 0; i < kClients; ++i) {
      clients.emplace_back(Client, i + 100 * phase, stub.get(), &stop, false,
                           &out);
    }
    // The phase's length, sampling RSS meanwhile (a measured duration,
    // not a synchronisation).
    const auto end = std::chrono::steady_clock::now() +
                     std::chrono::milliseconds(seconds * 1000 / 3);
    while (std::chrono::steady_clock::now() < end) {
      peak = std::max(peak, RssBytes(server.pid()));
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    stop = true;
    for (std::thread& t : clients) t.join();
    // At rest: once sortd has been idle for --idle_trim_interval it gives
    // free heap memory back. Wait for a trim that follows all of this
    // phase's work: one more call after reading the count guarantees one.
    const double trims = Trims(server);
    ASSERT_GE(trims, 0) << "no sortd_heap_trims_total in /metrics\n"
                        << server.Output();
    {
      v1::SortRequest one;
      one.set_u32_keys(std::string(4, '\1'));
      v1::SortResponse answer;
      grpc::ClientContext ctx;
      ASSERT_TRUE(stub->Sort(&ctx, one, &answer).ok());
    }
    const auto trim_deadline =
        std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (Trims(server) <= trims) {
      ASSERT_LT(std::chrono::steady_clock::now(), trim_deadline)
          << "sortd did not trim its heap after going idle";
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    rest.push_back(RssBytes(server.pid()));
  }

  // Drain under load: SIGTERM while calls are in flight.
  Outcomes drain;
  std::atomic<bool> stop_drain{false};
  std::vector<std::thread> drainers;
  for (int i = 0; i < 6; ++i) {
    drainers.emplace_back(Client, i, stub.get(), &stop_drain, true, &drain);
  }
  {
    // SIGTERM once the drain load is really under way.
    std::unique_lock<std::mutex> lock(drain.mu);
    drain.ended_cv.wait(lock, [&] { return drain.ended >= 20; });
  }
  const int exit_code = server.Terminate();
  stop_drain = true;
  for (std::thread& t : drainers) t.join();

  std::string codes;
  for (const auto& [k, v] : out.by_code) {
    absl::StrAppend(&codes, codes.empty() ? "" : ",", "\"", k, "\":", v);
  }
  std::printf(
      "{\"soak_seconds\":%d,\"clients\":%d,\"requests\":%llu,\"keys\":%llu,"
      "\"verified\":%llu,\"wrong\":%llu,\"unexplained\":%llu,\"lost\":%llu,"
      "\"codes\":{%s},\"rss_peak_mb\":%.1f,\"rss_at_rest_mb\":[%.1f,%.1f,%.1f],"
      "\"drain_calls\":%llu,"
      "\"drain_lost\":%llu,\"exit\":%d}\n",
      seconds, kClients, static_cast<unsigned long long>(out.ended),
      static_cast<unsigned long long>(out.keys),
      static_cast<unsigned long long>(out.verified),
      static_cast<unsigned long long>(out.wrong),
      static_cast<unsigned long long>(out.unexpected),
      static_cast<unsigned long long>(out.started - out.ended), codes.c_str(),
      peak / 1048576.0, rest[0] / 1048576.0, rest[1] / 1048576.0,
      rest[2] / 1048576.0, static_cast<unsigned long long>(drain.ended),
      static_cast<unsigned long long>(drain.started - drain.ended), exit_code);
  RecordProperty("soak_requests", static_cast<int>(out.ended));

  EXPECT_EQ(out.wrong, 0u) << out.first_problem;
  EXPECT_EQ(out.unexpected, 0u) << out.first_problem;
  EXPECT_EQ(out.started, out.ended);
  EXPECT_GT(out.verified, 100u);
  EXPECT_GT(out.by_code["CANCELLED"] + out.by_code["DEADLINE_EXCEEDED"], 0u);
  // Bounded memory: at rest after the third phase no more than after the
  // second, beyond noise: what the allocator's arenas keep of the phase's
  // peak (an eighth of it) and 64 MiB. A leak grows with every phase.
  EXPECT_LE(rest[2], rest[1] + peak / 8 + (size_t{64} << 20))
      << "RSS at rest grew: " << rest[1] << " -> " << rest[2] << " (peak "
      << peak << ")";
  EXPECT_EQ(drain.wrong, 0u) << drain.first_problem;
  EXPECT_EQ(drain.unexpected, 0u) << drain.first_problem;
  EXPECT_EQ(drain.started, drain.ended);
  EXPECT_EQ(exit_code, 0) << server.Output();
}

}  // namespace
}  // namespace sortd
