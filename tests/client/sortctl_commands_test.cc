// sortctl's commands (client/sortctl_commands.cc) and how they fail: a
// server's status prints as the server's and exits 1; a local failure (an
// input that cannot be read or parsed, a TLS file, an answer that cannot
// be written) prints as sortctl's own and exits 4.
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
using testing::ServerProcess;
using testing::Sortctl;
using testing::WriteTempFile;

// A call's error status is the server's: "server: CODE: message", exit 1,
// whether sortd refused the request or nothing answered at all.
TEST(SortctlCli, ServerStatusesPrintAsServerAndExitOne) {
  const HeldPort dead_port;
  ASSERT_TRUE(dead_port.ok());
  CommandResult r = Sortctl(dead_port.target(), "--timeout=10s health");
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
  const HeldPort dead_port;
  ASSERT_TRUE(dead_port.ok());
  const std::string target = dead_port.target();
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

}  // namespace
}  // namespace sortd
