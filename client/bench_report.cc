// sortctl bench's report: a summary a person reads, or one JSON line; and a
// concurrency sweep's table.
#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/bench.h"
#include "client/sortctl_lib.h"

namespace sortd::cli {

namespace {

// What both report forms show.
struct ReportFigures {
  double secs;
  std::string mix;
  double mean_batch;
  const char* unit;
};

ReportFigures Figures(const BenchOptions& o, const BenchReport& r) {
  ReportFigures f;
  f.secs = std::max(r.seconds, 1e-9);
  for (const SizeClass& c : o.mix) {
    absl::StrAppend(&f.mix, f.mix.empty() ? "" : ",", FormatSize(c.size));
    if (o.mix.size() > 1) absl::StrAppend(&f.mix, ":", c.weight);
  }
  f.mean_batch = r.all.ok > 0 ? static_cast<double>(r.batch_requests_sum) /
                                    static_cast<double>(r.all.ok)
                              : 0;
  f.unit = o.op == BenchOp::kTranspose ? "matrices" : "keys";
  return f;
}

// Appends `,"NAME":{"KEY":COUNT,...}` to a JSON report.
void AppendJsonCounts(std::string& out, const char* name,
                      const std::map<std::string, uint64_t>& m) {
  absl::StrAppend(&out, ",\"", name, "\":{");
  bool first = true;
  for (const auto& [k, v] : m) {
    absl::StrAppend(&out, first ? "" : ",", JsonString(k), ":", v);
    first = false;
  }
  absl::StrAppend(&out, "}");
}

std::string JsonReport(const BenchOptions& o, const BenchReport& r) {
  const auto [secs, mix, mean_batch, unit] = Figures(o, r);
  const BenchStats& a = r.all;
  std::string out = absl::StrFormat(
      "{\"command\":\"bench\",\"op\":\"%s\",\"type\":\"%s\",\"sizes\":%s,"
      "\"concurrency\":%d,\"seconds\":%.6f,\"requests\":%u,\"errors\":%u,"
      "\"started\":%u,\"ended\":%u,\"requests_per_s\":%.3f,"
      "\"%s_per_s\":%.3f,\"bytes_per_s\":%.3f,\"latency_ms\":{\"p50\":%.6f,"
      "\"p90\":%.6f,\"p99\":%.6f,\"max\":%.6f},\"mean_batch_requests\":%.3f,"
      "\"max_batch_requests\":%d,\"max_device_runs\":%u,\"verified\":%u,"
      "\"mismatches\":%u",
      OpName(o.op),
      o.op == BenchOp::kTranspose ? "matrix" : KeyTypeName(o.key_type),
      JsonString(mix), o.concurrency, r.seconds, a.ok, a.errors, r.started,
      r.ended, a.ok / secs, unit, a.keys / secs, a.bytes / secs,
      a.Percentile(50) * 1e3, a.Percentile(90) * 1e3, a.Percentile(99) * 1e3,
      a.latencies.empty() ? 0.0 : a.latencies.back() * 1e3, mean_batch,
      r.batch_requests_max, r.device_runs_max, r.verified, r.mismatches);
  absl::StrAppendFormat(&out,
                        ",\"loop\":\"%s\",\"rate\":%.3f,\"late_starts\":%u,"
                        "\"max_start_lag_ms\":%.6f",
                        o.rate > 0 ? "open" : "closed", o.rate, r.late_starts,
                        r.max_start_lag * 1e3);
  if (r.server_cpu_seconds >= 0) {
    absl::StrAppendFormat(
        &out, ",\"server_cpu_seconds\":%.6f,\"server_cpu_ms_per_request\":%.6f",
        r.server_cpu_seconds,
        a.ok > 0 ? r.server_cpu_seconds * 1e3 / static_cast<double>(a.ok) : 0);
  } else if (!r.server_metrics_error.empty()) {
    absl::StrAppend(
        &out, ",\"server_metrics_error\":", JsonString(r.server_metrics_error));
  }
  AppendJsonCounts(out, "errors_by_code", r.errors_by_code);
  AppendJsonCounts(out, "paths", r.paths);
  AppendJsonCounts(out, "routes", r.routes);
  absl::StrAppend(&out, ",\"by_size\":[");
  bool first = true;
  for (const auto& [size, s] : r.by_size) {
    absl::StrAppendFormat(
        &out,
        "%s{\"size\":%u,\"requests\":%u,\"errors\":%u,\"requests_per_s\":%."
        "3f,\"%s_per_s\":%.3f,\"p50_ms\":%.6f,\"p99_ms\":%.6f,\"max_ms\":%."
        "6f}",
        first ? "" : ",", size, s.ok, s.errors, s.ok / secs, unit,
        s.keys / secs, s.Percentile(50) * 1e3, s.Percentile(99) * 1e3,
        s.latencies.empty() ? 0.0 : s.latencies.back() * 1e3);
    first = false;
  }
  absl::StrAppend(&out, "]}\n");
  return out;
}

// A rate with an SI prefix and a trailing space, e.g. "1.50 k".
std::string RateText(double v) {
  if (v >= 1e9) return absl::StrFormat("%.2f G", v / 1e9);
  if (v >= 1e6) return absl::StrFormat("%.2f M", v / 1e6);
  if (v >= 1e3) return absl::StrFormat("%.2f k", v / 1e3);
  return absl::StrFormat("%.2f ", v);
}

// Each key's share of the `answered` requests, e.g. "gpu 90%, cpu 10%";
// "-" when there is none.
std::string ShareText(const std::map<std::string, uint64_t>& m,
                      uint64_t answered) {
  std::string s;
  for (const auto& [k, v] : m) {
    absl::StrAppendFormat(
        &s, "%s%s %.0f%%", s.empty() ? "" : ", ", k,
        100.0 * static_cast<double>(v) /
            static_cast<double>(std::max<uint64_t>(answered, 1)));
  }
  return s.empty() ? std::string("-") : s;
}

// The heading, and the requests, throughput and latency lines.
void AppendThroughput(std::string& out, const BenchOptions& o,
                      const BenchReport& r, const ReportFigures& f) {
  const BenchStats& a = r.all;
  absl::StrAppendFormat(
      &out, "sortctl bench: %s %s, sizes %s, concurrency %d, %.1f s\n",
      OpName(o.op),
      o.op == BenchOp::kTranspose ? "32x32 bit matrices"
                                  : KeyTypeName(o.key_type),
      f.mix, o.concurrency, r.seconds);
  absl::StrAppendFormat(&out, "  requests  %u answered, %u errors (%sreq/s)\n",
                        a.ok, a.errors, RateText(a.ok / f.secs));
  absl::StrAppendFormat(&out, "  %-9s %s%s/s, %sB/s on the wire\n", f.unit,
                        RateText(a.keys / f.secs), f.unit,
                        RateText(a.bytes / f.secs));
  absl::StrAppendFormat(
      &out, "  latency   p50 %.3f ms, p90 %.3f ms, p99 %.3f ms, max %.3f ms\n",
      a.Percentile(50) * 1e3, a.Percentile(90) * 1e3, a.Percentile(99) * 1e3,
      a.latencies.empty() ? 0.0 : a.latencies.back() * 1e3);
}

// The open-loop schedule's line, and the servers' CPU time.
void AppendLoadAndServer(std::string& out, const BenchOptions& o,
                         const BenchReport& r) {
  const BenchStats& a = r.all;
  if (o.rate > 0) {
    absl::StrAppendFormat(
        &out,
        "  load      open loop, %scalls/s offered; %u started over 1 ms late "
        "(latest by %.3f ms)%s\n",
        RateText(o.rate), r.late_starts, r.max_start_lag * 1e3,
        r.late_starts > 0 ? ": latency counts from when a call was due" : "");
  }
  if (r.server_cpu_seconds >= 0) {
    absl::StrAppendFormat(
        &out, "  server    %.3f CPU-s over the run, %.3f CPU-ms a request\n",
        r.server_cpu_seconds,
        a.ok > 0 ? r.server_cpu_seconds * 1e3 / static_cast<double>(a.ok) : 0);
  } else if (!r.server_metrics_error.empty()) {
    absl::StrAppend(&out, "  server    CPU not read: ", r.server_metrics_error,
                    "\n");
  }
}

// Where the requests were served, and how they were batched.
void AppendServing(std::string& out, const BenchReport& r,
                   const ReportFigures& f) {
  absl::StrAppendFormat(&out, "  served    paths: %s; routes: %s\n",
                        ShareText(r.paths, r.all.ok),
                        ShareText(r.routes, r.all.ok));
  absl::StrAppendFormat(&out,
                        "  batches   %.1f requests per device run on average "
                        "(largest %d)%s\n",
                        f.mean_batch, r.batch_requests_max,
                        r.device_runs_max > 1
                            ? absl::StrCat("; up to ", r.device_runs_max,
                                           " runs per request (beyond device "
                                           "memory)")
                                  .c_str()
                            : "");
}

// Per size (with more than one), the errors by code, the sampled checks
// and the calls that never ended.
void AppendBreakdown(std::string& out, const BenchOptions& o,
                     const BenchReport& r, const ReportFigures& f) {
  if (r.by_size.size() > 1) {
    for (const auto& [size, s] : r.by_size) {
      absl::StrAppendFormat(
          &out, "  %-9s %u answered, %sreq/s, p50 %.3f ms, p99 %.3f ms\n",
          FormatSize(size), s.ok, RateText(s.ok / f.secs),
          s.Percentile(50) * 1e3, s.Percentile(99) * 1e3);
    }
  }
  if (!r.errors_by_code.empty()) {
    std::string e;
    for (const auto& [k, v] : r.errors_by_code) {
      absl::StrAppend(&e, e.empty() ? "" : ", ", k, " ", v);
    }
    absl::StrAppend(&out, "  errors    ", e, "\n");
  }
  if (o.verify_every > 0) {
    if (r.mismatches == 0) {
      absl::StrAppendFormat(
          &out, "  verified  %u sampled answers, all correct\n", r.verified);
    } else {
      absl::StrAppendFormat(&out,
                            "  verified  %u sampled answers, %u WRONG (first: "
                            "%s)\n",
                            r.verified, r.mismatches, r.first_mismatch);
    }
  }
  if (r.started != r.ended) {
    absl::StrAppendFormat(&out, "  LOST      %u calls never ended\n",
                          r.started - r.ended);
  }
}

std::string TextReport(const BenchOptions& o, const BenchReport& r) {
  const ReportFigures f = Figures(o, r);
  std::string out;
  AppendThroughput(out, o, r, f);
  AppendLoadAndServer(out, o, r);
  AppendServing(out, r, f);
  AppendBreakdown(out, o, r, f);
  return out;
}

}  // namespace

std::string FormatReport(const BenchOptions& o, const BenchReport& r,
                         bool json) {
  return json ? JsonReport(o, r) : TextReport(o, r);
}

std::string FormatSweep(const BenchOptions& o,
                        const std::vector<BenchReport>& runs,
                        const std::vector<int>& levels) {
  const char* unit = o.op == BenchOp::kTranspose ? "matrices" : "keys";
  std::string out = absl::StrFormat(
      "sortctl bench sweep: %s %s, sizes %s\n"
      "%11s %12s %13s %12s %10s %10s %10s %8s\n",
      OpName(o.op),
      o.op == BenchOp::kTranspose ? "32x32 bit matrices"
                                  : KeyTypeName(o.key_type),
      Figures(o, runs.empty() ? BenchReport{} : runs.front()).mix,
      "concurrency", "req/s", absl::StrCat(unit, "/s"), "bytes/s", "p50 ms",
      "p99 ms", "max ms", "errors");
  for (size_t i = 0; i < runs.size() && i < levels.size(); ++i) {
    const BenchStats& a = runs[i].all;
    const double secs = std::max(runs[i].seconds, 1e-9);
    absl::StrAppendFormat(
        &out, "%11d %12s %13s %12s %10.3f %10.3f %10.3f %8u\n", levels[i],
        RateText(a.ok / secs), RateText(a.keys / secs),
        absl::StrCat(RateText(a.bytes / secs), "B"), a.Percentile(50) * 1e3,
        a.Percentile(99) * 1e3,
        a.latencies.empty() ? 0.0 : a.latencies.back() * 1e3, a.errors);
  }
  return out;
}

}  // namespace sortd::cli
