// `sortctl bench`: a bounded load generator for sortd. Workers send sorts
// (or transposes, or Echo calls: the baseline) of a size mix for a fixed
// time and/or number of requests, and the report gives rates, latency
// percentiles, errors by code, and how the server says it served them
// (path, route, batch sizes).
//
//   BenchOptions o;
//   o.mix = *ParseSizeMix("1k:70,64k:25,16m:5");
//   absl::StatusOr<BenchReport> r = RunBench(client, o, on_progress);
//   std::fputs(FormatReport(o, *r, /*json=*/false).c_str(), stdout);
//   BenchVerdict v = JudgeBench(*r);  // exit status and why
//
// Closed loop (the default): each worker sends its next call once the last
// is answered, so the load follows the server's speed. Open loop (`rate`):
// calls are due at fixed times, `rate` a second, whatever the answers do;
// each is timed from when it was due, so a server (or a client short of
// workers) that falls behind shows in the latency rather than hiding it.
//
// With the addresses of sortd's metrics endpoints (`server_metrics`), the
// report gives the CPU seconds the servers spent over the measured part,
// per answered request: what a request costs the node, beside what it
// costs the caller in time.
//
// A worker whose call failed with UNAVAILABLE (server down or unreachable)
// or RESOURCE_EXHAUSTED (server overloaded) backs off before its next call,
// so that a dead server is not hammered with calls that fail at once.
#ifndef SORTD_CLIENT_BENCH_H_
#define SORTD_CLIENT_BENCH_H_

#include <cstdint>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/client.h"
#include "core/keys.h"

namespace sortd::cli {

// One size of a mix: `size` keys (matrices for transposes), chosen with
// probability weight / total weight.
struct SizeClass {
  uint64_t size = 0;
  double weight = 1;
};

// "4096", "64k", "16m", or weighted "1k:70,64k:25,16m:5" (k = 1024,
// m = 1024^2, g = 1024^3; weights need not sum to 100).
absl::StatusOr<std::vector<SizeClass>> ParseSizeMix(std::string_view text);
std::string FormatSize(uint64_t n);  // 1024 -> "1k"

enum class BenchOp { kSort, kTranspose, kEcho };
// "sort", "echo", "transpose".
const char* OpName(BenchOp op);

// A worker's wait after a call the server refused as down or overloaded:
// `initial` after the first such failure, times `multiplier` after each
// further one in a row, at most `max`; each wait is drawn uniformly from
// [d/2, d] of that nominal d ("equal jitter"), so that workers do not retry
// in lockstep. A zero `initial` turns back-off off.
struct BackoffPolicy {
  absl::Duration initial = absl::Milliseconds(10);
  absl::Duration max = absl::Seconds(1);
  double multiplier = 2;
};

// The codes a worker backs off on: UNAVAILABLE (server down, unreachable,
// or draining) and RESOURCE_EXHAUSTED (overloaded: "retry with back-off").
bool ShouldBackOff(absl::StatusCode code);

// The schedule of one worker's waits. Not thread-safe: one per worker.
//
//   Backoff b(policy, seed);
//   if (s.ok()) b.Reset();
//   if (ShouldBackOff(s.code())) wait_unless_the_run_ended(b.Next());
class Backoff {
 public:
  Backoff(const BackoffPolicy& policy, uint64_t seed);
  // The wait after one more failure in a row.
  absl::Duration Next();
  // After a success: the next failure waits about `initial` again.
  void Reset();

 private:
  BackoffPolicy policy_;
  absl::Duration nominal_;  // d of the next wait
  std::mt19937_64 rng_;
};

struct BenchOptions {
  BenchOp op = BenchOp::kSort;
  KeyType key_type = KeyType::kU32;
  std::vector<SizeClass> mix = {{1024, 1}};
  int concurrency = 16;
  // Stops at whichever comes first; at least one must be bounded.
  absl::Duration duration = absl::Seconds(10);
  uint64_t max_requests = 0;  // 0: no count bound
  // Untimed calls before the measured part.
  absl::Duration warmup = absl::Seconds(1);
  // Check every N-th answer against a local reference (0: none).
  uint64_t verify_every = 0;
  // Distinct random inputs per size (answers are never the same array).
  int variants = 4;
  uint64_t seed = 1;
  // Non-empty: sorts (and echoes) go through shared memory registered over
  // this Unix socket, the server's --shm_socket, one region per worker
  // holding its inputs and answers (client/shared_memory.h); only tokens
  // and offsets cross the gRPC socket.
  std::string shm_socket;
  // Sorts ask for their keys in compact form (SortOptions::compact_keys).
  bool compact_keys = false;
  // Waits after UNAVAILABLE / RESOURCE_EXHAUSTED; they end early when the
  // run does. (Closed loop only: an open loop keeps its schedule.)
  BackoffPolicy backoff;
  // Calls a second, due at fixed times (open loop); 0: closed loop. The
  // warm-up keeps the same schedule; `concurrency` bounds the calls in
  // flight, and a call due while every worker is busy starts late.
  double rate = 0;
  // sortd metrics endpoints ("host:port" of --metrics_listen), every
  // replica the target reaches: their process CPU seconds are read before
  // and after the measured part.
  std::vector<std::string> server_metrics;
};

// Results of one size class (or of all of them).
struct BenchStats {
  uint64_t ok = 0, errors = 0;
  uint64_t keys = 0;              // keys (matrices) of the answered requests
  uint64_t bytes = 0;             // request plus response bytes, serialized
  std::vector<double> latencies;  // seconds, answered requests
  double Percentile(double p) const;  // latencies must be sorted
};

struct BenchReport {
  double seconds = 0;  // measured wall time
  BenchStats all;
  std::map<uint64_t, BenchStats> by_size;
  std::map<std::string, uint64_t> errors_by_code;
  std::map<std::string, uint64_t> paths, routes;
  uint64_t batch_requests_sum = 0;  // over answered requests
  int batch_requests_max = 0;
  uint64_t device_runs_max = 0;
  uint64_t verified = 0, mismatches = 0;
  std::string first_mismatch;
  // Every call ended with an answer or a status: started == ended.
  uint64_t started = 0, ended = 0;
  // Open loop: calls that started more than a millisecond after they were
  // due (every worker was busy), and the latest start.
  uint64_t late_starts = 0;
  double max_start_lag = 0;  // seconds
  // The servers' CPU seconds over the measured part (with server_metrics;
  // -1 when not read, and then server_metrics_error says why).
  double server_cpu_seconds = -1;
  std::string server_metrics_error;
};

// Progress while running: seconds so far and the report so far (totals
// only, no percentiles).
using BenchProgress = std::function<void(double, const BenchReport&)>;

absl::StatusOr<BenchReport> RunBench(Client& client,
                                     const BenchOptions& options,
                                     const BenchProgress& progress = nullptr);

// How a run went, as sortctl's exit status: 0; 1 when no request was
// answered or more than half of the calls that ended failed; 3 when a
// sampled answer was wrong (before 1). `reason` says why when not 0.
struct BenchVerdict {
  int exit_code = 0;
  std::string reason;
};
BenchVerdict JudgeBench(const BenchReport& r);

// The report for people (a few aligned lines) or one JSON object.
std::string FormatReport(const BenchOptions& options, const BenchReport& r,
                         bool json);

// A concurrency sweep's table: one row per run, runs[i] made at
// concurrency levels[i] with `options` otherwise.
std::string FormatSweep(const BenchOptions& options,
                        const std::vector<BenchReport>& runs,
                        const std::vector<int>& levels);

}  // namespace sortd::cli

#endif  // SORTD_CLIENT_BENCH_H_
