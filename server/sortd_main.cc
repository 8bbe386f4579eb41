// sortd: the sorting daemon. Serves sortd.v1.SortService over gRPC, health
// (grpc.health.v1) and reflection, and Prometheus metrics over HTTP.
//
//   sortd --listen=127.0.0.1:50051 --metrics_listen=127.0.0.1:9464
//
// Startup: the gRPC server starts with health NOT_SERVING, the engine is
// brought up, then health turns SERVING. SIGTERM or SIGINT: health turns
// NOT_SERVING, new calls are refused, calls in flight finish (up to
// --drain_timeout), and the process exits 0.
//
// This file only wires: the flags are read and checked in server/flags*.cc,
// the gRPC server is built in server/grpc_server.cc, the engines in
// server/engines.cc, the router's thresholds in server/router_setup.cc, the
// stop signals and the drain are in server/shutdown.cc.
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "core/version.h"
#include "cpu/cpu_sorter.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"
#include "server/authz_flags.h"
#include "server/engines.h"
#include "server/flags.h"
#include "server/grpc_server.h"
#include "server/host_buffers.h"
#include "server/log.h"
#include "server/memory.h"
#include "server/memory_setup.h"
#include "server/metrics.h"
#include "server/router_setup.h"
#include "server/scheduler.h"
#include "server/service.h"
#include "server/shared_memory.h"
#include "server/shm_socket.h"
#include "server/shutdown.h"

using sortd::LogAt;
using sortd::LogLevel;
using sortd::LogLine;

namespace {

constexpr char kServiceName[] = "sortd.v1.SortService";

// The stopped gRPC server, never destroyed (Serve says why); a global so
// that leak checkers see it held.
std::atomic<grpc::Server*> g_stopped_server{nullptr};

int Fail(const absl::Status& status) {
  LogAt(LogLevel::kError, "%s\n", status.ToString().c_str());
  return 1;
}

// The socket co-located clients register shared memory over; null when
// shared memory is off.
absl::StatusOr<std::unique_ptr<sortd::ShmSocket>> StartSharedMemory(
    const sortd::ShmSocket::Options& options, size_t max_bytes,
    sortd::RegionRegistry& regions) {
  if (!regions.enabled()) return nullptr;
  auto shm = sortd::ShmSocket::Start(options, &regions);
  if (shm.ok()) {
    LogLine(
        "shared memory: sealed memfds registered over %s, at most %zu "
        "bytes\n",
        options.path.c_str(), max_bytes);
  }
  return shm;
}

// The metrics endpoint, which also tells whether faults are injected.
absl::StatusOr<std::unique_ptr<sortd::Metrics>> StartMetrics(
    const sortd::SortdOptions& o) {
  auto metrics = sortd::Metrics::Create(o.metrics_listen);
  if (metrics.ok()) (*metrics)->SetFaultInjection(o.engines.base.faults.any());
  return metrics;
}

// Scrapes read the registry's counts; the returned cleanup clears the
// source (after any scrape reading it), before the registry goes.
[[nodiscard]] auto ExportSharedMemory(sortd::Metrics& metrics,
                                      sortd::RegionRegistry& regions) {
  metrics.SetSharedMemorySource([&regions] {
    return sortd::Metrics::SharedMemoryCounts{
        .regions = regions.regions(), .adopted_bytes = regions.adopted_bytes()};
  });
  return absl::MakeCleanup(
      [&metrics] { metrics.SetSharedMemorySource(nullptr); });
}

// Scrapes read the router's lateness as it fades; the returned cleanup
// clears the source (after any scrape reading it), before the scheduler is
// destroyed.
[[nodiscard]] auto ExportLateness(sortd::Metrics& metrics,
                                  sortd::Scheduler& scheduler) {
  metrics.SetLatenessSource(
      [&scheduler](sortd::Op op) { return scheduler.device_late(op); });
  return absl::MakeCleanup([&metrics] { metrics.SetLatenessSource(nullptr); });
}

// The service's host buffer pool (only when it is on) and shared-memory
// regions in `o`, and the memory budget they make logged.
void UseServicePools(sortd::HostBufferPool& host_buffers,
                     sortd::RegionRegistry& regions, sortd::SortdOptions& o) {
  if (o.host_buffers.max_idle_bytes > 0) o.service.buffers = &host_buffers;
  o.service.regions = &regions;
  sortd::LogMemoryBudget(o.service);
}

// The engines of the devices --device names, set up to use page-locked
// host buffers and shared-memory regions where the options say.
absl::StatusOr<std::vector<sortd::DeviceSlot>> CreateDevices(
    const sortd::SortdOptions& o, sortd::HostBufferPool& host_buffers,
    sortd::RegionRegistry& regions) {
  auto engines = sortd::CreateEngines(o.device, o.engines);
  if (!engines.ok()) return engines;
  sortd::UsePinnedMemory(*engines, o.host_pool_pinned, host_buffers);
  sortd::PinRegions(*engines, o.shm_pinned, regions);
  return engines;
}

// The scheduler's CPU workers and router thresholds in `o`: CPU-path
// requests run as many at once as the CPU path has threads, the number the
// router's calibration times them with (sorts of up to 32K keys run whole
// on the thread that takes them). The thresholds are exported as metrics.
void SetUpRouting(sortd::CpuSorter& cpu,
                  const std::vector<sortd::DeviceSlot>& engines,
                  sortd::Metrics& metrics, sortd::SortdOptions& o) {
  o.scheduler.cpu_workers =
      o.request_threads > 0 ? o.request_threads : std::max(2, cpu.threads());
  LogLine("cpu path: %d threads; its requests run %d at a time\n",
          cpu.threads(), o.scheduler.cpu_workers);
  if (!engines.empty()) {
    sortd::SetRouterThresholds(o.router, cpu, *engines.front().engine,
                               &o.scheduler);
  }
  metrics.SetThresholds(o.scheduler.sort, o.scheduler.transpose,
                        o.scheduler.in_place_min_keys);
}

// Health turns SERVING, for the server and for the sort service, and the
// addresses are printed.
void MarkServing(grpc::HealthCheckServiceInterface& health,
                 const sortd::SortdOptions& o, int port,
                 const sortd::Metrics& metrics) {
  health.SetServingStatus(true);
  health.SetServingStatus(kServiceName, true);
  sortd::PrintServing(o.grpc.listen, port, o.metrics_listen,
                      metrics.listening_ports());
}

int Serve() {
  if (absl::Status s = sortd::SetLogOptionsFromFlags(); !s.ok()) return Fail(s);
  LogLine("%s starting\n", sortd::VersionText("sortd").c_str());
  absl::StatusOr<sortd::SortdOptions> flags = sortd::SortdOptionsFromFlags();
  if (!flags.ok()) return Fail(flags.status());
  sortd::SortdOptions& o = *flags;
  sortd::WarnOfFaultInjection(o);
  auto metrics = StartMetrics(o);
  if (!metrics.ok()) return Fail(metrics.status());

  sortd::HostBufferPool host_buffers(o.host_buffers);
  sortd::RegionRegistry regions(o.regions);
  auto no_shm_source = ExportSharedMemory(**metrics, regions);
  UseServicePools(host_buffers, regions, o);
  sortd::SortServiceImpl service(metrics->get(), o.service);
  auto authz = sortd::AuthzPolicyFromFlags(o.grpc.tls.mutual());
  if (!authz.ok()) return Fail(authz.status());
  service.SetAuthzPolicy(authz->get());
  auto shm = StartSharedMemory(o.shm, o.regions.max_bytes, regions);
  if (!shm.ok()) return Fail(shm.status());

  int port = 0;
  auto started = sortd::StartGrpcServer(service, o.grpc, &port);
  if (!started.ok()) return Fail(started.status());
  std::unique_ptr<grpc::Server> server = *std::move(started);
  grpc::HealthCheckServiceInterface* health = server->GetHealthCheckService();

  auto engines = CreateDevices(o, host_buffers, regions);
  if (!engines.ok()) {
    server->Shutdown();
    return Fail(engines.status());
  }
  // The CPU path serves small requests, spills and failovers.
  sortd::CpuSorter cpu(o.cpu);
  SetUpRouting(cpu, *engines, **metrics, o);
  sortd::LogEngines(cpu, *engines);
  sortd::Scheduler scheduler(o.scheduler, &cpu, std::move(*engines),
                             metrics->get());
  auto no_lateness_source = ExportLateness(**metrics, scheduler);
  service.SetScheduler(&scheduler);
  std::unique_ptr<sortd::IdleTrimmer> trimmer =
      sortd::StartIdleTrimmer(o.idle_trim_interval, host_buffers, cpu,
                              scheduler, service, metrics->get());
  MarkServing(*health, o, port, **metrics);

  LogLine("%s: draining\n", strsignal(sortd::WaitForStopSignal()));
  health->Shutdown();  // NOT_SERVING for all, and stays so
  sortd::Drain(service, scheduler, *server, port, o.drain_timeout);
  if (*shm != nullptr) (*shm)->Stop();  // no call uses a region any more
  sortd::LogStopped(host_buffers, cpu);
  // The stopped gRPC server is left to the process's exit: destroying it
  // shuts gRPC's library down, which waits for its idle poller's timeout
  // (up to ten seconds after a connection closed). Everything else is
  // destroyed in reverse order of creation: the scheduler, the engines, and
  // last the metrics endpoint (~Metrics stops it quickly).
  g_stopped_server.store(server.release());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // Debian's Abseil (no NDEBUG) records every absl::Mutex lock's order, in
  // one graph under one global spin lock where a loaded node's gRPC threads
  // queue (decision 029); the tests and the TSan build keep checking it.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  sortd::KeepLargeBlocksInHeap();
  sortd::BlockStopSignals();
  signal(SIGPIPE, SIG_IGN);

  absl::FlagsUsageConfig usage;  // unset members keep their defaults
  usage.version_string = [] { return sortd::VersionText("sortd") + "\n"; };
  usage.contains_help_flags = sortd::IsSortdFlagsFile;
  usage.contains_helpshort_flags = sortd::IsSortdFlagsFile;
  usage.contains_helppackage_flags = sortd::IsSortdFlagsFile;
  absl::SetFlagsUsageConfig(usage);
  absl::SetProgramUsageMessage(
      "GPU sorting service (gRPC sortd.v1.SortService).\n"
      "Usage: sortd [--listen=HOST:PORT] [--metrics_listen=HOST:PORT] "
      "[--device=auto|gpu|opencl-cpu|cpu] [flags]\n"
      "Run with --helpfull for every flag, including Abseil's own.");
  absl::ParseCommandLine(argc, argv);
  return Serve();
}
