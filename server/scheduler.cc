#include "server/scheduler.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <new>

#include "absl/strings/str_cat.h"
#include "core/keys.h"
#include "server/batch_codec.h"
#include "server/log.h"
#include "server/out_of_memory.h"
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

absl::Status Abandoned() {
  return absl::UnavailableError(
      "sortd shut down before this request ran (--drain_timeout passed); "
      "retry on another replica");
}

}  // namespace

Scheduler::Options Scheduler::Normalized(Options o) {
  o.max_batch_units = std::clamp<size_t>(o.max_batch_units, 1, size_t{1} << 31);
  o.max_batch_requests = std::max<size_t>(o.max_batch_requests, 1);
  o.pipeline_depth = std::max(1, o.pipeline_depth);
  o.full_pipeline_depth = std::max(o.pipeline_depth, o.full_pipeline_depth);
  return o;
}

// Batches must fit every device at once: the widest kind of sort (64-bit
// keys, 64-bit values, permutation) and transposes.
Batchers::Limits Scheduler::BatchLimits(const Options& options,
                                        const DevicePool& pool) {
  std::byte dummy{};
  const SortJob widest{.key_type = KeyType::kU64,
                       .value_type = ValueType::kU64,
                       .permutation_out = &dummy};
  const size_t limit = options.max_batch_units;
  const size_t matrices = pool.max_transpose_matrices(limit / 32 + 1);
  return {.max_delay = options.max_batch_delay,
          .max_requests = options.max_batch_requests,
          .max_units = {
              pool.max_batch_keys(widest, options.max_batch_requests, limit),
              std::min(limit, matrices * 32)}};
}

Scheduler::Scheduler(const Options& options, Sorter* cpu,
                     std::vector<DeviceSlot> devices,
                     SchedulerListener* listener)
    : options_(Normalized(options)),
      cpu_(cpu),
      listener_(listener != nullptr ? listener : &null_listener_),
      admission_({.max_units = options_.max_queued_units,
                  .max_requests = options_.max_queued_requests,
                  .max_call_units = options_.max_call_units,
                  .max_client_units = options_.max_client_queued_units,
                  .max_client_requests = options_.max_client_queued_requests,
                  .client_flag = "--max_client_queued_keys",
                  .client_requests_flag = "--max_client_queued_requests"}),
      pool_(std::move(devices),
            {.pipeline_depth = options_.pipeline_depth,
             .reinit_backoff = options_.reinit_backoff,
             .max_reinit_backoff = options_.max_reinit_backoff}),
      batchers_(BatchLimits(options_, pool_)),
      cpu_queue_({.threads = std::max(1, options_.cpu_workers),
                  .shares = {.bulk_units = options_.cpu_bulk_units}}),
      split_scratch_(options_.split_scratch_bytes) {
  router_ = {.sort = options_.sort,
             .transpose = options_.transpose,
             .cpu_sort = options_.cpu_sort,
             .gpu_sort = options_.gpu_sort,
             .cpu_transpose = options_.cpu_transpose,
             .gpu_transpose = options_.gpu_transpose,
             .spill = options_.spill,
             .max_batch_delay = options_.max_batch_delay};
  listener_->OnDeviceLateness(Op::kSort, 1);
  listener_->OnDeviceLateness(Op::kTranspose, 1);
  runners_.resize(pool_.size());
  for (size_t d = 0; d < pool_.size(); ++d) {
    const DevicePool::Device& dev = pool_[d];
    const auto [vendor, driver] = dev.engine->vendor_driver();
    listener_->OnDeviceInfo(dev.name, vendor, driver);
    listener_->OnDeviceMemory(dev.name, dev.engine->memory_bytes());
    listener_->OnDeviceState(dev.name, true);
    // A runner per batch it may hold at once.
    const int runners = pool_.Depth(d, options_.full_pipeline_depth);
    for (int r = 0; r < runners; ++r) {
      runners_[d].emplace_back([this, d] { RunnerLoop(d); });
    }
  }
}

Scheduler::~Scheduler() { Drain(Now()); }

absl::Time Scheduler::Now() const {
  return options_.clock ? options_.clock() : absl::Now();
}

int Scheduler::healthy_devices() const {
  std::lock_guard<std::mutex> lock(mu_);
  return pool_.devices_up();
}

Scheduler::Stats Scheduler::stats() const {
  const Admission::Counts counts = admission_.counts();
  std::lock_guard<std::mutex> lock(mu_);
  Stats s = stats_;
  s.submitted = counts.admitted + counts.refused;
  s.rejected = counts.refused;
  s.answered = counts.released;
  return s;
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

Scheduler::QueueSnapshot Scheduler::QueueLocked() {
  return {.seq = ++queue_seq_,
          .units = batchers_.units() + handover_units_ + cpu_queued_units_,
          .requests =
              batchers_.requests() + handover_requests_ + cpu_queued_requests_,
          .inflight = inflight_};
}

void Scheduler::Publish(const QueueSnapshot& queue) {
  std::lock_guard<std::mutex> lock(publish_mu_);
  if (queue.seq <= published_seq_) return;
  published_seq_ = queue.seq;
  listener_->OnQueue(queue.units, queue.requests, queue.inflight);
}

void Scheduler::Submit(std::shared_ptr<Task> task) {
  task->enqueued = Now();
  absl::StatusOr<size_t> charged = admission_.Admit(task->units, task->client);
  if (!charged.ok()) {
    TaskResult result;
    result.status = charged.status();
    task->done(result);
    return;
  }
  task->charged = *charged;
  task->holds = 2;  // its answer, and this call
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++inflight_;
  }
  SubmitAdmitted(task);
  Unhold(*task);
}

void Scheduler::SubmitAdmitted(const std::shared_ptr<Task>& task) {
  if (task->prepare) {
    // Where its output arrays cannot be had it is answered like any
    // refusal, its admission given back.
    const absl::Status prepared =
        CatchOutOfMemory("this request's arrays", task->prepare);
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
  RouteEstimate estimate;
  const Route route = RouteLocked(*task, &estimate);
  task->route = route;
  const bool device = route == Route::kSolo || route == Route::kBatch;
  // Overflowed: a size of the CPU path's sent to a device by estimate.
  const Thresholds& th =
      task->op == Op::kSort ? options_.sort : options_.transpose;
  if (device && task->units <= th.cpu_max) {
    task->device_estimate = estimate.device;
  }
  QueueSnapshot queue;
  if (device) {
    batchers_.Add(task, route == Route::kSolo);
    queue = QueueLocked();
  } else if (route == Route::kSpill) {
    ++stats_.spilled;
  }
  lock.unlock();
  if (device) cv_.notify_all();
  listener_->OnRoute(task->op, route);
  if (route == Route::kFailover) listener_->OnCpuFallback("no_healthy_device");
  if (device) {
    Publish(queue);
  } else {
    EnqueueCpu(task, route);
  }
}

void Scheduler::Unhold(Task& task) {
  if (task.holds.fetch_sub(1) == 1) {
    admission_.Release(task.charged, task.client);
  }
}

Route Scheduler::RouteLocked(const Task& task, RouteEstimate* estimate) const {
  const RouteLoad load{
      .devices = static_cast<int>(pool_.size()),
      .devices_up = pool_.devices_up(),
      .device_backlog_units =
          batchers_.units() + handover_units_ + pool_.inflight_units(),
      .cpu_queued_units = cpu_queued_units_,
      .cpu_queued_requests = cpu_queued_requests_,
      .device_late = late_[static_cast<int>(task.op)].At(Now())};
  return ChooseRoute(router_, {.op = task.op, .units = task.units}, load,
                     estimate);
}

double Scheduler::DeviceLateness::At(absl::Time now) const {
  if (at_ == absl::InfinitePast()) return 1;
  const double halves = std::max(0.0, absl::FDivDuration(now - at_, kHalfLife));
  return std::exp(log_ * std::exp2(-halves));
}

double Scheduler::DeviceLateness::Add(double answered_s, double estimated_s,
                                      absl::Time now) {
  if (!(estimated_s > 0)) return At(now);
  const double ratio = std::clamp(answered_s / estimated_s, kMin, kMax);
  const double current = std::log(At(now));
  log_ = current + kWeight * (std::log(ratio) - current);
  at_ = std::max(at_, now);
  return At(now);
}

double Scheduler::device_late(Op op) const {
  std::lock_guard<std::mutex> lock(mu_);
  return late_[static_cast<int>(op)].At(Now());
}

void Scheduler::EnqueueCpu(std::shared_ptr<Task> task, Route route) {
  task->route = route;
  QueueSnapshot queue;
  {
    std::lock_guard<std::mutex> lock(mu_);
    cpu_queued_units_ += task->units;
    ++cpu_queued_requests_;
    queue = QueueLocked();
  }
  Publish(queue);
  cpu_queue_.Submit(task->client, task->units, [this, task] { RunCpu(task); });
}

void Scheduler::RunCpu(const std::shared_ptr<Task>& task) {
  const absl::Time start = Now();
  const absl::Status expired = Expired(*task, start);
  bool abandon;
  {
    std::lock_guard<std::mutex> lock(mu_);
    cpu_queued_units_ -= task->units;
    --cpu_queued_requests_;
    abandon = abandoning_;
    if (!abandon) ++(expired.ok() ? stats_.cpu_runs : stats_.dropped);
  }
  TaskResult result;
  result.route = task->route;
  if (abandon) {
    result.status = Abandoned();
  } else if (!expired.ok()) {
    result.status = expired;
  } else {
    // Scratch that cannot be had answers RESOURCE_EXHAUSTED.
    result.status = CatchOutOfMemory("this request's sort", [&] {
      if (task->op == Op::kSort) {
        SortJob job = task->sort;
        job.stages = nullptr;
        return cpu_->Sort(job);
      }
      TransposeJob job = task->transpose;
      job.stages = nullptr;
      return cpu_->Transpose(job);
    });
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
  if (result.status.ok() && result.path != ExecutionPath::kCpu &&
      task->device_estimate > 0) {
    // Weighed before the caller hears: its next request sees it.
    const absl::Time now = Now();
    double late;
    {
      std::lock_guard<std::mutex> lock(mu_);
      late = late_[static_cast<int>(task->op)].Add(
          absl::ToDoubleSeconds(now - task->enqueued), task->device_estimate,
          now);
    }
    listener_->OnDeviceLateness(task->op, late);
  }
  task->done(result);
  QueueSnapshot queue;
  {
    std::lock_guard<std::mutex> lock(mu_);
    --inflight_;
    queue = QueueLocked();
  }
  Publish(queue);
  Unhold(*task);
}

void Scheduler::RunnerLoop(size_t device_index) {
  batch::PackBuffer pack;  // this runner's packing buffer, reused
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    if (stopping_) return;
    const DevicePool::Device& dev = pool_[device_index];
    if (!dev.up) {
      if (pack.bytes() > 0) {
        // The failed engine's memory is not kept through its re-creation.
        lock.unlock();
        pack.Release();
        lock.lock();
        continue;
      }
      if (pool_.WantsReinit(device_index)) {
        Reinit(lock, device_index);
      } else {
        cv_.wait(lock);
      }
      continue;
    }
    // A batch another device failed goes first: it has waited once already.
    // Only the devices that have not failed it may take it, so the first of
    // them with room does, even while a device that may not take it holds
    // fewer batches (the least loaded rule would leave it waiting for a
    // device that will never run it). Room counts up to
    // full_pipeline_depth, as for a full batch: otherwise a device kept
    // beyond pipeline_depth by full batches would never take it.
    if (!handovers_.empty() &&
        pool_.HasRoom(device_index, options_.full_pipeline_depth)) {
      auto it = std::find_if(
          handovers_.begin(), handovers_.end(),
          [&](const Handover& h) { return MayTakeLocked(h, device_index); });
      if (it != handovers_.end()) {
        Handover h = std::move(*it);
        handovers_.erase(it);
        handover_units_ -= h.units;
        handover_requests_ -= h.batch.size();
        stats_.device_failovers += h.batch.size();
        pool_.Lease(device_index, h.units);
        const std::string to = dev.name;
        const QueueSnapshot queue = QueueLocked();
        lock.unlock();
        Publish(queue);
        listener_->OnDeviceFailover(h.from, to, h.batch.size());
        const bool returned =
            RunBatch(device_index, h.batch, std::move(h.tried), &pack, h.units);
        lock.lock();
        if (!returned) pool_.Return(device_index, h.units);
        cv_.notify_all();
        continue;
      }
    }
    // Beyond pipeline_depth batches in flight, only a full batch or a solo
    // task no longer than one goes.
    const bool within_depth = pool_.MayLease(device_index);
    if (!within_depth &&
        !pool_.MayLease(device_index, options_.full_pipeline_depth)) {
      cv_.wait(lock);
      continue;
    }
    Batch batch;
    absl::Time wake = absl::InfiniteFuture();
    if (!within_depth) {
      if (!batchers_.TakeFull(Now(), draining_, &batch)) {
        cv_.wait(lock);
        continue;
      }
    } else if (!batchers_.TakeReady(Now(), draining_, &batch, &wake)) {
      if (wake == absl::InfiniteFuture() && pack.bytes() > 0) {
        // Nothing queued: the packing buffer (page-locked memory, as large
        // as the largest batch) goes back once a second has passed without
        // a wake-up.
        if (cv_.wait_for(lock, std::chrono::seconds(1)) ==
            std::cv_status::timeout) {
          lock.unlock();
          pack.Release();
          lock.lock();
        }
      } else if (wake == absl::InfiniteFuture()) {
        cv_.wait(lock);
      } else {
        WaitAtMost(cv_, lock, wake - Now());
      }
      continue;
    }
    size_t units = 0;
    for (const auto& t : batch) units += t->units;
    pool_.Lease(device_index, units);
    const QueueSnapshot queue = QueueLocked();
    lock.unlock();
    Publish(queue);
    const bool returned = RunBatch(device_index, batch, {}, &pack, units);
    lock.lock();
    if (!returned) pool_.Return(device_index, units);
    cv_.notify_all();
  }
}

void Scheduler::Reinit(std::unique_lock<std::mutex>& lock,
                       size_t device_index) {
  pool_.BeginReinit(device_index);
  while (!stopping_ && Now() < pool_[device_index].next_attempt) {
    WaitAtMost(cv_, lock, pool_[device_index].next_attempt - Now());
  }
  if (stopping_) {
    pool_.AbortReinit(device_index);
    return;
  }
  const EngineFactory make = pool_.FreeEngine(device_index);
  lock.unlock();
  absl::StatusOr<std::unique_ptr<Sorter>> engine = make();
  lock.lock();
  const DevicePool::Reinit r =
      pool_.EndReinit(device_index, std::move(engine), Now());
  const DevicePool::Device& dev = pool_[device_index];
  const std::string name = dev.name;
  std::pair<std::string, std::string> info;
  if (r.up) {
    ++stats_.reinits;
    info = dev.engine->vendor_driver();
  }
  lock.unlock();
  cv_.notify_all();
  if (r.up) {
    LogLine("device %s re-created; it serves again\n", name.c_str());
    listener_->OnDeviceInfo(name, info.first, info.second);
    listener_->OnDeviceState(name, true);
  } else {
    LogLine("re-creating device %s failed (%s); next try in %s\n", name.c_str(),
            r.error.ToString().c_str(),
            absl::FormatDuration(r.next_try).c_str());
  }
  lock.lock();
}

Batch Scheduler::TakeLive(Batch& batch, absl::Time now) {
  Batch live;
  live.reserve(batch.size());
  for (auto& t : batch) {
    if (absl::Status e = Expired(*t, now); !e.ok()) {
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
  return live;
}

bool Scheduler::RunBatch(size_t device_index, Batch& batch,
                         std::vector<bool> tried, batch::PackBuffer* pack,
                         size_t leased_units) {
  // Only this runner's lease uses the engine until it is returned: the
  // pool re-creates a device only with nothing in flight.
  DevicePool::Device& dev = pool_[device_index];
  const absl::Time start = Now();
  Batch live = TakeLive(batch, start);
  if (live.empty()) return false;
  const Op op = live.front()->op;
  size_t units = 0;
  for (const auto& t : live) units += t->units;
  switch (TrySplit(device_index, live, tried, start, leased_units)) {
    case SplitOutcome::kAnswered:
      return true;
    case SplitOutcome::kFailedOver:
      return false;
    case SplitOutcome::kNotSplit:
      break;
  }
  StageTimes stages;
  int device_runs = 1;
  // Host memory running out in a run (its merge or packing buffers) is a
  // failure like any other: the CPU path tries.
  absl::Status status = CatchOutOfMemory("this batch's device run", [&] {
    return RunOnEngine(*dev.engine, live, &stages, pack, &device_runs);
  });
  const absl::Duration compute = Now() - start;
  if (!status.ok()) {
    FailOver(device_index, live, std::move(tried), status);
    return false;
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
  return false;
}

bool Scheduler::DeviceFault(const absl::Status& error) {
  // What another device may not repeat: its memory running out (device
  // memory, or host memory a run took), a lost or unavailable device, an
  // internal error of the engine or a corrupt result. Any other code (a bad
  // argument, an unsupported request) is the requests' own: another device
  // would refuse them too, and the CPU path answers them as it always has.
  switch (error.code()) {
    case absl::StatusCode::kResourceExhausted:
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kInternal:
    case absl::StatusCode::kDataLoss:
    case absl::StatusCode::kUnknown:
    case absl::StatusCode::kAborted:
      return true;
    default:
      return false;
  }
}

bool Scheduler::MayTakeLocked(const Handover& h, size_t d) const {
  return pool_[d].up && !h.tried[d];
}

void Scheduler::StrandedHandoversLocked(Batch* out) {
  for (auto it = handovers_.begin(); it != handovers_.end();) {
    bool takeable = false;
    for (size_t d = 0; d < pool_.size() && !takeable; ++d) {
      takeable = MayTakeLocked(*it, d);
    }
    if (takeable) {
      ++it;
      continue;
    }
    handover_units_ -= it->units;
    handover_requests_ -= it->batch.size();
    for (auto& t : it->batch) out->push_back(std::move(t));
    it = handovers_.erase(it);
  }
}

// A failed batch goes to every other device at most once (`tried` travels
// with it), so it reaches the CPU path after at most one run per device and
// never comes back to a device that failed it, even one re-created since.
// The handover is decided under the lock, together with marking the device
// down, so that no runner can take it for a device already known broken and
// no request routed after it finds that device still up.
void Scheduler::FailOver(size_t device_index, Batch& batch,
                         std::vector<bool> tried, const absl::Status& error) {
  const DevicePool::Device& dev = pool_[device_index];
  const Op op = batch.front()->op;
  const size_t requests = batch.size();
  bool marked_down = false, handed = false;
  Batch stranded;
  QueueSnapshot queue;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (dev.up && !dev.engine->healthy()) {
      pool_.MarkDown(device_index, Now());
      marked_down = true;
    }
    // A drain past its deadline starts nothing new on a device: the CPU
    // path answers these UNAVAILABLE.
    if ((marked_down || DeviceFault(error)) && !abandoning_) {
      Handover h;
      h.tried = std::move(tried);
      h.tried.resize(pool_.size());
      h.tried[device_index] = true;
      h.from = dev.name;
      for (size_t d = 0; d < pool_.size() && !handed; ++d) {
        handed = MayTakeLocked(h, d);
      }
      if (handed) {
        for (const auto& t : batch) h.units += t->units;
        h.batch = std::move(batch);
        batch.clear();
        handover_units_ += h.units;
        handover_requests_ += h.batch.size();
        handovers_.push_back(std::move(h));
        queue = QueueLocked();
      }
    }
    stats_.failovers += batch.size();
    if (marked_down) {
      // Work that only the lost device could still take: with no device
      // left up, every queued task; else the handovers that every other
      // device up has failed already.
      if (pool_.devices_up() == 0) stranded = batchers_.TakeAll();
      StrandedHandoversLocked(&stranded);
      stats_.failovers += stranded.size();
    }
  }
  LogLine("a %s batch of %zu request(s) failed on %s (%s); %s\n", OpName(op),
          requests, dev.name.c_str(), error.ToString().c_str(),
          handed ? "another device answers them" : "the CPU path answers them");
  if (marked_down) {
    LogLine(
        "device %s is unhealthy; the other devices, or the CPU path with "
        "none up, answer its share until it is re-created (first try in "
        "%s)\n",
        dev.name.c_str(),
        absl::FormatDuration(options_.reinit_backoff).c_str());
    listener_->OnDeviceState(dev.name, false);
  }
  if (handed) Publish(queue);
  if (marked_down || handed) cv_.notify_all();
  for (auto& t : stranded) {
    listener_->OnCpuFallback("no_healthy_device");
    EnqueueCpu(t, Route::kFailover);
  }
  const std::string reason = absl::StatusCodeToString(error.code());
  for (auto& t : batch) {
    listener_->OnCpuFallback(reason);
    EnqueueCpu(t, Route::kFailover);
  }
}

absl::Status Scheduler::RunOnEngine(Sorter& engine, Batch& batch,
                                    StageTimes* stages, batch::PackBuffer* pack,
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
  return batch::SortTogether(engine, jobs, stages, pack,
                             options_.in_place_min_keys);
}

void Scheduler::StartDrain() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    draining_ = true;
  }
  cv_.notify_all();
}

void Scheduler::AbandonQueued() {
  admission_.Close();
  Batch abandoned;
  {
    std::lock_guard<std::mutex> lock(mu_);
    abandoning_ = true;
    abandoned = batchers_.TakeAll();
    for (Handover& h : handovers_) {
      for (auto& t : h.batch) abandoned.push_back(std::move(t));
    }
    handovers_.clear();
    handover_units_ = handover_requests_ = 0;
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
    result.status = Abandoned();
    Answer(t, std::move(result));
  }
}

void Scheduler::Drain(absl::Time deadline) {
  StartDrain();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return;
  }
  admission_.WaitIdle(deadline, [this] { return Now(); });
  AbandonQueued();
  // Running work finishes.
  admission_.WaitIdle();
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  for (auto& threads : runners_) {
    for (std::thread& t : threads) {
      if (t.joinable()) t.join();
    }
  }
  cpu_queue_.Stop();
}

}  // namespace sortd
