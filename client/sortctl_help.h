// sortctl's help and usage: the program's usage text, each command's own
// help (`sortctl help COMMAND`, `sortctl COMMAND --help`), and the exit
// codes of its contract.
//
//   if (int help = CommandHelp(argc, argv); help >= 0) return help;
//   std::vector<char*> args = ParseFlags(argc, argv);
#ifndef SORTD_CLIENT_SORTCTL_HELP_H_
#define SORTD_CLIENT_SORTCTL_HELP_H_

#include <string>
#include <vector>

namespace sortd::cli {

// Exit codes: the call failed (or an input could not be read); bad usage;
// an answer did not match the local reference.
inline constexpr int kExitCallFailed = 1;
inline constexpr int kExitUsage = 2;
inline constexpr int kExitMismatch = 3;

// Prints "sortctl: MESSAGE" and where usage is, on stderr; kExitUsage.
int Usage(const std::string& message);

// Sets the program's usage text and --version's.
void SetUsageMessages();

// `sortctl help [COMMAND]` and `sortctl COMMAND --help|-h`: prints the
// command's help and returns its exit code; -1 if the command line asks for
// neither.
int CommandHelp(int argc, char** argv);

// absl::ParseCommandLine, with a malformed command line (an unknown flag, a
// value that does not parse) exiting kExitUsage rather than absl's 1.
std::vector<char*> ParseFlags(int argc, char** argv);

}  // namespace sortd::cli

#endif  // SORTD_CLIENT_SORTCTL_HELP_H_
