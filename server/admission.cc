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
  if (units_ + more <= limits_.max_units)
    return CheckClientLocked(more, client);
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
  return CheckClientLocked(more, client);
}

absl::Status Admission::CheckClientLocked(size_t more,
                                          const std::string& client) const {
  if (!client.empty() && limits_.max_client_units != SIZE_MAX) {
    auto it = client_units_.find(client);
    const size_t held = it == client_units_.end() ? 0 : it->second;
    if (held + more > limits_.max_client_units) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "this client's calls hold ", held, " ", limits_.unit,
          " and this one needs ", more, " more; one client may hold ",
          limits_.max_client_units, " (", limits_.client_flag,
          "), so that others keep their share; retry with back-off"));
    }
  }
  return absl::OkStatus();
}

void Admission::ChangedLocked() {
  if (limits_.on_change) limits_.on_change(units_);
}

absl::StatusOr<size_t> Admission::Admit(size_t units) {
  const size_t charge =
      limits_.strict ? units : std::min(units, limits_.max_call_units);
  std::lock_guard<std::mutex> lock(mu_);
  const absl::Status refused = CheckLocked(0, charge, /*fresh=*/true);
  if (!refused.ok()) {
    ++counts_.refused;
    return refused;
  }
  units_ += charge;
  ++requests_;
  ++counts_.admitted;
  ChangedLocked();
  return charge;
}

absl::Status Admission::Grow(size_t charged, size_t more, bool fresh,
                             const std::string& client) {
  std::lock_guard<std::mutex> lock(mu_);
  const absl::Status refused = CheckLocked(charged, more, fresh, client);
  if (!refused.ok()) {
    if (fresh) ++counts_.refused;
    return refused;
  }
  units_ += more;
  if (!client.empty()) client_units_[client] += more;
  if (fresh) {
    ++requests_;
    ++counts_.admitted;
  }
  ChangedLocked();
  return absl::OkStatus();
}

void Admission::Shrink(size_t units, bool last, const std::string& client) {
  std::lock_guard<std::mutex> lock(mu_);
  units_ -= units;
  if (!client.empty()) {
    auto it = client_units_.find(client);
    if (it != client_units_.end() && (it->second -= units) == 0) {
      client_units_.erase(it);
    }
  }
  if (last) {
    --requests_;
    ++counts_.released;
    idle_.notify_all();
  }
  ChangedLocked();
}

void Admission::Release(size_t charged) {
  // Notified under the lock: once WaitIdle sees nothing admitted its caller
  // may destroy this object, which must not happen inside notify_all.
  std::lock_guard<std::mutex> lock(mu_);
  units_ -= charged;
  --requests_;
  ++counts_.released;
  ChangedLocked();
  idle_.notify_all();
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

size_t Admission::units() const {
  std::lock_guard<std::mutex> lock(mu_);
  return units_;
}

size_t Admission::client_units(const std::string& client) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = client_units_.find(client);
  return it == client_units_.end() ? 0 : it->second;
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
