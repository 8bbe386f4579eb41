#include "server/handler_pool.h"

#include <algorithm>
#include <utility>

#include "server/usable_cores.h"

namespace sortd {

HandlerPool::HandlerPool(int threads) {
  threads_.reserve(static_cast<size_t>(std::max(1, threads)));
  for (int i = 0; i < std::max(1, threads); ++i) {
    threads_.emplace_back([this] { Loop(); });
  }
}

HandlerPool::~HandlerPool() {
  {
    MutexLock lock(&mu_);
    stopping_ = true;
  }
  ready_.NotifyAll();
  for (std::thread& t : threads_) t.join();
}

void HandlerPool::Post(absl::AnyInvocable<void() &&> task) {
  {
    MutexLock lock(&mu_);
    tasks_.push_back(std::move(task));
  }
  ready_.NotifyOne();
}

size_t HandlerPool::queued() const {
  MutexLock lock(&mu_);
  return tasks_.size();
}

int HandlerPool::DefaultThreads() { return std::max(2, UsableCores() / 4); }

void HandlerPool::Loop() {
  while (true) {
    absl::AnyInvocable<void() &&> task;
    {
      MutexLock lock(&mu_);
      while (!stopping_ && tasks_.empty()) ready_.Wait(&mu_);
      // Stopping, the tasks already posted still run: each answers a call.
      if (tasks_.empty()) return;
      task = std::move(tasks_.front());
      tasks_.pop_front();
    }
    std::move(task)();
  }
}

}  // namespace sortd
