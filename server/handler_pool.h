// HandlerPool: threads of sortd's own on which the handlers of large unary
// calls run, so that gRPC's polling threads (few: a handful even on a large
// host) stay free to read and answer small calls. A large call's handler
// joins its request from gRPC's slices, parses it and, for Echo, copies its
// arrays: tens of milliseconds for a 64 MiB request, during which a polling
// thread would read no other connection.
//
//   HandlerPool pool(4);
//   pool.Post([...] { ...; reactor->Finish(status); });
//
// Tasks run in the order posted, each on one of the pool's threads; the
// destructor runs every task already posted, then joins the threads.
#ifndef SORTD_SERVER_HANDLER_POOL_H_
#define SORTD_SERVER_HANDLER_POOL_H_

#include <cstddef>
#include <deque>
#include <thread>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "core/mutex.h"

namespace sortd {

class HandlerPool {
 public:
  // `threads` at least 1.
  explicit HandlerPool(int threads);
  ~HandlerPool();
  HandlerPool(const HandlerPool&) = delete;
  HandlerPool& operator=(const HandlerPool&) = delete;

  void Post(absl::AnyInvocable<void() &&> task) ABSL_LOCKS_EXCLUDED(mu_);
  // Tasks posted and not yet started.
  size_t queued() const ABSL_LOCKS_EXCLUDED(mu_);

  // The threads a pool gets when asked for 0: a quarter of the host's
  // cores, at least 2.
  static int DefaultThreads();

 private:
  void Loop() ABSL_LOCKS_EXCLUDED(mu_);

  mutable Mutex mu_;
  CondVar ready_;
  std::deque<absl::AnyInvocable<void() &&>> tasks_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace sortd

#endif  // SORTD_SERVER_HANDLER_POOL_H_
