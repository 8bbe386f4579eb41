// Task: one admitted request on its way through the scheduler, and the
// outcome it is answered with.
//
//   auto task = std::make_shared<Task>();
//   task->units = keys;
//   task->prepare = [&] { ...fill task->sort...; return absl::OkStatus(); };
//   task->done = [](const TaskResult& r) { ... };
#ifndef SORTD_SERVER_TASK_H_
#define SORTD_SERVER_TASK_H_

#include <atomic>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "core/sorter.h"
#include "server/router.h"

namespace sortd {

struct TaskResult {
  absl::Status status;
  // Valid when status is OK.
  ExecutionPath path = ExecutionPath::kCpu;
  std::string device;
  Route route = Route::kCpu;
  absl::Duration queue_wait;  // from Submit to the start of its run
  absl::Duration compute;     // its run (the whole batch's, when batched)
  int batch_requests = 0;     // requests in the run that answered it
  // Device runs it took: 1, or more when it exceeded the device's memory
  // and was sorted in runs merged on the CPU; 0 on the CPU path.
  int device_runs = 0;
};

struct Task {
  Op op = Op::kSort;
  // Called once by Submit, after admission: validates the request and fills
  // `sort` or `transpose` (sizing the outputs). An error answers the task.
  std::function<absl::Status()> prepare;
  // Called exactly once with the outcome. It may run on any thread,
  // including inline in Submit.
  std::function<void(const TaskResult&)> done;
  // Checked before any work: a cancelled task, or one past its deadline, is
  // answered CANCELLED or DEADLINE_EXCEEDED and never reaches a device.
  std::function<bool()> cancelled;
  absl::Time deadline = absl::InfiniteFuture();
  // Units the task will hold (keys, or 32 rows per matrix), known before
  // prepare() for admission control.
  size_t units = 0;
  // Who sent it (server/peer.h): the queues serve clients in fair shares.
  std::string client;

  SortJob sort;
  TransposeJob transpose;
  // Host scratch bytes the caller has admitted for this sort beyond its
  // arrays (the CPU path's radix scratch: server/held_bytes.h), which a
  // sort cut across the devices may hold instead (server/split_sort.h);
  // 0: it is never cut.
  size_t host_scratch_bytes = 0;

  // Set by the scheduler.
  absl::Time enqueued;
  size_t charged = 0;  // units it holds of the admission budget
  // Its admission is released when both its answer and the Submit call
  // that queued it are done: the scheduler is not drained away under a
  // Submit still running.
  std::atomic<int> holds{0};
  Route route = Route::kCpu;
  // The router's estimate of its answer on a device, in seconds (0: none).
  double device_estimate = 0;
};

// Tasks that run on a device together.
using Batch = std::vector<std::shared_ptr<Task>>;

}  // namespace sortd

#endif  // SORTD_SERVER_TASK_H_
