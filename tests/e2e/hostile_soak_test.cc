// Hostile-neighbour soak: the real sortd (--device=cpu) serving well-behaved
// clients beside hostile ones on the same host: SortStreams that flood
// chunks or stall without half-closing, arrays sent in parts that never
// complete (padded with unknown fields), sparse and oversized shared-memory
// regions and silent socket connections, readers that never read their
// answers, and connection churn. The well-behaved clients must see no
// error and no wrong answer, and their small sorts' p99 must stay within
// 10x of what it was with no hostile client; sortd's resident memory must
// stay within its configured budget plus a stated overhead; sortd must
// never exit. SORTD_SOAK_SECONDS sets the hostile phase's length (default
// 20).
//
// Figures (latency percentiles, peak RSS, what each hostile actor got) are
// printed as one JSON line.
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/shared_memory.h"
#include "client/sortctl_lib.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "sortd/v1/sortd.grpc.pb.h"
#include "tests/raw_grpc.h"
#include "tests/server_process.h"
#include "tests/test_certs.h"

namespace sortd {
namespace {

using Clock = std::chrono::steady_clock;
using testing::RssBytes;
using testing::ServerProcess;

// What sortd may hold for requests (its --max_held_bytes) and what its
// resident memory may exceed that by: the process itself, gRPC's buffers
// and the CPU path's scratch for the sorts it runs.
constexpr size_t kHeldBudget = size_t{512} << 20;
constexpr size_t kOverhead = size_t{384} << 20;

// Clients authenticate with mutual TLS: the well-behaved ones as one
// client, the hostile ones as another (on one host, a certificate is what
// tells clients apart; without it they would all be the same client).
enum Who { kNeighbour = 0, kHostile = 1 };
const testing::TestCertificates* certificates = nullptr;

// A channel of its own connection.
std::shared_ptr<grpc::Channel> NewChannel(const std::string& address, Who who) {
  return certificates->Channel(address, who);
}

// Outcomes by actor and status code.
class Tally {
 public:
  void Add(const std::string& actor, grpc::StatusCode code) {
    std::lock_guard<std::mutex> lock(mu_);
    ++counts_[actor]
             [absl::StatusCodeToString(static_cast<absl::StatusCode>(code))];
  }
  uint64_t Count(const std::string& actor) {
    std::lock_guard<std::mutex> lock(mu_);
    uint64_t n = 0;
    for (const auto& [code, c] : counts_[actor]) n += c;
    return n;
  }
  uint64_t Refused(const std::string& actor) {
    std::lock_guard<std::mutex> lock(mu_);
    uint64_t n = 0;
    for (const auto& [code, c] : counts_[actor]) {
      if (code != "OK") n += c;
    }
    return n;
  }
  std::string Json() {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<std::string> actors;
    for (const auto& [actor, codes] : counts_) {
      std::vector<std::string> parts;
      for (const auto& [code, c] : codes) {
        parts.push_back(absl::StrCat("\"", code, "\":", c));
      }
      actors.push_back(
          absl::StrCat("\"", actor, "\":{", absl::StrJoin(parts, ","), "}"));
    }
    return absl::StrCat("{", absl::StrJoin(actors, ","), "}");
  }

 private:
  std::mutex mu_;
  std::map<std::string, std::map<std::string, uint64_t>> counts_;
};

// Well-behaved clients: verified sorts; small ones timed.
struct Behaved {
  std::mutex mu;
  std::vector<double> small_ms;
  uint64_t ok = 0, errors = 0, wrong = 0;
  std::string first_problem;
};

void BehavedClient(const std::string& address, size_t keys, uint64_t seed,
                   const std::atomic<bool>& stop, Behaved* out) {
  auto stub = v1::SortService::NewStub(NewChannel(address, kNeighbour));
  std::mt19937_64 rng(seed);
  while (!stop.load()) {
    v1::SortRequest request;
    const KeyType type = keys > 4096 ? KeyType::kU64 : KeyType::kU32;
    cli::SetKeys(type, cli::RandomKeys(type, keys, rng()), &request);
    if (keys > 4096) {
      request.set_u32_values(cli::RandomValues(ValueType::kU32, keys, rng()));
    }
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(60));
    v1::SortResponse response;
    const auto start = Clock::now();
    const grpc::Status s = stub->Sort(&context, request, &response);
    const double ms =
        std::chrono::duration<double, std::milli>(Clock::now() - start).count();
    std::lock_guard<std::mutex> lock(out->mu);
    if (!s.ok()) {
      ++out->errors;
      if (out->first_problem.empty()) {
        out->first_problem =
            absl::StrCat("status ", s.error_code(), ": ", s.error_message());
      }
    } else if (absl::Status v = cli::VerifySort(request, response); !v.ok()) {
      ++out->wrong;
      if (out->first_problem.empty()) out->first_problem = v.ToString();
    } else {
      ++out->ok;
      if (keys <= 4096) out->small_ms.push_back(ms);
    }
  }
}

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * v.size()))];
}

// Runs well-behaved clients for `seconds`: two sorting 1K keys, one 256K
// keys with values.
void RunBehaved(const std::string& address, double seconds, Behaved* out) {
  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;
  for (int i = 0; i < 2; ++i) {
    threads.emplace_back(BehavedClient, address, 1000, 11 + i, std::cref(stop),
                         out);
  }
  threads.emplace_back(BehavedClient, address, 256 * 1024, 7, std::cref(stop),
                       out);
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  stop.store(true);
  for (std::thread& t : threads) t.join();
}

// --- hostile actors, each a loop until `stop`.

// SortStreams that send 4 MiB chunks and never half-close: half of them
// until sortd ends the stream, half stalling after 32 MiB. Chunks go 100 ms
// apart (40 MB/s a stream): these streams hold memory; a flood of bytes as
// fast as the network carries them is a volumetric attack, which on this
// 2-core host takes the CPU from everyone however sortd holds its memory
// (docs/security.md says what is promised there and what is not).
constexpr auto kChunkGap = std::chrono::milliseconds(100);
void StreamFlood(const std::string& address, bool stall,
                 const std::atomic<bool>& stop, Tally* tally) {
  auto stub = v1::SortService::NewStub(NewChannel(address, kHostile));
  v1::SortRequest chunk;
  cli::SetKeys(KeyType::kU32, cli::RandomKeys(KeyType::kU32, 1 << 20, 3),
               &chunk);
  while (!stop.load()) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(120));
    auto stream = stub->SortStream(&context);
    std::atomic<bool> done{false};
    // Cancels the stream once `stop` is set, wherever Write blocks.
    std::thread canceller([&] {
      while (!done.load() && !stop.load()) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
      if (!done.load()) context.TryCancel();
    });
    for (int i = 0; !stop.load() && (!stall || i < 8); ++i) {
      if (!stream->Write(chunk)) break;
      std::this_thread::sleep_for(kChunkGap);
    }
    v1::SortResponse ignored;
    while (stream->Read(&ignored)) {
    }  // returns once sortd ends the stream (or the cancel)
    const grpc::Status s = stream->Finish();
    done.store(true);
    canceller.join();
    if (!stop.load())
      tally->Add(stall ? "stalled_stream" : "flood", s.error_code());
  }
}

// Parts of arrays that never complete (one part of two), each padded with
// 8 MiB of an unknown field.
void OrphanParts(const std::string& address, uint64_t seed,
                 const std::atomic<bool>& stop, Tally* tally) {
  grpc::GenericStub stub(NewChannel(address, kHostile));
  std::mt19937_64 rng(seed);
  while (!stop.load()) {
    v1::SortRequest request;
    cli::SetKeys(KeyType::kU32, cli::RandomKeys(KeyType::kU32, 1024, rng()),
                 &request);
    v1::Part* part = request.mutable_part();
    part->set_group(absl::StrCat(rng(), "-", rng()));
    part->set_index(0);
    part->set_count(2);
    std::string bytes = request.SerializeAsString();
    // Field 1000, length-delimited: 8 MiB that no field of SortRequest is.
    const std::string tag = "\xc2\x3e";
    std::string length;
    for (uint32_t v = 8u << 20; true; v >>= 7) {
      if (v < 0x80) {
        length.push_back(static_cast<char>(v));
        break;
      }
      length.push_back(static_cast<char>((v & 0x7f) | 0x80));
    }
    bytes += tag + length + std::string(8u << 20, 'p');
    testing::UnaryResult r = testing::Unary(stub, "Sort", bytes);
    if (!stop.load()) tally->Add("orphan_part", r.status.error_code());
  }
}

// Shared memory: sparse memfds, memfds beyond --shm_max_bytes, and
// connections that never speak.
void HostileRegions(const std::string& socket, const std::atomic<bool>& stop,
                    Tally* tally) {
  while (!stop.load()) {
    for (const bool sparse : {true, false}) {
      const size_t bytes = sparse ? size_t{256} << 20 : size_t{96} << 20;
      const int fd = memfd_create("hostile", MFD_CLOEXEC | MFD_ALLOW_SEALING);
      ASSERT_GE(fd, 0);
      ASSERT_EQ(ftruncate(fd, static_cast<off_t>(bytes)), 0);
      if (!sparse) {
        ASSERT_EQ(posix_fallocate(fd, 0, static_cast<off_t>(bytes)), 0);
      }
      ASSERT_EQ(
          fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL), 0);
      absl::StatusOr<int> s = ConnectShmSocket(socket);
      if (s.ok()) {
        auto r = RegisterMemfd(*s, fd);
        tally->Add(sparse ? "sparse_region" : "oversized_region",
                   static_cast<grpc::StatusCode>(r.status().code()));
        close(*s);
      }
      close(fd);
    }
    std::vector<int> silent;
    for (int i = 0; i < 16; ++i) {
      absl::StatusOr<int> s = ConnectShmSocket(socket);
      if (s.ok()) silent.push_back(*s);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    for (int s : silent) close(s);
  }
}

// Sorts of 1M keys through SortStream whose answers are never read; each
// call is cancelled after two seconds.
void SlowReader(const std::string& address, const std::atomic<bool>& stop,
                Tally* tally) {
  auto stub = v1::SortService::NewStub(NewChannel(address, kHostile));
  v1::SortRequest request;
  cli::SetKeys(KeyType::kU32, cli::RandomKeys(KeyType::kU32, 1 << 20, 9),
               &request);
  while (!stop.load()) {
    grpc::ClientContext context;
    auto stream = stub->SortStream(&context);
    stream->Write(request);
    stream->WritesDone();
    const auto until = Clock::now() + std::chrono::seconds(2);
    while (!stop.load() && Clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    context.TryCancel();
    const grpc::Status s = stream->Finish();
    tally->Add("slow_reader", s.error_code());
  }
}

// A new connection (a TLS handshake) for each small call, five a second: a
// careless client. Handshakes as fast as a client can open them are a
// volumetric attack on the CPU, which connection limits in front of sortd
// bound (docs/security.md).
void Churn(const std::string& address, const std::atomic<bool>& stop,
           Tally* tally) {
  v1::SortRequest request;
  cli::SetKeys(KeyType::kU32, cli::RandomKeys(KeyType::kU32, 16, 1), &request);
  while (!stop.load()) {
    auto stub = v1::SortService::NewStub(NewChannel(address, kHostile));
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(10));
    v1::SortResponse response;
    tally->Add("churn", stub->Sort(&context, request, &response).error_code());
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
}

TEST(HostileSoak, WellBehavedClientsAreServedBesideHostileOnes) {
  const char* env = std::getenv("SORTD_SOAK_SECONDS");
  const double seconds = env != nullptr ? std::atof(env) : 20.0;
  testing::TestCertificates certs;
  ASSERT_TRUE(certs.Make({"neighbour", "hostile"})) << certs.error();
  certificates = &certs;
  char dir[] = "/tmp/sortd_hostile_XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string socket = std::string(dir) + "/shm.sock";
  std::vector<std::string> flags({
      "--device=cpu",
      "--cpu_threads=2",
      "--max_request_bytes=33554432",
      "--max_stream_bytes=268435456",
      absl::StrCat("--max_held_bytes=", kHeldBudget),
      "--stream_idle_timeout=2s",
      "--part_timeout=2s",
      "--shm_socket=" + socket,
      "--shm_max_bytes=67108864",
      "--shm_idle_timeout=1s",
  });
  for (const std::string& f : certs.ServerFlags()) flags.push_back(f);
  ServerProcess server(flags);
  ASSERT_TRUE(server.Start()) << server.Output();
  const std::string address = server.address();

  // The well-behaved clients alone: their p99 and sortd's resident memory.
  Behaved idle;
  RunBehaved(address, 4, &idle);
  ASSERT_EQ(idle.errors + idle.wrong, 0u) << idle.first_problem;
  const double idle_p99 = Percentile(idle.small_ms, 0.99);
  const size_t idle_rss = RssBytes(server.pid());

  // The same beside the hostile actors, sortd's memory sampled throughout.
  Tally tally;
  std::atomic<bool> stop{false};
  std::atomic<size_t> peak_rss{idle_rss};
  std::vector<std::thread> hostile;
  for (int i = 0; i < 4; ++i) {
    hostile.emplace_back(StreamFlood, address, i % 2 == 1, std::cref(stop),
                         &tally);
  }
  for (int i = 0; i < 3; ++i) {
    hostile.emplace_back(OrphanParts, address, 5 + i, std::cref(stop), &tally);
  }
  hostile.emplace_back(HostileRegions, socket, std::cref(stop), &tally);
  hostile.emplace_back(SlowReader, address, std::cref(stop), &tally);
  hostile.emplace_back(SlowReader, address, std::cref(stop), &tally);
  hostile.emplace_back(Churn, address, std::cref(stop), &tally);
  std::thread monitor([&] {
    while (!stop.load()) {
      const size_t rss = RssBytes(server.pid());
      size_t peak = peak_rss.load();
      while (rss > peak && !peak_rss.compare_exchange_weak(peak, rss)) {
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(25));
    }
  });
  // Hostile load first builds up, then the well-behaved clients measure.
  std::this_thread::sleep_for(std::chrono::seconds(2));
  Behaved beside;
  RunBehaved(address, seconds, &beside);
  stop.store(true);
  for (std::thread& t : hostile) t.join();
  monitor.join();
  const double beside_p99 = Percentile(beside.small_ms, 0.99);

  std::printf(
      "{\"seconds\":%.0f,\"idle\":{\"p50_ms\":%.3f,\"p99_ms\":%.3f,"
      "\"ok\":%llu},\"beside_hostile\":{\"p50_ms\":%.3f,\"p99_ms\":%.3f,"
      "\"ok\":%llu,\"errors\":%llu,\"wrong\":%llu},\"idle_rss\":%zu,"
      "\"peak_rss\":%zu,\"held_budget\":%zu,\"hostile\":%s}\n",
      seconds, Percentile(idle.small_ms, 0.5), idle_p99,
      static_cast<unsigned long long>(idle.ok),
      Percentile(beside.small_ms, 0.5), beside_p99,
      static_cast<unsigned long long>(beside.ok),
      static_cast<unsigned long long>(beside.errors),
      static_cast<unsigned long long>(beside.wrong), idle_rss, peak_rss.load(),
      kHeldBudget, tally.Json().c_str());

  EXPECT_EQ(beside.errors, 0u) << beside.first_problem;
  EXPECT_EQ(beside.wrong, 0u) << beside.first_problem;
  EXPECT_GT(beside.small_ms.size(), 100u);
  // Not starved: within 10x of the p99 alone. (The goal is 3x; on the
  // 2-core host the hostile clients' TLS handshakes and bytes take CPU
  // that sortd shares with everyone: the ratio is printed above.)
  EXPECT_LE(beside_p99, 10 * idle_p99)
      << "small sorts beside hostile clients: p99 " << beside_p99
      << " ms, alone " << idle_p99 << " ms";
  EXPECT_LE(peak_rss.load(), idle_rss + kHeldBudget + kOverhead)
      << "sortd's resident memory went past its budget";
  // Every hostile actor ran into its bound.
  for (const char* actor : {"flood", "stalled_stream", "orphan_part",
                            "sparse_region", "oversized_region"}) {
    EXPECT_GT(tally.Refused(actor), 0u) << actor << ": " << tally.Json();
  }
  EXPECT_GT(tally.Count("slow_reader"), 0u);
  EXPECT_GT(tally.Count("churn"), 5u);
  // sortd never exited, and drains cleanly.
  EXPECT_EQ(kill(server.pid(), 0), 0) << server.Output();
  EXPECT_EQ(server.Terminate(), 0) << server.Output();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace sortd
