#include "client/sortctl_help.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "core/version.h"

namespace sortd::cli {

int Usage(const std::string& message) {
  std::fprintf(stderr, "sortctl: %s\nRun 'sortctl --help' for usage.\n",
               message.c_str());
  return kExitUsage;
}

int LocalError(const absl::Status& status) {
  std::fprintf(stderr, "sortctl: %s\n", std::string(status.message()).c_str());
  return kExitLocal;
}

int ServerError(const absl::Status& status) {
  std::fprintf(stderr, "server: %s: %s\n",
               absl::StatusCodeToString(status.code()).c_str(),
               std::string(status.message()).c_str());
  return kExitCallFailed;
}

namespace {

// The exit codes and the two forms of error message, for the help texts.
constexpr char kExitStatusText[] =
    "Exit status:\n"
    "  0  success\n"
    "  1  a call returned an error status, printed as 'server: CODE: "
    "message'\n"
    "     (the code may come from the gRPC channel: UNAVAILABLE when nothing\n"
    "     answers); bench: no request was answered, or more than half of "
    "the\n"
    "     calls failed\n"
    "  2  bad usage: an unknown command, flag or value, a missing or "
    "conflicting\n"
    "     argument; nothing was sent\n"
    "  3  the answer (bench: a sampled answer) did not match the local "
    "reference\n"
    "  4  a local failure, printed as 'sortctl: message': an input that "
    "cannot\n"
    "     be read or parsed, an output that cannot be written, a TLS file "
    "that\n"
    "     cannot be loaded";

// --target's default, for the help texts.
std::string DefaultTarget() {
  const absl::CommandLineFlag* flag = absl::FindCommandLineFlag("target");
  return flag == nullptr ? "" : flag->DefaultValue();
}

// One command's help: `sortctl help COMMAND` or `sortctl COMMAND --help`.
struct Command {
  const char* name;
  const char* what;
  const char* usage;
  std::vector<const char*> flags;
};

const std::vector<Command>& Commands() {
  static const std::vector<Command> commands = {
      {"sort",
       "sorts keys (and values) read from a file or generated",
       "sortctl [--target HOST:PORT] sort --type u32|i32|f32|u64|i64|f64 "
       "[--desc]\n    [--values u32|u64] [--permutation] (--input FILE | "
       "--random N [--seed S])\n    [--output FILE] [--verify] [--json]",
       {"type", "desc", "values", "permutation", "input", "random", "seed",
        "output", "verify", "json", "stream", "compact"}},
      {"transpose",
       "transposes 32x32 bit matrices",
       "sortctl [--target HOST:PORT] transpose (--input FILE | --random N)\n"
       "    [--output FILE] [--verify] [--json]",
       {"input", "random", "seed", "output", "verify", "json"}},
      {"health",
       "asks the server's health service",
       "sortctl [--target HOST:PORT] health [--json]",
       {"json"}},
      {"bench",
       "keeps calls in flight and reports throughput and latency",
       "sortctl [--target HOST:PORT] bench [--op sort|transpose|echo] "
       "[--type T]\n    [--sizes 1k:70,64k:25,16m:5] [--concurrency N] "
       "[--duration 10s] [--requests N]\n    [--rate CALLS_PER_S] "
       "[--server_metrics HOST:PORT,...] [--verify] [--json]",
       {"op", "type", "sizes", "concurrency", "duration", "requests", "warmup",
        "rate", "server_metrics", "seed", "verify", "verify_every", "compact",
        "variants", "shm_socket", "json"}},
  };
  return commands;
}

const Command* FindCommand(absl::string_view name) {
  for (const Command& c : Commands()) {
    if (name == c.name) return &c;
  }
  return nullptr;
}

// Flags every command takes: where and how to connect.
const std::vector<const char*>& ConnectionFlags() {
  static const std::vector<const char*> flags = {
      "target",          "timeout",     "connections", "lb",
      "tls_ca",          "tls_cert",    "tls_key",     "tls_server_name",
      "max_unary_bytes", "chunk_bytes", "split_bytes", "small_call_bytes"};
  return flags;
}

void PrintFlags(const std::vector<const char*>& names) {
  for (const char* name : names) {
    const absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
    if (flag == nullptr) continue;
    std::printf(
        "  --%s (default: %s)\n      %s\n", name,
        flag->DefaultValue().empty() ? "\"\"" : flag->DefaultValue().c_str(),
        flag->Help().c_str());
  }
}

int PrintCommandHelp(const Command& c) {
  std::printf("sortctl %s: %s.\n\n  %s\n\nFlags:\n", c.name, c.what, c.usage);
  PrintFlags(c.flags);
  std::printf("\nConnection flags (every command):\n");
  PrintFlags(ConnectionFlags());
  return 0;
}

}  // namespace

// `sortctl help [COMMAND]`, and `sortctl COMMAND --help|-h`: the command's
// own help. Returns -1 if the command line asks for neither.
int CommandHelp(int argc, char** argv) {
  std::vector<absl::string_view> words;
  bool help_flag = false;
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    if (arg == "--help" || arg == "-help" || arg == "-h") {
      help_flag = true;
    } else if (!absl::StartsWith(arg, "-")) {
      words.push_back(arg);
    }
  }
  if (!words.empty() && words[0] == "help") {
    if (words.size() < 2) {
      std::printf("sortctl: command-line client of sortd.\n\nCommands:\n");
      for (const Command& c : Commands()) {
        std::printf("  %-10s %s\n", c.name, c.what);
      }
      std::printf(
          "\n'sortctl help COMMAND' (or 'sortctl COMMAND --help') shows a "
          "command's flags;\n'sortctl --helpfull' every flag.\n\n"
          "Environment:\n"
          "  SORTD_TARGET  the target when --target is not given (ignored "
          "when empty);\n"
          "                without either, %s.\n\n"
          "%s\n",
          DefaultTarget().c_str(), kExitStatusText);
      return 0;
    }
    const Command* c = FindCommand(words[1]);
    if (c == nullptr) {
      return Usage(absl::StrCat("help: unknown command '", words[1],
                                "'; expected sort, transpose, health or "
                                "bench"));
    }
    return PrintCommandHelp(*c);
  }
  if (help_flag) {
    // The first word that names a command (a flag's value may come first:
    // --target HOST:PORT sort --help).
    for (absl::string_view word : words) {
      if (const Command* c = FindCommand(word)) return PrintCommandHelp(*c);
    }
  }
  return -1;
}

namespace {

// absl::ParseCommandLine reports a malformed command line (an unknown flag,
// a value that does not parse, a missing value) on stderr, naming the flag,
// and calls std::exit(1); sortctl's contract is 2 for bad usage. While it
// parses, this exit hook turns such an exit into 2. --help and absl's other
// usage flags, which it also answers with an exit, keep absl's exit code.
std::atomic<bool> parsing_flags{false};
std::atomic<bool> help_asked{false};

void ExitWithUsageCodeOnFlagError() {
  if (!parsing_flags.load() || help_asked.load()) return;
  std::fputs("Run 'sortctl --help' for usage.\n", stderr);
  std::fflush(nullptr);
  std::_Exit(kExitUsage);
}

// Whether the command line names one of absl's usage flags (--help,
// --helpfull, --helpon=..., --version, ...).
bool AsksForHelp(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    if (arg == "--") break;
    if (!absl::ConsumePrefix(&arg, "-")) continue;
    absl::ConsumePrefix(&arg, "-");
    arg = arg.substr(0, arg.find('='));
    for (absl::string_view name :
         {"help", "helpfull", "helpshort", "helppackage", "helpon", "helpmatch",
          "version", "only_check_args"}) {
      if (arg == name) return true;
    }
  }
  return false;
}

}  // namespace

void SetUsageMessages() {
  absl::FlagsUsageConfig usage;  // unset members keep their defaults
  usage.version_string = [] { return sortd::VersionText("sortctl") + "\n"; };
  absl::SetFlagsUsageConfig(usage);
  absl::SetProgramUsageMessage(
      "command-line client of sortd.\n\n"
      "  sortctl [--target HOST:PORT] sort --type u32|i32|f32|u64|i64|f64 "
      "[--desc] [--values u32|u64]\n"
      "          [--permutation] (--input FILE | --random N [--seed S]) "
      "[--output FILE] [--verify] [--json]\n"
      "  sortctl [--target HOST:PORT] transpose (--input FILE | --random N) "
      "[--output FILE] [--verify] [--json]\n"
      "  sortctl [--target HOST:PORT] health [--json]\n"
      "  sortctl [--target HOST:PORT] bench [--op sort|transpose|echo] "
      "[--type T] [--sizes 1k:70,64k:25,16m:5]\n"
      "          [--concurrency N] [--duration 10s] [--requests N] "
      "[--verify] [--json]\n\n"
      "Prints a one-line summary (--json: one JSON object). --target "
      "defaults to $SORTD_TARGET when\nthat is set and not empty, else " +
      DefaultTarget() + ".\n\n" + kExitStatusText);
}

std::vector<char*> ParseFlags(int argc, char** argv) {
  help_asked = AsksForHelp(argc, argv);
  std::atexit(ExitWithUsageCodeOnFlagError);
  parsing_flags = true;
  std::vector<char*> args = absl::ParseCommandLine(argc, argv);
  parsing_flags = false;
  return args;
}

}  // namespace sortd::cli
