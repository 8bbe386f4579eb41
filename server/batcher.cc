#include "server/batcher.h"

#include <algorithm>

namespace sortd {

void ClassBatcher::Add(std::shared_ptr<Task> task) {
  units_ += task->units;
  tasks_.push_back(std::move(task));
}

bool ClassBatcher::Ready(absl::Time now, absl::Duration max_delay,
                         size_t max_requests, size_t max_units) const {
  return now >= oldest() + max_delay || Full(max_requests, max_units);
}

void ClassBatcher::Take(size_t max_requests, size_t max_units, Batch* batch) {
  size_t units = 0, taken = 0;
  while (!tasks_.empty() && taken < max_requests &&
         (taken == 0 || units + tasks_.front()->units <= max_units)) {
    units += tasks_.front()->units;
    batch->push_back(std::move(tasks_.front()));
    tasks_.pop_front();
    ++taken;
  }
  units_ -= units;
}

void ClassBatcher::TakeAll(Batch* out) {
  for (auto& t : tasks_) out->push_back(std::move(t));
  tasks_.clear();
  units_ = 0;
}

// Sorts of every key type and order batch together by key width: packing
// maps each request's keys to their order-preserving unsigned bits (the
// complement for descending, which keeps equal keys in input order), and
// the batch sorts those ascending.
Batchers::ClassKey Batchers::ClassOf(const Task& task) {
  if (task.op == Op::kTranspose) return {1, 0, 0, 0};
  const SortJob& j = task.sort;
  return {0, static_cast<int>(KeySize(j.key_type)),
          static_cast<int>(j.value_type), j.permutation_out != nullptr};
}

void Batchers::Add(std::shared_ptr<Task> task, bool solo) {
  units_ += task->units;
  ++requests_;
  if (solo) {
    solo_.push_back(std::move(task));
  } else {
    const ClassKey key = ClassOf(*task);
    classes_[key].Add(std::move(task));
  }
}

Batchers::Classes::iterator Batchers::OldestReady(absl::Time now,
                                                  bool close_all,
                                                  absl::Time* wake_at) {
  // The oldest ready candidate: the head of the solo queue (always ready;
  // then classes_.end()) or a class whose batch may close.
  auto best = classes_.end();
  absl::Time best_time =
      solo_.empty() ? absl::InfiniteFuture() : solo_.front()->enqueued;
  for (auto it = classes_.begin(); it != classes_.end(); ++it) {
    const size_t max_units = limits_.max_units[std::get<0>(it->first)];
    if (!close_all && !it->second.Ready(now, limits_.max_delay,
                                        limits_.max_requests, max_units)) {
      *wake_at = std::min(*wake_at, it->second.oldest() + limits_.max_delay);
      continue;
    }
    if (it->second.oldest() < best_time) {
      best_time = it->second.oldest();
      best = it;
    }
  }
  return best;
}

bool Batchers::TakeReady(absl::Time now, bool close_all, Batch* batch,
                         absl::Time* wake_at) {
  const auto best = OldestReady(now, close_all, wake_at);
  if (best != classes_.end()) {
    TakeFrom(best, batch);
  } else if (!solo_.empty()) {
    TakeSolo(batch);
  } else {
    return false;
  }
  return true;
}

bool Batchers::TakeFull(absl::Time now, bool close_all, Batch* batch) {
  absl::Time wake = absl::InfiniteFuture();
  const auto best = OldestReady(now, close_all, &wake);
  if (best == classes_.end()) {
    // The solo head is the oldest ready work (or nothing is ready): it is
    // full work when no longer than a full batch of its op.
    if (solo_.empty() ||
        solo_.front()->units >
            limits_.max_units[std::get<0>(ClassOf(*solo_.front()))]) {
      return false;
    }
    TakeSolo(batch);
    return true;
  }
  if (!best->second.Full(limits_.max_requests,
                         limits_.max_units[std::get<0>(best->first)])) {
    return false;
  }
  TakeFrom(best, batch);
  return true;
}

void Batchers::TakeSolo(Batch* batch) {
  units_ -= solo_.front()->units;
  --requests_;
  batch->push_back(std::move(solo_.front()));
  solo_.pop_front();
}

void Batchers::TakeFrom(Classes::iterator it, Batch* batch) {
  const size_t before = batch->size();
  it->second.Take(limits_.max_requests,
                  limits_.max_units[std::get<0>(it->first)], batch);
  if (it->second.empty()) classes_.erase(it);
  for (size_t i = before; i < batch->size(); ++i) {
    units_ -= (*batch)[i]->units;
    --requests_;
  }
}

Batch Batchers::TakeAll() {
  Batch all;
  for (auto& [key, queue] : classes_) queue.TakeAll(&all);
  classes_.clear();
  for (auto& t : solo_) all.push_back(std::move(t));
  solo_.clear();
  units_ = 0;
  requests_ = 0;
  return all;
}

}  // namespace sortd
