// sortd's Prometheus metrics: one registry, exposed over HTTP at /metrics
// when a listen address is given. Recording methods are thread-safe.
//
//   auto metrics = Metrics::Create("127.0.0.1:9464");
//   (*metrics)->RecordRequest("Sort", "OK", "cpu", 1000, 0.004);
//
// Path labels: cpu (the oneTBB CPU path), gpu (an OpenCL GPU), opencl-cpu
// (the OpenCL CPU device, PoCL: serving without a GPU), none (rejected
// before any engine ran).
#ifndef SORTD_SERVER_METRICS_H_
#define SORTD_SERVER_METRICS_H_

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "core/mutex.h"
#include "prometheus/counter.h"
#include "prometheus/exposer.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"
#include "server/scheduler.h"

namespace sortd {

// Also the scheduler's listener: batches, routes, queue depth, devices.
class Metrics final : public SchedulerListener {
 public:
  // Starts the HTTP exposer on `listen` ("host:port"; port 0 picks a free
  // one); an empty address keeps the metrics in memory only.
  static absl::StatusOr<std::unique_ptr<Metrics>> Create(
      const std::string& listen);

  // Ports the exposer is bound to (empty without one).
  std::vector<int> listening_ports() const;

  // `units`: keys of a sort, rows of a transpose (32 a matrix), 0 when the
  // request was refused before it was read; the duration's `size` label is
  // its class (SizeClass).
  void RecordRequest(std::string_view method, std::string_view code,
                     std::string_view path, size_t units, double seconds);
  // "none" (0), "1k", "64k", "1m", "16m" (at most that many units), or
  // "over_16m".
  static std::string_view SizeClass(size_t units);
  void AddKeysSorted(std::string_view path, std::string_view dtype,
                     double keys);
  void AddMatricesTransposed(std::string_view path, double matrices);
  void AddRequestBytes(std::string_view method, double bytes);
  void AddKeyBytesSaved(std::string_view method, double bytes);
  // Device time of one stage of one engine run (OpenCL profiling events).
  void ObserveStage(std::string_view device, std::string_view kernel,
                    std::string_view stage, double seconds);
  // A request the engine failed and the CPU path answered instead.
  void AddCpuFallback(std::string_view reason);

  // Time from arrival to the start of a request's run.
  void ObserveQueueWait(std::string_view method, double seconds);
  // The router's thresholds, in keys (32 per matrix for transposes).
  void SetThresholds(const Thresholds& sort, const Thresholds& transpose,
                     size_t sort_in_place_min);

  // sortd_fault_injection_enabled: 1 while --inject_faults arms injected
  // device faults (tests only), else 0.
  void SetFaultInjection(bool enabled);

  // Resident memory of sortd, and an idle heap trim when `trimmed`.
  // After an idle trim check (the process's memory itself is in the
  // standard process_* metrics, read at each scrape).
  void RecordMemory(bool trimmed, double released_bytes);

  // Bytes admitted for requests now (sortd_held_bytes), and their bound.
  void SetHeldBytes(double bytes);
  void SetHeldBytesLimit(double bytes);
  // Parts of arrays waiting for their others, and their message bytes.
  void SetWaitingParts(double parts, double bytes);

  // SchedulerListener.
  void OnRoute(Op op, Route route) override;
  void OnBatch(Op op, const std::string& device, size_t requests,
               size_t units) override;
  void OnStages(const std::string& device, const char* kernel,
                const StageTimes& stages) override;
  void OnCpuFallback(std::string_view reason) override {
    AddCpuFallback(reason);
  }
  void OnQueue(size_t queued_units, size_t queued_requests,
               size_t inflight_requests) override;
  void OnDeviceLateness(Op op, double factor) override;
  void OnDeviceState(const std::string& device, bool up) override;
  void OnDeviceInfo(const std::string& device, const std::string& vendor,
                    const std::string& driver) override;
  void OnDeviceMemory(
      const std::string& device,
      const std::vector<std::pair<std::string, double>>& bytes) override;
  // sortd_device_failovers_total{device}: counted against the device that
  // failed the requests (the series every device has from its start, so
  // that a dashboard repeated by device finds it).
  // Adds what the device's transfers moved since the last call to
  // sortd_device_transfer_bytes_total; a total below the last one is an
  // engine created again, counted from zero.
  void OnDeviceTransfers(const std::string& device,
                         const Sorter::TransferBytes& bytes) override
      ABSL_LOCKS_EXCLUDED(transfers_mu_);
  void OnDeviceFailover(const std::string& from, const std::string& to,
                        size_t requests) override;

  prometheus::Registry& registry() { return *registry_; }

  // What /metrics serves: the registry, after the gauges read at scrape
  // time (the router's device lateness) are brought up to date.
  std::vector<prometheus::MetricFamily> Collect() const;

  // Where each scrape reads the router's device lateness by operation (the
  // scheduler's, which fades between answers); empty: the gauges keep what
  // OnDeviceLateness last set. Clear it before the source goes away: it
  // returns once no scrape is reading it.
  void SetLatenessSource(std::function<double(Op)> source);

  // What each scrape reads for sortd_shm_regions and
  // sortd_shm_adopted_bytes (the region registry's counts); empty: 0.
  // Clear it before the registry goes away, as SetLatenessSource's.
  struct SharedMemoryCounts {
    size_t regions = 0;
    size_t adopted_bytes = 0;
  };
  void SetSharedMemorySource(std::function<SharedMemoryCounts()> source);

  // Stops the HTTP endpoint at once (see the .cc for how).
  ~Metrics() override;

 private:
  Metrics();

  class Scraped;

  std::shared_ptr<prometheus::Registry> registry_;
  std::shared_ptr<prometheus::Collectable> scraped_;  // Collect(), served
  Mutex transfers_mu_;
  // The totals each device's engine last reported.
  std::map<std::string, Sorter::TransferBytes> transfers_seen_
      ABSL_GUARDED_BY(transfers_mu_);
  mutable Mutex lateness_mu_;
  std::function<double(Op)> lateness_source_ ABSL_GUARDED_BY(lateness_mu_);
  std::function<SharedMemoryCounts()> shm_source_ ABSL_GUARDED_BY(lateness_mu_);
  std::shared_ptr<prometheus::Collectable> process_;
  std::unique_ptr<prometheus::Exposer> exposer_;
  std::string listen_host_;  // where the exposer listens, for ~Metrics
  prometheus::Family<prometheus::Counter>& requests_;
  prometheus::Family<prometheus::Histogram>& request_duration_;
  prometheus::Family<prometheus::Counter>& keys_sorted_;
  prometheus::Family<prometheus::Counter>& matrices_transposed_;
  prometheus::Family<prometheus::Counter>& request_bytes_;
  prometheus::Family<prometheus::Counter>& key_bytes_saved_;
  prometheus::Family<prometheus::Histogram>& stage_duration_;
  prometheus::Family<prometheus::Counter>& cpu_fallbacks_;
  prometheus::Family<prometheus::Counter>& device_failovers_;
  prometheus::Family<prometheus::Histogram>& queue_wait_;
  prometheus::Family<prometheus::Histogram>& batch_requests_;
  prometheus::Family<prometheus::Histogram>& batch_keys_;
  prometheus::Family<prometheus::Counter>& batches_;
  prometheus::Family<prometheus::Counter>& routed_;
  prometheus::Family<prometheus::Gauge>& thresholds_;
  prometheus::Family<prometheus::Gauge>& device_up_;
  prometheus::Family<prometheus::Gauge>& device_info_;
  prometheus::Family<prometheus::Gauge>& device_memory_;
  prometheus::Family<prometheus::Gauge>& device_lateness_;
  prometheus::Family<prometheus::Counter>& device_transfers_;
  prometheus::Gauge& late_sort_;
  prometheus::Gauge& late_transpose_;
  prometheus::Gauge& queued_keys_;
  prometheus::Gauge& queued_requests_;
  prometheus::Gauge& inflight_requests_;
  prometheus::Gauge& held_bytes_;
  prometheus::Gauge& max_held_bytes_;
  prometheus::Gauge& shm_regions_;
  prometheus::Gauge& shm_adopted_bytes_;
  prometheus::Gauge& waiting_parts_;
  prometheus::Gauge& waiting_part_bytes_;
  prometheus::Counter& heap_trims_;
  prometheus::Counter& heap_trimmed_bytes_;
  prometheus::Gauge& fault_injection_;
};

}  // namespace sortd

#endif  // SORTD_SERVER_METRICS_H_
