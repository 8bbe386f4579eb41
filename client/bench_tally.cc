// `sortctl bench`'s counting: each measured call's result recorded in a
// worker's own report, the workers' reports merged into the run's, the
// latency percentiles of the result, and the verdict (exit status) on it.
#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "client/bench_internal.h"
#include "client/sortctl_lib.h"

namespace sortd::cli {
namespace bench_internal {
namespace {

void AddStats(BenchStats& into, BenchStats& from) {
  into.ok += from.ok;
  into.errors += from.errors;
  into.keys += from.keys;
  into.bytes += from.bytes;
  into.latencies.insert(into.latencies.end(), from.latencies.begin(),
                        from.latencies.end());
  from = BenchStats();
}

}  // namespace

// Adds a worker's counts to the run's, and clears them.
void MergeReport(BenchReport& local, BenchReport& r) {
  AddStats(r.all, local.all);
  for (auto& [size, st] : local.by_size) AddStats(r.by_size[size], st);
  for (auto& [k, v] : local.errors_by_code) r.errors_by_code[k] += v;
  for (auto& [k, v] : local.paths) r.paths[k] += v;
  for (auto& [k, v] : local.routes) r.routes[k] += v;
  r.batch_requests_sum += local.batch_requests_sum;
  r.batch_requests_max =
      std::max(r.batch_requests_max, local.batch_requests_max);
  r.device_runs_max = std::max(r.device_runs_max, local.device_runs_max);
  r.verified += local.verified;
  r.mismatches += local.mismatches;
  if (r.first_mismatch.empty()) r.first_mismatch = local.first_mismatch;
  r.started += local.started;
  r.ended += local.ended;
  r.late_starts += local.late_starts;
  r.max_start_lag = std::max(r.max_start_lag, local.max_start_lag);
  local = BenchReport();
}

// Counts one measured call of `size` keys that took `seconds`.
void RecordCall(const CallResult& c, uint64_t size, bool checked,
                double seconds, BenchReport& local) {
  ++local.ended;
  BenchStats& by = local.by_size[size];
  if (!c.status.ok()) {
    ++local.all.errors;
    ++by.errors;
    ++local.errors_by_code[absl::StatusCodeToString(c.status.code())];
    return;
  }
  for (BenchStats* st : {&local.all, &by}) {
    ++st->ok;
    st->keys += size;
    st->bytes += c.bytes;
    st->latencies.push_back(seconds);
  }
  const v1::ServedBy& s = c.served_by;
  ++local.paths[PathText(s.path())];
  ++local.routes[s.route().empty() ? "unknown" : s.route()];
  local.batch_requests_sum +=
      static_cast<uint64_t>(std::max(1, s.batch_requests()));
  local.batch_requests_max =
      std::max(local.batch_requests_max, s.batch_requests());
  local.device_runs_max = std::max<uint64_t>(
      local.device_runs_max, static_cast<uint64_t>(s.device_runs()));
  if (!checked) return;
  ++local.verified;
  if (!c.verdict.ok()) {
    ++local.mismatches;
    if (local.first_mismatch.empty()) {
      local.first_mismatch =
          absl::StrCat(FormatSize(size), " keys: ", c.verdict.message());
    }
  }
}

}  // namespace bench_internal

BenchVerdict JudgeBench(const BenchReport& r) {
  std::string codes;
  for (const auto& [code, n] : r.errors_by_code) {
    absl::StrAppend(&codes, codes.empty() ? "" : ", ", code, " ", n);
  }
  if (r.mismatches > 0) {
    return {3, absl::StrCat(r.mismatches, " of ", r.verified,
                            " sampled answers were wrong (first: ",
                            r.first_mismatch, ")")};
  }
  if (r.all.ok == 0) {
    return {1, r.all.errors == 0
                   ? std::string("no request was answered")
                   : absl::StrCat("no request was answered: all ", r.all.errors,
                                  " calls failed (", codes, ")")};
  }
  if (2 * r.all.errors > r.ended) {
    return {1, absl::StrCat(r.all.errors, " of ", r.ended,
                            " calls failed, more than half (", codes, ")")};
  }
  return {};
}

double BenchStats::Percentile(double p) const {
  if (latencies.empty()) return 0;
  const double rank = p / 100.0 * static_cast<double>(latencies.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(rank));
  const size_t hi = std::min(lo + 1, latencies.size() - 1);
  const double f = rank - static_cast<double>(lo);
  return latencies[lo] * (1 - f) + latencies[hi] * f;
}

}  // namespace sortd::cli
