// The sortctl binary's exit status and its load generator's manners, run as
// a user runs them: bad usage exits 2 before any call; a bench whose server
// died backs off instead of hammering it, and exits 1 when most of its
// calls failed.
#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <string>
#include <vector>

#include "tests/server_process.h"

namespace sortd {
namespace {

using testing::CommandResult;
using ::testing::HasSubstr;
using ::testing::Not;
using testing::RunCommand;
using testing::ServerProcess;

// A loopback port with nothing listening: bound, read, closed.
int DeadPort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  EXPECT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  socklen_t len = sizeof(addr);
  EXPECT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  close(fd);
  return ntohs(addr.sin_port);
}

std::string DeadTarget() { return "127.0.0.1:" + std::to_string(DeadPort()); }

CommandResult Sortctl(const std::string& target, const std::string& args) {
  return RunCommand(std::string(SORTCTL_BINARY) + " --target=" + target + " " +
                    args);
}

// The unsigned number after "name": in sortctl's JSON; -1 when absent.
int64_t JsonCount(const std::string& json, const std::string& name) {
  const std::string key = "\"" + name + "\":";
  const size_t at = json.find(key);
  if (at == std::string::npos) return -1;
  size_t i = at + key.size();
  if (i >= json.size() || json[i] < '0' || json[i] > '9') return -1;
  int64_t n = 0;
  for (; i < json.size() && json[i] >= '0' && json[i] <= '9'; ++i) {
    n = n * 10 + (json[i] - '0');
  }
  return n;
}

// The number after "name": in sortctl's JSON; NaN when absent.
double JsonNumber(const std::string& json, const std::string& name) {
  const std::string key = "\"" + name + "\":";
  const size_t at = json.find(key);
  if (at == std::string::npos) return std::nan("");
  char* end = nullptr;
  const char* begin = json.c_str() + at + key.size();
  const double v = std::strtod(begin, &end);
  return end == begin ? std::nan("") : v;
}

// Every usage error exits 2 with a message naming what was wrong, before
// any call: the target is a dead port, so a call would have exited 1.
TEST(SortctlCli, BadUsageExitsTwoAndNamesTheArgument) {
  const std::string target = DeadTarget();
  struct Case {
    std::string args;
    std::string names;  // in the message on stderr
  };
  const std::vector<Case> cases = {
      {"sort --type u8 --random 10", "--type: 'u8'"},
      {"sort --type=u32 --values=u16 --random=10", "--values: 'u16'"},
      {"sort --random=10 --input=keys.txt", "exactly one of --input"},
      {"sort", "exactly one of --input"},
      {"sort --random=-5", "--random"},
      {"transpose", "exactly one of --input"},
      {"bench --type=u8", "--type: 'u8'"},
      {"bench --sizes=1q:5", "--sizes"},
      {"bench --duration=abc", "'duration'"},
      {"bench --duration=25h", "--duration"},
      {"bench --duration", "'duration'"},
      {"bench --concurrency=0", "--concurrency"},
      {"bench --sweep=1,0", "--sweep"},
      {"bench --requests=-1", "--requests"},
      {"bench --op=shuffle", "--op: 'shuffle'"},
      {"bench --rate=-5", "--rate"},
      {"bench --rate=fast", "'rate'"},
      {"frobnicate", "'frobnicate'"},
      {"", "expected a command"},
      {"health now", "'now'"},
      {"--no_such_flag health", "'no_such_flag'"},
      {"--tls_cert=client.pem health", "--tls_key"},
      {"--timeout=0s health", "--timeout"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.args);
    const CommandResult r = Sortctl(target, c.args);
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_THAT(r.err, HasSubstr(c.names));
    EXPECT_THAT(r.err, Not(HasSubstr("UNAVAILABLE")));
    EXPECT_EQ(r.out, "");
  }
}

// Each command has help of its own: its usage and its flags (with their
// defaults), then the connection flags, and no other command's flags.
TEST(SortctlCli, EachCommandHasItsOwnHelp) {
  const std::string target = DeadTarget();
  for (const std::string args :
       {"help bench", "bench --help", "--timeout=5s bench -h"}) {
    SCOPED_TRACE(args);
    const CommandResult r = Sortctl(target, args);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_THAT(r.out, HasSubstr("sortctl bench:"));
    EXPECT_THAT(r.out, HasSubstr("--concurrency (default: 16)"));
    EXPECT_THAT(r.out, HasSubstr("--target"));
    EXPECT_THAT(r.out, Not(HasSubstr("--permutation")));  // sort's
  }
  CommandResult r = Sortctl(target, "help sort");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("--permutation"));
  EXPECT_THAT(r.out, Not(HasSubstr("--concurrency")));
  r = Sortctl(target, "help");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  for (const char* command : {"sort", "transpose", "health", "bench"}) {
    EXPECT_THAT(r.out, HasSubstr(command));
  }
  r = Sortctl(target, "help frobnicate");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("'frobnicate'"));
}

// --version names the release and the git revision, for both binaries.
TEST(SortctlCli, VersionNamesTheReleaseAndTheRevision) {
  for (const std::string binary : {SORTCTL_BINARY, SORTD_BINARY}) {
    const CommandResult r = RunCommand(binary + " --version");
    EXPECT_EQ(r.exit_code, 0) << binary << r.err;
    const std::string name = binary.substr(binary.rfind('/') + 1);
    EXPECT_THAT(r.out,
                ::testing::MatchesRegex(
                    name + " [0-9]+\\.[0-9]+\\.[0-9]+ \\(git [^ )]+\\)\n"))
        << binary;
  }
}

// Writes `text` to a new file in the test's temporary directory.
std::string WriteTempFile(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + "/" + name;
  FILE* f = std::fopen(path.c_str(), "w");
  EXPECT_NE(f, nullptr) << path;
  if (f != nullptr) {
    std::fputs(text.c_str(), f);
    std::fclose(f);
  }
  return path;
}

// sortctl run with SORTD_TARGET set to `env_target` in its environment.
CommandResult SortctlWithEnv(const std::string& env_target,
                             const std::string& args) {
  return RunCommand("SORTD_TARGET='" + env_target + "' " +
                    std::string(SORTCTL_BINARY) + " " + args);
}

// A call's error status is the server's: "server: CODE: message", exit 1,
// whether sortd refused the request or nothing answered at all.
TEST(SortctlCli, ServerStatusesPrintAsServerAndExitOne) {
  CommandResult r = Sortctl(DeadTarget(), "--timeout=10s health");
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_THAT(r.err, ::testing::StartsWith("server: UNAVAILABLE: ")) << r.err;

  // 31 rows are not whole 32x32 matrices: sortd answers INVALID_ARGUMENT.
  ServerProcess server({"--device=cpu"});
  ASSERT_TRUE(server.Start()) << server.Output();
  std::string rows;
  for (int i = 0; i < 31; ++i) rows += std::to_string(i) + "\n";
  const std::string in = WriteTempFile("sortctl_cli_31_rows.txt", rows);
  r = Sortctl(server.address(), "transpose --input=" + in);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_THAT(r.err, ::testing::StartsWith("server: INVALID_ARGUMENT: "))
      << r.err;
  EXPECT_THAT(r.err, HasSubstr("31 words"));
  EXPECT_THAT(r.err, Not(HasSubstr("sortctl:")));
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(server.Terminate(), 0) << server.Output();
}

// A local failure is sortctl's own: "sortctl: message", exit 4, and no
// call is made (the target is a dead port: a call would exit 1 with
// UNAVAILABLE) -- an input that cannot be read or parsed, a TLS file that
// cannot be loaded.
TEST(SortctlCli, LocalFailuresPrintAsSortctlAndExitFour) {
  const std::string target = DeadTarget();
  const std::string bad_keys =
      WriteTempFile("sortctl_cli_bad_keys.txt", "7 1\n2 abc 5\n");
  const std::string bad_rows =
      WriteTempFile("sortctl_cli_bad_rows.txt", "0x1 0xZZ\n");
  struct Case {
    std::string args;
    std::string says;  // after "sortctl: "
  };
  const std::vector<Case> cases = {
      {"sort --input=/nonexistent/sortctl_keys.txt",
       "cannot read /nonexistent/sortctl_keys.txt"},
      {"sort --type=u32 --input=" + bad_keys,
       bad_keys + ": number 4 (\"abc\")"},
      {"sort --type=f32 --input=" + bad_keys, "(--type f32)"},
      {"sort --type=i64 --input=" + bad_keys,
       bad_keys + ": number 4 (\"abc\")"},
      {"transpose --input=" + bad_rows, bad_rows + ": number 2 (\"0xZZ\")"},
      {"--tls_ca=/nonexistent/ca.pem health", "/nonexistent/ca.pem"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.args);
    const CommandResult r = Sortctl(target, c.args);
    EXPECT_EQ(r.exit_code, 4) << r.err;
    EXPECT_THAT(r.err, ::testing::StartsWith("sortctl: "));
    EXPECT_THAT(r.err, HasSubstr(c.says));
    EXPECT_THAT(r.err, Not(HasSubstr("server:")));
    EXPECT_THAT(r.err, Not(HasSubstr("UNAVAILABLE")));
    EXPECT_EQ(r.out, "");
  }
}

// An answer that cannot be written is a local failure too, after a call
// that succeeded: exit 4, not 1.
TEST(SortctlCli, UnwritableOutputIsALocalFailure) {
  ServerProcess server({"--device=cpu"});
  ASSERT_TRUE(server.Start()) << server.Output();
  const CommandResult r =
      Sortctl(server.address(),
              "sort --random=100 --output=/nonexistent/sortctl_out.txt");
  EXPECT_EQ(r.exit_code, 4) << r.err;
  EXPECT_THAT(r.err, ::testing::StartsWith("sortctl: cannot write "));
  EXPECT_THAT(r.err, Not(HasSubstr("server:")));
  EXPECT_EQ(server.Terminate(), 0) << server.Output();
}

// SORTD_TARGET names the server when --target is not given; a --target on
// the command line wins over it, either way round.
TEST(SortctlCli, SortdTargetIsTheDefaultTargetAndTargetWins) {
  ServerProcess server({"--device=cpu"});
  ASSERT_TRUE(server.Start()) << server.Output();
  const std::string dead = DeadTarget();

  CommandResult r = SortctlWithEnv(server.address(), "health");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, server.address() + ": SERVING\n");

  r = SortctlWithEnv(server.address(),
                     "sort --type=f64 --random=5000 --verify --json");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("\"verified\":true"));

  r = SortctlWithEnv(dead, "--target=" + server.address() + " health");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, server.address() + ": SERVING\n");

  r = SortctlWithEnv(server.address(),
                     "--target=" + dead + " --timeout=10s health");
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_THAT(r.err, ::testing::StartsWith("server: UNAVAILABLE: "));

  // An explicit empty --target is still bad usage, not $SORTD_TARGET.
  r = SortctlWithEnv(server.address(), "--target= health");
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_THAT(r.err, HasSubstr("--target: empty"));

  // The help says where the target comes from, and the exit codes.
  r = SortctlWithEnv(dead, "help");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("SORTD_TARGET"));
  EXPECT_THAT(r.out, HasSubstr("4  a local failure"));
  EXPECT_EQ(server.Terminate(), 0) << server.Output();
}

// A bench against a server that is down from the start stops at its first
// check, before any measured call.
TEST(SortctlCli, BenchAgainstADeadPortFailsAtOnce) {
  const auto start = std::chrono::steady_clock::now();
  const CommandResult r =
      Sortctl(DeadTarget(), "bench --duration 2s --concurrency 4 --json");
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr("UNAVAILABLE"));
  EXPECT_LT(seconds, 30);
}

// The server dies during the warmup (killed as its first call arrives), so
// every measured call finds it gone. The old sortctl made some 100,000
// calls a second, each failing at once, and exited 0 or 1 depending on
// whether one had been answered; the workers now back off (10 ms doubling
// to 1 s), and the run exits 1 saying why.
TEST(SortctlCli, BenchBacksOffFromADeadServerAndExitsOne) {
  ServerProcess server({"--device=cpu", "--log_requests"});
  ASSERT_TRUE(server.Start()) << server.Output();
  std::future<CommandResult> bench = std::async(std::launch::async, [&] {
    return Sortctl(server.address(),
                   "bench --duration=2s --warmup=2s --concurrency=4 --json");
  });
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
  const CommandResult dead =
      Sortctl(server.address(),
              "bench --sizes=1k --requests=5 --duration=0 "
              "--warmup=0 --json --server_metrics=" +
                  DeadTarget());
  ASSERT_EQ(dead.exit_code, 0) << dead.err;
  EXPECT_THAT(dead.out, HasSubstr("\"server_metrics_error\":"));
  EXPECT_THAT(dead.out, Not(HasSubstr("server_cpu_seconds")));
  EXPECT_EQ(server.Terminate(), 0) << server.Output();
}

}  // namespace
}  // namespace sortd
