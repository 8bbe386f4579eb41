// What sortctl's files share, beside its help (sortctl_help.h): the flags,
// defined in sortctl.cc (absl's --help lists the flags of the program's
// main file), the checks of the flags more than one command takes, the
// connection they describe, and each command's entry point: sort,
// transpose and health in sortctl_commands.cc, bench in
// sortctl_bench_command.cc. Not part of any library's interface.
#ifndef SORTD_CLIENT_SORTCTL_INTERNAL_H_
#define SORTD_CLIENT_SORTCTL_INTERNAL_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/declare.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/client.h"

ABSL_DECLARE_FLAG(std::string, target);
ABSL_DECLARE_FLAG(absl::Duration, timeout);
ABSL_DECLARE_FLAG(std::string, tls_ca);
ABSL_DECLARE_FLAG(std::string, tls_cert);
ABSL_DECLARE_FLAG(std::string, tls_key);
ABSL_DECLARE_FLAG(std::string, tls_server_name);
ABSL_DECLARE_FLAG(std::string, lb);
ABSL_DECLARE_FLAG(std::string, type);
ABSL_DECLARE_FLAG(bool, desc);
ABSL_DECLARE_FLAG(std::string, values);
ABSL_DECLARE_FLAG(bool, permutation);
ABSL_DECLARE_FLAG(std::string, input);
ABSL_DECLARE_FLAG(int64_t, random);
ABSL_DECLARE_FLAG(uint64_t, seed);
ABSL_DECLARE_FLAG(std::string, output);
ABSL_DECLARE_FLAG(bool, verify);
ABSL_DECLARE_FLAG(bool, json);
ABSL_DECLARE_FLAG(bool, stream);
ABSL_DECLARE_FLAG(int64_t, max_unary_bytes);
ABSL_DECLARE_FLAG(int64_t, chunk_bytes);
ABSL_DECLARE_FLAG(std::string, op);
ABSL_DECLARE_FLAG(std::string, sizes);
ABSL_DECLARE_FLAG(int, concurrency);
ABSL_DECLARE_FLAG(double, rate);
ABSL_DECLARE_FLAG(std::vector<std::string>, server_metrics);
ABSL_DECLARE_FLAG(absl::Duration, duration);
ABSL_DECLARE_FLAG(int64_t, requests);
ABSL_DECLARE_FLAG(absl::Duration, warmup);
ABSL_DECLARE_FLAG(int64_t, verify_every);
ABSL_DECLARE_FLAG(int, variants);
ABSL_DECLARE_FLAG(std::string, sweep);
ABSL_DECLARE_FLAG(std::string, shm_socket);
ABSL_DECLARE_FLAG(bool, compact);
ABSL_DECLARE_FLAG(int, connections);
ABSL_DECLARE_FLAG(int64_t, small_call_bytes);
ABSL_DECLARE_FLAG(int64_t, split_bytes);

namespace sortctl {

// A client for --target, configured by the connection flags.
absl::StatusOr<std::unique_ptr<sortd::Client>> Connect();

// Usage messages naming the bad value of --type and --values.
std::string BadType();
std::string BadValues();

// --input or --random: exactly one, and --random not negative. Empty when
// they are fine, else the usage message.
std::string CheckInputFlags(const char* command);

// The commands; each returns sortctl's exit status.
int RunSort();
int RunTranspose();
int RunHealth();
int RunBench();

}  // namespace sortctl

#endif  // SORTD_CLIENT_SORTCTL_INTERNAL_H_
