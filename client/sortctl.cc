// sortctl: the command-line client of sortd.
//
//   sortctl [--target HOST:PORT] sort --type f32 --random 1000000 --verify
//   sortctl sort --type i64 --desc --input keys.txt --output sorted.txt
//   sortctl transpose --random 1024 --verify --json
//   sortctl health
//   sortctl bench --sizes 1k:70,64k:25,16m:5 --concurrency 64 --duration 60s
//   sortctl bench --op echo --sizes 16m --concurrency 1 --requests 20
//
// --target defaults to $SORTD_TARGET when that is set and not empty.
//
// Exit status: 0 success; 1 a call returned an error status, printed as
// "server: CODE: message" (bench: no request was answered, or more than
// half of its calls failed); 2 bad usage (an unknown command, flag or value;
// a missing or conflicting argument); 3 the answer did not match the local
// reference (--verify; bench: a sampled answer); 4 a local failure, printed
// as "sortctl: message" (an input that cannot be read or parsed, an output
// that cannot be written, a TLS file that cannot be loaded).
//
// This file holds the flags (absl's --help lists those of the program's
// main file), their checks that more than one command shares, the
// connection they describe, and the dispatch to the commands:
// sortctl_commands.cc (sort, transpose, health), sortctl_bench_command.cc
// (bench); sortctl_help.cc has the help and usage texts.
#include <malloc.h>
#include <sys/auxv.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "client/client.h"
#include "client/sortctl_help.h"
#include "client/sortctl_internal.h"
#include "client/sortctl_lib.h"

namespace cli = sortd::cli;

ABSL_FLAG(std::string, target, "127.0.0.1:50051",
          "sortd address: host:port, or a gRPC target such as "
          "dns:///sortd.example:50051; when not given, $SORTD_TARGET if that "
          "is set and not empty, else this default");
ABSL_FLAG(absl::Duration, timeout, absl::Seconds(300), "Deadline of the call");
ABSL_FLAG(std::string, tls_ca, "",
          "TLS: PEM file of the CA that signed sortd's certificate (turns "
          "TLS on)");
ABSL_FLAG(std::string, tls_cert, "",
          "mutual TLS: this client's certificate (PEM); with --tls_key");
ABSL_FLAG(std::string, tls_key, "", "mutual TLS: this client's key (PEM)");
ABSL_FLAG(std::string, tls_server_name, "",
          "TLS: the name to check in sortd's certificate, when the target "
          "address is not one it names");
ABSL_FLAG(std::string, lb, "",
          "gRPC load-balancing policy; empty: round_robin, over every "
          "address of the target (a dns:/// name of many replicas, e.g. a "
          "Kubernetes headless Service); pick_first: one server");
ABSL_FLAG(std::string, type, "u32", "sort: key type, u32|i32|f32|u64|i64|f64");
ABSL_FLAG(bool, desc, false, "sort: descending order (still stable)");
ABSL_FLAG(std::string, values, "",
          "sort: attach a payload of this type (u32|u64), one value per key; "
          "with --random the values are random, with --input the payload is "
          "each key's input position");
ABSL_FLAG(bool, permutation, false,
          "sort: ask for the permutation (argsort indices)");
ABSL_FLAG(std::string, input, "",
          "Read whitespace-separated numbers from this file ('-' = stdin): "
          "keys for sort, uint32 rows (decimal or 0x hex) for transpose");
ABSL_FLAG(int64_t, random, -1,
          "Generate this many random keys (sort) or matrices (transpose)");
ABSL_FLAG(uint64_t, seed, 1, "Seed for --random");
ABSL_FLAG(std::string, output, "",
          "Write the answer to this file ('-' = stdout): sort writes one key "
          "per line, followed by its value and its input index when "
          "requested; transpose writes one 0x-hex row per line");
ABSL_FLAG(bool, verify, false,
          "Check the answer against a local reference; exit 3 on mismatch");
ABSL_FLAG(bool, json, false, "Print the summary as one JSON object");
ABSL_FLAG(bool, stream, false,
          "sort: send the array through the SortStream RPC in chunks, "
          "whatever its size (larger than --max_unary_bytes always is)");
ABSL_FLAG(int64_t, max_unary_bytes, int64_t{256} << 20,
          "sort: requests larger than this go through SortStream; set to "
          "the server's --max_request_bytes");
ABSL_FLAG(int64_t, chunk_bytes, int64_t{2} << 20,
          "sort: array bytes (keys and values) per SortStream message");
ABSL_FLAG(std::string, op, "sort",
          "bench: what to send, sort|transpose|echo (echo: the Echo RPC with "
          "the same sort requests, the baseline)");
ABSL_FLAG(std::string, sizes, "1k",
          "bench: request sizes in keys (matrices for transpose): one size "
          "(4096, 64k, 16m) or a weighted mix such as 1k:70,64k:25,16m:5");
ABSL_FLAG(int, concurrency, 16, "bench: concurrent calls (one thread each)");
ABSL_FLAG(std::string, sweep, "",
          "bench: concurrency levels to run one after another, e.g. "
          "1,4,16,64 (each with --duration or --requests and --warmup); "
          "prints a table, or one JSON report a level with --json");
ABSL_FLAG(double, rate, 0,
          "bench: open loop, calls a second due at fixed times whatever the "
          "answers do (latency from when each was due); 0: closed loop, each "
          "worker calling again once answered");
ABSL_FLAG(std::vector<std::string>, server_metrics, {},
          "bench: sortd metrics endpoints (host:port of --metrics_listen, "
          "comma-separated: every replica the target reaches); the report "
          "gives their CPU seconds over the run and per request");
ABSL_FLAG(absl::Duration, duration, absl::Seconds(10),
          "bench: measured time (0 with --requests: until that many); at "
          "most 24h");
ABSL_FLAG(int64_t, requests, 0,
          "bench: stop after this many measured requests (0: --duration "
          "alone bounds the run)");
ABSL_FLAG(absl::Duration, warmup, absl::Seconds(1),
          "bench: unmeasured calls before the measured part");
ABSL_FLAG(int64_t, verify_every, 16,
          "bench with --verify: check every N-th answer of each worker");
ABSL_FLAG(int, variants, 4,
          "bench: distinct random inputs per size (1 to 64); with "
          "--shm_socket each worker's region holds every one of them and "
          "its answer");
ABSL_FLAG(std::string, shm_socket, "",
          "bench: send sorts through shared memory, one region per worker, "
          "registered over this Unix socket (the server's --shm_socket; "
          "same host only)");
ABSL_FLAG(bool, compact, false,
          "sort, bench: ask for the sorted keys in compact form (32-bit "
          "keys: about a third of the bytes back; the result is the same)");
ABSL_FLAG(int, connections, 5,
          "TCP connections to the server: the first for calls smaller than "
          "--small_call_bytes, the others taken in turn by larger calls");
ABSL_FLAG(int64_t, small_call_bytes, int64_t{256} << 10,
          "Calls smaller than this many bytes all go on the first "
          "connection (0: every call takes its turn)");
ABSL_FLAG(int64_t, split_bytes, int64_t{16} << 20,
          "Sorts of at least this many bytes go out in parts over several "
          "connections at once, sorted by the server as one array (0: never)");

namespace {

using cli::Usage;

// The flags every command uses to reach the server. Empty when they are
// fine, else the usage message.
std::string CheckConnectionFlags() {
  if (absl::GetFlag(FLAGS_target).empty()) return "--target: empty";
  if (absl::GetFlag(FLAGS_timeout) <= absl::ZeroDuration()) {
    return absl::StrCat("--timeout: expected a positive duration, got ",
                        absl::FormatDuration(absl::GetFlag(FLAGS_timeout)));
  }
  if (absl::GetFlag(FLAGS_tls_cert).empty() !=
      absl::GetFlag(FLAGS_tls_key).empty()) {
    return absl::GetFlag(FLAGS_tls_cert).empty()
               ? "--tls_key needs --tls_cert (this client's certificate)"
               : "--tls_cert needs --tls_key (this client's key)";
  }
  if (absl::GetFlag(FLAGS_max_unary_bytes) < 0) {
    return absl::StrCat("--max_unary_bytes: negative (",
                        absl::GetFlag(FLAGS_max_unary_bytes), ")");
  }
  if (absl::GetFlag(FLAGS_chunk_bytes) < 1) {
    return absl::StrCat("--chunk_bytes: expected at least 1, got ",
                        absl::GetFlag(FLAGS_chunk_bytes));
  }
  return "";
}

}  // namespace

namespace sortctl {

absl::StatusOr<std::unique_ptr<sortd::Client>> Connect() {
  sortd::ClientOptions options;
  options.max_unary_bytes = static_cast<size_t>(
      std::max<int64_t>(absl::GetFlag(FLAGS_max_unary_bytes), 0));
  options.stream_chunk_bytes = static_cast<size_t>(
      std::max<int64_t>(absl::GetFlag(FLAGS_chunk_bytes), 8));
  options.timeout = absl::GetFlag(FLAGS_timeout);
  options.load_balancing = absl::GetFlag(FLAGS_lb);
  options.tls_ca = absl::GetFlag(FLAGS_tls_ca);
  options.tls_cert = absl::GetFlag(FLAGS_tls_cert);
  options.tls_key = absl::GetFlag(FLAGS_tls_key);
  options.tls_server_name = absl::GetFlag(FLAGS_tls_server_name);
  options.connections = std::max(1, absl::GetFlag(FLAGS_connections));
  options.small_call_bytes = static_cast<size_t>(
      std::max<int64_t>(0, absl::GetFlag(FLAGS_small_call_bytes)));
  options.split_bytes = static_cast<size_t>(
      std::max<int64_t>(0, absl::GetFlag(FLAGS_split_bytes)));
  return sortd::Client::Create(absl::GetFlag(FLAGS_target), options);
}

std::string BadType() {
  return absl::StrCat("--type: '", absl::GetFlag(FLAGS_type),
                      "' is not a key type; expected u32|i32|f32|u64|i64|f64");
}

std::string BadValues() {
  return absl::StrCat("--values: '", absl::GetFlag(FLAGS_values),
                      "' is not a value type; expected u32 or u64");
}

std::string CheckInputFlags(const char* command) {
  const int64_t random = absl::GetFlag(FLAGS_random);
  if (random < -1) {
    return absl::StrCat(command, ": --random: expected a count, got ", random);
  }
  if (absl::GetFlag(FLAGS_input).empty() == (random < 0)) {
    return absl::StrCat(command,
                        ": give exactly one of --input FILE or --random N");
  }
  return "";
}

}  // namespace sortctl

int main(int argc, char** argv) {
#if defined(__GLIBC__)
  // glibc reads its tunables at start only: sortctl starts itself again
  // once, with malloc on transparent huge pages, unless the caller chose
  // (docs/decisions/031). Where that cannot be done it runs on as it is;
  // so it does in secure execution (setuid, file capabilities), where
  // glibc drops GLIBC_TUNABLES and every restart would find it unset.
  if (std::optional<std::string> tunables =
          cli::TunablesWithHugePages(std::getenv("GLIBC_TUNABLES"));
      tunables.has_value() && getauxval(AT_SECURE) == 0 &&
      setenv("GLIBC_TUNABLES", tunables->c_str(), 1) == 0) {
    execv("/proc/self/exe", argv);
  }
#endif
  // As sortd does (docs/decisions/029): no process-wide lock-order graph
  // behind every absl::Mutex lock of sortctl's gRPC threads.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
#if defined(__GLIBC__)
  // Keep blocks of up to 32 MiB (glibc's largest setting) in the heap and
  // freed memory there, so that gRPC's buffers of large calls are reused
  // without page faults, as sortd does (server/memory.h).
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
#endif
  cli::SetUsageMessages();
  // $SORTD_TARGET stands in for the built-in default; a --target on the
  // command line, parsed after, still wins.
  if (const char* env = std::getenv(cli::kTargetEnv);
      env != nullptr && *env != '\0') {
    absl::SetFlag(&FLAGS_target, std::string(env));
  }
  if (int help = cli::CommandHelp(argc, argv); help >= 0) return help;
  std::vector<char*> args = cli::ParseFlags(argc, argv);
  if (args.size() < 2) {
    return Usage("expected a command: sort, transpose, health or bench");
  }
  const std::string command = args[1];
  if (command != "sort" && command != "transpose" && command != "health" &&
      command != "bench") {
    return Usage(absl::StrCat("unknown command '", command,
                              "'; expected sort, transpose, health or bench"));
  }
  if (args.size() > 2) {
    return Usage(absl::StrCat(command, ": unexpected argument '", args[2],
                              "' (flags start with --)"));
  }
  if (std::string bad = CheckConnectionFlags(); !bad.empty()) {
    return Usage(bad);
  }
  if (command == "sort") return sortctl::RunSort();
  if (command == "transpose") return sortctl::RunTranspose();
  if (command == "health") return sortctl::RunHealth();
  return sortctl::RunBench();
}
