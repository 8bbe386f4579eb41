#include "server/scheduler.h"

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "core/keys.h"
#include "server/batch_codec.h"
#include "server/log.h"
#include "server/runs.h"

namespace sortd {
namespace {

// Waits for `cv` at most `d` (a minute at a time: callers loop, and an
// infinite duration must not overflow the wait).
void WaitAtMost(std::condition_variable& cv, std::unique_lock<std::mutex>& lock,
                absl::Duration d) {
  d = std::clamp(d, absl::ZeroDuration(), absl::Minutes(1));
  cv.wait_for(lock, absl::ToChronoNanoseconds(d));
}

}  // namespace

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
  router_ = {.sort = options_.sort,
             .transpose = options_.transpose,
             .cpu_sort = options_.cpu_sort,
             .gpu_sort = options_.gpu_sort,
             .cpu_transpose = options_.cpu_transpose,
             .gpu_transpose = options_.gpu_transpose,
             .spill = options_.spill,
             .max_batch_delay = options_.max_batch_delay,
             .fused_segment_keys = {fused_[0], fused_[1]}};
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

absl::Time Scheduler::Now() const {
  return options_.clock ? options_.clock() : absl::Now();
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
  RouteLoad load;
  load.devices = static_cast<int>(devices_.size());
  load.device_backlog_units = pending_units_;
  for (const auto& d : devices_) {
    if (!d->up) continue;
    ++load.devices_up;
    load.device_backlog_units += d->inflight_units;
  }
  load.cpu_queued_units = cpu_queued_units_;
  return ChooseRoute(
      router_,
      {.op = task.op,
       .units = task.units,
       .key_size = task.op == Op::kSort ? KeySize(task.sort.key_type) : 4},
      load);
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
        WaitAtMost(cv_, lock, wake - Now());
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
  LogLine(
      "device %s is unhealthy; the CPU path answers its share "
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
    WaitAtMost(cv_, lock, dev.next_attempt - Now());
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
    LogLine("device %s re-created; it serves again\n", dev.name.c_str());
    const auto [vendor, driver] = dev.engine->vendor_driver();
    listener_->OnDeviceInfo(dev.name, vendor, driver);
    listener_->OnDeviceState(dev.name, true);
  } else {
    dev.backoff = std::min(dev.backoff * 2, options_.max_reinit_backoff);
    dev.next_attempt = Now() + dev.backoff;
    LogLine("re-creating device %s failed (%s); next try in %s\n",
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
    LogLine(
        "a %s batch of %zu request(s) failed on %s (%s); "
        "the CPU path answers them\n",
        OpName(op), live.size(), dev.name.c_str(), status.ToString().c_str());
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

absl::Status Scheduler::RunOnEngine(Sorter& engine, Batch& batch,
                                    StageTimes* stages,
                                    std::vector<std::byte>* pack,
                                    int* device_runs) {
  const Op op = batch.front()->op;
  *device_runs = 1;
  if (batch.size() == 1 && op == Op::kSort) {
    SortJob job = batch.front()->sort;
    job.stages = stages;
    // Beyond the device's memory: sorted in runs, merged on the CPU.
    return SortInRuns(engine, job, engine.max_sort_keys(job), device_runs,
                      options_.pipeline_depth);
  }
  if (batch.size() == 1) {
    return batch::TransposeInPieces(engine, batch.front()->transpose, stages,
                                    device_runs);
  }
  if (op == Op::kTranspose) {
    std::vector<const TransposeJob*> jobs;
    for (const auto& t : batch) jobs.push_back(&t->transpose);
    return batch::TransposeTogether(engine, jobs, stages, pack);
  }
  std::vector<const SortJob*> jobs;
  for (const auto& t : batch) jobs.push_back(&t->sort);
  return batch::SortTogether(engine, jobs, stages, pack);
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
    LogLine(
        "drain timeout: answering %zu queued request(s) "
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
      WaitAtMost(idle_cv_, lock, deadline - Now());
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
