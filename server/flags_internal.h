// What the files defining sortd's flags share: the declarations of every
// flag (each defined in the file of its subject: flags.cc the gRPC port,
// metrics endpoint and service; flags_memory.cc request sizes and memory
// limits; flags_devices.cc the devices and their engines;
// flags_scheduling.cc batching, queues and routing; flags_shm.cc shared
// memory), and the per-subject checks and readers SortdOptionsFromFlags
// (flags.cc) assembles the options from. Not part of flags.h's interface.
#ifndef SORTD_SERVER_FLAGS_INTERNAL_H_
#define SORTD_SERVER_FLAGS_INTERNAL_H_

#include <cstdint>
#include <string>

#include "absl/flags/declare.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "gpu/opencl_engine.h"
#include "server/engines.h"
#include "server/host_buffers.h"
#include "server/router_setup.h"
#include "server/scheduler.h"
#include "server/service.h"
#include "server/shared_memory.h"
#include "server/shm_socket.h"

// flags.cc: the gRPC port, the metrics endpoint and the service.
ABSL_DECLARE_FLAG(std::string, listen);
ABSL_DECLARE_FLAG(std::string, metrics_listen);
ABSL_DECLARE_FLAG(bool, echo);
ABSL_DECLARE_FLAG(absl::Duration, part_timeout);
ABSL_DECLARE_FLAG(absl::Duration, drain_timeout);
ABSL_DECLARE_FLAG(absl::Duration, idle_trim_interval);
ABSL_DECLARE_FLAG(std::string, tls_cert);
ABSL_DECLARE_FLAG(std::string, tls_key);
ABSL_DECLARE_FLAG(std::string, tls_client_ca);
ABSL_DECLARE_FLAG(bool, log_requests);

// flags_memory.cc: request sizes, memory limits and the host pools.
ABSL_DECLARE_FLAG(int64_t, max_request_bytes);
ABSL_DECLARE_FLAG(int64_t, max_stream_bytes);
ABSL_DECLARE_FLAG(int64_t, max_held_bytes);
ABSL_DECLARE_FLAG(int64_t, max_call_bytes);
ABSL_DECLARE_FLAG(int64_t, max_client_held_bytes);
ABSL_DECLARE_FLAG(absl::Duration, stream_idle_timeout);
ABSL_DECLARE_FLAG(int64_t, large_request_bytes);
ABSL_DECLARE_FLAG(int, large_request_threads);
ABSL_DECLARE_FLAG(int64_t, stream_chunk_bytes);
ABSL_DECLARE_FLAG(int64_t, host_pool_bytes);
ABSL_DECLARE_FLAG(int64_t, cpu_scratch_bytes);
ABSL_DECLARE_FLAG(int64_t, host_pool_min_bytes);
ABSL_DECLARE_FLAG(bool, host_pool_pinned);

// flags_devices.cc: the devices and their engines.
ABSL_DECLARE_FLAG(std::string, device);
ABSL_DECLARE_FLAG(int64_t, device_memory_bytes);
ABSL_DECLARE_FLAG(int64_t, device_pool_bytes);
ABSL_DECLARE_FLAG(int64_t, warm_up_keys);
ABSL_DECLARE_FLAG(int64_t, host_pinned_max_bytes);
ABSL_DECLARE_FLAG(int, pipeline_depth);
ABSL_DECLARE_FLAG(int, full_pipeline_depth);
ABSL_DECLARE_FLAG(absl::Duration, kernel_profile_interval);
ABSL_DECLARE_FLAG(absl::Duration, reinit_backoff);
ABSL_DECLARE_FLAG(bool, sub_devices);
ABSL_DECLARE_FLAG(int, sub_device_units);
ABSL_DECLARE_FLAG(std::string, kernel_policy);
ABSL_DECLARE_FLAG(std::string, kernel_policy_overrides);
ABSL_DECLARE_FLAG(std::string, kernel_cache_dir);
ABSL_DECLARE_FLAG(std::string, inject_faults);

// flags_scheduling.cc: the CPU path's threads, batching, queues, routing.
ABSL_DECLARE_FLAG(int, cpu_threads);
ABSL_DECLARE_FLAG(int, request_threads);
ABSL_DECLARE_FLAG(absl::Duration, max_batch_delay);
ABSL_DECLARE_FLAG(int64_t, max_batch_keys);
ABSL_DECLARE_FLAG(int, max_batch_requests);
ABSL_DECLARE_FLAG(int64_t, max_queued_keys);
ABSL_DECLARE_FLAG(int64_t, max_call_keys);
ABSL_DECLARE_FLAG(int, max_queued_requests);
ABSL_DECLARE_FLAG(int, max_client_queued_requests);
ABSL_DECLARE_FLAG(int64_t, max_client_queued_keys);
ABSL_DECLARE_FLAG(int64_t, cpu_max_keys);
ABSL_DECLARE_FLAG(int64_t, solo_min_keys);
ABSL_DECLARE_FLAG(int64_t, transpose_cpu_max_matrices);
ABSL_DECLARE_FLAG(int64_t, transpose_solo_min_matrices);
ABSL_DECLARE_FLAG(int64_t, batch_in_place_min_keys);
ABSL_DECLARE_FLAG(bool, spill_to_cpu);
ABSL_DECLARE_FLAG(int64_t, split_min_keys);
ABSL_DECLARE_FLAG(int64_t, split_scratch_bytes);
ABSL_DECLARE_FLAG(int64_t, calibrate_max_keys);

// flags_shm.cc: shared memory.
ABSL_DECLARE_FLAG(std::string, shm_socket);
ABSL_DECLARE_FLAG(int64_t, shm_max_bytes);
ABSL_DECLARE_FLAG(bool, shm_pinned);
ABSL_DECLARE_FLAG(int64_t, shm_pinned_max_bytes);
ABSL_DECLARE_FLAG(int32_t, shm_max_connections);
ABSL_DECLARE_FLAG(absl::Duration, shm_idle_timeout);

namespace sortd {

// Each check returns INVALID_ARGUMENT naming the flags (of its subject, or
// those its bound depends on) when one is out of range; SortdOptionsFromFlags
// runs them in the order below, so the first error is always the same one.

// flags_memory.cc.
absl::Status CheckRequestSizeFlag();
absl::Status CheckBufferFlags();
absl::Status CheckHeldBytesFlags();
absl::Status CheckLargeRequestFlags();
// The service's options but its buffers and regions.
SortServiceImpl::Options ServiceOptions();
HostBufferPool::Options HostBufferOptions();
absl::string_view MemoryFlagsFile();

// flags_scheduling.cc.
absl::Status CheckThreadFlags();
absl::Status CheckQueueFlags();
absl::Status CheckClientQueueFlags();
absl::Status CheckBatchDelayFlag();
// The scheduler's options but its CPU workers and router thresholds.
Scheduler::Options SchedulerOptions();
RouterPins RouterPinsFromFlags();
absl::string_view SchedulingFlagsFile();

// flags_devices.cc: the engine options every device shares, checked.
absl::StatusOr<gpu::OpenClEngine::Options> EngineBase();
EngineSetup EngineSetupFromFlags(const gpu::OpenClEngine::Options& base);
absl::string_view DeviceFlagsFile();

// flags_shm.cc.
RegionRegistry::Options RegionOptions();
ShmSocket::Options ShmSocketOptions();
absl::string_view SharedMemoryFlagsFile();

}  // namespace sortd

#endif  // SORTD_SERVER_FLAGS_INTERNAL_H_
