#include "server/admission.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace sortd {

absl::StatusOr<size_t> Admission::Admit(size_t units) {
  const size_t charge = std::min(units, limits_.max_call_units);
  std::lock_guard<std::mutex> lock(mu_);
  absl::Status refused;
  if (closed_) {
    refused = absl::UnavailableError(
        "sortd is shutting down and takes no new requests; retry on "
        "another replica");
  } else if (requests_ + 1 > limits_.max_requests) {
    refused = absl::ResourceExhaustedError(absl::StrCat(
        "sortd is overloaded: ", requests_,
        " requests are queued or running, the limit is ", limits_.max_requests,
        " (--max_queued_requests); retry with back-off"));
  } else if (requests_ > 0 && units_ + charge > limits_.max_units) {
    refused = absl::ResourceExhaustedError(
        absl::StrCat("sortd is overloaded: ", units_,
                     " keys are queued or running and this request counts "
                     "for ",
                     charge, ", the limit is ", limits_.max_units,
                     " (--max_queued_keys); retry with back-off"));
  }
  if (!refused.ok()) {
    ++counts_.refused;
    return refused;
  }
  units_ += charge;
  ++requests_;
  ++counts_.admitted;
  return charge;
}

void Admission::Release(size_t charged) {
  // Notified under the lock: once WaitIdle sees nothing admitted its caller
  // may destroy this object, which must not happen inside notify_all.
  std::lock_guard<std::mutex> lock(mu_);
  units_ -= charged;
  --requests_;
  ++counts_.released;
  idle_.notify_all();
}

void Admission::Close() {
  std::lock_guard<std::mutex> lock(mu_);
  closed_ = true;
}

bool Admission::WaitIdle(absl::Time deadline,
                         const std::function<absl::Time()>& now) {
  std::unique_lock<std::mutex> lock(mu_);
  for (absl::Time t = now(); requests_ > 0 && t < deadline; t = now()) {
    // A minute at a time: an infinite deadline must not overflow the wait.
    const absl::Duration d =
        std::clamp(deadline - t, absl::ZeroDuration(), absl::Minutes(1));
    idle_.wait_for(lock, absl::ToChronoNanoseconds(d));
  }
  return requests_ == 0;
}

void Admission::WaitIdle() {
  std::unique_lock<std::mutex> lock(mu_);
  idle_.wait(lock, [this] { return requests_ == 0; });
}

size_t Admission::requests() const {
  std::lock_guard<std::mutex> lock(mu_);
  return requests_;
}

Admission::Counts Admission::counts() const {
  std::lock_guard<std::mutex> lock(mu_);
  return counts_;
}

}  // namespace sortd
