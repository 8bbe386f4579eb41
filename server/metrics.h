// sortd's Prometheus metrics: one registry, exposed over HTTP at /metrics
// when a listen address is given. Recording methods are thread-safe.
//
//   auto metrics = Metrics::Create("127.0.0.1:9464");
//   (*metrics)->RecordRequest("Sort", "OK", "cpu", 0.004);
#ifndef SORTD_SERVER_METRICS_H_
#define SORTD_SERVER_METRICS_H_

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "prometheus/counter.h"
#include "prometheus/exposer.h"
#include "prometheus/family.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"

namespace sortd {

class Metrics {
 public:
  // Starts the HTTP exposer on `listen` ("host:port"; port 0 picks a free
  // one); an empty address keeps the metrics in memory only.
  static absl::StatusOr<std::unique_ptr<Metrics>> Create(
      const std::string& listen);

  // Ports the exposer is bound to (empty without one).
  std::vector<int> listening_ports() const;

  void RecordRequest(std::string_view method, std::string_view code,
                     std::string_view path, double seconds);
  void AddKeysSorted(std::string_view path, std::string_view dtype,
                     double keys);
  void AddMatricesTransposed(std::string_view path, double matrices);
  void AddRequestBytes(std::string_view method, double bytes);
  // Device time of one stage of one engine run (OpenCL profiling events).
  void ObserveStage(std::string_view device, std::string_view kernel,
                    std::string_view stage, double seconds);
  // A request the engine failed and the CPU path answered instead.
  void AddCpuFallback(std::string_view reason);

  prometheus::Registry& registry() { return *registry_; }

 private:
  Metrics();

  std::shared_ptr<prometheus::Registry> registry_;
  std::unique_ptr<prometheus::Exposer> exposer_;
  prometheus::Family<prometheus::Counter>& requests_;
  prometheus::Family<prometheus::Histogram>& request_duration_;
  prometheus::Family<prometheus::Counter>& keys_sorted_;
  prometheus::Family<prometheus::Counter>& matrices_transposed_;
  prometheus::Family<prometheus::Counter>& request_bytes_;
  prometheus::Family<prometheus::Histogram>& stage_duration_;
  prometheus::Family<prometheus::Counter>& cpu_fallbacks_;
};

}  // namespace sortd

#endif  // SORTD_SERVER_METRICS_H_
