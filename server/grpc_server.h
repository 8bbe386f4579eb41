// sortd's gRPC server: the sort service, health (grpc.health.v1) and
// reflection (v1 and v1alpha) on one port, plaintext or TLS
// (server/tls.h), with the connection limits of server/grpc_limits.h.
//
//   int port = 0;
//   absl::StatusOr<std::unique_ptr<grpc::Server>> server =
//       StartGrpcServer(service, options, &port);
//   ...
//   PrintServing(options.listen, port, metrics_listen, metrics_ports);
#ifndef SORTD_SERVER_GRPC_SERVER_H_
#define SORTD_SERVER_GRPC_SERVER_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "grpcpp/server.h"
#include "server/grpc_limits.h"
#include "server/service.h"
#include "server/tls.h"

namespace sortd {

struct GrpcServerOptions {
  // host:port (--listen); port 0 picks a free one.
  std::string listen;
  // Largest message received, in bytes (--max_request_bytes).
  int max_receive_bytes = 256 << 20;
  GrpcLimits limits;
  TlsFiles tls;
};

// The server listening on `options.listen` (the bound port in *port),
// health NOT_SERVING. INVALID_ARGUMENT for TLS files that cannot be used;
// UNAVAILABLE when the address cannot be bound.
absl::StatusOr<std::unique_ptr<grpc::Server>> StartGrpcServer(
    SortServiceImpl& service, const GrpcServerOptions& options, int* port);

// Prints the line scripts and tests wait for: the bound addresses of the
// gRPC port (`listen` with `port`) and of the metrics endpoint
// (`metrics_listen` with the first of `metrics_ports`; none: disabled).
void PrintServing(const std::string& listen, int port,
                  const std::string& metrics_listen,
                  const std::vector<int>& metrics_ports);

}  // namespace sortd

#endif  // SORTD_SERVER_GRPC_SERVER_H_
