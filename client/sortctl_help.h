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

#include "absl/status/status.h"

namespace sortd::cli {

// Exit codes: the server (or the gRPC channel to it) answered a call with
// an error status; bad usage; an answer did not match the local reference;
// a local failure (a file that cannot be read, written or parsed, a TLS
// file that cannot be loaded), no call having been answered with an error.
inline constexpr int kExitCallFailed = 1;
inline constexpr int kExitUsage = 2;
inline constexpr int kExitMismatch = 3;
inline constexpr int kExitLocal = 4;

// The environment variable naming the target when --target is not given.
inline constexpr char kTargetEnv[] = "SORTD_TARGET";

// Prints "sortctl: MESSAGE" and where usage is, on stderr; kExitUsage.
int Usage(const std::string& message);

// Prints a local failure as "sortctl: MESSAGE" on stderr; kExitLocal.
int LocalError(const absl::Status& status);

// Prints a call's error status as "server: CODE: MESSAGE" on stderr;
// kExitCallFailed. The status may come from the gRPC channel rather than
// sortd itself (UNAVAILABLE: nothing answered; DEADLINE_EXCEEDED: --timeout
// passed): it is what the call returned.
int ServerError(const absl::Status& status);

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
