// The gRPC server's defences against clients that misuse the connection
// itself, as gRPC's and Envoy's guides recommend: keepalive enforcement
// (a client pinging too often is sent GOAWAY ENHANCE_YOUR_CALM and cut
// off), the server's own keepalive pings (dead peers are dropped),
// connection idle and age limits (clients re-resolve, so new replicas get
// traffic), a resource quota (the bytes gRPC buffers before sortd admits a
// request, and its threads) and a metadata size limit. Set by the --grpc_*
// flags (docs/reference.md).
#ifndef SORTD_SERVER_GRPC_LIMITS_H_
#define SORTD_SERVER_GRPC_LIMITS_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "grpcpp/server_builder.h"

namespace sortd {

struct GrpcLimits {
  // Calls one connection may have open at once (HTTP/2 streams).
  int max_concurrent_streams = 256;
  // The server pings a connection with calls open after this long without
  // activity, and closes it if the ping is not answered within the timeout.
  absl::Duration keepalive_time = absl::Minutes(1);
  absl::Duration keepalive_timeout = absl::Seconds(20);
  // Pings closer together than this (with no data sent meanwhile) are
  // strikes; after max_ping_strikes the connection gets GOAWAY
  // ENHANCE_YOUR_CALM. Clients' keepalive must be at least this.
  absl::Duration min_ping_interval = absl::Seconds(10);
  int max_ping_strikes = 2;
  // Whether clients may ping a connection with no call open (if not, such
  // pings are strikes), and the server pings one.
  bool keepalive_permit_without_calls = false;
  // A connection without calls for this long is closed (GOAWAY).
  absl::Duration max_connection_idle = absl::Minutes(10);
  // A connection is closed (GOAWAY) after this long, give or take 10%;
  // its calls then have the grace period to finish before they are
  // cancelled. InfiniteDuration: never.
  absl::Duration max_connection_age = absl::Minutes(30);
  absl::Duration max_connection_age_grace = absl::Minutes(5);
  // Bytes gRPC may hold for all connections (receive buffers of requests
  // not yet handed to sortd); 0: no limit. Past it gRPC resets streams
  // (RESOURCE_EXHAUSTED) and closes connections (GOAWAY), not only those
  // of the client that filled it.
  int64_t memory_bytes = int64_t{2} << 30;
  // Threads gRPC may start for the synchronous services (reflection); one
  // stays polling, the others serve one stream each.
  int max_threads = 32;
  // Largest header list (metadata) of a call, in bytes.
  int max_metadata_bytes = 8 << 10;
};

// The limits the --grpc_* flags set, checked against the largest request
// (--max_request_bytes): INVALID_ARGUMENT names a bad flag.
absl::Status GrpcLimitsFromFlags(int64_t max_request_bytes, GrpcLimits* out);

// Sets `limits` on `builder`, before BuildAndStart.
void ApplyGrpcLimits(const GrpcLimits& limits, grpc::ServerBuilder& builder);

// One line for the startup log.
std::string DescribeGrpcLimits(const GrpcLimits& limits);

}  // namespace sortd

#endif  // SORTD_SERVER_GRPC_LIMITS_H_
