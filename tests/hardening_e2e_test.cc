// Untrusted clients against the real sortd: host memory running out while
// a request is served (the CPU path's scratch under an address-space
// limit, a device run's host buffers by fault injection) is answered
// RESOURCE_EXHAUSTED and the server serves on; the gRPC connection limits
// (ping flood, oversized metadata); every RESOURCE_EXHAUSTED answer carries
// the retry pushback, and the C++ client retries on it.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "client/client.h"
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
  EXPECT_THAT(server.Output(), HasSubstr("no host memory"));
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
