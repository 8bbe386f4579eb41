// The scheduler under closed-loop load, in process (no gRPC): C client
// threads each keep one sort of N u32 keys in flight against the real
// engines for a fixed time, for each batching delay, and for the unbatched
// baseline (--max_batch_requests=1 equivalent) and the CPU path alone;
// with --routed, also as sortd routes them: thresholds and cost models
// from sortd's startup calibration, spilling to the CPU path and
// overflowing to device batches on (mode "routed", --routed_delay_us).
// One JSON line per configuration:
//
//   batching_benchmark --device=gpu --keys=1024,4096 --concurrency=16,64
//
// {"bench":"batching","device":...,"keys":1024,"concurrency":64,
//  "mode":"batched","delay_us":200,"requests_per_s":...,"keys_per_s":...,
//  "p50_ms":...,"p99_ms":...,"mean_batch":...,"queue_ms":...,
//  "run_ms":...,"stages_ms":{"host_pack":...,"upload":...,...},
//  "device_share":...}
//
// p50_ms, p99_ms: over the requests started in the measured window (a
// fifth of --seconds of warm-up before it is left out).
// device_share: the fraction of the window's answers that a device gave.
// p99_cpu_ms, p99_device_ms: p99 of the answers each path gave; device_late:
// the router's device lateness at the end of the window
// (Placement::Lateness; 1: devices answer as estimated); refused: submissions
// over the admission budget, which a client retries after 100 us.
//
// queue_ms and run_ms: a request's mean wait for its run and the run's
// wall time (pack, engine, unpack); stages_ms: the mean time per device run
// of each stage, over the runs of the measured window that reported it
// (device time from profiling events, of the runs profiled, one in each
// --kernel_profile_interval; host_* are host wall time, of every run).
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "cpu/cpu_sorter.h"
#include "gpu/opencl_engine.h"
#include "server/calibrate.h"
#include "server/scheduler.h"

ABSL_FLAG(std::string, device, "gpu", "gpu or opencl-cpu");
ABSL_FLAG(std::string, keys, "256,1024,4096", "Keys per request");
ABSL_FLAG(std::string, concurrency, "16,64", "Client threads");
ABSL_FLAG(std::string, delays_us, "0,50,100,200,500,1000,2000",
          "Batching delays to try, microseconds");
ABSL_FLAG(double, seconds, 1.0, "Measured time per configuration");
ABSL_FLAG(int, pipeline_depth, 2, "Batches in flight per device");
ABSL_FLAG(int, full_pipeline_depth, 3,
          "Batches in flight per device while the next batch is full "
          "(sortd's --full_pipeline_depth)");
ABSL_FLAG(std::string, classes, "1",
          "Batch classes the clients spread over (client c uses class c % "
          "k: key types u32, f32, u64, i32, i64, f64, each ascending and "
          "descending), comma-separated values of k");
ABSL_FLAG(int64_t, max_batch_keys, int64_t{1} << 22,
          "Keys one device run takes at most (sortd's --max_batch_keys)");
ABSL_FLAG(bool, pinned_requests, true,
          "Clients' arrays of --pinned_min_bytes or more in the engine's "
          "page-locked memory, as sortd keeps request arrays "
          "(--host_pool_pinned)");
ABSL_FLAG(int64_t, pinned_min_bytes, int64_t{256} << 10,
          "The smallest array placed in page-locked memory (sortd's "
          "--host_pool_min_bytes)");
ABSL_FLAG(int64_t, pinned_max_bytes, int64_t{1} << 30,
          "Page-locked memory the clients' arrays may hold at once; beyond, "
          "from the heap (sortd's --host_pinned_max_bytes)");
ABSL_FLAG(absl::Duration, kernel_profile_interval, absl::Milliseconds(10),
          "Device runs are profiled one an interval (sortd's "
          "--kernel_profile_interval)");
ABSL_FLAG(bool, baselines, true, "Also measure the CPU path and unbatched");
ABSL_FLAG(int64_t, in_place_min_keys, 0,
          "Batched requests in page-locked memory are sorted where they lie "
          "from this many keys a request, packed below (sortd's "
          "--batch_in_place_min_keys; -1: always packed); the routed mode "
          "takes the calibration's");
ABSL_FLAG(bool, routed, false,
          "Also measure the requests as sortd routes them (calibrated at "
          "startup, as sortd does, with its spill and overflow)");
ABSL_FLAG(int, request_threads, 0,
          "Threads that run CPU-path requests concurrently (sortd's "
          "--request_threads; 0: one per hardware thread)");
ABSL_FLAG(bool, spill_to_cpu, true,
          "The routed mode's spill and overflow (sortd's --spill_to_cpu)");
ABSL_FLAG(int64_t, routed_delay_us, 100,
          "The routed mode's batching delay (sortd's --max_batch_delay)");

namespace {

std::vector<size_t> Parse(const std::string& list) {
  std::vector<size_t> out;
  for (absl::string_view s : absl::StrSplit(list, ',')) {
    size_t v = 0;
    if (absl::SimpleAtoi(s, &v)) out.push_back(v);
  }
  return out;
}

// Stage times of every device run, summed, with how many runs reported
// each stage (device stages come from the profiled runs alone).
class StageTotals final : public sortd::SchedulerListener {
 public:
  struct Total {
    double seconds = 0;
    double runs = 0;
  };
  void OnStages(const std::string& /*device*/, const char* /*kernel*/,
                const sortd::StageTimes& stages) override {
    std::lock_guard<std::mutex> l(mu_);
    std::map<std::string, double> run;
    for (const sortd::StageTime& st : stages) run[st.stage] += st.seconds;
    for (const auto& [stage, secs] : run) {
      totals_[stage].seconds += secs;
      totals_[stage].runs += 1;
    }
  }
  std::map<std::string, Total> Snapshot() const {
    std::lock_guard<std::mutex> l(mu_);
    return totals_;
  }

 private:
  mutable std::mutex mu_;
  std::map<std::string, Total> totals_;
};

struct Result {
  double requests_per_s = 0, p50_ms = 0, p99_ms = 0, mean_batch = 0;
  // p99 of the answers each path gave (0: none).
  double p99_cpu_ms = 0, p99_device_ms = 0;
  // The router's device lateness at the end of the window (sorts).
  double device_late = 1;
  // Submissions refused as over the admission budget, retried.
  size_t refused = 0;
  double queue_ms = 0, run_ms = 0;
  double device_share = 0;                  // of the window's answers
  std::map<std::string, double> stages_ms;  // per device run
};

// {"stage":ms,...}
std::string StagesJson(const std::map<std::string, double>& stages_ms) {
  std::string out = "{";
  for (const auto& [stage, ms] : stages_ms) {
    if (out.size() > 1) out += ",";
    char buf[96];
    std::snprintf(buf, sizeof(buf), "\"%s\":%.4f", stage.c_str(), ms);
    out += buf;
  }
  return out + "}";
}

// A client's array: from `memory` (the engine's page-locked memory) when
// it is given, else from the heap. sortd's request buffers are page-locked
// from --pinned_min_bytes (sortd's --host_pool_min_bytes).
class HostArray {
 public:
  HostArray(size_t bytes, std::shared_ptr<sortd::HostMemory> memory)
      : bytes_(bytes) {
    if (memory != nullptr) {
      data_ = static_cast<std::byte*>(memory->Allocate(bytes));
      if (data_ != nullptr) memory_ = std::move(memory);
    }
    if (data_ == nullptr) data_ = new std::byte[bytes];
  }
  ~HostArray() {
    if (memory_ != nullptr) {
      memory_->Free(data_, bytes_);
    } else {
      delete[] data_;
    }
  }
  HostArray(const HostArray&) = delete;
  HostArray& operator=(const HostArray&) = delete;
  std::byte* data() { return data_; }
  uint32_t* words() { return reinterpret_cast<uint32_t*>(data_); }

 private:
  size_t bytes_;
  std::shared_ptr<sortd::HostMemory> memory_;
  std::byte* data_ = nullptr;
};

Result Load(sortd::Scheduler& sched, const StageTotals& totals, size_t keys,
            size_t clients, double seconds, size_t classes,
            const std::shared_ptr<sortd::HostMemory>& memory) {
  std::atomic<bool> stop{false};
  std::mutex mu;
  std::vector<double> latencies;
  std::vector<double> path_latencies[2];  // CPU path, devices
  std::atomic<size_t> done_count{0};
  std::atomic<size_t> refused{0};  // RESOURCE_EXHAUSTED, retried
  // Summed over requests answered in the measured window, microseconds.
  std::atomic<bool> measuring{false};
  std::atomic<int64_t> queue_us{0}, run_us{0}, measured{0};
  std::vector<std::thread> threads;
  for (size_t c = 0; c < clients; ++c) {
    threads.emplace_back([&, c] {
      std::mt19937 rng(static_cast<uint32_t>(c));
      constexpr sortd::KeyType kTypes[] = {
          sortd::KeyType::kU32, sortd::KeyType::kF32, sortd::KeyType::kU64,
          sortd::KeyType::kI32, sortd::KeyType::kI64, sortd::KeyType::kF64};
      const size_t cls = c % std::max<size_t>(classes, 1);
      const sortd::KeyType type = kTypes[(cls / 2) % 6];
      // Page-locked where sortd would keep this request's arrays.
      const bool pin =
          keys * sortd::KeySize(type) >=
          static_cast<size_t>(absl::GetFlag(FLAGS_pinned_min_bytes));
      // Random bits are valid keys of every type (NaNs included).
      HostArray in(keys * 8, pin ? memory : nullptr);
      HostArray out(keys * 8, pin ? memory : nullptr);
      for (size_t i = 0; i < keys * 2; ++i) in.words()[i] = rng();
      std::vector<double> mine, mine_by_path[2];
      while (!stop.load(std::memory_order_relaxed)) {
        auto task = std::make_shared<sortd::Task>();
        task->op = sortd::Op::kSort;
        task->units = keys;
        task->sort.count = keys;
        task->sort.key_type = type;
        task->sort.order =
            cls % 2 ? sortd::Order::kDescending : sortd::Order::kAscending;
        task->sort.keys = in.data();
        task->sort.keys_out = out.data();
        absl::Notification done;
        absl::Status status;
        bool on_device = false;
        task->done = [&](const sortd::TaskResult& r) {
          status = r.status;
          on_device = r.path != sortd::ExecutionPath::kCpu;
          if (measuring.load(std::memory_order_relaxed)) {
            queue_us += absl::ToInt64Microseconds(r.queue_wait);
            run_us += absl::ToInt64Microseconds(r.compute);
            ++measured;
          }
          done.Notify();
        };
        const absl::Time start = absl::Now();
        // Latencies count the requests started in the measured window.
        const bool counted = measuring.load(std::memory_order_relaxed);
        sched.Submit(task);
        done.WaitForNotification();
        if (absl::IsResourceExhausted(status)) {
          // Over the admission budget (a request answered has not yet
          // given its share back): as a client would, back off and retry.
          refused.fetch_add(1, std::memory_order_relaxed);
          absl::SleepFor(absl::Microseconds(100));
          continue;
        }
        if (!status.ok()) {
          std::fprintf(stderr, "a sort failed: %s\n",
                       status.ToString().c_str());
          std::abort();
        }
        const double ms = absl::ToDoubleMilliseconds(absl::Now() - start);
        if (counted) {
          mine.push_back(ms);
          mine_by_path[on_device].push_back(ms);
        }
        done_count.fetch_add(1, std::memory_order_relaxed);
      }
      std::lock_guard<std::mutex> l(mu);
      latencies.insert(latencies.end(), mine.begin(), mine.end());
      for (int p = 0; p < 2; ++p) {
        path_latencies[p].insert(path_latencies[p].end(),
                                 mine_by_path[p].begin(),
                                 mine_by_path[p].end());
      }
    });
  }
  // Warm for a fifth of the time, then measure.
  absl::SleepFor(absl::Seconds(seconds / 5));
  const size_t start_count = done_count.load();
  const sortd::Scheduler::Stats before = sched.stats();
  const std::map<std::string, StageTotals::Total> stages_before =
      totals.Snapshot();
  measuring = true;
  const absl::Time start = absl::Now();
  absl::SleepFor(absl::Seconds(seconds));
  const size_t end_count = done_count.load();
  measuring = false;
  const std::map<std::string, StageTotals::Total> stages_after =
      totals.Snapshot();
  const double elapsed = absl::ToDoubleSeconds(absl::Now() - start);
  stop = true;
  for (std::thread& t : threads) t.join();
  const sortd::Scheduler::Stats after = sched.stats();
  Result r;
  r.device_late = sched.device_late(sortd::Op::kSort);
  r.refused = refused.load();
  r.requests_per_s = (end_count - start_count) / elapsed;
  std::sort(latencies.begin(), latencies.end());
  if (!latencies.empty()) {
    r.p50_ms = latencies[latencies.size() / 2];
    r.p99_ms = latencies[latencies.size() * 99 / 100];
  }
  for (int p = 0; p < 2; ++p) {
    std::vector<double>& l = path_latencies[p];
    std::sort(l.begin(), l.end());
    if (!l.empty())
      (p ? r.p99_device_ms : r.p99_cpu_ms) = l[l.size() * 99 / 100];
  }
  const double runs = static_cast<double>(after.gpu_runs - before.gpu_runs);
  const double answered =
      static_cast<double>((after.cpu_runs - before.cpu_runs) +
                          (after.gpu_tasks - before.gpu_tasks));
  if (answered > 0) {
    r.device_share =
        static_cast<double>(after.gpu_tasks - before.gpu_tasks) / answered;
  }
  r.mean_batch =
      runs > 0 ? static_cast<double>(after.gpu_tasks - before.gpu_tasks) / runs
               : 1.0;
  if (measured > 0) {
    r.queue_ms = queue_us.load() / 1e3 / static_cast<double>(measured);
    r.run_ms = run_us.load() / 1e3 / static_cast<double>(measured);
  }
  for (const auto& [stage, total] : stages_after) {
    StageTotals::Total was;
    if (const auto it = stages_before.find(stage); it != stages_before.end()) {
      was = it->second;
    }
    const double d = total.seconds - was.seconds;
    const double n = total.runs - was.runs;
    if (n > 0 && d > 0) r.stages_ms[stage] = d * 1e3 / n;
  }
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  if (absl::GetFlag(FLAGS_pinned_min_bytes) < 1) {
    std::fprintf(stderr, "--pinned_min_bytes must be positive\n");
    return 1;
  }
  if (absl::GetFlag(FLAGS_pinned_max_bytes) < 0) {
    std::fprintf(stderr, "--pinned_max_bytes must not be negative\n");
    return 1;
  }
  sortd::CpuSorter cpu({});
  sortd::gpu::OpenClEngine::Options eo;
  eo.kind = absl::GetFlag(FLAGS_device) == "gpu" ? sortd::gpu::DeviceKind::kGpu
                                                 : sortd::gpu::DeviceKind::kCpu;
  // As sortd sets them (EngineSetup): GPUs get the full-batch depth's lanes.
  eo.lanes = eo.kind == sortd::gpu::DeviceKind::kGpu
                 ? std::max(absl::GetFlag(FLAGS_pipeline_depth),
                            absl::GetFlag(FLAGS_full_pipeline_depth))
                 : absl::GetFlag(FLAGS_pipeline_depth);
  eo.profile_interval = absl::GetFlag(FLAGS_kernel_profile_interval);
  eo.pinned_host_max_bytes =
      static_cast<size_t>(absl::GetFlag(FLAGS_pinned_max_bytes));
  auto engine = sortd::gpu::OpenClEngine::Create(eo);
  if (!engine.ok()) {
    std::fprintf(stderr, "%s\n", engine.status().ToString().c_str());
    return 1;
  }
  if (const std::string& f = (*engine)->policy_fallback(); !f.empty()) {
    std::fprintf(stderr, "batching_benchmark: WARNING: %s\n", f.c_str());
  }
  const std::string device = (*engine)->device_name();
  std::unique_ptr<sortd::Sorter> shared(std::move(*engine));
  // The engine is handed to each scheduler in turn through a thin owner.
  struct Borrowed final : sortd::Sorter {
    sortd::Sorter* e;
    explicit Borrowed(sortd::Sorter* s) : e(s) {}
    sortd::ExecutionPath path() const override { return e->path(); }
    std::string device_name() const override { return e->device_name(); }
    int concurrent_runs() const override { return e->concurrent_runs(); }
    absl::Status Sort(const sortd::SortJob& j) override { return e->Sort(j); }
    absl::Status SortSegments(const sortd::SortJob& j,
                              absl::Span<const uint32_t> o) override {
      return e->SortSegments(j, o);
    }
    absl::Status Transpose(const sortd::TransposeJob& j) override {
      return e->Transpose(j);
    }
    bool SortsParts(
        absl::Span<const sortd::SortJob* const> parts) const override {
      return e->SortsParts(parts);
    }
    std::shared_ptr<sortd::HostMemory> host_memory() const override {
      return e->host_memory();
    }
  };
  const int cpu_workers =
      absl::GetFlag(FLAGS_request_threads) > 0
          ? absl::GetFlag(FLAGS_request_threads)
          : static_cast<int>(std::thread::hardware_concurrency());
  // The routed mode's thresholds and costs, calibrated once as sortd does
  // at startup (server/router_setup.cc).
  sortd::Calibration calibration;
  if (absl::GetFlag(FLAGS_routed)) {
    sortd::CalibrationOptions copts;
    copts.cpu_callers = cpu_workers;
    copts.max_batch_keys =
        static_cast<size_t>(absl::GetFlag(FLAGS_max_batch_keys));
    if (absl::GetFlag(FLAGS_pinned_requests)) {
      copts.pinned_min_bytes =
          static_cast<size_t>(absl::GetFlag(FLAGS_pinned_min_bytes));
    }
    absl::StatusOr<sortd::Calibration> c =
        sortd::Calibrate(cpu, *shared, copts);
    if (!c.ok()) {
      std::fprintf(stderr, "calibration: %s\n", c.status().ToString().c_str());
      return 1;
    }
    std::fputs(c->report.c_str(), stderr);
    calibration = *std::move(c);
  }
  const double seconds = absl::GetFlag(FLAGS_seconds);
  for (size_t classes : Parse(absl::GetFlag(FLAGS_classes))) {
    for (size_t keys : Parse(absl::GetFlag(FLAGS_keys))) {
      for (size_t clients : Parse(absl::GetFlag(FLAGS_concurrency))) {
        struct Mode {
          const char* name;
          long delay_us;
          size_t max_requests;
          bool device;
          bool routed = false;
        };
        std::vector<Mode> modes;
        if (absl::GetFlag(FLAGS_baselines)) {
          modes = {{"cpu_path", 0, 1, false}, {"unbatched", 0, 1, true}};
        }
        for (size_t d : Parse(absl::GetFlag(FLAGS_delays_us))) {
          modes.push_back({"batched", static_cast<long>(d), 256, true});
        }
        if (absl::GetFlag(FLAGS_routed)) {
          modes.push_back(
              {"routed",
               static_cast<long>(absl::GetFlag(FLAGS_routed_delay_us)), 256,
               true, true});
        }
        for (const Mode& m : modes) {
          sortd::Scheduler::Options o;
          o.max_batch_delay = absl::Microseconds(m.delay_us);
          o.max_batch_requests = m.max_requests;
          o.sort = {.cpu_max = m.device ? 0 : SIZE_MAX, .solo_min = SIZE_MAX};
          o.spill = false;
          const int64_t in_place = absl::GetFlag(FLAGS_in_place_min_keys);
          o.in_place_min_keys =
              in_place < 0 ? SIZE_MAX : static_cast<size_t>(in_place);
          if (m.routed) {
            sortd::ApplyCalibration(calibration, &o);
            o.spill = absl::GetFlag(FLAGS_spill_to_cpu);
          }
          o.max_batch_units =
              static_cast<size_t>(absl::GetFlag(FLAGS_max_batch_keys));
          o.pipeline_depth = absl::GetFlag(FLAGS_pipeline_depth);
          o.full_pipeline_depth = absl::GetFlag(FLAGS_full_pipeline_depth);
          o.cpu_workers = cpu_workers;
          std::vector<sortd::DeviceSlot> slots;
          slots.push_back({std::make_unique<Borrowed>(shared.get()), nullptr});
          StageTotals totals;
          sortd::Scheduler sched(o, &cpu, std::move(slots), &totals);
          const Result r =
              Load(sched, totals, keys, clients, seconds, classes,
                   absl::GetFlag(FLAGS_pinned_requests) ? shared->host_memory()
                                                        : nullptr);
          sched.Drain(absl::Now() + absl::Seconds(30));
          std::printf(
              "{\"bench\":\"batching\",\"device\":\"%s\",\"keys\":%zu,"
              "\"concurrency\":%zu,\"mode\":\"%s\",\"delay_us\":%ld,"
              "\"requests_per_s\":%.1f,\"keys_per_s\":%.4g,\"p50_ms\":%.4f,"
              "\"p99_ms\":%.4f,\"mean_batch\":%.2f,\"classes\":%zu,"
              "\"pipeline_depth\":%d,\"full_pipeline_depth\":%d,"
              "\"max_batch_keys\":%zu,"
              "\"pinned_requests\":%s,\"pinned_min_bytes\":%lld,"
              "\"in_place_min_keys\":%lld,"
              "\"queue_ms\":%.4f,\"run_ms\":%.4f,\"stages_ms\":%s,"
              "\"device_share\":%.3f,\"p99_cpu_ms\":%.4f,"
              "\"p99_device_ms\":%.4f,\"device_late\":%.3f,\"refused\":%zu}\n",
              device.c_str(), keys, clients, m.name, m.delay_us,
              r.requests_per_s, r.requests_per_s * keys, r.p50_ms, r.p99_ms,
              m.device ? r.mean_batch : 1.0, classes,
              absl::GetFlag(FLAGS_pipeline_depth),
              std::max(o.pipeline_depth, o.full_pipeline_depth),
              o.max_batch_units,
              absl::GetFlag(FLAGS_pinned_requests) ? "true" : "false",
              static_cast<long long>(absl::GetFlag(FLAGS_pinned_min_bytes)),
              o.in_place_min_keys == SIZE_MAX
                  ? -1LL
                  : static_cast<long long>(o.in_place_min_keys),
              r.queue_ms, r.run_ms, StagesJson(r.stages_ms).c_str(),
              r.device_share, r.p99_cpu_ms, r.p99_device_ms, r.device_late,
              r.refused);
          std::fflush(stdout);
        }
      }
    }
  }
  return 0;
}
