// Admission: a budget of units that calls are charged before they hold
// them, and released once answered; a call past the bounds is refused with
// RESOURCE_EXHAUSTED and a message that says which bound and how to react.
// Thread-safe.
//
// sortd keeps two: the scheduler's, in keys of queued work (a bound on
// queue depth, where a long call counts as a share of it), and the
// service's, in bytes of memory held for requests (--max_held_bytes),
// where every call is charged all it holds, as it comes to hold it
// (Hold::Grow), and a call that would hold more than one call may is
// refused up front. Both also bound each client's share (its requests and
// units together), so that one client cannot fill the whole budget and
// have every other client refused; a refusal names the bound that binds,
// the budget's before the client's share.
//
//   Admission admission({.max_units = 1 << 28, .max_requests = 4096,
//                        .max_call_units = 1 << 26,
//                        .max_client_requests = 2048});
//   absl::StatusOr<size_t> charged = admission.Admit(task_units, client);
//   if (!charged.ok()) return charged.status();   // refused
//   ...                                           // work, answer
//   admission.Release(*charged, client);
//
//   Admission::Hold hold(&bytes);                 // a call's bytes
//   if (absl::Status s = hold.Grow(n); !s.ok()) return s;   // refused
//   ... hold n more bytes ...                     // released with `hold`
#ifndef SORTD_SERVER_ADMISSION_H_
#define SORTD_SERVER_ADMISSION_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "core/mutex.h"

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
    // A call of more than max_call_units: false, it is charged
    // max_call_units, and a lone call is admitted whatever its size (a
    // budget of queued work, where the cap is a share of the queue); true,
    // it is refused up front and nothing is admitted beyond max_units (a
    // budget of memory, which charging a call less than it holds would let
    // it pass).
    bool strict = false;
    // Units, and requests, that the calls of one client (Admit's client,
    // Hold::SetClient) may hold together, so that one client cannot take
    // the whole budget from the others. Not strict, a client's lone
    // request is admitted whatever its units, as the budget's lone request
    // is.
    size_t max_client_units = SIZE_MAX;
    size_t max_client_requests = SIZE_MAX;
    // For the messages: the unit, and the flags that set max_units,
    // max_call_units, max_requests, max_client_units and
    // max_client_requests.
    std::string unit = "keys";
    std::string units_flag = "--max_queued_keys";
    std::string call_flag = "--max_call_keys";
    std::string requests_flag = "--max_queued_requests";
    std::string client_flag = "";
    std::string client_requests_flag = "";
    // Called with the units charged after every change, under the budget's
    // lock (cheap, and never calling back into it): a gauge.
    std::function<void(size_t)> on_change = nullptr;
  };
  struct Counts {
    uint64_t admitted = 0, refused = 0, released = 0;
  };

  // One call's charge, grown as the call comes to hold more and released
  // (all of it) when destroyed. Counts as one request from its first
  // Grow. Not thread-safe: one call's thread at a time.
  class Hold {
   public:
    Hold() = default;
    explicit Hold(Admission* budget) : budget_(budget) {}
    ~Hold() { Reset(); }
    Hold(Hold&& other) noexcept { *this = std::move(other); }
    Hold& operator=(Hold&& other) noexcept;
    Hold(const Hold&) = delete;
    Hold& operator=(const Hold&) = delete;

    // Counts this call's charge as `client`'s (a Peer's fair-share key),
    // against Limits::max_client_units. Before the first Grow.
    void SetClient(std::string client) { client_ = std::move(client); }
    // Charges `units` more, or says why not (then the charge is as it
    // was). Without a budget, always OK.
    absl::Status Grow(size_t units);
    // Gives back `units` of the charge (at most what it holds).
    void Shrink(size_t units);
    // Gives back the whole charge.
    void Reset();
    size_t charged() const { return charged_; }

   private:
    Admission* budget_ = nullptr;
    size_t charged_ = 0;
    bool admitted_ = false;
    std::string client_;  // empty: counted for no client
  };

  explicit Admission(const Limits& limits) : limits_(limits) {}

  // The units a request of `units` from `client` (empty: counted for no
  // client) is charged, or why it is refused. Not strict: a lone request
  // is always admitted (unless closed), its size bounded by the server's
  // request limit, as refusing it would refuse it forever; strict: a
  // request of more than max_call_units is refused.
  absl::StatusOr<size_t> Admit(size_t units, const std::string& client = "")
      ABSL_LOCKS_EXCLUDED(mu_);
  // Gives back what Admit charged for `client`. Nothing of this object is
  // touched after the last release has woken WaitIdle.
  void Release(size_t charged, const std::string& client = "")
      ABSL_LOCKS_EXCLUDED(mu_);

  // Every later Admit is refused UNAVAILABLE (the server is shutting down).
  void Close() ABSL_LOCKS_EXCLUDED(mu_);

  // Waits until nothing is admitted or `now()` reaches `deadline`; true
  // when idle. Waits last the difference between `now()`'s times.
  bool WaitIdle(absl::Time deadline, const std::function<absl::Time()>& now)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Waits until nothing is admitted.
  void WaitIdle() ABSL_LOCKS_EXCLUDED(mu_);

  size_t requests() const ABSL_LOCKS_EXCLUDED(mu_);
  // Units charged now, over every request; of one client's.
  size_t units() const ABSL_LOCKS_EXCLUDED(mu_);
  size_t client_units(const std::string& client) const ABSL_LOCKS_EXCLUDED(mu_);
  // Requests of one client admitted and not yet released.
  size_t client_requests(const std::string& client) const
      ABSL_LOCKS_EXCLUDED(mu_);
  Counts counts() const ABSL_LOCKS_EXCLUDED(mu_);
  const Limits& limits() const { return limits_; }

 private:
  // Why `more` units for a request already charged `charged` (0: a new
  // one) are refused, or OK; with the lock held.
  absl::Status CheckLocked(size_t charged, size_t more, bool fresh,
                           const std::string& client = "") const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The same for `client`'s share (Limits::max_client_requests and
  // max_client_units).
  absl::Status CheckClientLocked(size_t more, bool fresh,
                                 const std::string& client) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ChangedLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Charges `more` units (and, `fresh`, one request) to the budget and
  // `client`; gives back `units` (and, `last`, the request).
  void ChargeLocked(size_t more, bool fresh, const std::string& client)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ReleaseLocked(size_t units, bool last, const std::string& client)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Hold's steps.
  absl::Status Grow(size_t charged, size_t more, bool fresh,
                    const std::string& client);
  void Shrink(size_t units, bool last, const std::string& client);

  struct ClientShare {
    size_t units = 0, requests = 0;
  };

  const Limits limits_;
  mutable Mutex mu_;
  CondVar idle_;
  size_t units_ ABSL_GUARDED_BY(mu_) = 0;
  size_t requests_ ABSL_GUARDED_BY(mu_) = 0;
  // Clients with a request admitted or units held.
  std::map<std::string, ClientShare> clients_ ABSL_GUARDED_BY(mu_);
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  Counts counts_ ABSL_GUARDED_BY(mu_);
};

}  // namespace sortd

#endif  // SORTD_SERVER_ADMISSION_H_
