// The one place where engine statuses (absl::Status) become gRPC statuses.
// The canonical codes are the same numbers in both libraries.
#ifndef SORTD_SERVER_STATUS_H_
#define SORTD_SERVER_STATUS_H_

#include <string>

#include "absl/status/status.h"
#include "grpcpp/server_context.h"
#include "grpcpp/support/status.h"
#include "server/no_retry.h"

namespace sortd {

// Trailing metadata of a RESOURCE_EXHAUSTED answer: how long a client's
// gRPC retry policy waits before it tries again (gRFC A6; a negative value
// tells it not to retry: NotRetryable). gRPC clients with a retry policy
// honour it.
inline constexpr char kRetryPushbackHeader[] = "grpc-retry-pushback-ms";
// Long enough for a full queue to move (small sorts are answered within
// milliseconds), short enough that a client waits little once it has.
inline constexpr int kRetryPushbackMs = 250;

inline grpc::Status ToGrpcStatus(const absl::Status& s) {
  if (s.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()),
                      std::string(s.message()));
}

// ToGrpcStatus for the answer of the call of `context`, to be passed to its
// Finish: a RESOURCE_EXHAUSTED answer also carries the retry pushback.
// Every call of the service finishes through it.
inline grpc::Status FinishStatus(grpc::ServerContextBase& context,
                                 const absl::Status& s) {
  if (s.code() == absl::StatusCode::kResourceExhausted) {
    context.AddTrailingMetadata(
        kRetryPushbackHeader,
        IsNotRetryable(s) ? "-1" : std::to_string(kRetryPushbackMs));
  }
  return ToGrpcStatus(s);
}

}  // namespace sortd

#endif  // SORTD_SERVER_STATUS_H_
