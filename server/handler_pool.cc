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
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  ready_.notify_all();
  for (std::thread& t : threads_) t.join();
}

void HandlerPool::Post(absl::AnyInvocable<void() &&> task) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    tasks_.push_back(std::move(task));
  }
  ready_.notify_one();
}

size_t HandlerPool::queued() const {
  std::lock_guard<std::mutex> lock(mu_);
  return tasks_.size();
}

int HandlerPool::DefaultThreads() { return std::max(2, UsableCores() / 4); }

void HandlerPool::Loop() {
  while (true) {
    absl::AnyInvocable<void() &&> task;
    {
      std::unique_lock<std::mutex> lock(mu_);
      ready_.wait(lock, [this] { return stopping_ || !tasks_.empty(); });
      // Stopping, the tasks already posted still run: each answers a call.
      if (tasks_.empty()) return;
      task = std::move(tasks_.front());
      tasks_.pop_front();
    }
    std::move(task)();
  }
}

}  // namespace sortd
