// `sortctl bench`'s load generator: the size mix and back-off it follows,
// and the run itself, closed or open loop, whose workers call the server
// and count their results. Its requests are made in bench_inputs.cc, the
// counting is in bench_tally.cc, the report in bench_report.cc.
#include "client/bench.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <memory>
#include <random>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "client/bench_internal.h"
#include "client/metrics_scrape.h"
#include "client/shared_memory.h"
#include "client/sortctl_lib.h"
#include "core/mutex.h"

namespace sortd::cli {

using bench_internal::CallResult;
using bench_internal::Inputs;
using bench_internal::MakeInputs;
using bench_internal::MakeRegion;
using bench_internal::MergeReport;
using bench_internal::RecordCall;
using bench_internal::RequestKeys;
using bench_internal::SetAnswerKeys;
using bench_internal::WorkerRegion;

const char* OpName(BenchOp op) {
  switch (op) {
    case BenchOp::kSort:
      return "sort";
    case BenchOp::kTranspose:
      return "transpose";
    case BenchOp::kEcho:
      return "echo";
  }
  return "?";
}

namespace {

// Echo answers with the input unchanged.
absl::Status VerifyEcho(const v1::SortRequest& request,
                        const v1::SortResponse& response) {
  const std::string* keys = nullptr;
  KeysOf(request, &keys);
  if (KeysOf(response) != *keys) {
    return absl::DataLossError("the echo differs from the request");
  }
  return absl::OkStatus();
}

struct Shared {
  Mutex mu;
  BenchReport report ABSL_GUARDED_BY(mu);
  absl::Time last_end ABSL_GUARDED_BY(mu) = absl::InfinitePast();
};

}  // namespace

absl::StatusOr<std::vector<SizeClass>> ParseSizeMix(std::string_view text) {
  std::vector<SizeClass> mix;
  for (absl::string_view item :
       absl::StrSplit(absl::string_view(text.data(), text.size()), ',',
                      absl::SkipEmpty())) {
    item = absl::StripAsciiWhitespace(item);
    SizeClass c;
    absl::string_view size = item;
    if (size_t colon = item.find(':'); colon != absl::string_view::npos) {
      size = item.substr(0, colon);
      if (!absl::SimpleAtod(item.substr(colon + 1), &c.weight) ||
          !(c.weight > 0) || !std::isfinite(c.weight)) {
        return absl::InvalidArgumentError(
            absl::StrCat("size mix: bad weight in '", item, "'"));
      }
    }
    uint64_t scale = 1;
    if (!size.empty()) {
      switch (absl::ascii_tolower(size.back())) {
        case 'k':
          scale = uint64_t{1} << 10;
          break;
        case 'm':
          scale = uint64_t{1} << 20;
          break;
        case 'g':
          scale = uint64_t{1} << 30;
          break;
      }
      if (scale > 1) size.remove_suffix(1);
    }
    uint64_t n = 0;
    if (!absl::SimpleAtoi(size, &n) || n > (uint64_t{1} << 32) / scale) {
      return absl::InvalidArgumentError(absl::StrCat(
          "size mix: bad size in '", item,
          "'; expected a count such as 4096, 64k or 16m, optionally with "
          ":weight"));
    }
    c.size = n * scale;
    mix.push_back(c);
  }
  if (mix.empty()) {
    return absl::InvalidArgumentError("size mix: no sizes given");
  }
  return mix;
}

std::string FormatSize(uint64_t n) {
  if (n >= (uint64_t{1} << 30) && n % (uint64_t{1} << 30) == 0) {
    return absl::StrCat(n >> 30, "g");
  }
  if (n >= (uint64_t{1} << 20) && n % (uint64_t{1} << 20) == 0) {
    return absl::StrCat(n >> 20, "m");
  }
  if (n >= 1024 && n % 1024 == 0) return absl::StrCat(n >> 10, "k");
  return absl::StrCat(n);
}

bool ShouldBackOff(absl::StatusCode code) {
  return code == absl::StatusCode::kUnavailable ||
         code == absl::StatusCode::kResourceExhausted;
}

Backoff::Backoff(const BackoffPolicy& policy, uint64_t seed)
    : policy_(policy), nominal_(policy.initial), rng_(seed) {}

absl::Duration Backoff::Next() {
  const absl::Duration d = std::min(nominal_, policy_.max);
  if (d <= absl::ZeroDuration()) return absl::ZeroDuration();
  nominal_ = std::min(d * std::max(policy_.multiplier, 1.0), policy_.max);
  return d * std::uniform_real_distribution<double>(0.5, 1.0)(rng_);
}

void Backoff::Reset() { nominal_ = policy_.initial; }

namespace {

// A bench in progress: `concurrency` workers calling in a loop until the
// deadline or the request count, each call counted once measuring starts.
class BenchRun {
 public:
  BenchRun(Client& client, const BenchOptions& o, std::vector<Inputs> inputs,
           std::vector<WorkerRegion> regions)
      : client_(client),
        o_(o),
        inputs_(std::move(inputs)),
        regions_(std::move(regions)),
        measuring_(o.warmup <= absl::ZeroDuration()),
        active_(o.concurrency) {
    for (const SizeClass& c : o.mix) total_weight_ += c.weight;
  }

  BenchReport Run(const BenchProgress& progress);

 private:
  void Worker(int id);
  void OpenLoopWorker(int id);
  // Open loop: which call is the first measured, and when measuring ends.
  void PlanOpenLoop();
  // Redraws the progress line every quarter second until `end` or until
  // every worker is done; `start` is when measuring began.
  void ShowProgressUntil(absl::Time end, absl::Time start,
                         const BenchProgress& progress);
  // The run's report, once the workers are joined: its measured time from
  // `start`, the servers' CPU time since `cpu_before`, sorted latencies.
  BenchReport FinishReport(absl::Time start,
                           const absl::StatusOr<double>& cpu_before);
  // A size class drawn by the mix's weights.
  size_t PickClass(std::mt19937_64& rng) const {
    double w = std::uniform_real_distribution<double>(0, total_weight_)(rng);
    size_t c = 0;
    while (c + 1 < o_.mix.size() && w >= o_.mix[c].weight) {
      w -= o_.mix[c].weight;
      ++c;
    }
    return c;
  }
  // The servers' CPU seconds now (summed over server_metrics).
  absl::StatusOr<double> ServerCpuSeconds() const {
    double sum = 0;
    for (const std::string& endpoint : o_.server_metrics) {
      absl::StatusOr<double> v =
          ScrapeSample(endpoint, "process_cpu_seconds_total");
      if (!v.ok()) return v.status();
      sum += *v;
    }
    return sum;
  }
  CallResult Call(int id, size_t c, size_t variant, bool check,
                  v1::SortResponse& answer);
  // The run's end: by time, or once the request count is issued. Back-off
  // waits end with it.
  void StopAll() {
    {
      MutexLock lock(&stop_mu_);
      stop_ = true;
    }
    stop_cv_.NotifyAll();
  }
  void WaitUnlessStopped(absl::Duration d) {
    const auto until =
        std::chrono::steady_clock::now() + absl::ToChronoNanoseconds(d);
    MutexLock lock(&stop_mu_);
    while (!stop_.load() && stop_cv_.WaitUntil(&stop_mu_, until)) {
    }
  }
  void Flush(BenchReport& local, absl::Time last_end) {
    MutexLock lock(&shared_.mu);
    MergeReport(local, shared_.report);
    shared_.last_end = std::max(shared_.last_end, last_end);
  }

  Client& client_;
  const BenchOptions& o_;
  const std::vector<Inputs> inputs_;
  const std::vector<WorkerRegion> regions_;
  double total_weight_ = 0;
  Shared shared_;
  // Open loop: call k is due at run_start_ + k / rate; calls from
  // first_measured_ on are measured, until measure_end_ or the count.
  absl::Time run_start_;
  absl::Time measure_end_ = absl::InfiniteFuture();
  uint64_t first_measured_ = 0;
  std::atomic<uint64_t> ticket_{0};
  std::atomic<uint64_t> issued_{0};
  std::atomic<bool> measuring_;
  std::atomic<int> active_;
  std::atomic<bool> stop_{false};
  Mutex stop_mu_;  // orders StopAll's notification with a waiter's check
  CondVar stop_cv_;
};

CallResult BenchRun::Call(int id, size_t c, size_t variant, bool check,
                          v1::SortResponse& answer) {
  const Inputs& in = inputs_[c];
  CallResult r;
  if (o_.op == BenchOp::kTranspose) {
    const v1::TransposeRequest& req = in.transposes[variant];
    absl::StatusOr<v1::TransposeResponse> resp = client_.Transpose(req);
    r.status = resp.status();
    if (!resp.ok()) return r;
    r.served_by = resp->served_by();
    r.bytes = req.ByteSizeLong() + resp->ByteSizeLong();
    if (check) r.verdict = VerifyTranspose(req.matrices(), resp->matrices());
    return r;
  }
  const v1::SortRequest& req = in.sorts[variant];
  const v1::SortRequest& sent =
      regions_.empty() ? req : regions_[id].sorts[c][variant];
  // One answer message per worker, its buffers reused call after call, as
  // a client that sorts arrays of one size would.
  r.status = o_.op == BenchOp::kEcho ? client_.Echo(sent, &answer)
                                     : client_.Sort(sent, &answer);
  if (!r.status.ok()) return r;
  r.served_by = answer.served_by();
  // On the wire: compact keys arrive decoded into `answer`.
  r.bytes = sent.ByteSizeLong() + answer.ByteSizeLong() -
            static_cast<uint64_t>(
                std::max<int64_t>(0, r.served_by.key_bytes_saved()));
  if (!check) return r;
  if (!regions_.empty()) {
    // The answer is in the region: read it back for the check.
    const std::byte* out =
        regions_[id].region->data() + regions_[id].out_offsets[c][variant];
    SetAnswerKeys(std::string(reinterpret_cast<const char*>(out),
                              RequestKeys(req).size()),
                  &answer);
  }
  r.verdict = o_.op == BenchOp::kEcho ? VerifyEcho(req, answer)
                                      : VerifySort(req, answer);
  return r;
}

void BenchRun::Worker(int id) {
  std::mt19937_64 rng(o_.seed * 1000003 + static_cast<uint64_t>(id));
  Backoff backoff(o_.backoff,
                  o_.seed * 2654435761u + static_cast<uint64_t>(id));
  BenchReport local;
  uint64_t calls = 0;
  absl::Time last_end = absl::InfinitePast();
  v1::SortResponse answer;
  while (!stop_.load()) {
    const bool measured = measuring_.load();
    if (measured && o_.max_requests > 0 &&
        issued_.fetch_add(1) >= o_.max_requests) {
      StopAll();  // wakes workers backing off: nothing is left to send
      break;
    }
    const size_t c = PickClass(rng);
    const Inputs& in = inputs_[c];
    const size_t variant =
        rng() % std::max(in.sorts.size(), in.transposes.size());
    const bool check = o_.verify_every > 0 && ++calls % o_.verify_every == 0;
    if (measured) ++local.started;
    const absl::Time start = absl::Now();
    const CallResult result = Call(id, c, variant, check, answer);
    const absl::Time finished = absl::Now();
    // Down or overloaded: wait before the next call (the run's end cuts the
    // wait short). A success resets the schedule.
    const bool back_off = ShouldBackOff(result.status.code());
    if (result.status.ok()) backoff.Reset();
    if (!measured) {
      if (back_off) WaitUnlessStopped(backoff.Next());
      continue;
    }
    last_end = std::max(last_end, finished);
    RecordCall(result, in.size, check, absl::ToDoubleSeconds(finished - start),
               local);
    if (back_off) {
      Flush(local, last_end);  // the progress line shows the errors
      WaitUnlessStopped(backoff.Next());
    } else if (local.ended % 64 == 0) {
      Flush(local, last_end);
    }
  }
  Flush(local, last_end);
  --active_;
}

void BenchRun::OpenLoopWorker(int id) {
  std::mt19937_64 rng(o_.seed * 1000003 + static_cast<uint64_t>(id));
  BenchReport local;
  uint64_t calls = 0;
  absl::Time last_end = absl::InfinitePast();
  v1::SortResponse answer;
  while (!stop_.load()) {
    const uint64_t k = ticket_.fetch_add(1);
    const absl::Time due =
        run_start_ + absl::Seconds(static_cast<double>(k) / o_.rate);
    const bool measured = k >= first_measured_;
    if (measured &&
        ((o_.max_requests > 0 && k - first_measured_ >= o_.max_requests) ||
         due >= measure_end_)) {
      break;  // every later call is due later still
    }
    if (const absl::Duration wait = due - absl::Now();
        wait > absl::ZeroDuration()) {
      WaitUnlessStopped(wait);  // the schedule, not a synchronisation
      if (stop_.load()) break;
    }
    const size_t c = PickClass(rng);
    const Inputs& in = inputs_[c];
    const size_t variant =
        rng() % std::max(in.sorts.size(), in.transposes.size());
    const bool check = o_.verify_every > 0 && ++calls % o_.verify_every == 0;
    const absl::Time start = absl::Now();
    if (measured) {
      ++local.started;
      const double lag = absl::ToDoubleSeconds(start - due);
      if (lag > 1e-3) ++local.late_starts;
      local.max_start_lag = std::max(local.max_start_lag, lag);
    }
    const CallResult result = Call(id, c, variant, check, answer);
    const absl::Time finished = absl::Now();
    if (!measured) continue;
    last_end = std::max(last_end, finished);
    // From when it was due: the time a caller on this schedule waited.
    RecordCall(result, in.size, check, absl::ToDoubleSeconds(finished - due),
               local);
    if (local.ended % 64 == 0 || !result.status.ok()) Flush(local, last_end);
  }
  Flush(local, last_end);
  --active_;
}

void BenchRun::PlanOpenLoop() {
  first_measured_ = static_cast<uint64_t>(
      std::ceil(absl::ToDoubleSeconds(o_.warmup) * o_.rate));
  if (o_.duration > absl::ZeroDuration()) {
    measure_end_ =
        run_start_ +
        absl::Seconds(static_cast<double>(first_measured_) / o_.rate) +
        o_.duration;
  }
}

void BenchRun::ShowProgressUntil(absl::Time end, absl::Time start,
                                 const BenchProgress& progress) {
  for (;;) {
    const absl::Time now = absl::Now();
    if (now >= end || active_.load() == 0) break;
    absl::SleepFor(std::min(absl::Milliseconds(250), end - now));
    if (progress) {
      MutexLock lock(&shared_.mu);
      BenchReport partial;
      partial.all.ok = shared_.report.all.ok;
      partial.all.errors = shared_.report.all.errors;
      partial.all.keys = shared_.report.all.keys;
      partial.all.bytes = shared_.report.all.bytes;
      progress(absl::ToDoubleSeconds(absl::Now() - start), partial);
    }
  }
}

BenchReport BenchRun::FinishReport(absl::Time start,
                                   const absl::StatusOr<double>& cpu_before) {
  BenchReport report;
  absl::Time last_end;
  {
    // The workers are joined: never contended.
    MutexLock lock(&shared_.mu);
    report = std::move(shared_.report);
    last_end = shared_.last_end;
  }
  if (!o_.server_metrics.empty()) {
    absl::StatusOr<double> cpu_after = ServerCpuSeconds();
    if (!cpu_before.ok() || !cpu_after.ok()) {
      report.server_metrics_error = std::string(
          (!cpu_before.ok() ? cpu_before : cpu_after).status().message());
    } else {
      report.server_cpu_seconds = std::max(0.0, *cpu_after - *cpu_before);
    }
  }
  report.seconds =
      last_end > start ? absl::ToDoubleSeconds(last_end - start) : 0;
  std::sort(report.all.latencies.begin(), report.all.latencies.end());
  for (auto& [size, st] : report.by_size) {
    std::sort(st.latencies.begin(), st.latencies.end());
  }
  return report;
}

BenchReport BenchRun::Run(const BenchProgress& progress) {
  const bool open_loop = o_.rate > 0;
  run_start_ = absl::Now();
  if (open_loop) PlanOpenLoop();
  std::vector<std::thread> threads;
  for (int i = 0; i < o_.concurrency; ++i) {
    threads.emplace_back(
        [this, i, open_loop] { open_loop ? OpenLoopWorker(i) : Worker(i); });
  }
  const absl::Time warm_end =
      open_loop
          ? run_start_ +
                absl::Seconds(static_cast<double>(first_measured_) / o_.rate)
          : run_start_ + o_.warmup;
  if (o_.warmup > absl::ZeroDuration()) {
    absl::SleepFor(warm_end - absl::Now());  // a bench phase
  }
  absl::StatusOr<double> cpu_before = ServerCpuSeconds();
  measuring_ = true;
  const absl::Time start = open_loop ? warm_end : absl::Now();
  // Closed loop: the workers stop at the deadline. Open loop: each stops
  // once its next call would be due past it (or past the count), and the
  // calls in flight are answered.
  const absl::Time end = o_.duration > absl::ZeroDuration() && !open_loop
                             ? start + o_.duration
                             : absl::InfiniteFuture();
  // Meanwhile the progress line is redrawn every quarter second. The
  // measured time ends with the last answer, not with this loop.
  ShowProgressUntil(end, start, progress);
  StopAll();
  for (std::thread& t : threads) t.join();
  return FinishReport(start, cpu_before);
}

}  // namespace

absl::StatusOr<BenchReport> RunBench(Client& client, const BenchOptions& o,
                                     const BenchProgress& progress) {
  if (o.concurrency < 1) {
    return absl::InvalidArgumentError("--concurrency must be at least 1");
  }
  if (o.duration <= absl::ZeroDuration() && o.max_requests == 0) {
    return absl::InvalidArgumentError(
        "a bench is bounded: give --duration and/or --requests");
  }
  if (o.mix.empty()) return absl::InvalidArgumentError("no sizes");
  if (!(o.rate >= 0) || !std::isfinite(o.rate)) {
    return absl::InvalidArgumentError(
        "--rate: calls a second, 0 (closed loop) or more");
  }
  if (!o.shm_socket.empty() && o.op == BenchOp::kTranspose) {
    return absl::InvalidArgumentError("--shm_socket serves sorts and echoes");
  }
  std::vector<Inputs> inputs;
  for (size_t c = 0; c < o.mix.size(); ++c) {
    inputs.push_back(MakeInputs(o, o.mix[c].size, c));
  }
  std::vector<WorkerRegion> regions;
  for (int w = 0; !o.shm_socket.empty() && w < o.concurrency; ++w) {
    absl::StatusOr<WorkerRegion> region = MakeRegion(o, inputs);
    if (!region.ok()) return region.status();
    regions.push_back(*std::move(region));
  }
  return BenchRun(client, o, std::move(inputs), std::move(regions))
      .Run(progress);
}

}  // namespace sortd::cli
