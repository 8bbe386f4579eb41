// Batchers: the queues of device-bound tasks, one per batching class, and
// the queue of tasks that run alone. Sorts batch together only with sorts
// of the same key width, payload type and permutation request (key types
// and orders are normalised to ordered unsigned bits while packing);
// transposes batch with transposes. A class's batch closes when it holds
// max_requests tasks or its op's max_units units, or when its oldest task
// has waited max_delay; the oldest ready queue goes first. Within a class
// and the solo queue, clients share in fair shares (FairTasks).
//
// Not thread-safe: the scheduler calls it under its lock. Times are the
// caller's (the scheduler's clock), so tests drive it with fake ones.
//
//   Batchers queues({.max_delay = absl::Microseconds(100), ...});
//   queues.Add(task, /*solo=*/false);
//   Batch batch;
//   absl::Time wake = absl::InfiniteFuture();
//   if (!queues.TakeReady(now, /*close_all=*/false, &batch, &wake)) {
//     ... wait until `wake` or new work ...
//   }
#ifndef SORTD_SERVER_BATCHER_H_
#define SORTD_SERVER_BATCHER_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <tuple>

#include "absl/time/time.h"
#include "server/task.h"

namespace sortd {

// Device-bound tasks in fair shares between their clients (Task::client),
// as on the CPU path (server/fair_queue.h): each client's tasks go in the
// order they came; between clients, the next is the one whose start tag
// (start-time fair queueing, a task costing its units plus
// kRequestUnits) is smallest, so that one client's backlog does not keep
// another's tasks out of the next batch or the next solo run. With one
// client it is first in, first out.
class FairTasks {
 public:
  static constexpr size_t kRequestUnits = 4096;

  void Add(std::shared_ptr<Task> task);
  bool empty() const { return size_ == 0; }
  size_t size() const { return size_; }
  // The task that goes next.
  const std::shared_ptr<Task>& front() const;
  std::shared_ptr<Task> PopFront();
  // When the longest-waiting of the clients' next tasks was queued.
  absl::Time oldest() const { return *head_times_.begin(); }
  // Every task, moved into `out`.
  void TakeAll(Batch* out);

 private:
  struct Entry {
    uint64_t start = 0, seq = 0;
    std::shared_ptr<Task> task;
  };
  struct Flow {
    std::deque<Entry> tasks;
    uint64_t finish = 0;  // of its last task queued
  };
  using Head = std::tuple<uint64_t, uint64_t, Flow*>;  // start, seq, flow
  void AddHead(Flow& flow);
  void Forget();

  std::map<std::string, Flow, std::less<>> flows_;
  std::set<Head> heads_;
  std::multiset<absl::Time> head_times_;
  uint64_t virtual_time_ = 0, seq_ = 0;
  size_t size_ = 0, forget_at_ = 64;
};

// One class's queue, in fair shares between clients.
class ClassBatcher {
 public:
  void Add(std::shared_ptr<Task> task);
  bool empty() const { return tasks_.empty(); }
  absl::Time oldest() const { return tasks_.oldest(); }
  // Whether it holds a whole batch: max_requests tasks or max_units units.
  bool Full(size_t max_requests, size_t max_units) const {
    return tasks_.size() >= max_requests || units_ >= max_units;
  }
  // Whether a batch may close at `now`: full, or its oldest task is due.
  bool Ready(absl::Time now, absl::Duration max_delay, size_t max_requests,
             size_t max_units) const;
  // The next tasks (FairTasks' order) that fit `max_requests` and
  // `max_units` (at least one), moved into `batch`.
  void Take(size_t max_requests, size_t max_units, Batch* batch);
  // Every task, moved into `out`.
  void TakeAll(Batch* out);

 private:
  FairTasks tasks_;
  size_t units_ = 0;
};

class Batchers {
 public:
  struct Limits {
    absl::Duration max_delay = absl::Microseconds(100);
    size_t max_requests = 256;
    // Units one batch holds at most, by op: sorts, transposes.
    size_t max_units[2] = {size_t{1} << 22, size_t{1} << 22};
  };

  explicit Batchers(const Limits& limits) : limits_(limits) {}

  // Queues a task: alone (`solo`) or in its class.
  void Add(std::shared_ptr<Task> task, bool solo);
  // Moves the oldest ready batch into `batch` (a solo task is always
  // ready); `close_all` makes every class ready (draining). False when none
  // is ready; then `*wake_at` is lowered to when the first will be.
  bool TakeReady(absl::Time now, bool close_all, Batch* batch,
                 absl::Time* wake_at);
  // Moves into `batch` what TakeReady would take, if nothing would join it
  // by waiting: a full class batch, or a solo task no longer than a full
  // batch; false when the oldest ready work is a batch that is due but not
  // full, a longer solo task, or nothing (so full work never overtakes
  // older ready work).
  bool TakeFull(absl::Time now, bool close_all, Batch* batch);
  // Empties every queue.
  Batch TakeAll();

  size_t units() const { return units_; }
  size_t requests() const { return requests_; }

 private:
  using ClassKey = std::tuple<int, int, int, int>;
  static ClassKey ClassOf(const Task& task);
  void TakeSolo(Batch* batch);

  const Limits limits_;
  using Classes = std::map<ClassKey, ClassBatcher>;
  // The oldest ready class batch, or classes_.end() when the head of the
  // solo queue is older or no class is ready (see TakeReady).
  Classes::iterator OldestReady(absl::Time now, bool close_all,
                                absl::Time* wake_at);
  // Takes a batch from `it` (erased once empty) into `batch`.
  void TakeFrom(Classes::iterator it, Batch* batch);
  Classes classes_;
  FairTasks solo_;
  size_t units_ = 0, requests_ = 0;
};

}  // namespace sortd

#endif  // SORTD_SERVER_BATCHER_H_
