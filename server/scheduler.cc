#include "server/scheduler.h"

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "oneapi/tbb/blocked_range.h"
#include "oneapi/tbb/parallel_for.h"
#include "server/keys.h"
#include "server/runs.h"

namespace sortd {
namespace {

// Copies of at least this many bytes in packing and unpacking are spread
// over the oneTBB pool.
constexpr size_t kParallelCopyBytes = size_t{1} << 20;

absl::Time Now() { return absl::Now(); }

}  // namespace

const char* RouteName(Route route) {
  switch (route) {
    case Route::kCpu:
      return "cpu";
    case Route::kBatch:
      return "batch";
    case Route::kSolo:
      return "solo";
    case Route::kSpill:
      return "spill";
    case Route::kFailover:
      return "failover";
  }
  return "unknown";
}

Scheduler::Scheduler(const Options& options, Sorter* cpu,
                     std::vector<DeviceSlot> devices,
                     SchedulerListener* listener)
    : options_(options),
      cpu_(cpu),
      listener_(listener != nullptr ? listener : &null_listener_),
      cpu_queue_(std::max(1, options.cpu_workers)) {
  options_.max_batch_units =
      std::clamp<size_t>(options_.max_batch_units, 1, size_t{1} << 31);
  options_.max_batch_requests =
      std::max<size_t>(options_.max_batch_requests, 1);
  options_.pipeline_depth = std::max(1, options_.pipeline_depth);
  for (DeviceSlot& slot : devices) {
    if (slot.engine == nullptr) continue;
    auto dev = std::make_unique<Device>();
    dev->name = slot.engine->device_name();
    // Two workers on one kind of device (or one device twice) stay apart
    // in logs and metrics.
    int same = 0;
    for (const auto& other : devices_) {
      same += other->name.starts_with(dev->name);
    }
    if (same > 0) dev->name = absl::StrCat(dev->name, " #", same + 1);
    dev->engine = std::move(slot.engine);
    dev->factory = std::move(slot.factory);
    dev->backoff = options_.reinit_backoff;
    devices_.push_back(std::move(dev));
  }
  // The longest segment every device sorts inside a batch's shared
  // launches, per key width; longer sorts run alone.
  for (const auto& dev : devices_) {
    for (int w = 0; w < 2; ++w) {
      const size_t f =
          dev->engine->fused_segment_keys(w ? KeyType::kU64 : KeyType::kU32);
      if (f > 0 && (fused_[w] == 0 || f < fused_[w])) fused_[w] = f;
    }
  }
  // Batches must fit every device at once: the widest kind of sort (64-bit
  // keys, 64-bit values, permutation) and transposes.
  batch_limit_[0] = batch_limit_[1] = options_.max_batch_units;
  std::byte dummy{};
  const SortJob widest{.key_type = KeyType::kU64,
                       .value_type = ValueType::kU64,
                       .permutation_out = &dummy};
  for (const auto& dev : devices_) {
    if (size_t m = dev->engine->max_sort_keys(widest); m > 0) {
      batch_limit_[0] = std::min(batch_limit_[0], m);
    }
    if (size_t m = dev->engine->max_transpose_matrices(); m > 0) {
      batch_limit_[1] = std::min(batch_limit_[1], m * 32);
    }
  }
  for (size_t d = 0; d < devices_.size(); ++d) {
    const auto [vendor, driver] = devices_[d]->engine->vendor_driver();
    listener_->OnDeviceInfo(devices_[d]->name, vendor, driver);
    listener_->OnDeviceMemory(devices_[d]->name,
                              devices_[d]->engine->memory_bytes());
    listener_->OnDeviceState(devices_[d]->name, true);
    for (int r = 0; r < options_.pipeline_depth; ++r) {
      devices_[d]->runners.emplace_back([this, d] { RunnerLoop(d); });
    }
  }
}

Scheduler::~Scheduler() { Drain(Now()); }

const Thresholds& Scheduler::ThresholdsFor(Op op) const {
  return op == Op::kSort ? options_.sort : options_.transpose;
}

// Sorts of every key type and order batch together by key width: packing
// maps each request's keys to their order-preserving unsigned bits (the
// complement for descending, which keeps equal keys in input order), and
// the batch sorts those ascending.
Scheduler::ClassKey Scheduler::ClassOf(const Task& task) {
  if (task.op == Op::kTranspose) return {1, 0, 0, 0, 0};
  const SortJob& j = task.sort;
  return {0, static_cast<int>(KeySize(j.key_type)), 0,
          static_cast<int>(j.value_type), j.permutation_out != nullptr};
}

int Scheduler::healthy_devices() const {
  std::lock_guard<std::mutex> lock(mu_);
  int up = 0;
  for (const auto& d : devices_) up += d->up;
  return up;
}

Scheduler::Stats Scheduler::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

absl::Status Scheduler::Expired(const Task& task, absl::Time now) {
  if (task.cancelled && task.cancelled()) {
    return absl::CancelledError(
        "the call was cancelled before work on it began");
  }
  if (task.deadline < now) {
    return absl::DeadlineExceededError(
        "the call's deadline passed before work on it began");
  }
  return absl::OkStatus();
}

void Scheduler::ReportQueueLocked() {
  listener_->OnQueue(pending_units_ + cpu_queued_units_,
                     pending_requests_ + cpu_queued_requests_,
                     admitted_requests_);
}

size_t Scheduler::ChargeOf(const Task& task) const {
  return std::min(task.units, options_.max_call_units);
}

void Scheduler::Submit(std::shared_ptr<Task> task) {
  task->enqueued = Now();
  absl::Status rejected;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.submitted;
    // While draining, calls that reached the handler before gRPC stopped
    // taking new ones are still served; after the drain deadline (or once
    // drained) nothing is.
    if (abandoning_ || stopping_) {
      rejected = absl::UnavailableError(
          "sortd is shutting down and takes no new requests; retry on "
          "another replica");
    } else if (admitted_requests_ + 1 > options_.max_queued_requests) {
      rejected = absl::ResourceExhaustedError(
          absl::StrCat("sortd is overloaded: ", admitted_requests_,
                       " requests are queued or running, the limit is ",
                       options_.max_queued_requests,
                       " (--max_queued_requests); retry with back-off"));
    } else if (admitted_requests_ > 0 &&
               admitted_units_ + ChargeOf(*task) > options_.max_queued_units) {
      // A lone request is always admitted: its size is bounded by
      // --max_request_bytes, and refusing it would refuse it forever.
      rejected = absl::ResourceExhaustedError(absl::StrCat(
          "sortd is overloaded: ", admitted_units_,
          " keys are queued or running and this request counts for ",
          ChargeOf(*task), ", the limit is ", options_.max_queued_units,
          " (--max_queued_keys); retry with back-off"));
    }
    if (rejected.ok()) {
      task->charged = ChargeOf(*task);
      admitted_units_ += task->charged;
      ++admitted_requests_;
    } else {
      ++stats_.rejected;
    }
  }
  if (!rejected.ok()) {
    TaskResult result;
    result.status = rejected;
    task->done(result);
    return;
  }
  if (task->prepare) {
    absl::Status prepared = task->prepare();
    if (!prepared.ok()) {
      TaskResult result;
      result.status = prepared;
      Answer(task, std::move(result));
      return;
    }
  }
  // Queue wait and the batching delay count from here: validation and
  // sizing the response are not queueing.
  task->enqueued = Now();
  std::unique_lock<std::mutex> lock(mu_);
  const Route route = RouteLocked(*task);
  task->route = route;
  listener_->OnRoute(task->op, route);
  if (route == Route::kFailover) listener_->OnCpuFallback("no_healthy_device");
  if (route == Route::kCpu || route == Route::kSpill ||
      route == Route::kFailover) {
    if (route == Route::kSpill) ++stats_.spilled;
    lock.unlock();
    EnqueueCpu(task, route);
    return;
  }
  if (route == Route::kSolo) {
    solo_.push_back(task);
  } else {
    Pending& p = pending_[ClassOf(*task)];
    p.tasks.push_back(task);
    p.units += task->units;
  }
  pending_units_ += task->units;
  ++pending_requests_;
  ReportQueueLocked();
  lock.unlock();
  cv_.notify_all();
}

Route Scheduler::RouteLocked(const Task& task) const {
  int up = 0;
  size_t backlog = pending_units_;
  for (const auto& d : devices_) {
    if (!d->up) continue;
    ++up;
    backlog += d->inflight_units;
  }
  if (up == 0) return devices_.empty() ? Route::kCpu : Route::kFailover;
  const Thresholds& th = ThresholdsFor(task.op);
  const CostModel& gpu =
      task.op == Op::kSort ? options_.gpu_sort : options_.gpu_transpose;
  const CostModel& cpu =
      task.op == Op::kSort ? options_.cpu_sort : options_.cpu_transpose;
  // Estimated time to answer this request on each side, behind what is
  // already waiting there (only with both calibrated cost models).
  const bool estimate = options_.spill && gpu.known() && cpu.known();
  const double n = static_cast<double>(task.units);
  const double cpu_eta =
      cpu.Seconds(n) + static_cast<double>(cpu_queued_units_) * cpu.per_unit;
  const double gpu_eta =
      gpu.Seconds(n) + static_cast<double>(backlog) * gpu.per_unit / up;
  if (task.units <= th.cpu_max) {
    // Small requests belong to the CPU path, unless its own backlog would
    // answer this one later than a device batch would (overflow).
    const bool overflow =
        estimate && task.units > 0 && cpu_queued_units_ > 0 &&
        absl::ToDoubleSeconds(options_.max_batch_delay) + gpu_eta < cpu_eta;
    if (!overflow) return Route::kCpu;
  } else if (estimate && backlog > 0 && cpu_eta < gpu_eta) {
    // Spill only when the devices have a backlog: on idle devices the
    // calibrated thresholds (or the operator's pinned ones) decide.
    return Route::kSpill;
  }
  if (task.units >= th.solo_min) return Route::kSolo;
  if (task.op == Op::kSort) {
    const size_t fused = fused_[KeySize(task.sort.key_type) == 8];
    if (fused > 0 && task.units > fused) return Route::kSolo;
  }
  return Route::kBatch;
}

void Scheduler::EnqueueCpu(std::shared_ptr<Task> task, Route route) {
  task->route = route;
  {
    std::lock_guard<std::mutex> lock(mu_);
    cpu_queued_units_ += task->units;
    ++cpu_queued_requests_;
    ReportQueueLocked();
  }
  cpu_queue_.Submit([this, task] { RunCpu(task); });
}

void Scheduler::RunCpu(const std::shared_ptr<Task>& task) {
  bool abandon;
  {
    std::lock_guard<std::mutex> lock(mu_);
    cpu_queued_units_ -= task->units;
    --cpu_queued_requests_;
    abandon = abandoning_;
    ++stats_.cpu_runs;
  }
  TaskResult result;
  result.route = task->route;
  const absl::Time start = Now();
  if (abandon) {
    result.status = absl::UnavailableError(
        "sortd shut down before this request ran (--drain_timeout passed); "
        "retry on another replica");
  } else if (absl::Status e = Expired(*task, start); !e.ok()) {
    result.status = e;
  } else {
    if (task->op == Op::kSort) {
      SortJob job = task->sort;
      job.stages = nullptr;
      result.status = cpu_->Sort(job);
    } else {
      TransposeJob job = task->transpose;
      job.stages = nullptr;
      result.status = cpu_->Transpose(job);
    }
    result.path = ExecutionPath::kCpu;
    result.device = cpu_->device_name();
    result.queue_wait = start - task->enqueued;
    result.compute = Now() - start;
    result.batch_requests = 1;
  }
  Answer(task, std::move(result));
}

void Scheduler::Answer(const std::shared_ptr<Task>& task, TaskResult result) {
  if (result.status.ok()) result.route = task->route;
  task->done(result);
  // Notified under the lock: once Drain sees nothing admitted it may
  // destroy the scheduler, which must not happen while this thread is
  // still inside notify_all.
  std::lock_guard<std::mutex> lock(mu_);
  ++stats_.answered;
  admitted_units_ -= task->charged;
  --admitted_requests_;
  ReportQueueLocked();
  idle_cv_.notify_all();
}

bool Scheduler::MayTakeLocked(size_t device_index) const {
  const Device& dev = *devices_[device_index];
  if (dev.inflight >= options_.pipeline_depth) return false;
  for (const auto& other : devices_) {
    if (other->up && other->inflight < dev.inflight) return false;
  }
  return true;
}

bool Scheduler::TakeReadyLocked(absl::Time now, Batch* batch,
                                absl::Time* wake_at) {
  // The oldest ready candidate: the head of the solo queue (always ready)
  // or a class whose batch is full or whose oldest task has waited enough.
  const Pending* best = nullptr;
  ClassKey best_key{};
  absl::Time best_time = absl::InfiniteFuture();
  bool best_solo = false;
  if (!solo_.empty()) {
    best_time = solo_.front()->enqueued;
    best_solo = true;
  }
  for (const auto& [key, p] : pending_) {
    const absl::Time first = p.tasks.front()->enqueued;
    const absl::Time due = first + options_.max_batch_delay;
    const bool ready = draining_ || now >= due ||
                       p.tasks.size() >= options_.max_batch_requests ||
                       p.units >= batch_limit_[std::get<0>(key)];
    if (!ready) {
      *wake_at = std::min(*wake_at, due);
      continue;
    }
    if (first < best_time) {
      best_time = first;
      best = &p;
      best_key = key;
      best_solo = false;
    }
  }
  if (best_solo) {
    batch->push_back(std::move(solo_.front()));
    solo_.pop_front();
  } else if (best != nullptr) {
    Pending& p = pending_[best_key];
    const size_t limit = batch_limit_[std::get<0>(best_key)];
    size_t units = 0;
    while (!p.tasks.empty() && batch->size() < options_.max_batch_requests &&
           (batch->empty() || units + p.tasks.front()->units <= limit)) {
      units += p.tasks.front()->units;
      batch->push_back(std::move(p.tasks.front()));
      p.tasks.pop_front();
    }
    p.units -= units;
    if (p.tasks.empty()) pending_.erase(best_key);
  } else {
    return false;
  }
  for (const auto& t : *batch) {
    pending_units_ -= t->units;
    --pending_requests_;
  }
  return true;
}

void Scheduler::RunnerLoop(size_t device_index) {
  std::vector<std::byte> pack;  // this runner's packing buffer, reused
  std::unique_lock<std::mutex> lock(mu_);
  Device& dev = *devices_[device_index];
  for (;;) {
    if (stopping_) return;
    if (!dev.up) {
      if (dev.factory && !dev.reinit_running && dev.inflight == 0) {
        Reinit(lock, device_index);
      } else {
        cv_.wait(lock);
      }
      continue;
    }
    if (!MayTakeLocked(device_index)) {
      cv_.wait(lock);
      continue;
    }
    Batch batch;
    absl::Time wake = absl::InfiniteFuture();
    if (!TakeReadyLocked(Now(), &batch, &wake)) {
      if (wake == absl::InfiniteFuture()) {
        cv_.wait(lock);
      } else {
        cv_.wait_until(lock, absl::ToChronoTime(wake));
      }
      continue;
    }
    size_t units = 0;
    for (const auto& t : batch) units += t->units;
    ++dev.inflight;
    dev.inflight_units += units;
    ReportQueueLocked();
    lock.unlock();
    RunBatch(device_index, batch, &pack);
    lock.lock();
    --dev.inflight;
    dev.inflight_units -= units;
    cv_.notify_all();
  }
}

void Scheduler::MarkDownLocked(Device& dev,
                               std::unique_lock<std::mutex>& lock) {
  dev.up = false;
  dev.backoff = options_.reinit_backoff;
  dev.next_attempt = Now() + dev.backoff;
  std::fprintf(stderr,
               "sortd: device %s is unhealthy; the CPU path answers its share "
               "until it is re-created (first try in %s)\n",
               dev.name.c_str(), absl::FormatDuration(dev.backoff).c_str());
  listener_->OnDeviceState(dev.name, false);
  bool any_up = false;
  for (const auto& d : devices_) any_up |= d->up;
  if (!any_up) MoveAllPendingToCpuLocked(lock);
  cv_.notify_all();
}

Scheduler::Batch Scheduler::TakeAllPendingLocked() {
  Batch all;
  for (auto& [key, p] : pending_) {
    for (auto& t : p.tasks) all.push_back(std::move(t));
  }
  pending_.clear();
  for (auto& t : solo_) all.push_back(std::move(t));
  solo_.clear();
  pending_units_ = 0;
  pending_requests_ = 0;
  return all;
}

void Scheduler::MoveAllPendingToCpuLocked(std::unique_lock<std::mutex>& lock) {
  Batch moved = TakeAllPendingLocked();
  lock.unlock();
  for (auto& t : moved) EnqueueCpu(t, Route::kFailover);
  lock.lock();
}

void Scheduler::Reinit(std::unique_lock<std::mutex>& lock,
                       size_t device_index) {
  Device& dev = *devices_[device_index];
  dev.reinit_running = true;
  while (!stopping_ && Now() < dev.next_attempt) {
    cv_.wait_until(lock, absl::ToChronoTime(dev.next_attempt));
  }
  if (stopping_) {
    dev.reinit_running = false;
    return;
  }
  dev.engine.reset();  // free the broken context before making a new one
  lock.unlock();
  absl::StatusOr<std::unique_ptr<Sorter>> engine = dev.factory();
  lock.lock();
  dev.reinit_running = false;
  if (engine.ok() && *engine != nullptr) {
    dev.engine = std::move(*engine);
    dev.up = true;
    dev.backoff = options_.reinit_backoff;
    ++stats_.reinits;
    std::fprintf(stderr, "sortd: device %s re-created; it serves again\n",
                 dev.name.c_str());
    const auto [vendor, driver] = dev.engine->vendor_driver();
    listener_->OnDeviceInfo(dev.name, vendor, driver);
    listener_->OnDeviceState(dev.name, true);
  } else {
    dev.backoff = std::min(dev.backoff * 2, options_.max_reinit_backoff);
    dev.next_attempt = Now() + dev.backoff;
    std::fprintf(stderr,
                 "sortd: re-creating device %s failed (%s); next try in %s\n",
                 dev.name.c_str(),
                 engine.ok() ? "no engine" : engine.status().ToString().c_str(),
                 absl::FormatDuration(dev.backoff).c_str());
  }
  cv_.notify_all();
}

void Scheduler::RunBatch(size_t device_index, Batch& batch,
                         std::vector<std::byte>* pack) {
  Device& dev = *devices_[device_index];
  const absl::Time start = Now();
  Batch live;
  live.reserve(batch.size());
  for (auto& t : batch) {
    if (absl::Status e = Expired(*t, start); !e.ok()) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        ++stats_.dropped;
      }
      TaskResult result;
      result.status = e;
      Answer(t, std::move(result));
    } else {
      live.push_back(std::move(t));
    }
  }
  if (live.empty()) return;
  const Op op = live.front()->op;
  size_t units = 0;
  for (const auto& t : live) units += t->units;
  StageTimes stages;
  int device_runs = 1;
  absl::Status status =
      RunOnEngine(*dev.engine, live, &stages, pack, &device_runs);
  const absl::Duration compute = Now() - start;
  if (!status.ok()) {
    std::fprintf(stderr,
                 "sortd: a %s batch of %zu request(s) failed on %s (%s); "
                 "the CPU path answers them\n",
                 OpName(op), live.size(), dev.name.c_str(),
                 status.ToString().c_str());
    {
      std::unique_lock<std::mutex> lock(mu_);
      stats_.failovers += live.size();
      // Before anyone is answered: no request routed after this one may
      // find the broken device still marked up.
      if (dev.up && !dev.engine->healthy()) MarkDownLocked(dev, lock);
    }
    const std::string reason = absl::StatusCodeToString(status.code());
    for (auto& t : live) {
      listener_->OnCpuFallback(reason);
      EnqueueCpu(t, Route::kFailover);
    }
    return;
  }
  listener_->OnStages(dev.name,
                      op == Op::kTranspose ? "transpose"
                      : live.size() > 1    ? "segmented_sort"
                                           : "sort",
                      stages);
  listener_->OnBatch(op, dev.name, live.size(), units);
  listener_->OnDeviceMemory(dev.name, dev.engine->memory_bytes());
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.gpu_runs;
    stats_.gpu_tasks += live.size();
    stats_.largest_batch = std::max(stats_.largest_batch, live.size());
  }
  for (auto& t : live) {
    TaskResult result;
    result.path = dev.engine->path();
    result.device = dev.name;
    result.queue_wait = start - t->enqueued;
    result.compute = compute;
    result.batch_requests = static_cast<int>(live.size());
    result.device_runs = device_runs;
    Answer(t, std::move(result));
  }
}

namespace {

// memcpy, spread over oneTBB when large.
void Copy(std::byte* dst, const std::byte* src, size_t bytes) {
  if (bytes < kParallelCopyBytes) {
    if (bytes > 0) std::memcpy(dst, src, bytes);
    return;
  }
  constexpr size_t kChunk = size_t{256} << 10;
  tbb::parallel_for(size_t{0}, (bytes + kChunk - 1) / kChunk, [&](size_t c) {
    const size_t off = c * kChunk;
    std::memcpy(dst + off, src + off, std::min(kChunk, bytes - off));
  });
}

// Copies n keys of type t from src to dst, mapped to their ordered bits
// (encode) or back; large arrays are spread over the oneTBB pool.
void ToOrderedBits(KeyType t, bool descending, bool encode,
                   const std::byte* src, std::byte* dst, size_t n) {
  DispatchKeyType(t, [&]<KeyType T>() {
    using U = KeyBits<T>;
    auto body = [&](size_t begin, size_t end) {
      for (size_t i = begin; i < end; ++i) {
        U v;
        std::memcpy(&v, src + i * sizeof(U), sizeof(U));
        v = encode ? OrderedBits<T>(v, descending) : RawBits<T>(v, descending);
        std::memcpy(dst + i * sizeof(U), &v, sizeof(U));
      }
    };
    if (n * sizeof(U) < kParallelCopyBytes) {
      body(0, n);
    } else {
      tbb::parallel_for(tbb::blocked_range<size_t>(0, n, size_t{1} << 16),
                        [&](const tbb::blocked_range<size_t>& r) {
                          body(r.begin(), r.end());
                        });
    }
  });
}

}  // namespace

absl::Status Scheduler::RunOnEngine(Sorter& engine, Batch& batch,
                                    StageTimes* stages,
                                    std::vector<std::byte>* pack,
                                    int* device_runs) {
  const Op op = batch.front()->op;
  *device_runs = 1;
  if (batch.size() == 1) {
    if (op == Op::kSort) {
      SortJob job = batch.front()->sort;
      job.stages = stages;
      // Beyond the device's memory: sorted in runs, merged on the CPU.
      return SortInRuns(engine, job, engine.max_sort_keys(job), device_runs,
                        options_.pipeline_depth);
    }
    // Matrices are independent: beyond the device's memory, a transpose
    // runs in device-sized pieces.
    const TransposeJob& whole = batch.front()->transpose;
    const size_t step = engine.max_transpose_matrices();
    if (step == 0 || whole.count <= step) {
      TransposeJob job = whole;
      job.stages = stages;
      return engine.Transpose(job);
    }
    *device_runs = 0;
    for (size_t at = 0; at < whole.count; at += step) {
      TransposeJob job = whole;
      job.count = std::min(step, whole.count - at);
      job.in = whole.in + at * 128;
      job.out = whole.out + at * 128;
      job.stages = stages;
      if (absl::Status s = engine.Transpose(job); !s.ok()) return s;
      ++*device_runs;
    }
    return absl::OkStatus();
  }
  if (op == Op::kTranspose) {
    size_t total = 0;
    for (const auto& t : batch) total += t->transpose.count;
    const size_t bytes = total * 32 * sizeof(uint32_t);
    pack->resize(2 * bytes);
    std::byte* in = pack->data();
    std::byte* out = in + bytes;
    size_t at = 0;
    for (const auto& t : batch) {
      const size_t b = t->transpose.count * 32 * sizeof(uint32_t);
      Copy(in + at, t->transpose.in, b);
      at += b;
    }
    TransposeJob job;
    job.count = total;
    job.in = in;
    job.out = out;
    job.stages = stages;
    if (absl::Status s = engine.Transpose(job); !s.ok()) return s;
    at = 0;
    for (const auto& t : batch) {
      const size_t b = t->transpose.count * 32 * sizeof(uint32_t);
      Copy(t->transpose.out, out + at, b);
      at += b;
    }
    return absl::OkStatus();
  }

  // Sorts of one class: one segmented sort over the concatenated arrays.
  const SortJob& first = batch.front()->sort;
  const size_t ks = KeySize(first.key_type);
  const size_t vs = ValueSize(first.value_type);
  const bool perm = first.permutation_out != nullptr;
  size_t total = 0;
  std::vector<uint32_t> offsets;
  offsets.reserve(batch.size() + 1);
  offsets.push_back(0);
  for (const auto& t : batch) {
    total += t->sort.count;
    offsets.push_back(static_cast<uint32_t>(total));
  }
  const size_t keys_bytes = total * ks, values_bytes = total * vs;
  pack->resize(2 * keys_bytes + 2 * values_bytes +
               (perm ? total * sizeof(uint32_t) : 0));
  std::byte* keys_in = pack->data();
  std::byte* values_in = keys_in + keys_bytes;
  std::byte* keys_out = values_in + values_bytes;
  std::byte* values_out = keys_out + keys_bytes;
  std::byte* perm_out = values_out + values_bytes;
  for (size_t i = 0; i < batch.size(); ++i) {
    const SortJob& j = batch[i]->sort;
    ToOrderedBits(j.key_type, j.order == Order::kDescending, true, j.keys,
                  keys_in + offsets[i] * ks, j.count);
    if (vs > 0) Copy(values_in + offsets[i] * vs, j.values, j.count * vs);
  }
  SortJob job;
  job.key_type = ks == 4 ? KeyType::kU32 : KeyType::kU64;
  job.order = Order::kAscending;
  job.count = total;
  job.keys = keys_in;
  job.value_type = first.value_type;
  job.values = vs > 0 ? values_in : nullptr;
  job.keys_out = keys_out;
  job.values_out = vs > 0 ? values_out : nullptr;
  job.permutation_out = perm ? perm_out : nullptr;
  job.stages = stages;
  if (absl::Status s = engine.SortSegments(job, offsets); !s.ok()) return s;
  for (size_t i = 0; i < batch.size(); ++i) {
    const SortJob& j = batch[i]->sort;
    ToOrderedBits(j.key_type, j.order == Order::kDescending, false,
                  keys_out + offsets[i] * ks, j.keys_out, j.count);
    if (vs > 0) Copy(j.values_out, values_out + offsets[i] * vs, j.count * vs);
    if (perm) {
      // The engine's indices are into the whole batch; the caller's are
      // into its own array.
      const std::byte* src = perm_out + offsets[i] * sizeof(uint32_t);
      for (size_t k = 0; k < j.count; ++k) {
        uint32_t index;
        std::memcpy(&index, src + k * sizeof(uint32_t), sizeof(index));
        index -= offsets[i];
        std::memcpy(j.permutation_out + k * sizeof(uint32_t), &index,
                    sizeof(index));
      }
    }
  }
  return absl::OkStatus();
}

void Scheduler::StartDrain() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    draining_ = true;
  }
  cv_.notify_all();
}

void Scheduler::AbandonQueued() {
  Batch abandoned;
  {
    std::lock_guard<std::mutex> lock(mu_);
    abandoning_ = true;
    abandoned = TakeAllPendingLocked();
  }
  if (!abandoned.empty()) {
    std::fprintf(stderr,
                 "sortd: drain timeout: answering %zu queued request(s) "
                 "UNAVAILABLE\n",
                 abandoned.size());
  }
  // CPU-path tasks not yet started answer UNAVAILABLE themselves.
  for (auto& t : abandoned) {
    TaskResult result;
    result.status = absl::UnavailableError(
        "sortd shut down before this request ran (--drain_timeout passed); "
        "retry on another replica");
    Answer(t, std::move(result));
  }
}

void Scheduler::Drain(absl::Time deadline) {
  StartDrain();
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (stopping_) return;
    while (admitted_requests_ > 0 && Now() < deadline) {
      idle_cv_.wait_until(lock, absl::ToChronoTime(deadline));
    }
  }
  AbandonQueued();
  {
    std::unique_lock<std::mutex> lock(mu_);
    // Running work finishes.
    idle_cv_.wait(lock, [this] { return admitted_requests_ == 0; });
    stopping_ = true;
  }
  cv_.notify_all();
  for (auto& dev : devices_) {
    for (std::thread& t : dev->runners) {
      if (t.joinable()) t.join();
    }
  }
  cpu_queue_.Stop();
}

}  // namespace sortd
