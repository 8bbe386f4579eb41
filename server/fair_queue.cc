#include "server/fair_queue.h"

#include <algorithm>
#include <utility>

namespace sortd {

void FairShares::Push(std::string_view client, size_t units,
                      std::function<void()> work) {
  const bool bulk = units >= options_.bulk_units;
  std::string key(1, bulk ? 'b' : 's');
  key.append(client);
  auto it = flows_.find(key);
  if (it == flows_.end()) it = flows_.emplace(std::move(key), Flow{}).first;
  Flow& flow = it->second;
  flow.bulk = bulk;
  const bool was_empty = flow.tasks.empty();
  const uint64_t start = std::max(virtual_time_, flow.finish);
  flow.finish = start + units + options_.request_units;
  flow.tasks.push_back(
      {.start = start, .seq = seq_++, .work = std::move(work)});
  ++queued_;
  if (was_empty) heads_[bulk].insert(HeadOf(flow));
}

bool FairShares::Pop(bool bulk_ok, Item* item) {
  int which = -1;
  if (!heads_[0].empty()) which = 0;
  if (bulk_ok && !heads_[1].empty() &&
      (which < 0 || *heads_[1].begin() < *heads_[0].begin())) {
    which = 1;
  }
  if (which < 0) return false;
  std::set<Head>& heads = heads_[which];
  Flow& flow = *std::get<2>(*heads.begin());
  heads.erase(heads.begin());
  Task task = std::move(flow.tasks.front());
  flow.tasks.pop_front();
  --queued_;
  virtual_time_ = std::max(virtual_time_, task.start);
  if (!flow.tasks.empty()) heads.insert(HeadOf(flow));
  item->work = std::move(task.work);
  item->bulk = flow.bulk;
  if (queued_ == 0 || flows_.size() >= forget_at_) Forget();
  return true;
}

void FairShares::Forget() {
  if (queued_ == 0) {
    // Nothing is waiting: no one is owed anything.
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

FairQueue::FairQueue(const Options& options)
    : shares_(options.shares), bulk_limit_(std::max(1, options.threads - 1)) {
  for (int i = 0; i < std::max(1, options.threads); ++i) {
    workers_.emplace_back([this] { Run(); });
  }
}

void FairQueue::Submit(std::string_view client, size_t units,
                       std::function<void()> work) {
  {
    MutexLock lock(&mu_);
    shares_.Push(client, units, std::move(work));
  }
  cv_.NotifyOne();
}

void FairQueue::Stop() {
  {
    MutexLock lock(&mu_);
    stopping_ = true;
  }
  cv_.NotifyAll();
  for (std::thread& t : workers_) {
    if (t.joinable()) t.join();
  }
}

void FairQueue::Run() {
  mu_.Lock();
  for (;;) {
    FairShares::Item item;
    if (!shares_.Pop(bulk_running_ < bulk_limit_, &item)) {
      if (stopping_ && shares_.empty()) break;
      cv_.Wait(&mu_);
      continue;
    }
    if (item.bulk) ++bulk_running_;
    mu_.Unlock();
    item.work();
    item.work = nullptr;  // its captures go before the lock is taken
    mu_.Lock();
    if (item.bulk) {
      --bulk_running_;
      // A bulk task may wait for this one; the waker may not be it.
      cv_.NotifyAll();
    }
  }
  mu_.Unlock();
}

}  // namespace sortd
