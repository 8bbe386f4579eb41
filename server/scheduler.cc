// The scheduler's front: admission, routing each task to a device batch or
// the CPU path, the CPU path itself, answering (and the device lateness it
// weighs), queue snapshots and draining. The device runners that take the
// batches, run and fail them over, and re-create lost devices are in
// server/scheduler_runner.cc; sorts cut across devices in
// server/scheduler_split.cc.
#include "server/scheduler.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <new>

#include "absl/strings/str_cat.h"
#include "core/keys.h"
#include "server/batch_codec.h"
#include "server/log.h"
#include "server/out_of_memory.h"

namespace sortd {
namespace {

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
      placement_({.router = {.sort = options_.sort,
                             .transpose = options_.transpose,
                             .cpu_sort = options_.cpu_sort,
                             .gpu_sort = options_.gpu_sort,
                             .cpu_transpose = options_.cpu_transpose,
                             .gpu_transpose = options_.gpu_transpose,
                             .spill = options_.spill,
                             .max_batch_delay = options_.max_batch_delay},
                  .pipeline_depth = options_.pipeline_depth,
                  .full_pipeline_depth = options_.full_pipeline_depth}),
      cpu_queue_({.threads = std::max(1, options_.cpu_workers),
                  .shares = {.bulk_units = options_.cpu_bulk_units}}),
      split_scratch_(options_.split_scratch_bytes) {
  listener_->OnDeviceLateness(Op::kSort, 1);
  listener_->OnDeviceLateness(Op::kTranspose, 1);
  runners_.resize(pool_.size());
  for (size_t d = 0; d < pool_.size(); ++d) {
    const DevicePool::Device& dev = pool_[d];
    const auto [vendor, driver] = dev.engine->vendor_driver();
    listener_->OnDeviceInfo(dev.name, vendor, driver);
    listener_->OnDeviceMemory(dev.name, dev.engine->memory_bytes());
    listener_->OnDeviceTransfers(dev.name, dev.engine->transfer_bytes());
    listener_->OnDeviceState(dev.name, true);
    // A runner per batch it may hold at once.
    const int runners = placement_.Runners(pool_, d);
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
  MutexLock lock(&mu_);
  return pool_.devices_up();
}

Scheduler::Stats Scheduler::stats() const {
  const Admission::Counts counts = admission_.counts();
  MutexLock lock(&mu_);
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
          .units = batchers_.units() + handover_units_ +
                   placement_.cpu_queued_units(),
          .requests = batchers_.requests() + handover_requests_ +
                      placement_.cpu_queued_requests(),
          .inflight = inflight_};
}

void Scheduler::Publish(const QueueSnapshot& queue) {
  MutexLock lock(&publish_mu_);
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
    MutexLock lock(&mu_);
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
  Route route;
  bool device;
  QueueSnapshot queue;
  {
    MutexLock lock(&mu_);
    RouteEstimate estimate;
    route = placement_.Choose({.op = task->op, .units = task->units}, pool_,
                              batchers_.units() + handover_units_, Now(),
                              &estimate);
    task->route = route;
    device = route == Route::kSolo || route == Route::kBatch;
    // Overflowed: a size of the CPU path's sent to a device by estimate.
    const Thresholds& th =
        task->op == Op::kSort ? options_.sort : options_.transpose;
    if (device && task->units <= th.cpu_max) {
      task->device_estimate = estimate.device;
    }
    if (device) {
      batchers_.Add(task, route == Route::kSolo);
      queue = QueueLocked();
    } else if (route == Route::kSpill) {
      ++stats_.spilled;
    }
  }
  if (device) cv_.NotifyAll();
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

double Scheduler::device_late(Op op) const {
  MutexLock lock(&mu_);
  return placement_.late(op, Now());
}

void Scheduler::EnqueueCpu(std::shared_ptr<Task> task, Route route) {
  task->route = route;
  QueueSnapshot queue;
  {
    MutexLock lock(&mu_);
    placement_.CpuQueued(task->units);
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
    MutexLock lock(&mu_);
    placement_.CpuStarted(task->units);
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
      MutexLock lock(&mu_);
      late = placement_.Answered(task->op,
                                 absl::ToDoubleSeconds(now - task->enqueued),
                                 task->device_estimate, now);
    }
    listener_->OnDeviceLateness(task->op, late);
  }
  task->done(result);
  QueueSnapshot queue;
  {
    MutexLock lock(&mu_);
    --inflight_;
    queue = QueueLocked();
  }
  Publish(queue);
  Unhold(*task);
}

void Scheduler::StartDrain() {
  {
    MutexLock lock(&mu_);
    draining_ = true;
  }
  cv_.NotifyAll();
}

void Scheduler::AbandonQueued() {
  admission_.Close();
  Batch abandoned;
  {
    MutexLock lock(&mu_);
    abandoning_ = true;
    abandoned = batchers_.TakeAll();
    for (Handover& h : handovers_) {
      for (auto& t : h.batch) abandoned.push_back(std::move(t));
    }
    handovers_.clear();
    handover_units_ = handover_requests_ = 0;
  }
  if (!abandoned.empty()) {
    LogAt(LogLevel::kWarning,
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
    MutexLock lock(&mu_);
    if (stopping_) return;
  }
  admission_.WaitIdle(deadline, [this] { return Now(); });
  AbandonQueued();
  // Running work finishes.
  admission_.WaitIdle();
  {
    MutexLock lock(&mu_);
    stopping_ = true;
  }
  cv_.NotifyAll();
  for (auto& threads : runners_) {
    for (std::thread& t : threads) {
      if (t.joinable()) t.join();
    }
  }
  cpu_queue_.Stop();
}

}  // namespace sortd
