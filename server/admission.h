// Admission: the bound on the work a server holds at once. Every request is
// admitted (and charged units of the budget) before any work on it, and
// released once answered; a request past the bounds is refused with
// RESOURCE_EXHAUSTED and a message that says which bound and how to react.
// Thread-safe.
//
//   Admission admission({.max_units = 1 << 28, .max_requests = 4096,
//                        .max_call_units = 1 << 26});
//   absl::StatusOr<size_t> charged = admission.Admit(task_units);
//   if (!charged.ok()) return charged.status();   // refused
//   ...                                           // work, answer
//   admission.Release(*charged);
#ifndef SORTD_SERVER_ADMISSION_H_
#define SORTD_SERVER_ADMISSION_H_

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace sortd {

class Admission {
 public:
  struct Limits {
    // Over every request admitted and not yet released.
    size_t max_units = size_t{1} << 28;
    size_t max_requests = 4096;
    // Units one request counts at most, so that one huge call (a long
    // SortStream) cannot hold the whole budget while it runs.
    size_t max_call_units = size_t{1} << 26;
  };
  struct Counts {
    uint64_t admitted = 0, refused = 0, released = 0;
  };

  explicit Admission(const Limits& limits) : limits_(limits) {}

  // The units a request of `units` is charged, or why it is refused. A lone
  // request is always admitted (unless closed): its size is bounded by the
  // server's request limit, and refusing it would refuse it forever.
  absl::StatusOr<size_t> Admit(size_t units);
  // Gives back what Admit charged. Nothing of this object is touched after
  // the last release has woken WaitIdle.
  void Release(size_t charged);

  // Every later Admit is refused UNAVAILABLE (the server is shutting down).
  void Close();

  // Waits until nothing is admitted or `now()` reaches `deadline`; true
  // when idle. Waits last the difference between `now()`'s times.
  bool WaitIdle(absl::Time deadline, const std::function<absl::Time()>& now);
  // Waits until nothing is admitted.
  void WaitIdle();

  size_t requests() const;
  Counts counts() const;

 private:
  const Limits limits_;
  mutable std::mutex mu_;
  std::condition_variable idle_;
  size_t units_ = 0, requests_ = 0;
  bool closed_ = false;
  Counts counts_;
};

}  // namespace sortd

#endif  // SORTD_SERVER_ADMISSION_H_
