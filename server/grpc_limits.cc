#include "server/grpc_limits.h"

#include <algorithm>
#include <climits>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "grpc/grpc.h"
#include "grpcpp/resource_quota.h"

ABSL_FLAG(int, max_concurrent_streams, 256,
          "Concurrent calls one client connection may have open (HTTP/2 "
          "streams); more wait in the client until one finishes.");
ABSL_FLAG(absl::Duration, grpc_keepalive_time, absl::Minutes(1),
          "The server pings a connection that has calls open after this long "
          "without activity, and closes it if the ping is not answered "
          "within --grpc_keepalive_timeout: a dead peer is dropped. inf: "
          "never.");
ABSL_FLAG(absl::Duration, grpc_keepalive_timeout, absl::Seconds(20),
          "How long the server waits for the answer to its keepalive ping.");
ABSL_FLAG(absl::Duration, grpc_min_ping_interval, absl::Seconds(10),
          "Clients' pings closer together than this, with no data sent "
          "meanwhile, are strikes (any ping on a connection without calls "
          "is, unless --grpc_keepalive_permit_without_calls); after "
          "--grpc_max_ping_strikes the connection is closed with GOAWAY "
          "ENHANCE_YOUR_CALM. Clients' keepalive time must be at least this.");
ABSL_FLAG(int, grpc_max_ping_strikes, 2,
          "Ping strikes a connection may have before it is closed (0: no "
          "limit, not recommended).");
ABSL_FLAG(bool, grpc_keepalive_permit_without_calls, false,
          "Let clients ping connections that have no call open (and the "
          "server ping them); false: such pings are strikes, and idle "
          "connections end by --grpc_max_connection_idle instead.");
ABSL_FLAG(absl::Duration, grpc_max_connection_idle, absl::Minutes(10),
          "A connection with no call open for this long is closed (GOAWAY; "
          "clients reconnect when they next call). inf: never.");
ABSL_FLAG(absl::Duration, grpc_max_connection_age, absl::Minutes(30),
          "A connection is closed (GOAWAY) after this long, give or take "
          "10%, so that clients re-resolve and new replicas get traffic. "
          "inf: never.");
ABSL_FLAG(absl::Duration, grpc_max_connection_age_grace, absl::Minutes(5),
          "Calls open on a connection closed for its age may run this long "
          "before they are cancelled: set it to at least the longest call "
          "deadline clients use. inf: calls always finish.");
ABSL_FLAG(int64_t, grpc_memory_bytes, int64_t{2} << 30,
          "Bytes gRPC may buffer for all connections together (requests "
          "being received before sortd admits them): beyond, it reclaims "
          "rather than take more, resetting calls (the client sees "
          "RESOURCE_EXHAUSTED) or closing connections with GOAWAY (their "
          "calls fail UNAVAILABLE), whichever clients they belong to; both "
          "are retried by clients' default service config. At least "
          "--max_request_bytes; 0: no limit.");
ABSL_FLAG(int, grpc_max_threads, 32,
          "Threads gRPC may start for the synchronous services "
          "(reflection), one of which keeps polling: at most one less "
          "reflection streams are open at once, and beyond, a new one gets "
          "RESOURCE_EXHAUSTED. The sorts (callback API) take none of them.");
ABSL_FLAG(int, grpc_max_metadata_bytes, 8 << 10,
          "Largest metadata (header list) a call may send, in bytes; a "
          "larger one is refused (RESOURCE_EXHAUSTED).");

namespace sortd {
namespace {

// A duration as a gRPC argument in milliseconds: infinite and beyond
// INT_MAX become INT_MAX, which gRPC reads as never.
int Millis(absl::Duration d) {
  if (d >= absl::Milliseconds(INT_MAX)) return INT_MAX;
  return static_cast<int>(std::max<int64_t>(0, absl::ToInt64Milliseconds(d)));
}

std::string Text(absl::Duration d) {
  return d == absl::InfiniteDuration() ? "never" : absl::FormatDuration(d);
}

}  // namespace

absl::Status GrpcLimitsFromFlags(int64_t max_request_bytes, GrpcLimits* out) {
  GrpcLimits l;
  l.max_concurrent_streams = absl::GetFlag(FLAGS_max_concurrent_streams);
  l.keepalive_time = absl::GetFlag(FLAGS_grpc_keepalive_time);
  l.keepalive_timeout = absl::GetFlag(FLAGS_grpc_keepalive_timeout);
  l.min_ping_interval = absl::GetFlag(FLAGS_grpc_min_ping_interval);
  l.max_ping_strikes = absl::GetFlag(FLAGS_grpc_max_ping_strikes);
  l.keepalive_permit_without_calls =
      absl::GetFlag(FLAGS_grpc_keepalive_permit_without_calls);
  l.max_connection_idle = absl::GetFlag(FLAGS_grpc_max_connection_idle);
  l.max_connection_age = absl::GetFlag(FLAGS_grpc_max_connection_age);
  l.max_connection_age_grace =
      absl::GetFlag(FLAGS_grpc_max_connection_age_grace);
  l.memory_bytes = absl::GetFlag(FLAGS_grpc_memory_bytes);
  l.max_threads = absl::GetFlag(FLAGS_grpc_max_threads);
  l.max_metadata_bytes = absl::GetFlag(FLAGS_grpc_max_metadata_bytes);
  if (l.max_concurrent_streams < 1) {
    return absl::InvalidArgumentError(
        "--max_concurrent_streams must be positive");
  }
  if (l.keepalive_time <= absl::ZeroDuration() ||
      l.keepalive_timeout <= absl::ZeroDuration() ||
      l.max_connection_idle <= absl::ZeroDuration() ||
      l.max_connection_age <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        "--grpc_keepalive_time, --grpc_keepalive_timeout, "
        "--grpc_max_connection_idle and --grpc_max_connection_age must be "
        "positive (inf: never)");
  }
  if (l.min_ping_interval < absl::ZeroDuration() ||
      l.max_connection_age_grace < absl::ZeroDuration() ||
      l.max_ping_strikes < 0) {
    return absl::InvalidArgumentError(
        "--grpc_min_ping_interval, --grpc_max_connection_age_grace and "
        "--grpc_max_ping_strikes must not be negative");
  }
  if (l.memory_bytes < 0 ||
      (l.memory_bytes > 0 && l.memory_bytes < max_request_bytes)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--grpc_memory_bytes=", l.memory_bytes, ": expected 0 (no limit) or ",
        "at least --max_request_bytes (", max_request_bytes, ")"));
  }
  if (l.max_threads < 2) {
    return absl::InvalidArgumentError("--grpc_max_threads must be at least 2");
  }
  if (l.max_metadata_bytes < 1024) {
    return absl::InvalidArgumentError(
        "--grpc_max_metadata_bytes must be at least 1024");
  }
  *out = l;
  return absl::OkStatus();
}

void ApplyGrpcLimits(const GrpcLimits& l, grpc::ServerBuilder& builder) {
  builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS,
                             l.max_concurrent_streams);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS,
                             Millis(l.keepalive_time));
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS,
                             Millis(l.keepalive_timeout));
  builder.AddChannelArgument(
      GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS,
      Millis(l.min_ping_interval));
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES,
                             l.max_ping_strikes);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS,
                             l.keepalive_permit_without_calls ? 1 : 0);
  builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_IDLE_MS,
                             Millis(l.max_connection_idle));
  builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_AGE_MS,
                             Millis(l.max_connection_age));
  builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_AGE_GRACE_MS,
                             Millis(l.max_connection_age_grace));
  builder.AddChannelArgument(GRPC_ARG_MAX_METADATA_SIZE, l.max_metadata_bytes);
  // The synchronous services (reflection) poll one completion queue with
  // at most two threads: their threads stay within the quota's cap on any
  // host (by default gRPC starts a poller per core, beyond a small cap).
  builder.SetSyncServerOption(grpc::ServerBuilder::SyncServerOption::NUM_CQS,
                              1);
  builder.SetSyncServerOption(
      grpc::ServerBuilder::SyncServerOption::MIN_POLLERS, 1);
  builder.SetSyncServerOption(
      grpc::ServerBuilder::SyncServerOption::MAX_POLLERS, 2);
  grpc::ResourceQuota quota("sortd");
  if (l.memory_bytes > 0) {
    quota.Resize(static_cast<size_t>(l.memory_bytes));
  }
  quota.SetMaxThreads(l.max_threads);
  builder.SetResourceQuota(quota);
}

std::string DescribeGrpcLimits(const GrpcLimits& l) {
  return absl::StrCat(
      "grpc: keepalive ping after ", Text(l.keepalive_time), " (timeout ",
      Text(l.keepalive_timeout), "); client pings at most every ",
      Text(l.min_ping_interval), ", ", l.max_ping_strikes, " strikes",
      l.keepalive_permit_without_calls ? ", also without calls" : "",
      "; connections closed after ", Text(l.max_connection_idle), " idle or ",
      Text(l.max_connection_age), " old (grace ",
      Text(l.max_connection_age_grace), "); gRPC buffers ",
      l.memory_bytes > 0 ? absl::StrCat("at most ", l.memory_bytes, " bytes")
                         : std::string("without limit"),
      ", ", l.max_threads, " threads; metadata up to ", l.max_metadata_bytes,
      " bytes");
}

}  // namespace sortd
