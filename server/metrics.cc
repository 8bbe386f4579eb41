#include "server/metrics.h"

#include <exception>

#include "absl/strings/str_cat.h"
#include "prometheus/gauge.h"

#ifndef SORTD_VERSION
#define SORTD_VERSION "unknown"
#endif

namespace sortd {
namespace {

// Request latency from 50 us (a tiny CPU sort) to 60 s (the largest sorts).
prometheus::Histogram::BucketBoundaries LatencyBuckets() {
  return {50e-6, 100e-6, 250e-6, 500e-6, 1e-3,   2.5e-3, 5e-3,
          10e-3, 25e-3,  50e-3,  100e-3, 250e-3, 500e-3, 1.0,
          2.5,   5.0,    10.0,   30.0,   60.0};
}

// Kernel stages run from a few microseconds to about a second.
prometheus::Histogram::BucketBoundaries StageBuckets() {
  return {5e-6,   10e-6, 25e-6, 50e-6, 100e-6, 250e-6, 500e-6, 1e-3,
          2.5e-3, 5e-3,  10e-3, 25e-3, 50e-3,  100e-3, 250e-3, 1.0};
}

}  // namespace

Metrics::Metrics()
    : registry_(std::make_shared<prometheus::Registry>()),
      requests_(prometheus::BuildCounter()
                    .Name("sortd_requests_total")
                    .Help("RPCs answered, by method, gRPC status code and "
                          "execution path (cpu, gpu, none when rejected "
                          "before any engine ran)")
                    .Register(*registry_)),
      request_duration_(prometheus::BuildHistogram()
                            .Name("sortd_request_duration_seconds")
                            .Help("Server-side time from receipt of a request "
                                  "to its answer, by method and path")
                            .Register(*registry_)),
      keys_sorted_(prometheus::BuildCounter()
                       .Name("sortd_keys_sorted_total")
                       .Help("Keys sorted, by path and key type")
                       .Register(*registry_)),
      matrices_transposed_(prometheus::BuildCounter()
                               .Name("sortd_matrices_transposed_total")
                               .Help("32x32 bit matrices transposed, by path")
                               .Register(*registry_)),
      request_bytes_(prometheus::BuildCounter()
                         .Name("sortd_request_bytes_total")
                         .Help("Serialized request bytes received, by method")
                         .Register(*registry_)),
      stage_duration_(
          prometheus::BuildHistogram()
              .Name("sortd_kernel_stage_duration_seconds")
              .Help("Device time of each stage of an engine run, from "
                    "OpenCL profiling events, by device, kernel (sort, "
                    "segmented_sort, transpose) and stage (upload, transform, "
                    "histogram, scan, scatter, local_sort, merge, copy, "
                    "transpose, download)")
              .Register(*registry_)),
      cpu_fallbacks_(prometheus::BuildCounter()
                         .Name("sortd_cpu_fallbacks_total")
                         .Help("Requests the device engine failed and the CPU "
                               "path answered, by reason (the engine's status "
                               "code, or engine_unhealthy)")
                         .Register(*registry_)) {
  prometheus::BuildGauge()
      .Name("sortd_build_info")
      .Help("Always 1; the label carries the sortd version")
      .Register(*registry_)
      .Add({{"version", SORTD_VERSION}})
      .Set(1);
}

absl::StatusOr<std::unique_ptr<Metrics>> Metrics::Create(
    const std::string& listen) {
  std::unique_ptr<Metrics> m(new Metrics());
  if (listen.empty()) return m;
  try {
    m->exposer_ = std::make_unique<prometheus::Exposer>(listen);
  } catch (const std::exception& e) {
    return absl::UnavailableError(
        absl::StrCat("cannot serve metrics on ", listen, ": ", e.what()));
  }
  m->exposer_->RegisterCollectable(m->registry_);
  return m;
}

std::vector<int> Metrics::listening_ports() const {
  return exposer_ ? exposer_->GetListeningPorts() : std::vector<int>{};
}

void Metrics::RecordRequest(std::string_view method, std::string_view code,
                            std::string_view path, double seconds) {
  requests_
      .Add({{"method", std::string(method)},
            {"code", std::string(code)},
            {"path", std::string(path)}})
      .Increment();
  request_duration_
      .Add({{"method", std::string(method)}, {"path", std::string(path)}},
           LatencyBuckets())
      .Observe(seconds);
}

void Metrics::AddKeysSorted(std::string_view path, std::string_view dtype,
                            double keys) {
  keys_sorted_.Add({{"path", std::string(path)}, {"dtype", std::string(dtype)}})
      .Increment(keys);
}

void Metrics::AddMatricesTransposed(std::string_view path, double matrices) {
  matrices_transposed_.Add({{"path", std::string(path)}}).Increment(matrices);
}

void Metrics::ObserveStage(std::string_view device, std::string_view kernel,
                           std::string_view stage, double seconds) {
  stage_duration_
      .Add({{"device", std::string(device)},
            {"kernel", std::string(kernel)},
            {"stage", std::string(stage)}},
           StageBuckets())
      .Observe(seconds);
}

void Metrics::AddCpuFallback(std::string_view reason) {
  cpu_fallbacks_.Add({{"reason", std::string(reason)}}).Increment();
}

void Metrics::AddRequestBytes(std::string_view method, double bytes) {
  request_bytes_.Add({{"method", std::string(method)}}).Increment(bytes);
}

}  // namespace sortd
