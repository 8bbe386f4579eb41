// FairShares and FairQueue: the CPU path's queue, which serves clients in
// fair shares of work rather than in order of arrival.
//
// Each client's work is one flow, or two: its bulk work (tasks of
// `bulk_units` units or more) is a flow of its own. Start-time fair
// queueing orders the flows: a task's start tag is the later of the
// queue's virtual time and the finish tag of its flow's previous task, its
// finish tag the start plus its cost (its units plus `request_units`, the
// fixed cost of a request), and the task with the smallest start tag runs
// next; the virtual time is the largest start tag yet run. A client that
// queues a lot is charged for it: another's first task starts at the
// virtual time, ahead of the backlog, and clients with tasks queued share
// the threads in proportion to work, whatever the number of their
// connections or requests.
//
// Bulk work is parallel inside (the CPU path sorts a million keys or more
// over all its threads), so it runs on at most threads - 1 threads at
// once (with two or more): one thread is always left to the others'
// small work, which then waits for at most one task of each other client
// with small work queued instead of for seconds of sorting.
//
//   FairQueue queue({.threads = 2});
//   queue.Submit("ipv4:10.0.0.7", keys, [] { ... });
//   queue.Stop();  // runs what was queued, then joins
#ifndef SORTD_SERVER_FAIR_QUEUE_H_
#define SORTD_SERVER_FAIR_QUEUE_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <tuple>
#include <vector>

#include "core/mutex.h"

namespace sortd {

// The ordering alone, not thread-safe: FairQueue calls it under its lock.
class FairShares {
 public:
  struct Options {
    // Tasks of this many units or more are bulk work.
    size_t bulk_units = size_t{1} << 20;
    // The cost of a request beyond its units, so that a client of many
    // tiny requests pays for them.
    size_t request_units = 4096;
  };
  struct Item {
    std::function<void()> work;
    bool bulk = false;
  };

  explicit FairShares(const Options& options) : options_(options) {}

  void Push(std::string_view client, size_t units, std::function<void()> work);
  // Moves the next task into `*item`: the smallest start tag over the
  // flows' heads, bulk ones only if `bulk_ok`. False if there is none.
  bool Pop(bool bulk_ok, Item* item);

  bool empty() const { return queued_ == 0; }
  size_t size() const { return queued_; }
  // Flows remembered (queued, or with a finish tag ahead of the virtual
  // time); for tests.
  size_t flows() const { return flows_.size(); }

 private:
  struct Task {
    uint64_t start = 0, seq = 0;
    std::function<void()> work;
  };
  struct Flow {
    std::deque<Task> tasks;
    uint64_t finish = 0;  // of its last task queued
    bool bulk = false;
  };
  using Head = std::tuple<uint64_t, uint64_t, Flow*>;  // start, seq, flow
  static Head HeadOf(Flow& flow) {
    return {flow.tasks.front().start, flow.tasks.front().seq, &flow};
  }
  // Forgets flows with nothing queued whose finish tag the virtual time
  // has passed: they would start at the virtual time anyway.
  void Forget();

  const Options options_;
  std::map<std::string, Flow, std::less<>> flows_;
  std::set<Head> heads_[2];  // by bulk
  uint64_t virtual_time_ = 0, seq_ = 0;
  size_t queued_ = 0, forget_at_ = 64;
};

class FairQueue {
 public:
  struct Options {
    int threads = 1;
    FairShares::Options shares;
  };

  explicit FairQueue(const Options& options);
  ~FairQueue() { Stop(); }

  FairQueue(const FairQueue&) = delete;
  FairQueue& operator=(const FairQueue&) = delete;

  // Queues `work` of `units` for `client`.
  void Submit(std::string_view client, size_t units, std::function<void()> work)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Finishes everything already submitted, then joins the threads.
  void Stop() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  void Run() ABSL_LOCKS_EXCLUDED(mu_);

  Mutex mu_;
  CondVar cv_;
  FairShares shares_ ABSL_GUARDED_BY(mu_);
  int bulk_running_ ABSL_GUARDED_BY(mu_) = 0;
  int bulk_limit_ = 1;  // set before the threads start
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> workers_;
};

}  // namespace sortd

#endif  // SORTD_SERVER_FAIR_QUEUE_H_
