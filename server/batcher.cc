#include "server/batcher.h"

#include <algorithm>

namespace sortd {

void FairTasks::Add(std::shared_ptr<Task> task) {
  auto it = flows_.find(task->client);
  if (it == flows_.end()) it = flows_.emplace(task->client, Flow{}).first;
  Flow& flow = it->second;
  const uint64_t start = std::max(virtual_time_, flow.finish);
  flow.finish = start + task->units + kRequestUnits;
  flow.tasks.push_back(
      {.start = start, .seq = seq_++, .task = std::move(task)});
  ++size_;
  if (flow.tasks.size() == 1) AddHead(flow);
}

void FairTasks::AddHead(Flow& flow) {
  const Entry& e = flow.tasks.front();
  heads_.insert({e.start, e.seq, &flow});
  head_times_.insert(e.task->enqueued);
}

const std::shared_ptr<Task>& FairTasks::front() const {
  return std::get<2>(*heads_.begin())->tasks.front().task;
}

std::shared_ptr<Task> FairTasks::PopFront() {
  Flow& flow = *std::get<2>(*heads_.begin());
  heads_.erase(heads_.begin());
  Entry e = std::move(flow.tasks.front());
  flow.tasks.pop_front();
  head_times_.erase(head_times_.find(e.task->enqueued));
  --size_;
  virtual_time_ = std::max(virtual_time_, e.start);
  if (!flow.tasks.empty()) AddHead(flow);
  if (size_ == 0 || flows_.size() >= forget_at_) Forget();
  return std::move(e.task);
}

void FairTasks::Forget() {
  if (size_ == 0) {
    // Nothing waits: no client is owed anything.
    flows_.clear();
    virtual_time_ = 0;
    forget_at_ = 64;
    return;
  }
  for (auto it = flows_.begin(); it != flows_.end();) {
    if (it->second.tasks.empty() && it->second.finish <= virtual_time_) {
      it = flows_.erase(it);
    } else {
      ++it;
    }
  }
  forget_at_ = std::max<size_t>(64, 2 * flows_.size());
}

void FairTasks::TakeAll(Batch* out) {
  while (!empty()) out->push_back(PopFront());
}

void ClassBatcher::Add(std::shared_ptr<Task> task) {
  units_ += task->units;
  tasks_.Add(std::move(task));
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
    batch->push_back(tasks_.PopFront());
    ++taken;
  }
  units_ -= units;
}

void ClassBatcher::TakeAll(Batch* out) {
  tasks_.TakeAll(out);
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
    solo_.Add(std::move(task));
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
      solo_.empty() ? absl::InfiniteFuture() : solo_.oldest();
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
  batch->push_back(solo_.PopFront());
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
  solo_.TakeAll(&all);
  units_ = 0;
  requests_ = 0;
  return all;
}

}  // namespace sortd
