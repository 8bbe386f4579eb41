// The scheduler's device runners: the loop each runner thread runs (taking
// handovers other devices failed, then batches from the batchers, within
// the device's pipeline depth), running a batch on the device's engine,
// failing a batch over to another device or the CPU path when its run
// fails, and re-creating a device that went down. Submission, routing, the
// CPU path and draining are in server/scheduler.cc; sorts cut across
// devices in server/scheduler_split.cc.
#include <algorithm>
#include <chrono>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/batch_codec.h"
#include "server/log.h"
#include "server/out_of_memory.h"
#include "server/runs.h"
#include "server/scheduler.h"

namespace sortd {
namespace {

// Waits for `cv` at most `d` (a minute at a time: callers loop, and an
// infinite duration must not overflow the wait).
void WaitAtMost(CondVar& cv, Mutex* mu, absl::Duration d)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
  d = std::clamp(d, absl::ZeroDuration(), absl::Minutes(1));
  cv.WaitFor(mu, absl::ToChronoNanoseconds(d));
}

}  // namespace

void Scheduler::RunnerLoop(size_t device_index) {
  batch::PackBuffer pack;  // this runner's packing buffer, reused
  mu_.Lock();
  for (;;) {
    if (stopping_) {
      mu_.Unlock();
      return;
    }
    if (!pool_[device_index].up) {
      WaitWhileDown(device_index, &pack);
      continue;
    }
    if (RunHandover(device_index, &pack)) continue;
    Batch batch;
    if (!TakeBatchOrWait(device_index, &pack, &batch)) continue;
    size_t units = 0;
    for (const auto& t : batch) units += t->units;
    pool_.Lease(device_index, units);
    const QueueSnapshot queue = QueueLocked();
    mu_.Unlock();
    Publish(queue);
    const bool returned = RunBatch(device_index, batch, {}, &pack, units);
    mu_.Lock();
    if (!returned) pool_.Return(device_index, units);
    cv_.NotifyAll();
  }
}

void Scheduler::WaitWhileDown(size_t device_index, batch::PackBuffer* pack) {
  if (pack->bytes() > 0) {
    // The failed engine's memory is not kept through its re-creation.
    mu_.Unlock();
    pack->Release();
    mu_.Lock();
    return;
  }
  if (pool_.WantsReinit(device_index)) {
    Reinit(device_index);
  } else {
    cv_.Wait(&mu_);
  }
}

bool Scheduler::RunHandover(size_t device_index, batch::PackBuffer* pack) {
  // A batch another device failed goes first: it has waited once already.
  // Only the devices that have not failed it may take it, so the first of
  // them with room does, even while a device that may not take it holds
  // fewer batches (the least loaded rule would leave it waiting for a
  // device that will never run it). Room counts up to
  // full_pipeline_depth, as for a full batch: otherwise a device kept
  // beyond pipeline_depth by full batches would never take it.
  if (handovers_.empty() || !placement_.MayTakeHandover(pool_, device_index)) {
    return false;
  }
  auto it = handovers_.begin();
  while (it != handovers_.end() && !MayTakeLocked(*it, device_index)) ++it;
  if (it == handovers_.end()) return false;
  Handover h = std::move(*it);
  handovers_.erase(it);
  handover_units_ -= h.units;
  handover_requests_ -= h.batch.size();
  stats_.device_failovers += h.batch.size();
  pool_.Lease(device_index, h.units);
  const std::string to = pool_[device_index].name;
  const QueueSnapshot queue = QueueLocked();
  mu_.Unlock();
  Publish(queue);
  listener_->OnDeviceFailover(h.from, to, h.batch.size());
  const bool returned =
      RunBatch(device_index, h.batch, std::move(h.tried), pack, h.units);
  mu_.Lock();
  if (!returned) pool_.Return(device_index, h.units);
  cv_.NotifyAll();
  return true;
}

bool Scheduler::TakeBatchOrWait(size_t device_index, batch::PackBuffer* pack,
                                Batch* batch) {
  // Beyond pipeline_depth batches in flight, only a full batch or a solo
  // task no longer than one goes.
  const Placement::Take take = placement_.MayTake(pool_, device_index);
  if (take == Placement::Take::kNothing) {
    cv_.Wait(&mu_);
    return false;
  }
  absl::Time wake = absl::InfiniteFuture();
  if (take == Placement::Take::kFullBatch) {
    if (batchers_.TakeFull(Now(), draining_, batch)) return true;
    cv_.Wait(&mu_);
    return false;
  }
  if (batchers_.TakeReady(Now(), draining_, batch, &wake)) return true;
  if (wake == absl::InfiniteFuture() && pack->bytes() > 0) {
    // Nothing queued: the packing buffer (page-locked memory, as large
    // as the largest batch) goes back once a second has passed without
    // a wake-up.
    if (!cv_.WaitFor(&mu_, std::chrono::seconds(1))) {
      mu_.Unlock();
      pack->Release();
      mu_.Lock();
    }
  } else if (wake == absl::InfiniteFuture()) {
    cv_.Wait(&mu_);
  } else {
    WaitAtMost(cv_, &mu_, wake - Now());
  }
  return false;
}

void Scheduler::Reinit(size_t device_index) {
  pool_.BeginReinit(device_index);
  while (!stopping_ && Now() < pool_[device_index].next_attempt) {
    WaitAtMost(cv_, &mu_, pool_[device_index].next_attempt - Now());
  }
  if (stopping_) {
    pool_.AbortReinit(device_index);
    return;
  }
  const EngineFactory make = pool_.FreeEngine(device_index);
  mu_.Unlock();
  absl::StatusOr<std::unique_ptr<Sorter>> engine = make();
  mu_.Lock();
  const DevicePool::Reinit r =
      pool_.EndReinit(device_index, std::move(engine), Now());
  const DevicePool::Device& dev = pool_[device_index];
  const std::string name = dev.name;
  std::pair<std::string, std::string> info;
  if (r.up) {
    ++stats_.reinits;
    info = dev.engine->vendor_driver();
  }
  mu_.Unlock();
  cv_.NotifyAll();
  if (r.up) {
    LogLine("device %s re-created; it serves again\n", name.c_str());
    listener_->OnDeviceInfo(name, info.first, info.second);
    listener_->OnDeviceState(name, true);
  } else {
    LogAt(LogLevel::kWarning,
          "re-creating device %s failed (%s); next try in %s\n", name.c_str(),
          r.error.ToString().c_str(), absl::FormatDuration(r.next_try).c_str());
  }
  mu_.Lock();
}

Batch Scheduler::TakeLive(Batch& batch, absl::Time now) {
  Batch live;
  live.reserve(batch.size());
  for (auto& t : batch) {
    if (absl::Status e = Expired(*t, now); !e.ok()) {
      {
        MutexLock lock(&mu_);
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
  DevicePool::Device& dev = LeasedDevice(device_index);
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
  listener_->OnDeviceTransfers(dev.name, dev.engine->transfer_bytes());
  {
    MutexLock lock(&mu_);
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
  const DevicePool::Device& dev = LeasedDevice(device_index);
  const Op op = batch.front()->op;
  const size_t requests = batch.size();
  bool marked_down = false, handed = false;
  Batch stranded;
  QueueSnapshot queue;
  {
    MutexLock lock(&mu_);
    if (dev.up && !dev.engine->healthy()) {
      pool_.MarkDown(device_index, Now());
      marked_down = true;
    }
    // A drain past its deadline starts nothing new on a device: the CPU
    // path answers these UNAVAILABLE.
    if ((marked_down || DeviceFault(error)) && !abandoning_) {
      handed = HandOverLocked(device_index, batch, std::move(tried), &queue);
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
  LogAt(LogLevel::kWarning,
        "a %s batch of %zu request(s) failed on %s (%s); %s\n", OpName(op),
        requests, dev.name.c_str(), error.ToString().c_str(),
        handed ? "another device answers them" : "the CPU path answers them");
  if (marked_down) {
    LogAt(LogLevel::kWarning,
          "device %s is unhealthy; the other devices, or the CPU path with "
          "none up, answer its share until it is re-created (first try in "
          "%s)\n",
          dev.name.c_str(),
          absl::FormatDuration(options_.reinit_backoff).c_str());
    listener_->OnDeviceState(dev.name, false);
  }
  if (handed) Publish(queue);
  if (marked_down || handed) cv_.NotifyAll();
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

bool Scheduler::HandOverLocked(size_t device_index, Batch& batch,
                               std::vector<bool> tried, QueueSnapshot* queue) {
  Handover h;
  h.tried = std::move(tried);
  h.tried.resize(pool_.size());
  h.tried[device_index] = true;
  h.from = pool_[device_index].name;
  bool taker = false;
  for (size_t d = 0; d < pool_.size() && !taker; ++d) {
    taker = MayTakeLocked(h, d);
  }
  if (!taker) return false;
  for (const auto& t : batch) h.units += t->units;
  h.batch = std::move(batch);
  batch.clear();
  handover_units_ += h.units;
  handover_requests_ += h.batch.size();
  handovers_.push_back(std::move(h));
  *queue = QueueLocked();
  return true;
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

}  // namespace sortd
