// The sortctl binary (client/sortctl.cc) as a user runs it: bad usage exits
// 2 before any call, naming what was wrong; --version names the release;
// SORTD_TARGET names the server unless --target does. Each command's tests
// are beside it: sortctl_help, sortctl_commands and
// sortctl_bench_command_test.cc.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

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
using ::testing::Not;
using testing::RunCommand;
using testing::ServerProcess;
using testing::Sortctl;
using testing::SortctlWithEnv;

// Every usage error exits 2 with a message naming what was wrong, before
// any call: the target is a dead port, so a call would have exited 1.
TEST(SortctlCli, BadUsageExitsTwoAndNamesTheArgument) {
  const HeldPort dead_port;
  ASSERT_TRUE(dead_port.ok());
  const std::string target = dead_port.target();
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

// SORTD_TARGET names the server when --target is not given; a --target on
// the command line wins over it, either way round.
TEST(SortctlCli, SortdTargetIsTheDefaultTargetAndTargetWins) {
  ServerProcess server({"--device=cpu"});
  ASSERT_TRUE(server.Start()) << server.Output();
  const HeldPort dead_port;
  ASSERT_TRUE(dead_port.ok());
  const std::string dead = dead_port.target();

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

}  // namespace
}  // namespace sortd
