// `sortctl bench`: its options from the flags (a usage message when they
// do not hold), and the run: a health check first, the load generator
// (client/bench.h) with a progress line, its report, and the verdict that
// sets the exit status.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "client/bench.h"
#include "client/cli_io.h"
#include "client/client.h"
#include "client/sortctl_help.h"
#include "client/sortctl_internal.h"
#include "client/sortctl_lib.h"

namespace cli = sortd::cli;
using sortd::cli::Progress;

namespace sortctl {
namespace {

using cli::LocalError;
using cli::ServerError;
using cli::Usage;

// --op as a BenchOp.
absl::StatusOr<cli::BenchOp> BenchOpFromFlag() {
  const std::string op = absl::GetFlag(FLAGS_op);
  if (op == "sort") return cli::BenchOp::kSort;
  if (op == "transpose") return cli::BenchOp::kTranspose;
  if (op == "echo") return cli::BenchOp::kEcho;
  return absl::InvalidArgumentError(
      absl::StrCat("bench: --op: '", op,
                   "' is not an op; expected sort, transpose or "
                   "echo"));
}

// --requests, --warmup and --verify_every, checked before they are copied.
absl::Status CheckBenchCountFlags() {
  if (absl::GetFlag(FLAGS_requests) < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("bench: --requests: expected a count, got ",
                     absl::GetFlag(FLAGS_requests)));
  }
  if (absl::GetFlag(FLAGS_warmup) < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("bench: --warmup: negative (",
                     absl::FormatDuration(absl::GetFlag(FLAGS_warmup)), ")"));
  }
  if (absl::GetFlag(FLAGS_verify_every) < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("bench: --verify_every: expected at least 1, got ",
                     absl::GetFlag(FLAGS_verify_every)));
  }
  return absl::OkStatus();
}

// The rest of the options, as the flags give them.
void CopyBenchFlags(cli::BenchOptions& o) {
  o.concurrency = absl::GetFlag(FLAGS_concurrency);
  o.duration = absl::GetFlag(FLAGS_duration);
  o.max_requests = static_cast<uint64_t>(absl::GetFlag(FLAGS_requests));
  o.warmup = absl::GetFlag(FLAGS_warmup);
  o.seed = absl::GetFlag(FLAGS_seed);
  o.variants = absl::GetFlag(FLAGS_variants);
  o.shm_socket = absl::GetFlag(FLAGS_shm_socket);
  o.compact_keys = absl::GetFlag(FLAGS_compact);
  o.rate = absl::GetFlag(FLAGS_rate);
  o.server_metrics = absl::GetFlag(FLAGS_server_metrics);
  if (absl::GetFlag(FLAGS_verify)) {
    o.verify_every = static_cast<uint64_t>(absl::GetFlag(FLAGS_verify_every));
  }
}

// The ranges of the copied options: --variants, --rate, --concurrency, and
// a bounded run (--duration, --requests).
absl::Status CheckBenchLimits(const cli::BenchOptions& o) {
  if (o.variants < 1 || o.variants > 64) {
    return absl::InvalidArgumentError(
        absl::StrCat("bench: --variants must be 1 to 64, got ", o.variants));
  }
  if (!(o.rate >= 0) || !std::isfinite(o.rate) || o.rate > 1e7) {
    return absl::InvalidArgumentError(absl::StrCat(
        "bench: --rate: calls a second, 0 (closed loop) to 1e7, got ",
        absl::GetFlag(FLAGS_rate)));
  }
  if (o.concurrency < 1 || o.concurrency > 4096) {
    return absl::InvalidArgumentError(absl::StrCat(
        "bench: --concurrency must be 1 to 4096, got ", o.concurrency));
  }
  if (o.duration > absl::Hours(24) || o.duration < absl::ZeroDuration() ||
      (o.duration == absl::ZeroDuration() && o.max_requests == 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "bench: --duration ", absl::FormatDuration(o.duration),
        ": a run is bounded: --duration up to 24h, or 0 with --requests N"));
  }
  return absl::OkStatus();
}

// bench's options from its flags; a usage message when they do not hold.
// The checks run in the order of the flags' usage messages: the first bad
// flag is the one reported.
absl::StatusOr<cli::BenchOptions> BenchOptionsFromFlags() {
  cli::BenchOptions o;
  absl::StatusOr<cli::BenchOp> op = BenchOpFromFlag();
  if (!op.ok()) return op.status();
  o.op = *op;
  const auto type = cli::ParseKeyTypeName(absl::GetFlag(FLAGS_type));
  if (!type)
    return absl::InvalidArgumentError(absl::StrCat("bench: ", BadType()));
  o.key_type = *type;
  absl::StatusOr<std::vector<cli::SizeClass>> mix =
      cli::ParseSizeMix(absl::GetFlag(FLAGS_sizes));
  if (!mix.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("bench: --sizes: ", mix.status().message()));
  }
  o.mix = *mix;
  if (absl::Status s = CheckBenchCountFlags(); !s.ok()) return s;
  CopyBenchFlags(o);
  if (absl::Status s = CheckBenchLimits(o); !s.ok()) return s;
  return o;
}

// --sweep's concurrency levels; empty when the flag is.
absl::StatusOr<std::vector<int>> ParseSweep(const std::string& text) {
  std::vector<int> levels;
  if (text.empty()) return levels;
  for (absl::string_view field : absl::StrSplit(text, ',')) {
    int level = 0;
    if (!absl::SimpleAtoi(field, &level) || level < 1 || level > 4096) {
      return absl::InvalidArgumentError(absl::StrCat(
          "bench: --sweep: concurrency levels 1 to 4096, comma-separated; "
          "got '",
          field, "'"));
    }
    levels.push_back(level);
  }
  if (levels.size() > 32) {
    return absl::InvalidArgumentError("bench: --sweep: at most 32 levels");
  }
  return levels;
}

// One measured run of `o`, with a progress line (`label` before it).
absl::StatusOr<cli::BenchReport> RunOnce(sortd::Client& client,
                                         const cli::BenchOptions& o,
                                         const std::string& label) {
  Progress progress(absl::GetFlag(FLAGS_json));
  const std::string bound =
      o.duration > absl::ZeroDuration()
          ? absl::StrFormat("/%.0f s", absl::ToDoubleSeconds(o.duration))
          : absl::StrCat(" s, ", o.max_requests, " requests");
  absl::StatusOr<cli::BenchReport> report =
      cli::RunBench(client, o, [&](double seconds, const cli::BenchReport& r) {
        progress.Step(absl::StrFormat(
            "bench %s%.1f%s: %u answered (%.0f req/s), %u errors", label,
            seconds, bound, r.all.ok, r.all.ok / std::max(seconds, 1e-9),
            r.all.errors));
      });
  progress.Clear();
  return report;
}

// The run's exit status, said on stderr when it is not 0.
int Verdict(const cli::BenchReport& report) {
  const cli::BenchVerdict verdict = cli::JudgeBench(report);
  if (verdict.exit_code != 0) {
    std::fprintf(stderr, "sortctl: bench: exit %d: %s\n", verdict.exit_code,
                 verdict.reason.c_str());
  }
  return verdict.exit_code;
}

// One run per concurrency level, in order: with --json one report line as
// each ends, else a table at the end. The exit status is the worst run's.
int RunSweep(sortd::Client& client, cli::BenchOptions o,
             const std::vector<int>& levels) {
  const bool json = absl::GetFlag(FLAGS_json);
  std::vector<cli::BenchReport> runs;
  int exit_code = 0;
  for (int level : levels) {
    o.concurrency = level;
    absl::StatusOr<cli::BenchReport> report =
        RunOnce(client, o, absl::StrCat("concurrency ", level, " "));
    if (!report.ok()) return ServerError(report.status());
    if (json) std::fputs(cli::FormatReport(o, *report, true).c_str(), stdout);
    std::fflush(stdout);
    exit_code = std::max(exit_code, Verdict(*report));
    runs.push_back(*std::move(report));
  }
  if (!json) std::fputs(cli::FormatSweep(o, runs, levels).c_str(), stdout);
  return exit_code;
}

}  // namespace

int RunBench() {
  absl::StatusOr<cli::BenchOptions> options = BenchOptionsFromFlags();
  if (!options.ok()) return Usage(std::string(options.status().message()));
  absl::StatusOr<std::vector<int>> sweep =
      ParseSweep(absl::GetFlag(FLAGS_sweep));
  if (!sweep.ok()) return Usage(std::string(sweep.status().message()));
  auto client = Connect();
  if (!client.ok()) return LocalError(client.status());
  if (absl::Status h = (*client)->CheckHealth(); !h.ok()) {
    return ServerError(h);
  }
  if (!sweep->empty()) return RunSweep(**client, *options, *sweep);
  absl::StatusOr<cli::BenchReport> report = RunOnce(**client, *options, "");
  if (!report.ok()) return ServerError(report.status());
  std::fputs(
      cli::FormatReport(*options, *report, absl::GetFlag(FLAGS_json)).c_str(),
      stdout);
  return Verdict(*report);
}

}  // namespace sortctl
