// The scheduler's sorts cut across every device up (server/split_sort.h):
// which sorts, which devices, and the accounting around the run.
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/log.h"
#include "server/out_of_memory.h"
#include "server/scheduler.h"
#include "server/split_sort.h"

namespace sortd {
namespace {

// Whether engines `a` and `b` are of one kind: path, vendor, driver and
// device name (devices of one name on one host get one kernel policy,
// gpu/policy.h). The parts of a split finish together only on equal
// devices, and only such splits are measured (bench/device-split.sh).
bool SameKind(const Sorter& a, const Sorter& b) {
  return a.path() == b.path() && a.device_name() == b.device_name() &&
         a.vendor_driver() == b.vendor_driver();
}

}  // namespace

bool Scheduler::SplitWanted(const Batch& live,
                            const std::vector<bool>& tried) const {
  if (options_.split_min_keys == 0 || live.size() != 1 || !tried.empty()) {
    return false;
  }
  const Task& task = *live.front();
  return task.op == Op::kSort && task.sort.count >= options_.split_min_keys &&
         task.sort.parts.empty() &&
         SplitScratchBytes(task.sort) <= task.host_scratch_bytes;
}

Scheduler::SplitOutcome Scheduler::TrySplit(size_t device_index, Batch& live,
                                            std::vector<bool>& tried,
                                            absl::Time start,
                                            size_t leased_units) {
  if (!SplitWanted(live, tried)) return SplitOutcome::kNotSplit;
  absl::Status error;
  if (RunSplit(device_index, live.front(), start, leased_units, &error)) {
    return SplitOutcome::kAnswered;
  }
  // A part this device failed: its failover decides, as for any run.
  if (!error.ok() && !LeasedDevice(device_index).engine->healthy()) {
    FailOver(device_index, live, std::move(tried), error);
    return SplitOutcome::kFailedOver;
  }
  return SplitOutcome::kNotSplit;
}

std::vector<size_t> Scheduler::SplitDevicesLocked(size_t device_index,
                                                  const SortJob& job) const {
  std::vector<size_t> devices = {device_index};
  const Sorter& runner = *pool_[device_index].engine;
  // Only devices with nothing in flight: under load every device is at
  // work on requests of its own already, and a split would only add a
  // merge on the host. At most kMaxSplitDevices, all of the runner's kind.
  for (size_t d = 0; d < pool_.size() && devices.size() < kMaxSplitDevices;
       ++d) {
    if (d != device_index && pool_[d].up && pool_[d].engine != nullptr &&
        pool_[d].inflight == 0 && SameKind(runner, *pool_[d].engine)) {
      devices.push_back(d);
    }
  }
  if (devices.size() < 2) return {};
  // Every part in one run of its device: a part beyond a device's memory
  // would need runs merged on the host, with scratch nobody admitted.
  const size_t part = SplitBound(job.count, devices.size(), 1);
  for (size_t d : devices) {
    SortJob shape = job;
    shape.count = part;
    const size_t max = pool_[d].engine->max_sort_keys(shape);
    if (max != 0 && max < part) return {};
  }
  return devices;
}

bool Scheduler::RunSplit(size_t device_index, const std::shared_ptr<Task>& task,
                         absl::Time start, size_t leased_units,
                         absl::Status* error) {
  std::vector<size_t> devices;
  std::vector<Sorter*> engines;
  std::vector<std::string> names;
  {
    MutexLock lock(&mu_);
    // Everything held for the split is had before any lease is taken:
    // without memory for it the sort runs on one device.
    try {
      devices = SplitDevicesLocked(device_index, task->sort);
      engines.reserve(devices.size());
      for (size_t d : devices) names.push_back(pool_[d].name);
    } catch (const std::bad_alloc&) {
      return false;
    }
    if (devices.empty()) return false;
    // The others count the part they hold as a batch in flight: they are
    // not re-created under it, and the router sees their backlog.
    for (size_t i = 0; i < devices.size(); ++i) {
      if (i > 0) pool_.Lease(devices[i], task->units / devices.size());
      engines.push_back(pool_[devices[i]].engine.get());
    }
  }
  SplitReport report;
  StageTimes unused;
  SortJob job = task->sort;
  job.stages = &unused;  // each part's stages come back in the report
  job.kernel_span_seconds = nullptr;
  *error = CatchOutOfMemory("this sort's split across the devices", [&] {
    return SplitSort(engines, job, &report, &split_scratch_);
  });
  // Read while the leases still keep the engines from being re-created.
  const ExecutionPath path = engines[0]->path();
  std::vector<DeviceMemory> memory;
  try {
    for (Sorter* engine : engines) {
      if (error->ok()) memory.push_back(engine->memory_bytes());
    }
  } catch (const std::bad_alloc&) {
    memory.clear();  // not reported this time
  }
  EndSplit(devices, task->units / devices.size(), leased_units, error->ok());
  if (!error->ok()) {
    LogAt(LogLevel::kWarning,
          "a sort of %zu keys split across %zu devices failed (%s); it is "
          "sorted again on one device\n",
          task->sort.count, devices.size(), error->ToString().c_str());
    return false;
  }
  AnswerSplit(task, names, path, memory, report, start);
  return true;
}

void Scheduler::EndSplit(const std::vector<size_t>& devices, size_t share,
                         size_t leased_units, bool ok) {
  std::vector<std::string> lost;
  Batch stranded;
  {
    MutexLock lock(&mu_);
    for (size_t i = 1; i < devices.size(); ++i) {
      const size_t d = devices[i];
      pool_.Return(d, share);
      if (pool_[d].up && !pool_[d].engine->healthy()) {
        pool_.MarkDown(d, Now());
        lost.push_back(pool_[d].name);
      }
    }
    if (!lost.empty()) {
      // As FailOver: work only the lost devices could still take.
      if (pool_.devices_up() == 0) stranded = batchers_.TakeAll();
      StrandedHandoversLocked(&stranded);
      stats_.failovers += stranded.size();
    }
    if (ok) {
      // The answer goes out next: the runner's device is free already.
      pool_.Return(devices[0], leased_units);
      ++stats_.split_sorts;
      ++stats_.gpu_runs;
      ++stats_.gpu_tasks;
    } else {
      ++stats_.split_failures;
    }
  }
  cv_.NotifyAll();
  for (const std::string& name : lost) {
    LogAt(LogLevel::kWarning,
          "device %s is unhealthy after its part of a split sort; the other "
          "devices, or the CPU path with none up, answer its share until it "
          "is re-created\n",
          name.c_str());
    listener_->OnDeviceState(name, false);
  }
  for (auto& t : stranded) {
    listener_->OnCpuFallback("no_healthy_device");
    EnqueueCpu(t, Route::kFailover);
  }
}

void Scheduler::AnswerSplit(const std::shared_ptr<Task>& task,
                            const std::vector<std::string>& names,
                            ExecutionPath path,
                            const std::vector<DeviceMemory>& memory,
                            SplitReport& report, absl::Time start) {
  const size_t k = names.size(), n = task->sort.count;
  if (!report.stages.empty()) {
    report.stages[0].push_back({"host_merge", report.merge_seconds});
  }
  for (size_t i = 0; i < k; ++i) {
    listener_->OnStages(names[i], "split_sort", report.stages[i]);
    listener_->OnBatch(Op::kSort, names[i], 1,
                       SplitBound(n, k, i + 1) - SplitBound(n, k, i));
    if (i < memory.size()) listener_->OnDeviceMemory(names[i], memory[i]);
  }
  TaskResult result;
  result.path = path;
  result.device = absl::StrJoin(names, "+");
  result.queue_wait = start - task->enqueued;
  result.compute = Now() - start;
  result.batch_requests = 1;
  result.device_runs = static_cast<int>(k);
  Answer(task, std::move(result));
}

}  // namespace sortd
