#include "server/handler_pool.h"

#include <algorithm>
#include <utility>

namespace sortd {

HandlerPool::HandlerPool(int threads) {
  threads_.reserve(static_cast<size_t>(std::max(1, threads)));
  for (int i = 0; i < std::max(1, threads); ++i) {
    threads_.emplace_back([this] { Loop(); });
  }
}

HandlerPool::~HandlerPool() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  for (std::thread& t : threads_) t.join();
}

void HandlerPool::Post(absl::AnyInvocable<void() &&> task) {
  absl::MutexLock lock(&mu_);
  tasks_.push_back(std::move(task));
}

size_t HandlerPool::queued() const {
  absl::MutexLock lock(&mu_);
  return tasks_.size();
}

int HandlerPool::DefaultThreads() {
  return std::max(2, static_cast<int>(std::thread::hardware_concurrency()) / 4);
}

bool HandlerPool::Ready() const { return stopping_ || !tasks_.empty(); }

void HandlerPool::Loop() {
  while (true) {
    absl::AnyInvocable<void() &&> task;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(this, &HandlerPool::Ready));
      // Stopping, the tasks already posted still run: each answers a call.
      if (tasks_.empty()) return;
      task = std::move(tasks_.front());
      tasks_.pop_front();
    }
    std::move(task)();
  }
}

}  // namespace sortd
