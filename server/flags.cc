// sortd's flags on the gRPC port (address, TLS), the metrics endpoint, the
// log and the service's own behaviour (Echo, parts, draining, idle
// trimming); and SortdOptionsFromFlags, which checks every flag and
// assembles the daemon's options from the readers of each subject
// (flags_internal.h lists the files).
#include "server/flags.h"

#include <initializer_list>
#include <string>

#include "absl/flags/flag.h"
#include "absl/strings/match.h"
#include "absl/time/time.h"
#include "gpu/opencl_engine.h"
#include "server/flags_internal.h"
#include "server/grpc_limits.h"
#include "server/log.h"
#include "server/usable_cores.h"

ABSL_FLAG(std::string, listen, "127.0.0.1:50051",
          "Address for the gRPC service, host:port. Port 0 picks a free "
          "port; the chosen address is printed on the 'serving on' line.");
ABSL_FLAG(std::string, metrics_listen, "127.0.0.1:9464",
          "Address for Prometheus metrics (HTTP, path /metrics), host:port. "
          "Port 0 picks a free port. Empty disables the endpoint.");
ABSL_FLAG(bool, echo, true,
          "Serve the Echo RPC: the request's arrays back unsorted through "
          "the same path as Sort, the baseline of end-to-end benchmarks.");
ABSL_FLAG(absl::Duration, part_timeout, absl::Seconds(10),
          "How long the parts of an array sent as several Sort calls "
          "(SortRequest.part) may take to come together, from the first.");
ABSL_FLAG(absl::Duration, drain_timeout, absl::Seconds(30),
          "On SIGTERM/SIGINT, how long calls in flight may take to finish "
          "before they are cancelled.");
ABSL_FLAG(absl::Duration, idle_trim_interval, absl::Seconds(1),
          "Once no request has been answered or in flight for this long, "
          "give free heap memory back to the system (malloc_trim), once per "
          "quiet period; 0 turns it off");
ABSL_FLAG(std::string, tls_cert, "",
          "PEM certificate (chain) of the gRPC port: with --tls_key, the "
          "port speaks TLS only.");
ABSL_FLAG(std::string, tls_key, "", "PEM private key for --tls_cert.");
ABSL_FLAG(std::string, tls_client_ca, "",
          "PEM CA certificates: with TLS on, clients must present a "
          "certificate signed by one of them (mutual TLS).");
ABSL_FLAG(bool, log_requests, false,
          "Log the start and end of every request to stderr.");
ABSL_FLAG(std::string, log_level, "info",
          "The least severe log lines written: debug, info, warning or "
          "error.");
ABSL_FLAG(std::string, log_format, "text",
          "Log lines as text (time, 'sortd:', level when not info, message) "
          "or json (one object a line: time, level, request id where the "
          "line is about one request, msg).");

namespace sortd {
namespace {

// Each subject's checks, in a fixed order: the first flag out of range is
// the one named.
absl::Status CheckFlags() {
  for (absl::Status (*check)() :
       {CheckRequestSizeFlag, CheckThreadFlags, CheckQueueFlags,
        CheckClientQueueFlags, CheckBufferFlags, CheckHeldBytesFlags,
        CheckLargeRequestFlags, CheckBatchDelayFlag}) {
    if (absl::Status s = check(); !s.ok()) return s;
  }
  return absl::OkStatus();
}

GrpcServerOptions GrpcServerFromFlags(const GrpcLimits& limits) {
  return {.listen = absl::GetFlag(FLAGS_listen),
          .max_receive_bytes =
              static_cast<int>(absl::GetFlag(FLAGS_max_request_bytes)),
          .limits = limits,
          .tls = {.cert = absl::GetFlag(FLAGS_tls_cert),
                  .key = absl::GetFlag(FLAGS_tls_key),
                  .client_ca = absl::GetFlag(FLAGS_tls_client_ca)}};
}

// Whether `filename` is `self`, a file's __FILE__, as Abseil's usage output
// names it.
bool IsFile(absl::string_view self, absl::string_view filename) {
  // Abseil names a flag's file by its __FILE__ without leading slashes.
  return !filename.empty() &&
         (self == filename || (absl::EndsWith(self, filename) &&
                               self[self.size() - filename.size() - 1] == '/'));
}

}  // namespace

absl::StatusOr<SortdOptions> SortdOptionsFromFlags() {
  if (absl::Status s = CheckFlags(); !s.ok()) return s;
  absl::StatusOr<gpu::OpenClEngine::Options> engine_base = EngineBase();
  if (!engine_base.ok()) return engine_base.status();
  GrpcLimits limits;
  if (absl::Status s =
          GrpcLimitsFromFlags(absl::GetFlag(FLAGS_max_request_bytes), &limits);
      !s.ok()) {
    return s;
  }
  return SortdOptions{
      .grpc = GrpcServerFromFlags(limits),
      .metrics_listen = absl::GetFlag(FLAGS_metrics_listen),
      .device = absl::GetFlag(FLAGS_device),
      .engines = EngineSetupFromFlags(*engine_base),
      .inject_faults = absl::GetFlag(FLAGS_inject_faults),
      .service = ServiceOptions(),
      .host_buffers = HostBufferOptions(),
      .host_pool_pinned = absl::GetFlag(FLAGS_host_pool_pinned),
      .shm_pinned = absl::GetFlag(FLAGS_shm_pinned),
      .regions = RegionOptions(),
      .shm = ShmSocketOptions(),
      .cpu = {.threads = absl::GetFlag(FLAGS_cpu_threads) > 0
                             ? absl::GetFlag(FLAGS_cpu_threads)
                             : UsableCores(),
              .scratch_max_idle_bytes =
                  static_cast<size_t>(absl::GetFlag(FLAGS_cpu_scratch_bytes))},
      .request_threads = absl::GetFlag(FLAGS_request_threads),
      .scheduler = SchedulerOptions(),
      .router = RouterPinsFromFlags(),
      .idle_trim_interval = absl::GetFlag(FLAGS_idle_trim_interval),
      .drain_timeout = absl::GetFlag(FLAGS_drain_timeout)};
}

absl::Status SetLogOptionsFromFlags() {
  absl::StatusOr<LogLevel> level =
      ParseLogLevel(absl::GetFlag(FLAGS_log_level));
  if (!level.ok()) return level.status();
  absl::StatusOr<LogFormat> format =
      ParseLogFormat(absl::GetFlag(FLAGS_log_format));
  if (!format.ok()) return format.status();
  SetLogOptions(*level, *format);
  return absl::OkStatus();
}

void WarnOfFaultInjection(const SortdOptions& o) {
  if (!o.engines.base.faults.any()) return;
  LogAt(LogLevel::kWarning,
        "FAULT INJECTION ENABLED (--inject_faults=%s): device "
        "runs fail on purpose and answers may fail over or fail; "
        "for tests only, never use in production\n",
        o.inject_faults.c_str());
}

bool IsSortdFlagsFile(absl::string_view filename) {
  for (absl::string_view self :
       {absl::string_view(__FILE__), MemoryFlagsFile(), DeviceFlagsFile(),
        SchedulingFlagsFile(), SharedMemoryFlagsFile()}) {
    if (IsFile(self, filename)) return true;
  }
  return false;
}

}  // namespace sortd
