#include "server/metrics.h"

#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <exception>
#include <limits>
#include <thread>

#include "absl/strings/str_cat.h"
#include "core/version.h"
#include "prometheus/gauge.h"
#include "server/process_metrics.h"

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

// Queue waits run from a few microseconds (an idle CPU path) to seconds.
prometheus::Histogram::BucketBoundaries QueueBuckets() {
  return {5e-6,   10e-6,  25e-6, 50e-6, 100e-6, 250e-6, 500e-6,
          1e-3,   2.5e-3, 5e-3,  10e-3, 25e-3,  50e-3,  100e-3,
          250e-3, 500e-3, 1.0,   2.5,   10.0};
}

// Requests per batch: 1 to 1024.
prometheus::Histogram::BucketBoundaries BatchRequestBuckets() {
  return {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024};
}

// Keys per batch: 64 to 16M, by fours.
prometheus::Histogram::BucketBoundaries BatchKeyBuckets() {
  prometheus::Histogram::BucketBoundaries b;
  for (double v = 64; v <= double(1 << 24); v *= 4) b.push_back(v);
  return b;
}

// Every metric family's name and help, as /metrics shows them; the
// constants below are grouped by subject, in the order Metrics() registers
// the families.
struct Doc {
  const char* name;
  const char* help;
};

// The requests and their answers.
constexpr Doc kRequests = {
    "sortd_requests_total",
    "RPCs answered, by method, gRPC status code and execution path (cpu, gpu, "
    "opencl-cpu for the OpenCL CPU device, none when rejected before any "
    "engine ran)"};
constexpr Doc kRequestDuration = {
    "sortd_request_duration_seconds",
    "Server-side time from receipt of a request to its answer, by method, "
    "path and size class (keys of a sort, rows of a transpose: none, 1k, "
    "64k, 1m, 16m as at most that many, over_16m)"};
constexpr Doc kKeysSorted = {"sortd_keys_sorted_total",
                             "Keys sorted and answered, by path and key type"};
constexpr Doc kMatricesTransposed = {"sortd_matrices_transposed_total",
                                     "32x32 bit matrices transposed, by path"};
constexpr Doc kRequestBytes = {"sortd_request_bytes_total",
                               "Serialized request bytes received, by method"};
constexpr Doc kKeyBytesSaved = {
    "sortd_response_key_bytes_saved_total",
    "Response bytes saved by sending sorted keys compact "
    "(response_key_coding), by method"};

// Device runs: their stages, and the requests failed devices passed on.
constexpr Doc kStageDuration = {
    "sortd_kernel_stage_duration_seconds",
    "Device time of each stage of an engine run, from OpenCL profiling events, "
    "by device, kernel (sort, segmented_sort, transpose) and stage (upload, "
    "transform, histogram, scan, scatter, local_sort, merge, copy, transpose, "
    "download; host_pack, host_unpack and host_merge are host wall time around "
    "a run; host_enqueue and host_wait the host's wall time enqueuing a run "
    "and waiting for it, device_span the device's time from the run's first "
    "command to its last)"};
constexpr Doc kCpuFallbacks = {
    "sortd_cpu_fallbacks_total",
    "Requests the CPU path answered instead of a device, by reason: the "
    "device's status code when it failed a batch, or no_healthy_device"};
constexpr Doc kDeviceFailovers = {
    "sortd_device_failovers_total",
    "Requests a device failed that another device then took instead of the "
    "CPU path, by the device that failed them (0 from the start for every "
    "device)"};

// Batching and routing: the waits, the batches formed, the routes taken and
// the router's thresholds.
constexpr Doc kQueueWait = {
    "sortd_queue_wait_seconds",
    "Time from a request's arrival to the start of its run (batching delay and "
    "queueing), by method"};
constexpr Doc kBatchRequests = {
    "sortd_batch_requests",
    "Requests in each device run the scheduler formed, by operation"};
constexpr Doc kBatchKeys = {
    "sortd_batch_keys",
    "Keys in each device run (32 per matrix for transposes), by operation"};
constexpr Doc kBatches = {
    "sortd_device_runs_total",
    "Device runs (one launch sequence each: a batch or a lone request), by "
    "operation and device"};
constexpr Doc kRouted = {
    "sortd_routed_requests_total",
    "Requests by operation and route: cpu (small), batch, solo (large), spill "
    "(devices backed up), failover (no healthy device)"};
constexpr Doc kThresholds = {
    "sortd_router_threshold_keys",
    "The router's boundaries in keys (32 per matrix for transposes): "
    "sort_cpu_max, sort_solo_min, transpose_cpu_max, transpose_solo_min; "
    "sort_spill_max, transpose_spill_max: the largest requests that may "
    "spill to the CPU path while the devices are backed up; "
    "sort_in_place_min: batched sorts in page-locked memory of this many "
    "keys a request or more are sorted where they lie, smaller ones "
    "packed"};

// The devices: health, identity, memory and lateness.
constexpr Doc kDeviceUp = {
    "sortd_device_up",
    "1 while a device engine serves, 0 while it is unhealthy and being "
    "re-created"};
constexpr Doc kDeviceInfo = {
    "sortd_device_info",
    "Always 1 per device worker; labels: device name, vendor, driver version"};
constexpr Doc kDeviceMemory = {
    "sortd_device_memory_bytes",
    "Device memory by kind: total (the device's), in_use (buffers of running "
    "work), pooled (idle, kept for reuse), pinned_staging (host staging)"};
constexpr Doc kDeviceTransfers = {
    "sortd_device_transfer_bytes_total",
    "Host bytes moved to and from each device, by path: direct (the device "
    "read or wrote them where they lie: page-locked request and answer "
    "buffers, adopted shared-memory regions) or staged (copied through the "
    "engine's page-locked staging buffers first, one more host copy; "
    "--host_pinned_max_bytes bounds the page-locked buffers)"};
constexpr Doc kDeviceLateness = {
    "sortd_router_device_lateness",
    "How much later than the router estimated the devices have lately "
    "answered requests overflowed from the CPU path, by operation, as the "
    "router sees it at the scrape (1: on time); spill and overflow scale "
    "device estimates by it, and it fades towards 1 with a 30 s half-life "
    "between answers"};

// Admission: what is queued, in flight and held.
constexpr Doc kQueuedKeys = {
    "sortd_queued_keys",
    "Keys of requests waiting to run (32 per matrix for transposes)"};
constexpr Doc kQueuedRequests = {"sortd_queued_requests",
                                 "Requests waiting to run"};
constexpr Doc kInflightRequests = {
    "sortd_inflight_requests",
    "Requests admitted and not yet answered (queued or running)"};
constexpr Doc kHeldBytes = {
    "sortd_held_bytes",
    "Memory admitted for requests, in bytes: what every call holds and will "
    "hold (received messages, stream arrays, waiting parts, answers, CPU "
    "scratch), charged before it is held; at most sortd_max_held_bytes"};
constexpr Doc kMaxHeldBytes = {
    "sortd_max_held_bytes",
    "The bound on sortd_held_bytes (--max_held_bytes): beyond it new calls "
    "and stream messages get RESOURCE_EXHAUSTED"};

// Shared memory.
constexpr Doc kShmRegions = {
    "sortd_shm_regions",
    "Shared-memory regions registered through --shm_socket, all clients"};
constexpr Doc kShmAdoptedBytes = {
    "sortd_shm_adopted_bytes",
    "Bytes of those regions page-locked for GPU transfers now "
    "(--shm_pinned), each region counted once; at most "
    "--shm_pinned_max_bytes"};

// Arrays sent as several parts.
constexpr Doc kWaitingParts = {
    "sortd_waiting_parts",
    "Parts of arrays sent as several Sort calls (SortRequest.part) waiting "
    "for the others"};
constexpr Doc kWaitingPartBytes = {"sortd_waiting_part_bytes",
                                   "Message bytes of those waiting parts"};

// Housekeeping: heap trims and fault injection.
constexpr Doc kHeapTrims = {
    "sortd_heap_trims_total",
    "Times sortd gave free heap memory back to the system after going idle "
    "(--idle_trim_interval)"};
constexpr Doc kHeapTrimmedBytes = {"sortd_heap_trimmed_bytes_total",
                                   "Resident bytes released by those trims"};
constexpr Doc kFaultInjection = {
    "sortd_fault_injection_enabled",
    "1 when sortd was started with --inject_faults: device runs fail on "
    "purpose (tests only; never in production)"};

prometheus::Family<prometheus::Gauge>& Gauges(prometheus::Registry& r,
                                              const Doc& doc) {
  return prometheus::BuildGauge().Name(doc.name).Help(doc.help).Register(r);
}

prometheus::Family<prometheus::Counter>& Counters(prometheus::Registry& r,
                                                  const Doc& doc) {
  return prometheus::BuildCounter().Name(doc.name).Help(doc.help).Register(r);
}

prometheus::Family<prometheus::Histogram>& Histograms(prometheus::Registry& r,
                                                      const Doc& doc) {
  return prometheus::BuildHistogram().Name(doc.name).Help(doc.help).Register(r);
}

}  // namespace

// The exposer's view of a Metrics: Collect() at each scrape.
class Metrics::Scraped : public prometheus::Collectable {
 public:
  explicit Scraped(const Metrics* m) : m_(m) {}
  std::vector<prometheus::MetricFamily> Collect() const override {
    return m_->Collect();
  }

 private:
  const Metrics* m_;
};

Metrics::Metrics()
    : registry_(std::make_shared<prometheus::Registry>()),
      scraped_(std::make_shared<Scraped>(this)),
      process_(std::make_shared<ProcessCollector>()),
      requests_(Counters(*registry_, kRequests)),
      request_duration_(Histograms(*registry_, kRequestDuration)),
      keys_sorted_(Counters(*registry_, kKeysSorted)),
      matrices_transposed_(Counters(*registry_, kMatricesTransposed)),
      request_bytes_(Counters(*registry_, kRequestBytes)),
      key_bytes_saved_(Counters(*registry_, kKeyBytesSaved)),
      stage_duration_(Histograms(*registry_, kStageDuration)),
      cpu_fallbacks_(Counters(*registry_, kCpuFallbacks)),
      device_failovers_(Counters(*registry_, kDeviceFailovers)),
      queue_wait_(Histograms(*registry_, kQueueWait)),
      batch_requests_(Histograms(*registry_, kBatchRequests)),
      batch_keys_(Histograms(*registry_, kBatchKeys)),
      batches_(Counters(*registry_, kBatches)),
      routed_(Counters(*registry_, kRouted)),
      thresholds_(Gauges(*registry_, kThresholds)),
      device_up_(Gauges(*registry_, kDeviceUp)),
      device_info_(Gauges(*registry_, kDeviceInfo)),
      device_memory_(Gauges(*registry_, kDeviceMemory)),
      device_lateness_(Gauges(*registry_, kDeviceLateness)),
      device_transfers_(Counters(*registry_, kDeviceTransfers)),
      late_sort_(device_lateness_.Add({{"op", "sort"}})),
      late_transpose_(device_lateness_.Add({{"op", "transpose"}})),
      queued_keys_(Gauges(*registry_, kQueuedKeys).Add({})),
      queued_requests_(Gauges(*registry_, kQueuedRequests).Add({})),
      inflight_requests_(Gauges(*registry_, kInflightRequests).Add({})),
      held_bytes_(Gauges(*registry_, kHeldBytes).Add({})),
      max_held_bytes_(Gauges(*registry_, kMaxHeldBytes).Add({})),
      shm_regions_(Gauges(*registry_, kShmRegions).Add({})),
      shm_adopted_bytes_(Gauges(*registry_, kShmAdoptedBytes).Add({})),
      waiting_parts_(Gauges(*registry_, kWaitingParts).Add({})),
      waiting_part_bytes_(Gauges(*registry_, kWaitingPartBytes).Add({})),
      heap_trims_(Counters(*registry_, kHeapTrims).Add({})),
      heap_trimmed_bytes_(Counters(*registry_, kHeapTrimmedBytes).Add({})),
      fault_injection_(Gauges(*registry_, kFaultInjection).Add({})) {
  fault_injection_.Set(0);
  prometheus::BuildGauge()
      .Name("sortd_build_info")
      .Help("Always 1; the labels carry the sortd version and git revision")
      .Register(*registry_)
      .Add({{"version", Version()}, {"revision", GitRevision()}})
      .Set(1);
}

std::vector<prometheus::MetricFamily> Metrics::Collect() const {
  {
    MutexLock lock(&lateness_mu_);
    if (lateness_source_) {
      late_sort_.Set(lateness_source_(Op::kSort));
      late_transpose_.Set(lateness_source_(Op::kTranspose));
    }
    if (shm_source_) {
      const SharedMemoryCounts counts = shm_source_();
      shm_regions_.Set(static_cast<double>(counts.regions));
      shm_adopted_bytes_.Set(static_cast<double>(counts.adopted_bytes));
    }
  }
  return registry_->Collect();
}

void Metrics::SetSharedMemorySource(
    std::function<SharedMemoryCounts()> source) {
  MutexLock lock(&lateness_mu_);
  shm_source_ = std::move(source);
}

void Metrics::SetLatenessSource(std::function<double(Op)> source) {
  MutexLock lock(&lateness_mu_);
  lateness_source_ = std::move(source);
}

absl::StatusOr<std::unique_ptr<Metrics>> Metrics::Create(
    const std::string& listen) {
  std::unique_ptr<Metrics> m(new Metrics());
  if (listen.empty()) return m;
  try {
    m->exposer_ = std::make_unique<prometheus::Exposer>(listen);
    m->listen_host_ = listen.substr(0, listen.rfind(':'));
  } catch (const std::exception& e) {
    return absl::UnavailableError(
        absl::StrCat("cannot serve metrics on ", listen, ": ", e.what()));
  }
  m->exposer_->RegisterCollectable(m->scraped_);
  m->exposer_->RegisterCollectable(m->process_);
  return m;
}

// civetweb's listener thread waits for connections in 2-second polls and
// checks for a stop only between them, so a plain stop takes up to 2 s.
// While the exposer stops, a helper connects to its port every 20 ms: the
// poll returns, the listener sees the stop flag and exits.
Metrics::~Metrics() {
  if (exposer_ == nullptr) return;
  const std::vector<int> ports = exposer_->GetListeningPorts();
  std::atomic<bool> stopped{false};
  std::thread waker;
  if (!ports.empty()) {
    std::string host = listen_host_;
    if (host.empty() || host == "0.0.0.0") host = "127.0.0.1";
    if (host == "[::]" || host == "::") host = "::1";
    if (host.size() > 2 && host.front() == '[') {
      host = host.substr(1, host.size() - 2);
    }
    const int port = ports.front();
    waker = std::thread([&stopped, host, port] {
      addrinfo hints{};
      hints.ai_socktype = SOCK_STREAM;
      addrinfo* addr = nullptr;
      if (getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints,
                      &addr) != 0) {
        return;
      }
      while (!stopped.load()) {
        const int fd =
            socket(addr->ai_family, addr->ai_socktype, addr->ai_protocol);
        if (fd >= 0) {
          connect(fd, addr->ai_addr, addr->ai_addrlen);
          close(fd);
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
      freeaddrinfo(addr);
    });
  }
  exposer_.reset();
  stopped = true;
  if (waker.joinable()) waker.join();
}

std::vector<int> Metrics::listening_ports() const {
  return exposer_ ? exposer_->GetListeningPorts() : std::vector<int>{};
}

std::string_view Metrics::SizeClass(size_t units) {
  if (units == 0) return "none";
  if (units <= (size_t{1} << 10)) return "1k";
  if (units <= (size_t{1} << 16)) return "64k";
  if (units <= (size_t{1} << 20)) return "1m";
  if (units <= (size_t{1} << 24)) return "16m";
  return "over_16m";
}

void Metrics::RecordRequest(std::string_view method, std::string_view code,
                            std::string_view path, size_t units,
                            double seconds) {
  requests_
      .Add({{"method", std::string(method)},
            {"code", std::string(code)},
            {"path", std::string(path)}})
      .Increment();
  request_duration_
      .Add({{"method", std::string(method)},
            {"path", std::string(path)},
            {"size", std::string(SizeClass(units))}},
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

void Metrics::ObserveQueueWait(std::string_view method, double seconds) {
  queue_wait_.Add({{"method", std::string(method)}}, QueueBuckets())
      .Observe(seconds);
}

void Metrics::SetThresholds(const Thresholds& sort, const Thresholds& transpose,
                            size_t sort_in_place_min) {
  auto set = [&](const char* boundary, size_t v) {
    thresholds_.Add({{"boundary", boundary}})
        .Set(v == SIZE_MAX ? std::numeric_limits<double>::infinity()
                           : static_cast<double>(v));
  };
  set("sort_cpu_max", sort.cpu_max);
  set("sort_solo_min", sort.solo_min);
  set("transpose_cpu_max", transpose.cpu_max);
  set("transpose_solo_min", transpose.solo_min);
  set("sort_spill_max", sort.spill_max);
  set("transpose_spill_max", transpose.spill_max);
  set("sort_in_place_min", sort_in_place_min);
}

void Metrics::OnRoute(Op op, Route route) {
  routed_.Add({{"op", OpName(op)}, {"route", RouteName(route)}}).Increment();
}

void Metrics::OnBatch(Op op, const std::string& device, size_t requests,
                      size_t units) {
  batches_.Add({{"op", OpName(op)}, {"device", device}}).Increment();
  batch_requests_.Add({{"op", OpName(op)}}, BatchRequestBuckets())
      .Observe(static_cast<double>(requests));
  batch_keys_.Add({{"op", OpName(op)}}, BatchKeyBuckets())
      .Observe(static_cast<double>(units));
}

void Metrics::OnStages(const std::string& device, const char* kernel,
                       const StageTimes& stages) {
  for (const StageTime& st : stages) {
    ObserveStage(device, kernel, st.stage, st.seconds);
  }
}

void Metrics::RecordMemory(bool trimmed, double released_bytes) {
  if (trimmed) {
    heap_trims_.Increment();
    heap_trimmed_bytes_.Increment(released_bytes);
  }
}

void Metrics::SetFaultInjection(bool enabled) {
  fault_injection_.Set(enabled ? 1 : 0);
}

void Metrics::OnQueue(size_t queued_units, size_t queued_requests,
                      size_t inflight_requests) {
  queued_keys_.Set(static_cast<double>(queued_units));
  queued_requests_.Set(static_cast<double>(queued_requests));
  inflight_requests_.Set(static_cast<double>(inflight_requests));
}

void Metrics::SetHeldBytes(double bytes) { held_bytes_.Set(bytes); }

void Metrics::SetHeldBytesLimit(double bytes) { max_held_bytes_.Set(bytes); }

void Metrics::SetWaitingParts(double parts, double bytes) {
  waiting_parts_.Set(parts);
  waiting_part_bytes_.Set(bytes);
}

void Metrics::OnDeviceLateness(Op op, double factor) {
  (op == Op::kSort ? late_sort_ : late_transpose_).Set(factor);
}

void Metrics::OnDeviceState(const std::string& device, bool up) {
  device_up_.Add({{"device", device}}).Set(up ? 1 : 0);
}

void Metrics::OnDeviceInfo(const std::string& device, const std::string& vendor,
                           const std::string& driver) {
  device_info_.Add({{"device", device}, {"vendor", vendor}, {"driver", driver}})
      .Set(1);
  // Every device's series exists before its first failure, so that rates
  // and increases over it start from 0 rather than from nothing.
  device_failovers_.Add({{"device", device}});
}

void Metrics::OnDeviceFailover(const std::string& from,
                               const std::string& /*to*/, size_t requests) {
  device_failovers_.Add({{"device", from}})
      .Increment(static_cast<double>(requests));
}

void Metrics::OnDeviceMemory(
    const std::string& device,
    const std::vector<std::pair<std::string, double>>& bytes) {
  for (const auto& [kind, value] : bytes) {
    device_memory_.Add({{"device", device}, {"kind", kind}}).Set(value);
  }
}

void Metrics::OnDeviceTransfers(const std::string& device,
                                const Sorter::TransferBytes& bytes) {
  Sorter::TransferBytes added;
  {
    MutexLock lock(&transfers_mu_);
    Sorter::TransferBytes& seen = transfers_seen_[device];
    auto since = [](uint64_t now, uint64_t before) {
      return now >= before ? now - before : now;
    };
    added = {since(bytes.staged, seen.staged),
             since(bytes.direct, seen.direct)};
    seen = bytes;
  }
  device_transfers_.Add({{"device", device}, {"path", "staged"}})
      .Increment(static_cast<double>(added.staged));
  device_transfers_.Add({{"device", device}, {"path", "direct"}})
      .Increment(static_cast<double>(added.direct));
}

void Metrics::AddRequestBytes(std::string_view method, double bytes) {
  request_bytes_.Add({{"method", std::string(method)}}).Increment(bytes);
}

void Metrics::AddKeyBytesSaved(std::string_view method, double bytes) {
  key_bytes_saved_.Add({{"method", std::string(method)}}).Increment(bytes);
}

}  // namespace sortd
