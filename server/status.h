// The one place where engine statuses (absl::Status) become gRPC statuses.
// The canonical codes are the same numbers in both libraries.
#ifndef SORTD_SERVER_STATUS_H_
#define SORTD_SERVER_STATUS_H_

#include <string>

#include "absl/status/status.h"
#include "grpcpp/support/status.h"

namespace sortd {

inline grpc::Status ToGrpcStatus(const absl::Status& s) {
  if (s.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()),
                      std::string(s.message()));
}

}  // namespace sortd

#endif  // SORTD_SERVER_STATUS_H_
