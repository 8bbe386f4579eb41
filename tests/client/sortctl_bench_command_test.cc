// `sortctl bench` (client/sortctl_bench_command.cc) as a user runs it: a
// server down from the start fails at once; one that dies during the run
// is backed off from and the run exits 1 saying why, as it does when most
// calls fail; an open loop keeps its schedule and reports the server's CPU
// seconds.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <future>
#include <string>
#include <vector>

#include "tests/client/sortctl_run.h"
#include "tests/held_port.h"
#include "tests/server_process.h"

namespace sortd {
namespace {

using testing::CommandResult;
using ::testing::HasSubstr;
using testing::HeldPort;
using testing::JsonCount;
using testing::JsonNumber;
using ::testing::Not;
using testing::PortOf;
using testing::ServerProcess;
using testing::Sortctl;

// A bench against a server that is down from the start stops at its first
// check, before any measured call.
TEST(SortctlCli, BenchAgainstADeadPortFailsAtOnce) {
  const HeldPort dead_port;
  ASSERT_TRUE(dead_port.ok());
  const auto start = std::chrono::steady_clock::now();
  const CommandResult r =
      Sortctl(dead_port.target(), "bench --duration 2s --concurrency 4 --json");
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr("UNAVAILABLE"));
  EXPECT_LT(seconds, 30);
}

// The server dies during the warmup (killed as its first call arrives), so
// every measured call finds it gone: the workers back off (10 ms doubling
// to 1 s) rather than call a dead server as fast as it fails them, and the
// run exits 1 saying why.
TEST(SortctlCli, BenchBacksOffFromADeadServerAndExitsOne) {
  ServerProcess server({"--device=cpu", "--log_requests"});
  ASSERT_TRUE(server.Start()) << server.Output();
  std::future<CommandResult> bench = std::async(std::launch::async, [&] {
    return Sortctl(server.address(),
                   "bench --duration=2s --warmup=2s --concurrency=4 --json");
  });
  // The port stays held after the kill, so that no server a parallel test
  // starts can be given it and answer the calls meant to fail.
  const HeldPort after(PortOf(server.address()));
  ASSERT_TRUE(after.ok());
  ASSERT_EQ(after.port(), PortOf(server.address()));
  ASSERT_TRUE(server.WaitForLine("sortd: start Sort", std::chrono::seconds(60)))
      << server.Output();
  server.Terminate(SIGKILL);
  const CommandResult r = bench.get();

  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr("calls failed"));
  const int64_t started = JsonCount(r.out, "started");
  EXPECT_GT(started, 0) << r.out;
  EXPECT_LT(started, 1000) << r.out;
  EXPECT_EQ(JsonCount(r.out, "ended"), started) << r.out;
  EXPECT_EQ(JsonCount(r.out, "errors"), started) << r.out;
  EXPECT_THAT(r.out, HasSubstr("\"errors_by_code\":{\"UNAVAILABLE\":"));
}

// Most calls fail (sizes beyond the server's request limit are refused with
// RESOURCE_EXHAUSTED) but some are answered: exit 1, not only when none
// was answered. One worker, a fixed seed: the same 16 picks every run
// (12 of them 64k).
TEST(SortctlCli, BenchExitsOneWhenMostCallsFail) {
  ServerProcess server({"--device=cpu", "--max_request_bytes=65536"});
  ASSERT_TRUE(server.Start()) << server.Output();
  const CommandResult r =
      Sortctl(server.address(),
              "bench --sizes=1k:1,64k:2 --concurrency=1 --requests=16 "
              "--duration=0 --warmup=0 --seed=3 --json");
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr("more than half"));
  const int64_t answered = JsonCount(r.out, "requests");
  const int64_t errors = JsonCount(r.out, "errors");
  EXPECT_GT(answered, 0) << r.out;
  EXPECT_GT(errors, answered) << r.out;
  EXPECT_EQ(answered + errors, 16) << r.out;
  EXPECT_THAT(r.out, HasSubstr("\"RESOURCE_EXHAUSTED\":"));
  EXPECT_EQ(server.Terminate(), 0) << server.Output();
}

// Open loop: calls are due at fixed times (--rate a second), however fast
// the answers come, so a second at 50 calls a second issues exactly 50
// calls and lasts the second (a closed loop of four workers sorting 4k keys
// would issue hundreds); the report gives sortd's CPU seconds over the run,
// read from its metrics endpoint, and says why when they cannot be read.
TEST(SortctlCli, BenchOpenLoopKeepsItsScheduleAndReportsServerCpu) {
  ServerProcess server({"--device=cpu", "--metrics_listen=127.0.0.1:0"});
  ASSERT_TRUE(server.Start()) << server.Output();
  const CommandResult r = Sortctl(
      server.address(),
      "bench --sizes=4k --rate=50 --duration=1s --warmup=0 --concurrency=4 "
      "--verify --verify_every=5 --json --server_metrics=" +
          server.metrics_address());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("\"loop\":\"open\""));
  EXPECT_EQ(JsonCount(r.out, "started"), 50) << r.out;
  EXPECT_EQ(JsonCount(r.out, "requests"), 50) << r.out;
  EXPECT_EQ(JsonCount(r.out, "mismatches"), 0) << r.out;
  // The last call is due 0.98 s in.
  EXPECT_GE(JsonNumber(r.out, "seconds"), 0.97) << r.out;
  EXPECT_GT(JsonNumber(r.out, "server_cpu_seconds"), 0) << r.out;
  EXPECT_GT(JsonNumber(r.out, "server_cpu_ms_per_request"), 0) << r.out;
  // The text report says the same for people.
  const CommandResult text =
      Sortctl(server.address(),
              "bench --sizes=1k --rate=20 --duration=0.5s --warmup=0 "
              "--server_metrics=" +
                  server.metrics_address());
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_THAT(text.out, HasSubstr("open loop"));
  EXPECT_THAT(text.out, HasSubstr("CPU-ms a request"));
  // A metrics address that answers nothing: the bench still runs, and the
  // report says why the CPU is missing.
  const HeldPort dead_port;
  ASSERT_TRUE(dead_port.ok());
  const CommandResult dead =
      Sortctl(server.address(),
              "bench --sizes=1k --requests=5 --duration=0 "
              "--warmup=0 --json --server_metrics=" +
                  dead_port.target());
  ASSERT_EQ(dead.exit_code, 0) << dead.err;
  EXPECT_THAT(dead.out, HasSubstr("\"server_metrics_error\":"));
  EXPECT_THAT(dead.out, Not(HasSubstr("server_cpu_seconds")));
  EXPECT_EQ(server.Terminate(), 0) << server.Output();
}

}  // namespace
}  // namespace sortd
