#include "server/admission.h"

#include <algorithm>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace sortd {

absl::Status Admission::CheckLocked(size_t charged, size_t more, bool fresh,
                                    const std::string& client) const {
  if (fresh && closed_) {
    return absl::UnavailableError(
        "sortd is shutting down and takes no new requests; retry on "
        "another replica");
  }
  if (fresh && requests_ + 1 > limits_.max_requests) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "sortd is overloaded: ", requests_,
        " requests are queued or running, the limit is ", limits_.max_requests,
        " (", limits_.requests_flag, "); retry with back-off"));
  }
  if (limits_.strict && charged + more > limits_.max_call_units) {
    return absl::ResourceExhaustedError(
        absl::StrCat("this call would hold ", charged + more, " ", limits_.unit,
                     ", more than one call may hold, ", limits_.max_call_units,
                     " (", limits_.call_flag, "); send less in one call"));
  }
  if (units_ + more <= limits_.max_units) {
    return CheckClientLocked(more, fresh, client);
  }
  if (limits_.strict) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "sortd is overloaded: requests hold ", units_, " ", limits_.unit,
        " and this one needs ", more, " more, the limit is ", limits_.max_units,
        " (", limits_.units_flag, "); retry with back-off"));
  }
  // Not strict: a lone request goes ahead whatever its size.
  if (requests_ > (fresh ? 0 : 1)) {
    return absl::ResourceExhaustedError(
        absl::StrCat("sortd is overloaded: ", units_, " ", limits_.unit,
                     " are queued or running and this request counts for ",
                     more, ", the limit is ", limits_.max_units, " (",
                     limits_.units_flag, "); retry with back-off"));
  }
  return CheckClientLocked(more, fresh, client);
}

absl::Status Admission::CheckClientLocked(size_t more, bool fresh,
                                          const std::string& client) const {
  if (client.empty()) return absl::OkStatus();
  auto it = clients_.find(client);
  const ClientShare held = it == clients_.end() ? ClientShare{} : it->second;
  if (fresh && held.requests + 1 > limits_.max_client_requests) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "this client has ", held.requests,
        " requests queued or running; one client may have ",
        limits_.max_client_requests, " (", limits_.client_requests_flag,
        "), so that others keep their share of the queue; wait for its "
        "calls' answers before sending more, or retry with back-off"));
  }
  if (held.units + more <= limits_.max_client_units) return absl::OkStatus();
  // Not strict: a client's lone request goes ahead whatever its size, as
  // the budget's does.
  if (!limits_.strict && held.requests <= (fresh ? 0 : 1)) {
    return absl::OkStatus();
  }
  return absl::ResourceExhaustedError(
      absl::StrCat("this client's calls hold ", held.units, " ", limits_.unit,
                   " and this one needs ", more, " more; one client may hold ",
                   limits_.max_client_units, " (", limits_.client_flag,
                   "), so that others keep their share; retry with back-off"));
}

void Admission::ChangedLocked() {
  if (limits_.on_change) limits_.on_change(units_);
}

void Admission::ChargeLocked(size_t more, bool fresh,
                             const std::string& client) {
  units_ += more;
  if (fresh) {
    ++requests_;
    ++counts_.admitted;
  }
  if (!client.empty()) {
    ClientShare& share = clients_[client];
    share.units += more;
    if (fresh) ++share.requests;
  }
  ChangedLocked();
}

void Admission::ReleaseLocked(size_t units, bool last,
                              const std::string& client) {
  units_ -= units;
  if (last) {
    --requests_;
    ++counts_.released;
  }
  if (!client.empty()) {
    auto it = clients_.find(client);
    if (it != clients_.end()) {
      it->second.units -= std::min(units, it->second.units);
      if (last && it->second.requests > 0) --it->second.requests;
      if (it->second.units == 0 && it->second.requests == 0) {
        clients_.erase(it);
      }
    }
  }
  ChangedLocked();
  // Notified under the lock: once WaitIdle sees nothing admitted its
  // caller may destroy this object, which must not happen inside
  // notify_all.
  if (last) idle_.NotifyAll();
}

absl::StatusOr<size_t> Admission::Admit(size_t units,
                                        const std::string& client) {
  const size_t charge =
      limits_.strict ? units : std::min(units, limits_.max_call_units);
  MutexLock lock(&mu_);
  const absl::Status refused = CheckLocked(0, charge, /*fresh=*/true, client);
  if (!refused.ok()) {
    ++counts_.refused;
    return refused;
  }
  ChargeLocked(charge, /*fresh=*/true, client);
  return charge;
}

absl::Status Admission::Grow(size_t charged, size_t more, bool fresh,
                             const std::string& client) {
  MutexLock lock(&mu_);
  const absl::Status refused = CheckLocked(charged, more, fresh, client);
  if (!refused.ok()) {
    if (fresh) ++counts_.refused;
    return refused;
  }
  ChargeLocked(more, fresh, client);
  return absl::OkStatus();
}

void Admission::Shrink(size_t units, bool last, const std::string& client) {
  MutexLock lock(&mu_);
  ReleaseLocked(units, last, client);
}

void Admission::Release(size_t charged, const std::string& client) {
  MutexLock lock(&mu_);
  ReleaseLocked(charged, /*last=*/true, client);
}

Admission::Hold& Admission::Hold::operator=(Hold&& other) noexcept {
  if (this != &other) {
    Reset();
    budget_ = std::exchange(other.budget_, nullptr);
    charged_ = std::exchange(other.charged_, 0);
    admitted_ = std::exchange(other.admitted_, false);
    client_ = std::move(other.client_);
  }
  return *this;
}

absl::Status Admission::Hold::Grow(size_t units) {
  if (budget_ == nullptr) return absl::OkStatus();
  if (absl::Status s = budget_->Grow(charged_, units, !admitted_, client_);
      !s.ok()) {
    return s;
  }
  admitted_ = true;
  charged_ += units;
  return absl::OkStatus();
}

void Admission::Hold::Shrink(size_t units) {
  units = std::min(units, charged_);
  if (budget_ == nullptr || !admitted_ || units == 0) return;
  charged_ -= units;
  budget_->Shrink(units, /*last=*/false, client_);
}

void Admission::Hold::Reset() {
  if (budget_ == nullptr || !admitted_) return;
  budget_->Shrink(std::exchange(charged_, 0), /*last=*/true, client_);
  admitted_ = false;
}

void Admission::Close() {
  MutexLock lock(&mu_);
  closed_ = true;
}

bool Admission::WaitIdle(absl::Time deadline,
                         const std::function<absl::Time()>& now) {
  MutexLock lock(&mu_);
  for (absl::Time t = now(); requests_ > 0 && t < deadline; t = now()) {
    // A minute at a time: an infinite deadline must not overflow the wait.
    const absl::Duration d =
        std::clamp(deadline - t, absl::ZeroDuration(), absl::Minutes(1));
    idle_.WaitFor(&mu_, absl::ToChronoNanoseconds(d));
  }
  return requests_ == 0;
}

void Admission::WaitIdle() {
  MutexLock lock(&mu_);
  while (requests_ > 0) idle_.Wait(&mu_);
}

size_t Admission::units() const {
  MutexLock lock(&mu_);
  return units_;
}

size_t Admission::client_units(const std::string& client) const {
  MutexLock lock(&mu_);
  auto it = clients_.find(client);
  return it == clients_.end() ? 0 : it->second.units;
}

size_t Admission::client_requests(const std::string& client) const {
  MutexLock lock(&mu_);
  auto it = clients_.find(client);
  return it == clients_.end() ? 0 : it->second.requests;
}

size_t Admission::requests() const {
  MutexLock lock(&mu_);
  return requests_;
}

Admission::Counts Admission::counts() const {
  MutexLock lock(&mu_);
  return counts_;
}

}  // namespace sortd
