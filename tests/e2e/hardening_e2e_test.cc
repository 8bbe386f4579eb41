// Untrusted clients against the real sortd: host memory running out while
// a request is served (the CPU path's scratch under an address-space
// limit, a device run's host buffers by fault injection) is answered
// RESOURCE_EXHAUSTED and the server serves on; the gRPC connection limits
// (ping flood, oversized metadata, connection idle time and age with its
// grace, keepalive against dead peers, gRPC's memory quota and its threads
// for reflection); every RESOURCE_EXHAUSTED answer carries the retry
// pushback, and the C++ client retries on it.
#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <future>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "client/client.h"
#include "grpc/reflection/v1/reflection.grpc.pb.h"
#include "sortd/v1/sortd.pb.h"
#include "tests/e2e_util.h"
#include "tests/raw_grpc.h"
#include "tests/reference.h"
#include "tests/server_process.h"

namespace sortd {
namespace {

using ::testing::HasSubstr;
using testing::ServerProcess;

// The address space a process has mapped, in bytes (VmSize); 0 if unknown.
size_t MappedBytes(pid_t pid) {
  std::ifstream status(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmSize:", 0) != 0) continue;
    size_t kib = 0;
    std::string digits;
    for (char c : line) {
      if (c >= '0' && c <= '9') digits += c;
    }
    if (absl::SimpleAtoi(digits, &kib)) return kib << 10;
  }
  return 0;
}

// The sorted copy of `keys`.
std::vector<uint32_t> Sorted(std::vector<uint32_t> keys) {
  std::sort(keys.begin(), keys.end());
  return keys;
}

// A client that sends each sort whole, once: what it sends is what the
// server sees.
ClientOptions Plain() {
  ClientOptions o;
  o.connections = 1;
  o.split_bytes = 0;
  o.max_attempts = 1;
  return o;
}

// A CPU-path sort whose scratch cannot be had (the server's address space
// is limited to what it holds plus room for the request and its answer
// arrays, not the radix sort's scratch, twice the keys) is answered
// RESOURCE_EXHAUSTED, and the same server goes on sorting. Without the
// guard the exception ended the process.
TEST(Hardening, CpuScratchOutOfMemoryIsResourceExhaustedAndServesOn) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "sanitizers reserve terabytes of address space";
#endif
  // No pools or trimming: the memory a request takes is mapped for it and
  // unmapped after (blocks of 32 MiB and more are mapped apart).
  // One malloc arena: no thread's first allocation maps a heap of its own
  // (64 MiB of address space) while the limit is on.
  ServerProcess server({"--device=cpu", "--cpu_scratch_bytes=0",
                        "--host_pool_bytes=0", "--idle_trim_interval=0"},
                       {"MALLOC_ARENA_MAX=1"});
  ASSERT_TRUE(server.Start()) << server.Output();
  auto client = Connect(server, Plain());
  constexpr size_t kKeys = size_t{16} << 20;  // 64 MiB of keys
  constexpr size_t kBytes = kKeys * sizeof(uint32_t);
  const std::vector<uint32_t> keys =
      testing::Generate<uint32_t>(testing::Shape::kRandom, kKeys, 1);
  // Warm-up: the same sort, unlimited, so that gRPC's buffers for a
  // message this large, the CPU path's threads and their heaps have all
  // been mapped once; what the server holds at rest is measured after.
  {
    auto sorted = client->Sort<uint32_t>(keys);
    ASSERT_TRUE(sorted.ok()) << sorted.status();
  }
  const size_t at_rest = MappedBytes(server.pid());
  ASSERT_GT(at_rest, 0u);
  // Room for the request and its answer array (2 x 64 MiB, measured) and
  // 64 MiB besides, not for the 128 MiB of scratch as well.
  rlimit limit;
  ASSERT_EQ(prlimit(server.pid(), RLIMIT_AS, nullptr, &limit), 0);
  limit.rlim_cur = at_rest + 2 * kBytes + (size_t{64} << 20);
  ASSERT_EQ(prlimit(server.pid(), RLIMIT_AS, &limit, nullptr), 0);

  auto refused = client->Sort<uint32_t>(keys);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted)
      << refused.status();
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("scratch"));

  // Still serving, within the same limit: small sorts, and a large one
  // whose scratch fits.
  for (size_t n : {size_t{1000}, size_t{1} << 20}) {
    const std::vector<uint32_t> some(keys.begin(), keys.begin() + n);
    auto sorted = client->Sort<uint32_t>(some);
    ASSERT_TRUE(sorted.ok()) << sorted.status() << server.Output();
    EXPECT_EQ(sorted->keys, Sorted(some));
  }
  EXPECT_EQ(server.Terminate(), 0) << server.Output();
}

// Host memory running out inside a device run (injected: the run's first
// device allocation throws std::bad_alloc) fails the run like any device
// error: the CPU path answers it, and the device serves the next one.
TEST(Hardening, DeviceRunOutOfHostMemoryFailsOverAndServesOn) {
  ServerProcess server(OpenClArgs({"--inject_faults=host_oom=1"}));
  ASSERT_TRUE(server.Start()) << server.Output();
  auto client = Connect(server, Plain());
  const std::vector<uint32_t> keys =
      testing::Generate<uint32_t>(testing::Shape::kRandom, 5000, 2);
  auto first = client->Sort<uint32_t>(keys);
  ASSERT_TRUE(first.ok()) << first.status() << server.Output();
  EXPECT_EQ(first->keys, Sorted(keys));
  EXPECT_EQ(first->served_by.path(), v1::EXECUTION_PATH_CPU);
  EXPECT_EQ(first->served_by.route(), "failover");
  // The failure is logged before the CPU path answers, but the test reads
  // the server's output on its own thread: wait for the line to arrive.
  EXPECT_TRUE(server.WaitForLine("no host memory", std::chrono::seconds(30)))
      << server.Output();
  auto second = client->Sort<uint32_t>(keys);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(second->keys, Sorted(keys));
  EXPECT_EQ(second->served_by.path(), v1::EXECUTION_PATH_OPENCL_CPU);
  EXPECT_EQ(server.Terminate(), 0) << server.Output();
}

// A channel that pings every 20 ms whether or not it has calls open.
std::shared_ptr<grpc::Channel> PingFlood(const ServerProcess& server) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 20);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 5000);
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  args.SetInt(GRPC_ARG_HTTP2_MIN_SENT_PING_INTERVAL_WITHOUT_DATA_MS, 10);
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  return grpc::CreateCustomChannel(server.address(),
                                   grpc::InsecureChannelCredentials(), args);
}

// A client that pings without pause on an idle connection gets GOAWAY
// (ENHANCE_YOUR_CALM, too many pings) and its connection is closed, while
// a well-behaved client on the same server is served throughout.
TEST(Hardening, PingFloodIsCutOffWhileOthersAreServed) {
  ServerProcess server({"--device=cpu", "--grpc_max_ping_strikes=2"});
  ASSERT_TRUE(server.Start()) << server.Output();
  auto client = Connect(server, Plain());
  std::shared_ptr<grpc::Channel> flood = PingFlood(server);
  const auto deadline =
      std::chrono::system_clock::now() + std::chrono::seconds(10);
  ASSERT_TRUE(flood->WaitForConnected(deadline));
  // The server closes the connection: the channel leaves READY (to IDLE,
  // or to CONNECTING as it reconnects).
  EXPECT_TRUE(flood->WaitForStateChange(GRPC_CHANNEL_READY, deadline))
      << "the ping flood was not cut off";
  EXPECT_NE(flood->GetState(false), GRPC_CHANNEL_READY);
  const std::vector<uint32_t> keys =
      testing::Generate<uint32_t>(testing::Shape::kRandom, 1000, 3);
  auto sorted = client->Sort<uint32_t>(keys);
  ASSERT_TRUE(sorted.ok()) << sorted.status();
  EXPECT_EQ(sorted->keys, Sorted(keys));
  EXPECT_EQ(server.Terminate(), 0) << server.Output();
}

// A client whose keepalive pings stay within --grpc_min_ping_interval
// keeps its connection while a call is open: the server's enforcement
// punishes floods, not keepalive.
TEST(Hardening, KeepaliveWithinTheIntervalKeepsTheConnection) {
  ServerProcess server({"--device=cpu", "--grpc_min_ping_interval=50ms",
                        "--grpc_max_ping_strikes=1"});
  ASSERT_TRUE(server.Start()) << server.Output();
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 200);
  args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  args.SetInt(GRPC_ARG_HTTP2_MIN_SENT_PING_INTERVAL_WITHOUT_DATA_MS, 100);
  auto channel = grpc::CreateCustomChannel(
      server.address(), grpc::InsecureChannelCredentials(), args);
  grpc::GenericStub stub(channel);
  // A stream left open, with nothing sent, while about ten pings go.
  grpc::ClientContext context;
  grpc::CompletionQueue cq;
  auto stream =
      stub.PrepareCall(&context, "/sortd.v1.SortService/SortStream", &cq);
  stream->StartCall(reinterpret_cast<void*>(1));
  void* tag;
  bool ok;
  ASSERT_TRUE(cq.Next(&tag, &ok));
  ASSERT_TRUE(ok);
  EXPECT_FALSE(channel->WaitForStateChange(
      GRPC_CHANNEL_READY,
      std::chrono::system_clock::now() + std::chrono::seconds(2)))
      << "the connection was closed";
  context.TryCancel();
  grpc::Status status;
  stream->Finish(&status, reinterpret_cast<void*>(2));
  while (cq.Next(&tag, &ok) && tag != reinterpret_cast<void*>(2)) {
  }
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {
  }
  EXPECT_EQ(server.Terminate(), 0) << server.Output();
}

// Metadata beyond --grpc_max_metadata_bytes (6 KiB against 4 KiB; gRPC's
// own default would take it) is refused RESOURCE_EXHAUSTED before it
// reaches the service, and gRPC closes that connection; calls within the
// limit are served.
TEST(Hardening, OversizedMetadataIsRefused) {
  ServerProcess server({"--device=cpu", "--grpc_max_metadata_bytes=4096"});
  ASSERT_TRUE(server.Start()) << server.Output();
  const std::string empty_sort("\x0a\x00", 2);
  grpc::GenericStub stub(testing::Channel(server));
  testing::UnaryResult big = testing::Unary(
      stub, "Sort", empty_sort, {{"x-padding", std::string(6 << 10, 'a')}});
  EXPECT_EQ(big.status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED)
      << big.status.error_message();
  // The offending connection is closed; a new one is served.
  grpc::ChannelArguments fresh;
  fresh.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  grpc::GenericStub again(grpc::CreateCustomChannel(
      server.address(), grpc::InsecureChannelCredentials(), fresh));
  testing::UnaryResult small = testing::Unary(
      again, "Sort", empty_sort, {{"x-padding", std::string(1 << 10, 'a')}});
  EXPECT_TRUE(small.status.ok())
      << small.status.error_code() << " " << small.status.error_message();
  EXPECT_EQ(server.Terminate(), 0) << server.Output();
}

// Refusals for want of capacity tell the client when to retry (trailing
// metadata grpc-retry-pushback-ms), and the C++ client retries them after
// that pushback: a sort refused while the key budget is held succeeds once
// it is freed, where a client without retries fails. The budget is held by
// a 10-key sort on an OpenCL-device server whose batches wait an hour for
// a second request; another 10-key sort completes the batch.
TEST(Hardening, ResourceExhaustedCarriesPushbackAndTheClientRetries) {
  // 2000 keys admitted at most, a call counting its whole size; sorts of
  // 1000 keys and more run alone, smaller ones wait for a second.
  ServerProcess server(
      OpenClArgs({"--metrics_listen=127.0.0.1:0", "--max_batch_requests=2",
                  "--max_batch_delay=1h", "--max_queued_keys=2000",
                  "--max_call_keys=2000", "--solo_min_keys=1000"}));
  ASSERT_TRUE(server.Start()) << server.Output();
  auto plain = Connect(server, Plain());
  auto retrying = Connect(server);  // the default options: 4 attempts
  auto held = std::async(std::launch::async, [&] {
    return plain->Sort<uint32_t>(std::vector<uint32_t>(10, 7));
  });
  ASSERT_TRUE(WaitForMetric(server, "sortd_queued_requests 1\n"))
      << server.Output();
  const std::vector<uint32_t> big =
      testing::Generate<uint32_t>(testing::Shape::kRandom, 1995, 4);

  // 10 + 1995 keys > 2000: refused, with the pushback (a raw call on a
  // channel without retries, so that the answer reaches the test as sent).
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_ENABLE_RETRIES, 0);
  grpc::GenericStub stub(grpc::CreateCustomChannel(
      server.address(), grpc::InsecureChannelCredentials(), args));
  std::string request("\x0a\xac\x3e", 3);  // u32_keys, 7980 bytes
  request += PackArray<uint32_t>(big);
  testing::UnaryResult refused = testing::Unary(stub, "Sort", request);
  ASSERT_EQ(refused.status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED)
      << refused.status.error_message();
  EXPECT_THAT(refused.status.error_message(), HasSubstr("--max_queued_keys"));
  EXPECT_THAT(refused.trailing_metadata, ::testing::Contains(::testing::Pair(
                                             "grpc-retry-pushback-ms", "250")));
  // The client without retries fails at once.
  auto failed = plain->Sort<uint32_t>(big);
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.status().code(), absl::StatusCode::kResourceExhausted);

  // The retrying client's first attempt is refused (the third refusal);
  // once the held batch is completed and answered, a retry is served.
  auto retried = std::async(std::launch::async,
                            [&] { return retrying->Sort<uint32_t>(big); });
  ASSERT_TRUE(WaitForMetric(
      server,
      "sortd_requests_total{code=\"RESOURCE_EXHAUSTED\",method=\"Sort\","
      "path=\"none\"} 3\n"))
      << HttpGet(server.metrics_address(), "/metrics");
  auto joined = plain->Sort<uint32_t>(std::vector<uint32_t>(10, 3));
  ASSERT_TRUE(joined.ok()) << joined.status();
  EXPECT_TRUE(held.get().ok());
  auto served = retried.get();
  ASSERT_TRUE(served.ok()) << served.status();
  EXPECT_EQ(served->keys, Sorted(big));
  EXPECT_EQ(server.Terminate(), 0) << server.Output();
}

// The client connections that carried calls, from --log_requests' lines
// ("start Sort request=N from ipv4:127.0.0.1:PORT"): their peer addresses,
// each port one connection.
std::set<std::string> CallingConnections(const std::string& log) {
  std::set<std::string> peers;
  std::istringstream lines(log);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.find("sortd: start ") == std::string::npos) continue;
    const size_t from = line.rfind(" from ");
    if (from != std::string::npos) peers.insert(line.substr(from + 6));
  }
  return peers;
}

// A connection is closed at --grpc_max_connection_age (GOAWAY): a client
// that keeps calling reconnects, and with the clients' default service
// config (retries) none of its calls fails, the calls open at the GOAWAY
// finishing within the grace.
TEST(Hardening, ConnectionsEndAtTheirAgeAndClientsReconnectWithoutFailures) {
  ServerProcess server({"--device=cpu", "--log_requests",
                        "--grpc_max_connection_age=500ms",
                        "--grpc_max_connection_age_grace=30s"});
  ASSERT_TRUE(server.Start()) << server.Output();
  ClientOptions options;  // the default retries
  options.connections = 1;
  options.split_bytes = 0;
  auto client = Connect(server, options);
  const std::vector<uint32_t> keys =
      testing::Generate<uint32_t>(testing::Shape::kRandom, 1000, 5);
  const std::vector<uint32_t> want = Sorted(keys);
  // Until the calls have gone over three connections (about 1.5 s of
  // ages), or a deadline far beyond.
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(30);
  int calls = 0, failed = 0;
  size_t connections = 0;
  while (connections < 3 && std::chrono::steady_clock::now() < deadline) {
    auto sorted = client->Sort<uint32_t>(keys);
    ++calls;
    if (!sorted.ok()) {
      ADD_FAILURE() << sorted.status();
      ++failed;
    } else {
      EXPECT_EQ(sorted->keys, want);
    }
    if (calls % 20 == 0) {
      connections = CallingConnections(server.Output()).size();
    }
  }
  EXPECT_GE(connections, 3u) << "over " << calls << " calls";
  EXPECT_EQ(failed, 0) << "of " << calls << " calls";
  EXPECT_EQ(server.Terminate(), 0) << server.Output();
}

// A connection with no call open for --grpc_max_connection_idle is closed
// by the server (the client's channel leaves READY without the client
// doing anything), while one with a call open is kept; the idle client
// reconnects on its next call.
TEST(Hardening, IdleConnectionsAreClosedAndBusyOnesKept) {
  ServerProcess server(
      {"--device=cpu", "--log_requests", "--grpc_max_connection_idle=300ms"});
  ASSERT_TRUE(server.Start()) << server.Output();
  const std::string empty_sort("\x0a\x00", 2);
  auto channel = [&] {
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    return grpc::CreateCustomChannel(server.address(),
                                     grpc::InsecureChannelCredentials(), args);
  };
  // The busy connection: a SortStream left open, nothing sent.
  auto busy = channel();
  grpc::GenericStub busy_stub(busy);
  grpc::ClientContext context;
  grpc::CompletionQueue cq;
  auto stream =
      busy_stub.PrepareCall(&context, "/sortd.v1.SortService/SortStream", &cq);
  stream->StartCall(reinterpret_cast<void*>(1));
  void* tag;
  bool ok;
  ASSERT_TRUE(cq.Next(&tag, &ok));
  ASSERT_TRUE(ok);
  ASSERT_TRUE(server.WaitForLine("start SortStream", std::chrono::seconds(10)))
      << server.Output();
  ASSERT_EQ(busy->GetState(false), GRPC_CHANNEL_READY);

  auto idle = channel();
  grpc::GenericStub idle_stub(idle);
  testing::UnaryResult first = testing::Unary(idle_stub, "Sort", empty_sort);
  ASSERT_TRUE(first.status.ok()) << first.status.error_message();
  ASSERT_EQ(idle->GetState(false), GRPC_CHANNEL_READY);
  const auto t0 = std::chrono::system_clock::now();
  EXPECT_TRUE(idle->WaitForStateChange(GRPC_CHANNEL_READY,
                                       t0 + std::chrono::seconds(10)))
      << "the idle connection was not closed";
  EXPECT_GE(std::chrono::system_clock::now() - t0,
            std::chrono::milliseconds(250))
      << "closed before it had been idle for --grpc_max_connection_idle";
  EXPECT_NE(idle->GetState(false), GRPC_CHANNEL_READY);
  // The busy one outlives the idle one by more than the idle time.
  EXPECT_FALSE(busy->WaitForStateChange(
      GRPC_CHANNEL_READY,
      std::chrono::system_clock::now() + std::chrono::seconds(1)))
      << "a connection with a call open was closed";
  testing::UnaryResult again = testing::Unary(idle_stub, "Sort", empty_sort);
  EXPECT_TRUE(again.status.ok()) << again.status.error_message();

  context.TryCancel();
  grpc::Status status;
  stream->Finish(&status, reinterpret_cast<void*>(2));
  while (cq.Next(&tag, &ok) && tag != reinterpret_cast<void*>(2)) {
  }
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {
  }
  EXPECT_EQ(server.Terminate(), 0) << server.Output();
}

// The synchronous services (reflection) run on at most --grpc_max_threads
// threads of gRPC's: reflection streams held open take them, and past
// them a new stream is refused RESOURCE_EXHAUSTED at once, while the
// sorts (callback API, no thread of their own) are all answered; once the
// streams close, reflection serves again.
TEST(Hardening, ReflectionBeyondTheThreadQuotaIsRefusedAndSortsAreServed) {
  ServerProcess server({"--device=cpu", "--grpc_max_threads=4"});
  ASSERT_TRUE(server.Start()) << server.Output();
  auto channel = testing::Channel(server);
  grpc::reflection::v1::ServerReflection::Stub reflection(channel);
  struct Stream {
    grpc::ClientContext context;
    std::unique_ptr<grpc::ClientReaderWriter<
        grpc::reflection::v1::ServerReflectionRequest,
        grpc::reflection::v1::ServerReflectionResponse>>
        rw;
  };
  // Opens a stream and asks for the services; true when answered (the
  // stream then holds a thread until closed).
  auto open = [&](Stream& s) {
    s.context.set_deadline(std::chrono::system_clock::now() +
                           std::chrono::seconds(60));
    s.rw = reflection.ServerReflectionInfo(&s.context);
    grpc::reflection::v1::ServerReflectionRequest request;
    request.set_list_services("");
    grpc::reflection::v1::ServerReflectionResponse response;
    return s.rw->Write(request) && s.rw->Read(&response) &&
           response.has_list_services_response();
  };
  std::vector<std::unique_ptr<Stream>> held;
  grpc::Status refused;
  for (int i = 0; i < 16; ++i) {
    auto s = std::make_unique<Stream>();
    if (!open(*s)) {
      refused = s->rw->Finish();
      break;
    }
    held.push_back(std::move(s));
  }
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED)
      << refused.error_message() << "; " << held.size() << " streams served";
  // Fewer than the quota: one of its threads stays polling.
  EXPECT_GE(held.size(), 1u);
  EXPECT_LT(held.size(), 4u);

  auto client = Connect(server, Plain());
  for (auto& r : ConcurrentSorts(*client, 32)) {
    EXPECT_TRUE(r.ok()) << r.status();
  }

  for (auto& s : held) {
    s->rw->WritesDone();
    EXPECT_TRUE(s->rw->Finish().ok());
  }
  held.clear();
  // The threads come back: a new stream is served (tried until one is,
  // as each thread returns once its stream's handler has).
  bool served = false;
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!served && std::chrono::steady_clock::now() < deadline) {
    Stream s;
    served = open(s);
    s.rw->WritesDone();
    (void)s.rw->Finish();
  }
  EXPECT_TRUE(served);
  EXPECT_EQ(server.Terminate(), 0) << server.Output();
}

// Requests that gRPC would buffer beyond --grpc_memory_bytes (32 calls of
// nearly 4 MiB at once, each on a connection of its own, against a quota
// of 4 MiB) are cut off by gRPC's resource quota rather than held: a
// stream reset ENHANCE_YOUR_CALM (the client sees RESOURCE_EXHAUSTED), or
// its connection closed with GOAWAY (UNAVAILABLE), both of which the
// clients' default service config retries. Every call that is answered is
// answered correctly, and the server goes on serving, old connections and
// new. With the default quota (2 GiB) all 32 are answered.
TEST(Hardening, RequestsBeyondTheGrpcMemoryQuotaAreCutOffAndServingGoesOn) {
  ServerProcess server({"--device=cpu", "--max_request_bytes=4194304",
                        "--grpc_memory_bytes=4194304"});
  ASSERT_TRUE(server.Start()) << server.Output();
  const std::vector<uint32_t> keys =
      testing::Generate<uint32_t>(testing::Shape::kRandom, 1000000, 6);
  const std::vector<uint32_t> want = Sorted(keys);
  std::string request("\x0a\x80\x92\xf4\x01", 5);  // u32_keys, 4000000 bytes
  request += PackArray<uint32_t>(keys);
  constexpr int kCalls = 32;
  std::vector<std::unique_ptr<grpc::GenericStub>> stubs;
  for (int i = 0; i < kCalls; ++i) {
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    args.SetInt(GRPC_ARG_ENABLE_RETRIES, 0);
    args.SetMaxReceiveMessageSize(-1);
    stubs.push_back(
        std::make_unique<grpc::GenericStub>(grpc::CreateCustomChannel(
            server.address(), grpc::InsecureChannelCredentials(), args)));
  }
  std::vector<std::future<testing::UnaryResult>> calls;
  for (int i = 0; i < kCalls; ++i) {
    calls.push_back(std::async(std::launch::async, [&, i] {
      return testing::Unary(*stubs[i], "Sort", request);
    }));
  }
  std::map<grpc::StatusCode, int> codes;
  for (auto& c : calls) {
    const testing::UnaryResult r = c.get();
    ++codes[r.status.error_code()];
    if (r.status.ok()) {
      v1::SortResponse answer;
      ASSERT_TRUE(answer.ParseFromString(r.response));
      ASSERT_EQ(answer.u32_keys().size(), want.size() * 4);
      EXPECT_EQ(
          std::memcmp(answer.u32_keys().data(), want.data(), want.size() * 4),
          0);
    }
  }
  const int refused = codes[grpc::StatusCode::RESOURCE_EXHAUSTED] +
                      codes[grpc::StatusCode::UNAVAILABLE];
  EXPECT_EQ(codes[grpc::StatusCode::OK] + refused, kCalls)
      << "other codes than OK, RESOURCE_EXHAUSTED and UNAVAILABLE";
  EXPECT_GE(refused, 1) << "the quota never bound";
  // Serving goes on: a call on an old connection, and a large one on a
  // new client once gRPC has taken back what the burst held (gRPC's
  // retries do not cover a request this large, so it is sent again here
  // until served, within a deadline).
  // The quota's GOAWAY may still be on its way to that connection: a call
  // that meets it is UNAVAILABLE (retries are off here) and the next one
  // reconnects.
  testing::UnaryResult small;
  for (int attempt = 0; attempt < 3; ++attempt) {
    small = testing::Unary(*stubs[0], "Sort", std::string("\x0a\x00", 2));
    if (small.status.error_code() != grpc::StatusCode::UNAVAILABLE) break;
  }
  EXPECT_TRUE(small.status.ok()) << small.status.error_message();
  auto client = Connect(server);
  absl::StatusOr<SortResult<uint32_t>> sorted = absl::UnknownError("not run");
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (!sorted.ok() && std::chrono::steady_clock::now() < deadline) {
    sorted = client->Sort<uint32_t>(keys);
    if (!sorted.ok()) {
      const absl::StatusCode code = sorted.status().code();
      ASSERT_TRUE(code == absl::StatusCode::kResourceExhausted ||
                  code == absl::StatusCode::kUnavailable)
          << sorted.status();
    }
  }
  ASSERT_TRUE(sorted.ok()) << sorted.status();
  EXPECT_EQ(sorted->keys, want);
  EXPECT_EQ(server.Terminate(), 0) << server.Output();
}

// A call still open when its connection reaches --grpc_max_connection_age
// may run on for the grace period, then it is cut off (the connection
// closed: UNAVAILABLE), no sooner; the client reconnects for its next
// call.
TEST(Hardening, ACallPastItsConnectionsAgeAndGraceIsCutOff) {
  ServerProcess server({"--device=cpu", "--log_requests",
                        "--grpc_max_connection_age=300ms",
                        "--grpc_max_connection_age_grace=700ms"});
  ASSERT_TRUE(server.Start()) << server.Output();
  auto channel = testing::Channel(server);
  grpc::GenericStub stub(channel);
  // A SortStream left open, nothing sent: sortd waits for its messages
  // (--stream_idle_timeout, 30 s, is far off).
  const auto t0 = std::chrono::steady_clock::now();
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::seconds(20));
  grpc::CompletionQueue cq;
  auto stream =
      stub.PrepareCall(&context, "/sortd.v1.SortService/SortStream", &cq);
  stream->StartCall(reinterpret_cast<void*>(1));
  void* tag;
  bool ok;
  ASSERT_TRUE(cq.Next(&tag, &ok));
  ASSERT_TRUE(ok);
  ASSERT_TRUE(server.WaitForLine("start SortStream", std::chrono::seconds(10)))
      << server.Output();
  grpc::Status status;
  stream->Finish(&status, reinterpret_cast<void*>(2));
  while (cq.Next(&tag, &ok) && tag != reinterpret_cast<void*>(2)) {
  }
  const auto lasted = std::chrono::steady_clock::now() - t0;
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE)
      << status.error_message();
  // Age (less its 10% jitter) and grace: 970 ms at least; far less than
  // the call's deadline.
  EXPECT_GE(lasted, std::chrono::milliseconds(950));
  EXPECT_LT(lasted, std::chrono::seconds(10));
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {
  }
  const testing::UnaryResult next =
      testing::Unary(stub, "Sort", std::string("\x0a\x00", 2));
  EXPECT_TRUE(next.status.ok()) << next.status.error_message();
  EXPECT_EQ(server.Terminate(), 0) << server.Output();
}

// A TCP relay for one connection from a client to a local port, that can
// be frozen: it then forwards nothing either way, as a peer that vanished
// without closing its connection (a host that lost power, a cable pulled)
// would, and it reports when the server closes its side.
class FreezableRelay {
 public:
  explicit FreezableRelay(int port) : port_(port) {
    listener_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    if (listener_ < 0 ||
        bind(listener_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) !=
            0 ||
        listen(listener_, 1) != 0 ||
        getsockname(listener_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      ADD_FAILURE() << "relay: " << std::strerror(errno);
      return;
    }
    address_ = absl::StrCat("127.0.0.1:", ntohs(addr.sin_port));
    thread_ = std::thread([this] { Run(); });
  }
  ~FreezableRelay() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
    for (int fd : {listener_, client_, server_}) {
      if (fd >= 0) close(fd);
    }
  }
  const std::string& address() const { return address_; }
  void Freeze() { frozen_ = true; }
  // Waits until the server has closed the relayed connection (end of
  // stream or reset), at most until `deadline`.
  bool WaitForServerClose(std::chrono::steady_clock::time_point deadline) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_until(lock, deadline, [this] { return server_closed_; });
  }
  // Waits until the server has sent `count` pings of its own (HTTP/2 PING
  // frames without ACK) through the relay, at most until `deadline`.
  bool WaitForServerPings(int count,
                          std::chrono::steady_clock::time_point deadline) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_until(lock, deadline,
                          [&] { return server_pings_ >= count; });
  }

 private:
  void Run() {
    pollfd accept_fd{listener_, POLLIN, 0};
    while (!stop_ && poll(&accept_fd, 1, 50) <= 0) {
    }
    if (stop_) return;
    client_ = accept(listener_, nullptr, nullptr);
    server_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(static_cast<uint16_t>(port_));
    if (client_ < 0 || server_ < 0 ||
        connect(server_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) !=
            0) {
      ADD_FAILURE() << "relay: " << std::strerror(errno);
      return;
    }
    char buf[1 << 16];
    while (!stop_) {
      // Frozen: only the server's side is read, and what it sends dropped.
      pollfd fds[2] = {{server_, POLLIN, 0}, {client_, POLLIN, 0}};
      if (poll(fds, frozen_ ? 1 : 2, 50) <= 0) continue;
      for (int i = 0; i < (frozen_ ? 1 : 2); ++i) {
        if (fds[i].revents == 0) continue;
        const ssize_t n = read(fds[i].fd, buf, sizeof(buf));
        if (n <= 0) {
          if (i == 0) {
            std::lock_guard<std::mutex> lock(mu_);
            server_closed_ = true;
            cv_.notify_all();
          }
          return;
        }
        if (!frozen_) {
          (void)!write(i == 0 ? client_ : server_, buf, n);
          if (i == 0) CountPings(buf, static_cast<size_t>(n));
        }
      }
    }
  }

  // Follows the server's HTTP/2 frames (it sends no preface): each a
  // 9-byte header (24-bit length, type, flags, stream) and its payload.
  void CountPings(const char* data, size_t n) {
    frames_.append(data, n);
    size_t at = 0;
    while (frames_.size() - at >= 9) {
      const auto* h = reinterpret_cast<const unsigned char*>(&frames_[at]);
      const size_t length = (size_t{h[0]} << 16) | (size_t{h[1]} << 8) | h[2];
      if (frames_.size() - at < 9 + length) break;
      if (h[3] == 6 && (h[4] & 1) == 0) {  // PING, not an ACK
        std::lock_guard<std::mutex> lock(mu_);
        ++server_pings_;
        cv_.notify_all();
      }
      at += 9 + length;
    }
    frames_.erase(0, at);
  }

  const int port_;
  std::string frames_;    // the server's bytes not yet a whole frame
  int server_pings_ = 0;  // guarded by mu_
  int listener_ = -1, client_ = -1, server_ = -1;
  std::string address_;
  std::atomic<bool> stop_{false}, frozen_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  bool server_closed_ = false;  // guarded by mu_
  std::thread thread_;
};

// A SortStream call left open with nothing sent, whose client stays alive:
// a thread of its own drives the connection (so that the client answers
// the server's pings) until the call is cancelled, when destroyed.
class LiveStream {
 public:
  explicit LiveStream(std::shared_ptr<grpc::Channel> channel)
      : stub_(std::move(channel)) {
    stream_ =
        stub_.PrepareCall(&context_, "/sortd.v1.SortService/SortStream", &cq_);
    stream_->StartCall(Tag(1));
    stream_->Read(&answer_, Tag(2));
    poller_ = std::thread([this] {
      void* tag;
      bool ok;
      int pending = 3;  // the start, the read and the finish
      while (pending > 0 && cq_.Next(&tag, &ok)) --pending;
    });
  }
  ~LiveStream() {
    context_.TryCancel();
    stream_->Finish(&status_, Tag(3));
    poller_.join();
    cq_.Shutdown();
    void* tag;
    bool ok;
    while (cq_.Next(&tag, &ok)) {
    }
  }

 private:
  static void* Tag(intptr_t n) { return reinterpret_cast<void*>(n); }

  grpc::GenericStub stub_;
  grpc::ClientContext context_;
  grpc::CompletionQueue cq_;
  std::unique_ptr<grpc::GenericClientAsyncReaderWriter> stream_;
  grpc::ByteBuffer answer_;
  grpc::Status status_;
  std::thread poller_;
};

// A client that vanishes with a call open (its connection frozen: nothing
// comes back, not even TCP's close) is dropped: sortd pings it after
// --grpc_keepalive_time without activity, and when the ping goes
// unanswered for --grpc_keepalive_timeout it closes the connection, ending
// the call and releasing what it held; other clients are served. While
// the client lives it answers the pings and keeps its connection (two
// pings go by before it vanishes).
TEST(Hardening, ADeadPeerWithACallOpenIsDroppedByKeepalive) {
  ServerProcess server({"--device=cpu", "--log_requests",
                        "--grpc_keepalive_time=200ms",
                        "--grpc_keepalive_timeout=300ms"});
  ASSERT_TRUE(server.Start()) << server.Output();
  const int port =
      std::stoi(server.address().substr(server.address().rfind(':') + 1));
  FreezableRelay relay(port);
  ASSERT_FALSE(relay.address().empty());
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  auto channel = grpc::CreateCustomChannel(
      relay.address(), grpc::InsecureChannelCredentials(), args);
  LiveStream stream(channel);
  // The call reached sortd (the relay forwards until frozen): sortd
  // pings only connections with calls open.
  ASSERT_TRUE(server.WaitForLine("start SortStream", std::chrono::seconds(10)))
      << server.Output();
  ASSERT_TRUE(relay.WaitForServerPings(
      2, std::chrono::steady_clock::now() + std::chrono::seconds(10)))
      << "sortd did not ping a connection with a call open";
  const auto t0 = std::chrono::steady_clock::now();
  relay.Freeze();
  EXPECT_TRUE(relay.WaitForServerClose(t0 + std::chrono::seconds(10)))
      << "sortd kept the dead peer's connection";
  // Keepalive time and timeout: 500 ms, give or take the last activity.
  EXPECT_GE(std::chrono::steady_clock::now() - t0,
            std::chrono::milliseconds(300));
  auto client = Connect(server, Plain());
  const std::vector<uint32_t> keys =
      testing::Generate<uint32_t>(testing::Shape::kRandom, 1000, 7);
  auto sorted = client->Sort<uint32_t>(keys);
  ASSERT_TRUE(sorted.ok()) << sorted.status();
  EXPECT_EQ(sorted->keys, Sorted(keys));
  EXPECT_EQ(server.Terminate(), 0) << server.Output();
}

// Bad --grpc_* values stop startup with a message naming the flag.
TEST(Hardening, BadGrpcLimitsStopStartup) {
  for (const char* flag :
       {"--grpc_memory_bytes=1000", "--grpc_max_threads=1",
        "--grpc_max_metadata_bytes=10", "--grpc_keepalive_time=0s",
        "--grpc_max_ping_strikes=-1"}) {
    SCOPED_TRACE(flag);
    ServerProcess server({"--device=cpu", flag});
    EXPECT_FALSE(server.Start(std::chrono::seconds(30)));
    const std::string name =
        std::string(flag).substr(0, std::string(flag).find('='));
    EXPECT_THAT(server.Output(), HasSubstr(name));
  }
}

}  // namespace
}  // namespace sortd
