// sortctl's help (client/sortctl_help.cc): each command has its own, its
// usage and flags with their defaults, then the connection flags, and no
// other command's flags.
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
using testing::Sortctl;

// Each command has help of its own: its usage and its flags (with their
// defaults), then the connection flags, and no other command's flags.
TEST(SortctlCli, EachCommandHasItsOwnHelp) {
  const HeldPort dead_port;
  ASSERT_TRUE(dead_port.ok());
  const std::string target = dead_port.target();
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

}  // namespace
}  // namespace sortd
