// Batchers: the queues of device-bound tasks, one per batching class, and
// the queue of tasks that run alone. Sorts batch together only with sorts
// of the same key width, payload type and permutation request (key types
// and orders are normalised to ordered unsigned bits while packing);
// transposes batch with transposes. A class's batch closes when it holds
// max_requests tasks or its op's max_units units, or when its oldest task
// has waited max_delay; the oldest ready queue goes first.
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
#include <deque>
#include <map>
#include <memory>
#include <tuple>

#include "absl/time/time.h"
#include "server/task.h"

namespace sortd {

// One class's queue, oldest first.
class ClassBatcher {
 public:
  void Add(std::shared_ptr<Task> task);
  bool empty() const { return tasks_.empty(); }
  absl::Time oldest() const { return tasks_.front()->enqueued; }
  // Whether it holds a whole batch: max_requests tasks or max_units units.
  bool Full(size_t max_requests, size_t max_units) const {
    return tasks_.size() >= max_requests || units_ >= max_units;
  }
  // Whether a batch may close at `now`: full, or its oldest task is due.
  bool Ready(absl::Time now, absl::Duration max_delay, size_t max_requests,
             size_t max_units) const;
  // The oldest tasks that fit `max_requests` and `max_units` (at least
  // one), moved into `batch`.
  void Take(size_t max_requests, size_t max_units, Batch* batch);
  // Every task, moved into `out`.
  void TakeAll(Batch* out);

 private:
  std::deque<std::shared_ptr<Task>> tasks_;
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
  std::deque<std::shared_ptr<Task>> solo_;
  size_t units_ = 0, requests_ = 0;
};

}  // namespace sortd

#endif  // SORTD_SERVER_BATCHER_H_
