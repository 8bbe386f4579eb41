// sortd: the sorting daemon. Serves sortd.v1.SortService over gRPC, health
// (grpc.health.v1) and reflection, and Prometheus metrics over HTTP.
//
//   sortd --listen=127.0.0.1:50051 --metrics_listen=127.0.0.1:9464
//
// Startup: the gRPC server starts with health NOT_SERVING, the engine is
// brought up, then health turns SERVING. SIGTERM or SIGINT: health turns
// NOT_SERVING, new calls are refused, calls in flight finish (up to
// --drain_timeout), and the process exits 0.
#include <signal.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gpu/opencl_engine.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"
#include "server/cpu_sorter.h"
#include "server/metrics.h"
#include "server/service.h"

namespace {
// $XDG_CACHE_HOME/sortd/kernels, else $HOME/.cache/sortd/kernels.
std::string DefaultKernelCacheDir() {
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg) {
    return absl::StrCat(xdg, "/sortd/kernels");
  }
  if (const char* home = std::getenv("HOME"); home && *home) {
    return absl::StrCat(home, "/.cache/sortd/kernels");
  }
  return "";
}
}  // namespace

ABSL_FLAG(std::string, listen, "127.0.0.1:50051",
          "Address for the gRPC service, host:port. Port 0 picks a free "
          "port; the chosen address is printed on the 'serving on' line.");
ABSL_FLAG(std::string, metrics_listen, "127.0.0.1:9464",
          "Address for Prometheus metrics (HTTP, path /metrics), host:port. "
          "Port 0 picks a free port. Empty disables the endpoint.");
ABSL_FLAG(std::string, device, "auto",
          "Engine: auto (a GPU if there is one, else the OpenCL CPU device, "
          "else the CPU path), gpu, opencl-cpu, or cpu (oneTBB).");
ABSL_FLAG(int64_t, max_request_bytes, int64_t{256} << 20,
          "Largest serialized request accepted, in bytes; larger requests "
          "get RESOURCE_EXHAUSTED. gRPC's maximum receive size is set to "
          "this value. At most 2147483647.");
ABSL_FLAG(int, cpu_threads, 0,
          "Threads of the oneTBB CPU path (0: one per hardware thread).");
ABSL_FLAG(int, request_threads, 0,
          "Threads that run requests concurrently (0: as many as "
          "--cpu_threads, at least 2).");
ABSL_FLAG(absl::Duration, drain_timeout, absl::Seconds(30),
          "On SIGTERM/SIGINT, how long calls in flight may take to finish "
          "before they are cancelled.");
ABSL_FLAG(std::string, kernel_cache_dir, DefaultKernelCacheDir(),
          "Folder for compiled OpenCL program binaries, so that restarts "
          "skip kernel compilation; a stale or corrupt entry is rebuilt. "
          "Empty disables the disk cache.");
ABSL_FLAG(bool, log_requests, false,
          "Log the start and end of every request to stderr.");

namespace {

constexpr char kServiceName[] = "sortd.v1.SortService";

// The engine for --device: `auto` takes a GPU, else the OpenCL CPU device,
// else the CPU path, and logs why it passed over each; an explicit OpenCL
// device that cannot be brought up is an error, never a silent substitute.
absl::StatusOr<std::unique_ptr<sortd::Sorter>> CreateEngine(
    const std::string& device, int cpu_threads) {
  using sortd::gpu::DeviceKind;
  using sortd::gpu::OpenClEngine;
  auto opencl =
      [&](DeviceKind kind) -> absl::StatusOr<std::unique_ptr<sortd::Sorter>> {
    OpenClEngine::Options options;
    options.kind = kind;
    options.cache_dir = absl::GetFlag(FLAGS_kernel_cache_dir);
    auto engine = OpenClEngine::Create(options);
    if (!engine.ok()) return engine.status();
    std::fprintf(stderr, "sortd: OpenCL device %s\nsortd: policy %s\n",
                 (*engine)->info().ToString().c_str(),
                 (*engine)->policy().ToString().c_str());
    return std::unique_ptr<sortd::Sorter>(std::move(*engine));
  };
  if (device == "gpu") return opencl(DeviceKind::kGpu);
  if (device == "opencl-cpu") return opencl(DeviceKind::kCpu);
  if (device == "auto") {
    for (DeviceKind kind : {DeviceKind::kGpu, DeviceKind::kCpu}) {
      auto engine = opencl(kind);
      if (engine.ok()) return engine;
      std::fprintf(stderr, "sortd: --device=auto: no OpenCL %s engine: %s\n",
                   kind == DeviceKind::kGpu ? "GPU" : "CPU",
                   engine.status().ToString().c_str());
    }
    std::fprintf(stderr, "sortd: --device=auto: serving on the CPU path\n");
  } else if (device != "cpu") {
    return absl::InvalidArgumentError(absl::StrCat(
        "--device=", device, ": expected auto, gpu, opencl-cpu or cpu"));
  }
  return std::make_unique<sortd::CpuSorter>(
      sortd::CpuSorter::Options{.threads = cpu_threads});
}

absl::Status CheckFlags() {
  const int64_t max_bytes = absl::GetFlag(FLAGS_max_request_bytes);
  if (max_bytes <= 0 || max_bytes > INT_MAX) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--max_request_bytes=", max_bytes, ": expected 1 to ", INT_MAX));
  }
  if (absl::GetFlag(FLAGS_cpu_threads) < 0 ||
      absl::GetFlag(FLAGS_request_threads) < 0) {
    return absl::InvalidArgumentError(
        "--cpu_threads and --request_threads must not be negative");
  }
  return absl::OkStatus();
}

// host:port with the port replaced by the one gRPC bound.
std::string BoundAddress(const std::string& listen, int port) {
  return absl::StrCat(listen.substr(0, listen.rfind(':')), ":", port);
}

int Fail(const absl::Status& status) {
  std::fprintf(stderr, "sortd: %s\n", status.ToString().c_str());
  return 1;
}

int Serve() {
  if (absl::Status s = CheckFlags(); !s.ok()) return Fail(s);
  auto metrics = sortd::Metrics::Create(absl::GetFlag(FLAGS_metrics_listen));
  if (!metrics.ok()) return Fail(metrics.status());

  const int cpu_threads = absl::GetFlag(FLAGS_cpu_threads);
  int request_threads = absl::GetFlag(FLAGS_request_threads);
  if (request_threads == 0) request_threads = std::max(2, cpu_threads);
  const int max_bytes =
      static_cast<int>(absl::GetFlag(FLAGS_max_request_bytes));
  sortd::SortServiceImpl service(
      metrics->get(),
      {.limits = {.max_request_bytes = static_cast<size_t>(max_bytes)},
       .workers = request_threads,
       .log_requests = absl::GetFlag(FLAGS_log_requests)});

  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  int port = 0;
  const std::string listen = absl::GetFlag(FLAGS_listen);
  builder.AddListeningPort(listen, grpc::InsecureServerCredentials(), &port);
  builder.SetMaxReceiveMessageSize(max_bytes);
  builder.SetMaxSendMessageSize(-1);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || port == 0) {
    return Fail(absl::UnavailableError(
        absl::StrCat("cannot listen on ", listen, " (--listen)")));
  }
  grpc::HealthCheckServiceInterface* health = server->GetHealthCheckService();
  health->SetServingStatus(false);

  auto engine = CreateEngine(absl::GetFlag(FLAGS_device), cpu_threads);
  if (!engine.ok()) {
    server->Shutdown();
    return Fail(engine.status());
  }
  // The CPU path answers whatever the device engine fails.
  sortd::CpuSorter cpu_fallback({.threads = cpu_threads});
  service.SetEngine(engine->get(), &cpu_fallback);
  health->SetServingStatus(true);
  health->SetServingStatus(kServiceName, true);

  const std::vector<int> metric_ports = (*metrics)->listening_ports();
  std::fprintf(stderr, "sortd: engine %s\n", (*engine)->device_name().c_str());
  std::printf(
      "sortd: serving on %s%s\n", BoundAddress(listen, port).c_str(),
      metric_ports.empty()
          ? " (metrics disabled)"
          : absl::StrCat(" (metrics on ",
                         BoundAddress(absl::GetFlag(FLAGS_metrics_listen),
                                      metric_ports.front()),
                         "/metrics)")
                .c_str());
  std::fflush(stdout);

  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  int signal_number = 0;
  sigwait(&signals, &signal_number);

  std::fprintf(stderr, "sortd: %s: draining\n", strsignal(signal_number));
  health->Shutdown();  // NOT_SERVING for all, and stays so
  const absl::Duration drain = absl::GetFlag(FLAGS_drain_timeout);
  server->Shutdown(absl::ToChronoTime(absl::Now() + drain));
  service.Drain();
  server->Wait();
  std::fprintf(stderr, "sortd: stopped\n");
  // The process is about to exit. Stopping the metrics endpoint would wait
  // out civetweb's 2-second poll for nothing, so it is left to the OS.
  metrics->release();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // Signals are taken by sigwait in Serve(); block them before any thread
  // (gRPC, oneTBB, the metrics server) starts so that none of those threads
  // receives them instead.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  signal(SIGPIPE, SIG_IGN);

  absl::SetProgramUsageMessage(
      "GPU sorting service (gRPC sortd.v1.SortService).\n"
      "Usage: sortd [--listen=HOST:PORT] [--metrics_listen=HOST:PORT] "
      "[--device=auto|gpu|opencl-cpu|cpu] [flags]\n"
      "Run with --helpfull for every flag, including Abseil's own.");
  absl::ParseCommandLine(argc, argv);
  return Serve();
}
