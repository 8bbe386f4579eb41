// Refusals that a retry cannot cure (a request beyond a fixed limit) are
// marked so: their answer's retry pushback tells gRPC clients not to retry
// (FinishStatus in server/status.h).
#ifndef SORTD_SERVER_NO_RETRY_H_
#define SORTD_SERVER_NO_RETRY_H_

#include "absl/status/status.h"
#include "absl/strings/cord.h"

namespace sortd {

// The payload (absl::Status::SetPayload) that marks a status.
inline constexpr char kNoRetryPayload[] = "sortd/no-retry";

// `s`, marked as not worth retrying.
inline absl::Status NotRetryable(absl::Status s) {
  s.SetPayload(kNoRetryPayload, absl::Cord("1"));
  return s;
}

inline bool IsNotRetryable(const absl::Status& s) {
  return s.GetPayload(kNoRetryPayload).has_value();
}

}  // namespace sortd

#endif  // SORTD_SERVER_NO_RETRY_H_
