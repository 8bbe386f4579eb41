// The sortd binary's start and stop (server/sortd_main.cc), run as an
// operator runs it: flags it cannot serve with are refused at start, naming
// themselves; the CPU path's concurrency is what the flags say; SIGTERM
// drains the calls in flight and exits 0.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <cstdio>
#include <future>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/client.h"
#include "tests/e2e_util.h"
#include "tests/reference.h"
#include "tests/server_process.h"

namespace sortd {
namespace {

using ::testing::HasSubstr;
using testing::ServerProcess;

// SIGTERM while a sort is running: the sort completes correctly, the
// server exits 0, and it no longer accepts calls.
TEST(E2EShutdown, SigtermDrainsInFlightCallsAndExitsZero) {
  ServerProcess server({"--device=cpu", "--log_requests"});
  ASSERT_TRUE(server.Start()) << server.Output();
  // One call: a sort sent in parts whose later parts come after the drain
  // began is refused (UNAVAILABLE), as any new call is.
  ClientOptions one_call;
  one_call.split_bytes = 0;
  auto client = Connect(server, one_call);
  const size_t n = size_t{6} << 20;
  const std::vector<uint64_t> keys =
      testing::Generate<uint64_t>(testing::Shape::kRandom, n, 5);
  auto pending = std::async(std::launch::async, [&] {
    return client->Sort<uint64_t>(keys, {.return_permutation = true});
  });
  ASSERT_TRUE(server.WaitForLine("sortd: start Sort", std::chrono::seconds(60)))
      << server.Output();
  EXPECT_EQ(server.Terminate(SIGTERM), 0) << server.Output();
  auto result = pending.get();
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_EQ(result->keys.size(), n);
  EXPECT_TRUE(std::is_sorted(result->keys.begin(), result->keys.end()));
  EXPECT_THAT(server.Output(), HasSubstr("draining"));
  EXPECT_THAT(server.Output(), HasSubstr("sortd: end Sort OK"));
  EXPECT_EQ(client->CheckHealth().code(), absl::StatusCode::kUnavailable);
}

TEST(E2EStartup, RefusesUnknownDeviceAndBadLimits) {
  // Each flag, and what the refusal says.
  const std::pair<const char*, const char*> cases[] = {
      {"--device=tpu", "unknown entry 'tpu'"},
      {"--max_concurrent_streams=0", "--max_concurrent_streams"},
      {"--max_batch_requests=0", "--max_batch_requests"},
      {"--max_request_bytes=0", "--max_request_bytes"},
      {"--device_pool_bytes=-1", "--device_pool_bytes"},
      {"--cpu_scratch_bytes=-1", "--cpu_scratch_bytes"},
      {"--host_pool_min_bytes=0", "--host_pool_min_bytes"},
      // Policies are checked before any device is looked at: under
      // --device=auto a device refusing them would only be passed over.
      {"--kernel_policy=nvidia_ptx", "--kernel_policy=nvidia_ptx names no"},
      {"--kernel_policy_overrides=radix.pas=three-launch",
       "--kernel_policy_overrides"},
      {"--large_request_threads=-1", "--large_request_threads"},
      {"--large_request_bytes=-1", "--large_request_bytes"},
  };
  for (const auto& [flag, says] : cases) {
    ServerProcess bad({flag});
    EXPECT_FALSE(bad.Start()) << flag;
    EXPECT_THAT(bad.Output(), HasSubstr(says)) << flag;
  }
  for (const char* spec : {"enqueue", "enqueue=0", "explode=1", "sticky"}) {
    ServerProcess bad_faults(
        {"--device=cpu", absl::StrCat("--inject_faults=", spec)});
    EXPECT_FALSE(bad_faults.Start()) << spec;
    EXPECT_THAT(bad_faults.Output(), HasSubstr("--inject_faults")) << spec;
    EXPECT_EQ(bad_faults.Terminate(), 1) << spec;
  }
}

// CPU-path requests run as many at a time as the CPU path has threads (the
// concurrency the router's calibration times), unless --request_threads
// says otherwise.
TEST(E2EStartup, CpuPathRequestsRunAsManyAtATimeAsItHasThreads) {
  // By default: as many as the CPU path's threads (oneTBB's default
  // concurrency, which follows the process's CPUs), at least 2.
  {
    ServerProcess server({"--device=cpu"});
    ASSERT_TRUE(server.Start()) << server.Output();
    std::string line;
    ASSERT_TRUE(
        server.WaitForLine("cpu path: ", std::chrono::seconds(30), &line))
        << server.Output();
    int threads = 0, at_once = 0;
    ASSERT_EQ(std::sscanf(line.substr(line.find("cpu path: ")).c_str(),
                          "cpu path: %d threads; its requests run %d at",
                          &threads, &at_once),
              2)
        << line;
    EXPECT_GE(threads, 1);
    EXPECT_EQ(at_once, std::max(2, threads)) << line;
  }
  const std::pair<std::vector<std::string>, const char*> cases[] = {
      {{"--cpu_threads=3"}, "cpu path: 3 threads; its requests run 3 at"},
      {{"--cpu_threads=1"}, "cpu path: 1 threads; its requests run 2 at"},
      {{"--cpu_threads=3", "--request_threads=5"},
       "cpu path: 3 threads; its requests run 5 at"},
  };
  for (const auto& [flags, says] : cases) {
    std::vector<std::string> args = {"--device=cpu"};
    args.insert(args.end(), flags.begin(), flags.end());
    ServerProcess server(args);
    ASSERT_TRUE(server.Start()) << server.Output();
    std::string line;
    ASSERT_TRUE(
        server.WaitForLine("cpu path: ", std::chrono::seconds(30), &line))
        << server.Output();
    EXPECT_THAT(line, HasSubstr(says)) << absl::StrJoin(flags, " ");
  }
}

}  // namespace
}  // namespace sortd
