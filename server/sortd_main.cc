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
#include <atomic>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/time.h"
#include "core/version.h"
#include "gpu/opencl_engine.h"
#include "gpu/policy.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"
#include "server/authz_flags.h"
#include "server/calibrate.h"
#include "server/connections.h"
#include "server/cpu_sorter.h"
#include "server/engines.h"
#include "server/grpc_limits.h"
#include "server/host_buffers.h"
#include "server/log.h"
#include "server/memory.h"
#include "server/metrics.h"
#include "server/reflection_v1.h"
#include "server/scheduler.h"
#include "server/service.h"
#include "server/shared_memory.h"
#include "server/shm_socket.h"
#include "server/tls.h"

using sortd::LogLine;

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
          "Devices, comma-separated: auto (every GPU; without one the OpenCL "
          "CPU device; without that only the CPU path), gpu (every GPU), "
          "gpu:N (the N-th), opencl-cpu[:N] (an OpenCL CPU device), or cpu "
          "(the oneTBB CPU path only). Each entry gets its own worker; an "
          "entry may repeat (a second worker on the same device).");
ABSL_FLAG(int64_t, max_request_bytes, int64_t{256} << 20,
          "Largest serialized request accepted, in bytes; larger requests "
          "get RESOURCE_EXHAUSTED. gRPC's maximum receive size is set to "
          "this value. At most 2147483647.");
ABSL_FLAG(int64_t, max_stream_bytes, int64_t{4} << 30,
          "Largest array (keys plus values) one SortStream call may send, in "
          "bytes. The stream is charged up to 9 times that against "
          "--max_call_bytes and --max_held_bytes (u32 keys with a "
          "permutation and compact keys: its messages, the array joined, "
          "the answer and the radix sort's scratch; server/held_bytes.h).");
ABSL_FLAG(int64_t, max_held_bytes, int64_t{16} << 30,
          "Memory all calls together may hold, in bytes: their received "
          "messages, stream arrays, waiting parts, answers and CPU-path "
          "scratch, each charged before it is held; a call or stream message "
          "beyond it gets RESOURCE_EXHAUSTED. The container's memory limit "
          "is derived from it (deploy/README.md, \"Memory limit\").");
ABSL_FLAG(int64_t, max_call_bytes, 0,
          "Memory one call may hold, in bytes (0: half of --max_held_bytes); "
          "a call that would hold more is refused RESOURCE_EXHAUSTED up "
          "front, a stream at the message that passes it. A u32 sort with a "
          "permutation holds 8 times its keys' bytes (server/held_bytes.h).");
ABSL_FLAG(int64_t, max_client_held_bytes, 0,
          "Memory the calls of one client may hold together, in bytes (0: "
          "--max_call_bytes); a call beyond it gets RESOURCE_EXHAUSTED, so "
          "that one client cannot take the whole --max_held_bytes from the "
          "others. A client is its certificate's identity under mutual TLS, "
          "else its host.");
ABSL_FLAG(absl::Duration, stream_idle_timeout, absl::Seconds(30),
          "A SortStream on which no message comes for this long, while "
          "sortd waits for one, is ended DEADLINE_EXCEEDED (within a "
          "quarter more) and what it held released; so is one whose client "
          "takes no answer chunk for this long (cancelled). 0: never.");
ABSL_FLAG(int64_t, stream_chunk_bytes, int64_t{2} << 20,
          "Array bytes (keys, values and permutation together) per "
          "SortStream response message; the default stays under gRPC's "
          "default 4 MiB receive limit of other clients "
          "(docs/PERFORMANCE.md: chunk size measured).");
ABSL_FLAG(int64_t, device_memory_bytes, 0,
          "Device memory each OpenCL device may use, in bytes (0: 80% of its "
          "global memory). Split between its lanes (on a GPU the larger of "
          "--pipeline_depth and --full_pipeline_depth); a sort "
          "larger than a lane's share is sorted in device-sized runs merged "
          "on the CPU.");
ABSL_FLAG(int64_t, device_pool_bytes, 0,
          "Idle device memory each OpenCL device keeps for reuse, in bytes "
          "(0: on a GPU, whatever --device_memory_bytes leaves; on an OpenCL "
          "CPU device, 4 GiB). Idle and in-use memory together stay within "
          "--device_memory_bytes; the buffers idle longest are freed first.");
ABSL_FLAG(int64_t, host_pool_bytes, int64_t{1} << 30,
          "Idle host memory kept for the arrays of large requests and "
          "answers, in bytes: a reused buffer costs no page faults, a fresh "
          "64 MiB one 16384 of them. Emptied when sortd goes quiet "
          "(--idle_trim_interval); 0 turns the pool off.");
ABSL_FLAG(int64_t, cpu_scratch_bytes, int64_t{1} << 30,
          "Idle scratch memory the CPU path keeps for its sorts whose "
          "scratch is 1 MiB or more (from 44K to 128K keys by shape), in "
          "bytes: reused scratch costs no page faults (a 2^22-key u32 "
          "sort's 32 MiB cost 8193 of them, about half its time). Emptied "
          "when sortd goes quiet (--idle_trim_interval); 0 frees every "
          "sort's scratch when it ends.");
ABSL_FLAG(int64_t, host_pool_min_bytes, int64_t{256} << 10,
          "Request and answer arrays of at least this many bytes come from "
          "the pool (page-locked with --host_pool_pinned, so that batches of "
          "them are sorted where they lie); smaller ones from the heap.");
ABSL_FLAG(int64_t, host_pinned_max_bytes, int64_t{1} << 30,
          "Page-locked memory each device's engine gives out at once for "
          "request and answer arrays (--host_pool_pinned) and for packing "
          "batches; beyond, pageable memory, copied through the engine's "
          "staging buffers: NVIDIA's transfers slowed down many times over "
          "with 2-4 GiB page-locked. 0: none.");
ABSL_FLAG(bool, host_pool_pinned, true,
          "Take the pool's buffers from page-locked memory of the first "
          "OpenCL device, which its transfers read and write in place; "
          "false: pageable memory, copied through the engine's staging "
          "buffers.");
ABSL_FLAG(bool, echo, true,
          "Serve the Echo RPC: the request's arrays back unsorted through "
          "the same path as Sort, the baseline of end-to-end benchmarks.");
ABSL_FLAG(int, cpu_threads, 0,
          "Threads of the oneTBB CPU path (0: one per hardware thread).");
ABSL_FLAG(int, request_threads, 0,
          "Threads that run CPU-path requests concurrently (0: as many as "
          "the CPU path has threads, --cpu_threads or one per hardware "
          "thread, at least 2).");
ABSL_FLAG(absl::Duration, max_batch_delay, absl::Microseconds(100),
          "Longest a GPU-bound request waits for others to join its batch "
          "(100us: the best or near-best throughput and p99 for 256- to "
          "4096-key sorts at 16 and 64 clients on an H100; "
          "docs/PERFORMANCE.md).");
ABSL_FLAG(int64_t, max_batch_keys, int64_t{1} << 22,
          "A batch closes at this many keys (32 per matrix for transposes).");
ABSL_FLAG(int, max_batch_requests, 256,
          "A batch closes at this many requests.");
ABSL_FLAG(int64_t, max_queued_keys, int64_t{1} << 28,
          "Keys (32 per matrix) admitted and not yet answered, at most; "
          "beyond, new requests get RESOURCE_EXHAUSTED. A bound on queued "
          "work; memory is bounded by --max_held_bytes.");
ABSL_FLAG(std::string, shm_socket, "",
          "Unix socket (SOCK_SEQPACKET) over which co-located clients "
          "register shared-memory regions by sending a sealed memfd; "
          "requests then name a region's token and offsets instead of "
          "carrying arrays. Its directory is created (mode 2770) if missing "
          "and must be sortd's (or root's) and not writable by others; the "
          "socket is mode 0660. Empty: shared memory is off.");
ABSL_FLAG(int64_t, shm_max_bytes, int64_t{16} << 30,
          "Resident bytes all registered shared-memory regions may hold "
          "together.");
ABSL_FLAG(int32_t, shm_max_connections, 256,
          "Clients connected to --shm_socket at once, at most.");
ABSL_FLAG(absl::Duration, shm_idle_timeout, absl::Seconds(10),
          "A connection to --shm_socket that has registered no region this "
          "long after it opened is closed.");
ABSL_FLAG(int64_t, max_call_keys, 0,
          "Keys one call counts against --max_queued_keys at most (0: a "
          "quarter of it): a larger call (a long SortStream) is admitted as "
          "if it held this many, so that it cannot starve other clients. "
          "A share of the queue, not a bound on memory: --max_held_bytes "
          "charges every call all it holds.");
ABSL_FLAG(int, max_queued_requests, 4096,
          "Requests admitted and not yet answered, at most; beyond, new "
          "requests get RESOURCE_EXHAUSTED.");
ABSL_FLAG(int, max_client_queued_requests, 0,
          "Requests of one client admitted and not yet answered, at most (0: "
          "half of --max_queued_requests, but at least 64 or all of a smaller "
          "queue); beyond, that client's new "
          "requests get RESOURCE_EXHAUSTED, so that one client cannot fill "
          "the queue and have every other client refused. A client is its "
          "certificate's identity under mutual TLS, else its host.");
ABSL_FLAG(int64_t, max_client_queued_keys, 0,
          "Keys (32 per matrix) of one client's requests admitted and not "
          "yet answered, at most (0: half of --max_queued_keys), each call "
          "counting at most --max_call_keys; beyond, that client's new "
          "requests get RESOURCE_EXHAUSTED (a client's lone request is "
          "admitted whatever its size).");
ABSL_FLAG(int64_t, cpu_max_keys, -1,
          "Sorts of at most this many keys run on the CPU path without "
          "batching (-1: calibrated at startup).");
ABSL_FLAG(int64_t, solo_min_keys, -1,
          "Sorts of at least this many keys run alone on a device, not "
          "batched (-1: calibrated at startup).");
ABSL_FLAG(int64_t, transpose_cpu_max_matrices, -1,
          "Transposes of at most this many matrices run on the CPU path "
          "(-1: calibrated at startup).");
ABSL_FLAG(int64_t, transpose_solo_min_matrices, -1,
          "Transposes of at least this many matrices run alone on a device "
          "(-1: calibrated at startup).");
ABSL_FLAG(int64_t, batch_in_place_min_keys, -1,
          "Batched sorts whose arrays lie in page-locked memory (see "
          "--host_pool_min_bytes) are sorted where they lie when they hold "
          "this many keys on average, else packed: each costs the device "
          "two transfers of its own (-1: calibrated at startup, or 0 when "
          "every router threshold is pinned).");
ABSL_FLAG(bool, spill_to_cpu, true,
          "Send a small request to a device batch when the CPU path's "
          "backlog would answer it later (overflow), and a GPU-bound one to "
          "the CPU path when the devices' backlog would answer it later "
          "(spill: only sizes up to the calibrated CPU range, so only where "
          "--cpu_max_keys or --transpose_cpu_max_matrices is pinned below "
          "it). Needs calibrated costs.");
ABSL_FLAG(int, pipeline_depth, 2,
          "Batches in flight per device: while one runs, the next is "
          "gathered and packed.");
ABSL_FLAG(int, full_pipeline_depth, 3,
          "Batches in flight per GPU while the next batch is full "
          "(--max_batch_keys or --max_batch_requests) or a request alone "
          "and no longer: its transfers overlap the others' kernels (0 to "
          "16; at most "
          "--pipeline_depth: none more). OpenCL CPU devices keep "
          "--pipeline_depth.");
ABSL_FLAG(absl::Duration, kernel_profile_interval, absl::Milliseconds(10),
          "Time a device run with OpenCL profiling events (the "
          "sortd_kernel_stage_duration_seconds histogram) when no run of its "
          "kind was timed within this interval: under load one run an "
          "interval, at low rates every run. The others run on a queue "
          "without profiling, whose launches cost the host less. 0: every "
          "run; inf: none (the histogram then has only the host stages).");
ABSL_FLAG(absl::Duration, reinit_backoff, absl::Seconds(1),
          "Wait before re-creating a failed device engine; doubles on each "
          "failed attempt, up to a minute.");
ABSL_FLAG(bool, sub_devices, true,
          "Give each sub-device of a GPU that partitions by affinity domain "
          "(the tiles of Intel's multi-tile GPUs) its own worker.");
ABSL_FLAG(int, sub_device_units, 0,
          "Split each OpenCL device that partitions equally into sub-devices "
          "of this many compute units, one worker each (0: no; for tests "
          "and for sharing a CPU device).");
ABSL_FLAG(int64_t, calibrate_max_keys, int64_t{1} << 20,
          "Largest sort timed by the startup calibration.");
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
ABSL_FLAG(std::string, kernel_policy, "",
          "The engines' tuning policy by name (nvidia-ptx, intel-subgroups, "
          "gpu, cpu), fitted to each device; empty: the one its vendor and "
          "extensions get. The policy in use is logged at startup.");
ABSL_FLAG(std::string, kernel_policy_overrides, "",
          "Knobs of the policy changed after it is chosen, key=value "
          "comma-separated as the startup log prints them (e.g. "
          "radix.pass=three-launch)");
ABSL_FLAG(std::string, kernel_cache_dir, DefaultKernelCacheDir(),
          "Folder for compiled OpenCL program binaries, so that restarts "
          "skip kernel compilation; a stale or corrupt entry is rebuilt. "
          "Empty disables the disk cache.");
ABSL_FLAG(std::string, tls_cert, "",
          "PEM certificate (chain) of the gRPC port: with --tls_key, the "
          "port speaks TLS only.");
ABSL_FLAG(std::string, tls_key, "", "PEM private key for --tls_cert.");
ABSL_FLAG(std::string, tls_client_ca, "",
          "PEM CA certificates: with TLS on, clients must present a "
          "certificate signed by one of them (mutual TLS).");
ABSL_FLAG(bool, log_requests, false,
          "Log the start and end of every request to stderr.");
ABSL_FLAG(std::string, inject_faults, "",
          "TESTS ONLY: make the OpenCL engines fail on purpose, a "
          "comma-separated list of enqueue=N (the N-th device enqueue after "
          "start-up fails), sticky (and every later one), "
          "stage=upload|download|copy|kernel|<stage> (count only those "
          "enqueues), device_lost=N (the N-th device run finds the device "
          "lost), oom=N (the N-th device allocation fails), host_oom=N (the "
          "N-th device allocation throws std::bad_alloc, as host memory "
          "running out in a run would), build=1 (the "
          "programs fail to build). Failed device work is answered by the CPU "
          "path. Logged loudly at startup and exported as "
          "sortd_fault_injection_enabled 1. Never in production.");

namespace {

constexpr char kServiceName[] = "sortd.v1.SortService";

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
  if (absl::GetFlag(FLAGS_max_batch_keys) < 1 ||
      absl::GetFlag(FLAGS_max_batch_keys) > (int64_t{1} << 31) ||
      absl::GetFlag(FLAGS_max_batch_requests) < 1 ||
      absl::GetFlag(FLAGS_max_queued_keys) < 1 ||
      absl::GetFlag(FLAGS_max_call_keys) < 0 ||
      absl::GetFlag(FLAGS_max_queued_requests) < 1 ||
      absl::GetFlag(FLAGS_pipeline_depth) < 1 ||
      absl::GetFlag(FLAGS_full_pipeline_depth) < 0 ||
      absl::GetFlag(FLAGS_full_pipeline_depth) > 16) {
    return absl::InvalidArgumentError(
        "--max_batch_keys (1 to 2^31), --max_batch_requests, "
        "--max_queued_keys, --max_queued_requests and --pipeline_depth must "
        "be positive, --max_call_keys not negative, --full_pipeline_depth "
        "0 to 16");
  }
  if (absl::GetFlag(FLAGS_max_client_queued_requests) < 0 ||
      absl::GetFlag(FLAGS_max_client_queued_requests) >
          absl::GetFlag(FLAGS_max_queued_requests) ||
      absl::GetFlag(FLAGS_max_client_queued_keys) < 0 ||
      absl::GetFlag(FLAGS_max_client_queued_keys) >
          absl::GetFlag(FLAGS_max_queued_keys)) {
    return absl::InvalidArgumentError(
        "--max_client_queued_requests must be 0 to --max_queued_requests, "
        "--max_client_queued_keys 0 to --max_queued_keys");
  }
  if (absl::GetFlag(FLAGS_max_stream_bytes) < 1 ||
      absl::GetFlag(FLAGS_stream_chunk_bytes) < 16 ||
      absl::GetFlag(FLAGS_stream_chunk_bytes) > (int64_t{1} << 30) ||
      absl::GetFlag(FLAGS_device_memory_bytes) < 0 ||
      absl::GetFlag(FLAGS_device_pool_bytes) < 0 ||
      absl::GetFlag(FLAGS_host_pool_bytes) < 0 ||
      absl::GetFlag(FLAGS_cpu_scratch_bytes) < 0 ||
      absl::GetFlag(FLAGS_host_pool_min_bytes) < 1) {
    return absl::InvalidArgumentError(
        "--max_stream_bytes and --host_pool_min_bytes must be positive, "
        "--stream_chunk_bytes 16 to 2^30, --device_memory_bytes, "
        "--device_pool_bytes, --host_pool_bytes and --cpu_scratch_bytes not "
        "negative");
  }
  if (absl::GetFlag(FLAGS_max_held_bytes) < 1 ||
      absl::GetFlag(FLAGS_max_call_bytes) < 0 ||
      absl::GetFlag(FLAGS_max_call_bytes) >
          absl::GetFlag(FLAGS_max_held_bytes) ||
      absl::GetFlag(FLAGS_max_client_held_bytes) < 0 ||
      absl::GetFlag(FLAGS_max_client_held_bytes) >
          absl::GetFlag(FLAGS_max_held_bytes) ||
      absl::GetFlag(FLAGS_stream_idle_timeout) < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        "--max_held_bytes must be positive, --max_call_bytes and "
        "--max_client_held_bytes 0 to --max_held_bytes, "
        "--stream_idle_timeout not negative");
  }
  if (absl::GetFlag(FLAGS_max_batch_delay) < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("--max_batch_delay must not be negative");
  }
  return absl::OkStatus();
}

// host:port with the port replaced by the one gRPC bound.
// The stopped gRPC server, never destroyed (Serve says why); a global so
// that leak checkers see it held.
std::atomic<grpc::Server*> g_stopped_server{nullptr};

std::string BoundAddress(const std::string& listen, int port) {
  return absl::StrCat(listen.substr(0, listen.rfind(':')), ":", port);
}

sortd::Scheduler::Options SchedulerOptions(int cpu_workers) {
  sortd::Scheduler::Options o;
  o.max_batch_delay = absl::GetFlag(FLAGS_max_batch_delay);
  o.max_batch_units = static_cast<size_t>(absl::GetFlag(FLAGS_max_batch_keys));
  o.max_batch_requests =
      static_cast<size_t>(absl::GetFlag(FLAGS_max_batch_requests));
  o.max_queued_units =
      static_cast<size_t>(absl::GetFlag(FLAGS_max_queued_keys));
  o.max_queued_requests =
      static_cast<size_t>(absl::GetFlag(FLAGS_max_queued_requests));
  const int64_t call_keys = absl::GetFlag(FLAGS_max_call_keys);
  o.max_call_units = call_keys > 0
                         ? static_cast<size_t>(call_keys)
                         : std::max<size_t>(1, o.max_queued_units / 4);
  const int client_requests = absl::GetFlag(FLAGS_max_client_queued_requests);
  // Half of the queue, but not below 64 requests (all of a smaller
  // queue): one client needs some depth to fill batches.
  o.max_client_queued_requests =
      client_requests > 0
          ? static_cast<size_t>(client_requests)
          : std::max(o.max_queued_requests / 2,
                     std::min<size_t>(o.max_queued_requests, 64));
  const int64_t client_keys = absl::GetFlag(FLAGS_max_client_queued_keys);
  o.max_client_queued_units = client_keys > 0
                                  ? static_cast<size_t>(client_keys)
                                  : std::max<size_t>(1, o.max_queued_units / 2);
  o.spill = absl::GetFlag(FLAGS_spill_to_cpu);
  o.cpu_workers = cpu_workers;
  o.pipeline_depth = absl::GetFlag(FLAGS_pipeline_depth);
  o.full_pipeline_depth = absl::GetFlag(FLAGS_full_pipeline_depth);
  o.reinit_backoff = absl::GetFlag(FLAGS_reinit_backoff);
  return o;
}

// The sizes that may spill to the CPU path: above its range, up to
// spill_max (the calibrated range, where a pin lowered cpu_max).
std::string SpillRanges(const sortd::Scheduler::Options& o) {
  auto range = [](const sortd::Thresholds& t, size_t per, const char* unit) {
    if (t.spill_max <= t.cpu_max) return std::string();
    return absl::StrCat(
        t.cpu_max / per + 1, "-",
        t.spill_max == SIZE_MAX ? "any" : absl::StrCat(t.spill_max / per), " ",
        unit);
  };
  const std::string sorts = range(o.sort, 1, "keys");
  const std::string transposes = range(o.transpose, 32, "matrices");
  if (sorts.empty() && transposes.empty()) return "no requests";
  if (transposes.empty()) return absl::StrCat("sorts of ", sorts);
  if (sorts.empty()) return absl::StrCat("transposes of ", transposes);
  return absl::StrCat("sorts of ", sorts, " and transposes of ", transposes);
}

// Router thresholds: calibrated on the first device unless every one is
// pinned by a flag; pinned ones override calibrated ones. Without a
// calibration (it failed) the defaults are conservative: small sorts on
// the CPU, sorts of a million keys and more alone.
void Route(sortd::CpuSorter& cpu, sortd::Sorter& device,
           sortd::Scheduler::Options* o) {
  const int64_t pins[4] = {absl::GetFlag(FLAGS_cpu_max_keys),
                           absl::GetFlag(FLAGS_solo_min_keys),
                           absl::GetFlag(FLAGS_transpose_cpu_max_matrices),
                           absl::GetFlag(FLAGS_transpose_solo_min_matrices)};
  // Nothing spills without calibrated costs.
  o->sort = {.cpu_max = 4096, .solo_min = size_t{1} << 20, .spill_max = 0};
  o->transpose = {
      .cpu_max = 256 * 32, .solo_min = size_t{1} << 20, .spill_max = 0};
  if (std::any_of(pins, pins + 4, [](int64_t v) { return v < 0; })) {
    sortd::CalibrationOptions copts;
    copts.max_keys = static_cast<size_t>(
        std::max<int64_t>(absl::GetFlag(FLAGS_calibrate_max_keys), 1024));
    // Under load the CPU path runs as many requests at once as it has
    // workers (--request_threads: small sorts whole on the worker, large
    // ones in its arena).
    copts.cpu_callers = o->cpu_workers;
    copts.max_batch_keys = o->max_batch_units;
    // Requests whose arrays the host buffer pool keeps page-locked are
    // batched where they lie (UsePinnedMemory).
    if (absl::GetFlag(FLAGS_host_pool_pinned) &&
        absl::GetFlag(FLAGS_host_pool_bytes) > 0) {
      copts.pinned_min_bytes =
          static_cast<size_t>(absl::GetFlag(FLAGS_host_pool_min_bytes));
    }
    const absl::Time start = absl::Now();
    absl::StatusOr<sortd::Calibration> c = sortd::Calibrate(cpu, device, copts);
    if (c.ok()) {
      std::fputs(c->report.c_str(), stderr);
      LogLine("calibration took %s\n",
              absl::FormatDuration(absl::Now() - start).c_str());
      sortd::ApplyCalibration(*c, o);
    } else {
      LogLine("calibration failed (%s); default thresholds\n",
              c.status().ToString().c_str());
    }
  }
  if (const int64_t pin = absl::GetFlag(FLAGS_batch_in_place_min_keys);
      pin >= 0) {
    o->in_place_min_keys = static_cast<size_t>(pin);
  }
  if (pins[0] >= 0) o->sort.cpu_max = static_cast<size_t>(pins[0]);
  if (pins[1] >= 0) o->sort.solo_min = static_cast<size_t>(pins[1]);
  if (pins[2] >= 0) o->transpose.cpu_max = static_cast<size_t>(pins[2]) * 32;
  if (pins[3] >= 0) o->transpose.solo_min = static_cast<size_t>(pins[3]) * 32;
  if (!o->spill) o->sort.spill_max = o->transpose.spill_max = 0;
  if (o->sort.solo_min <= o->sort.cpu_max) {
    LogLine(
        "router: --solo_min_keys=%zu is at most the CPU path's %zu keys: "
        "sorts up to %zu keys go to the CPU path first\n",
        o->sort.solo_min, o->sort.cpu_max, o->sort.cpu_max);
  }
  LogLine(
      "router: sorts of <= %zu keys on the CPU path, >= %zu "
      "alone on a device; transposes of <= %zu matrices on the CPU "
      "path, >= %zu alone; batches in between, each of at most %zu keys "
      "(rows) and %zu requests (--max_batch_keys, --max_batch_requests), "
      "closed after --max_batch_delay=%s; batched sorts in page-locked "
      "memory sorted where they lie from %zu keys a request, packed below "
      "(--batch_in_place_min_keys); while the devices are backed up, %s "
      "spill to the CPU path (--spill_to_cpu)\n",
      o->sort.cpu_max, o->sort.solo_min, o->transpose.cpu_max / 32,
      o->transpose.solo_min == SIZE_MAX ? SIZE_MAX
                                        : (o->transpose.solo_min + 31) / 32,
      o->max_batch_units, o->max_batch_requests,
      absl::FormatDuration(o->max_batch_delay).c_str(), o->in_place_min_keys,
      SpillRanges(*o).c_str());
}

int Fail(const absl::Status& status) {
  LogLine("%s\n", status.ToString().c_str());
  return 1;
}

// The engine options every device shares: fault injection, only from
// --inject_faults (never from the environment), announced loudly; kernel
// build diagnostics (CONTRIBUTING.md), read from the environment once.
absl::StatusOr<sortd::gpu::OpenClEngine::Options> EngineBase() {
  sortd::gpu::OpenClEngine::Options engine_base;
  const std::string faults = absl::GetFlag(FLAGS_inject_faults);
  if (absl::Status s = sortd::gpu::ParseFaultSpec(faults, &engine_base.faults);
      !s.ok()) {
    return s;
  }
  if (absl::GetFlag(FLAGS_kernel_profile_interval) < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        "--kernel_profile_interval must be 0 (every run) or more");
  }
  engine_base.profile_interval = absl::GetFlag(FLAGS_kernel_profile_interval);
  if (absl::GetFlag(FLAGS_host_pinned_max_bytes) < 0) {
    return absl::InvalidArgumentError(
        "--host_pinned_max_bytes must not be negative");
  }
  engine_base.pinned_host_max_bytes =
      static_cast<size_t>(absl::GetFlag(FLAGS_host_pinned_max_bytes));
  engine_base.policy_name = absl::GetFlag(FLAGS_kernel_policy);
  engine_base.policy_overrides = absl::GetFlag(FLAGS_kernel_policy_overrides);
  // Names and knobs are checked here, whatever devices there are: under
  // --device=auto a device refusing them would only be passed over.
  const std::vector<std::string> names = sortd::gpu::EnginePolicy::Names();
  if (!engine_base.policy_name.empty() &&
      std::find(names.begin(), names.end(), engine_base.policy_name) ==
          names.end()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--kernel_policy=", engine_base.policy_name,
        " names no policy; the policies are ", absl::StrJoin(names, ", ")));
  }
  sortd::gpu::EnginePolicy shape;
  if (absl::Status s = sortd::gpu::ApplyPolicyOverrides(
          engine_base.policy_overrides, &shape);
      !s.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--kernel_policy_overrides: ", s.message()));
  }
  if (const char* extra = std::getenv("SORTD_KERNEL_EXTRA_OPTIONS")) {
    engine_base.kernel_diagnostics.extra_options = extra;
  }
  if (const char* log = std::getenv("SORTD_KERNEL_BUILD_LOG")) {
    engine_base.kernel_diagnostics.print_build_log = std::string(log) == "1";
  }
  if (engine_base.faults.any()) {
    LogLine(
        "FAULT INJECTION ENABLED (--inject_faults=%s): device "
        "runs fail on purpose and answers may fail over or fail; "
        "for tests only, never use in production\n",
        faults.c_str());
  }
  return engine_base;
}

sortd::EngineSetup EngineSetupFromFlags(
    const sortd::gpu::OpenClEngine::Options& base) {
  return {
      .base = base,
      .cache_dir = absl::GetFlag(FLAGS_kernel_cache_dir),
      .lanes = absl::GetFlag(FLAGS_pipeline_depth),
      .gpu_lanes = absl::GetFlag(FLAGS_full_pipeline_depth),
      .memory_budget_bytes =
          static_cast<size_t>(absl::GetFlag(FLAGS_device_memory_bytes)),
      .pool_bytes = static_cast<size_t>(absl::GetFlag(FLAGS_device_pool_bytes)),
      .sub_devices = absl::GetFlag(FLAGS_sub_devices),
      .sub_device_units =
          static_cast<unsigned>(absl::GetFlag(FLAGS_sub_device_units))};
}

// The gRPC server with the service, health and reflection, listening on
// `listen` (the bound port in *port), health NOT_SERVING.
absl::StatusOr<std::unique_ptr<grpc::Server>> StartServer(
    sortd::SortServiceImpl& service, const std::string& listen, int max_bytes,
    int* port) {
  sortd::GrpcLimits limits;
  if (absl::Status s = sortd::GrpcLimitsFromFlags(max_bytes, &limits);
      !s.ok()) {
    return s;
  }
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  auto credentials = sortd::ServerCredentials(
      absl::GetFlag(FLAGS_tls_cert), absl::GetFlag(FLAGS_tls_key),
      absl::GetFlag(FLAGS_tls_client_ca));
  if (!credentials.ok()) return credentials.status();
  builder.AddListeningPort(listen, *credentials, port);
  builder.SetMaxReceiveMessageSize(max_bytes);
  builder.SetMaxSendMessageSize(-1);
  sortd::ApplyGrpcLimits(limits, builder);
  LogLine("%s\n", sortd::DescribeGrpcLimits(limits).c_str());
  builder.RegisterService(&service);
  // Reflection v1 beside gRPC's v1alpha; it lives as long as the process.
  static sortd::ReflectionV1 reflection(
      {sortd::v1::SortService::service_full_name(), "grpc.health.v1.Health",
       grpc::reflection::v1::ServerReflection::service_full_name(),
       "grpc.reflection.v1alpha.ServerReflection"});
  builder.RegisterService(&reflection);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || *port == 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", listen, " (--listen)"));
  }
  server->GetHealthCheckService()->SetServingStatus(false);
  return server;
}

// The line scripts and tests wait for: the bound addresses.
void PrintServing(const std::string& listen, int port,
                  const sortd::Metrics& metrics) {
  const std::vector<int> metric_ports = metrics.listening_ports();
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
}

// Blocks until SIGTERM or SIGINT (blocked in every thread since main()).
int WaitForStopSignal() {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  int signal_number = 0;
  sigwait(&signals, &signal_number);
  return signal_number;
}

// Health is NOT_SERVING already. New calls are answered UNAVAILABLE at
// once; calls in flight run (the scheduler no longer waits for batches to
// fill). Whatever has not started by the drain deadline gets UNAVAILABLE.
void Drain(sortd::SortServiceImpl& service, sortd::Scheduler& scheduler,
           grpc::Server& server, int port) {
  const absl::Time deadline = absl::Now() + absl::GetFlag(FLAGS_drain_timeout);
  scheduler.StartDrain();
  service.StartDrain();
  if (!service.WaitForCalls(deadline)) scheduler.AbandonQueued();
  // Only then gRPC's shutdown, whose GOAWAY makes it close each connection
  // once it has no call: first the clients' hosts acknowledge every byte
  // of their answers, which a closing socket would otherwise cut off.
  const int unacknowledged =
      sortd::WaitForAnswersAcknowledged(port, deadline + absl::Seconds(1));
  if (unacknowledged > 0) {
    LogLine("%d connection(s) still had answers in flight at the deadline\n",
            unacknowledged);
  }
  server.Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(1)));
  server.Wait();
  scheduler.Drain(absl::Now());
}

sortd::SortServiceImpl::Options ServiceOptions(
    int max_bytes, sortd::HostBufferPool& host_buffers,
    sortd::RegionRegistry& regions) {
  const auto held = static_cast<size_t>(absl::GetFlag(FLAGS_max_held_bytes));
  const size_t call =
      absl::GetFlag(FLAGS_max_call_bytes) > 0
          ? static_cast<size_t>(absl::GetFlag(FLAGS_max_call_bytes))
          : std::max<size_t>(1, held / 2);
  const size_t client =
      absl::GetFlag(FLAGS_max_client_held_bytes) > 0
          ? static_cast<size_t>(absl::GetFlag(FLAGS_max_client_held_bytes))
          : call;
  return {.limits = {.max_request_bytes = static_cast<size_t>(max_bytes),
                     .max_stream_bytes = static_cast<size_t>(
                         absl::GetFlag(FLAGS_max_stream_bytes)),
                     .stream_chunk_bytes = static_cast<size_t>(
                         absl::GetFlag(FLAGS_stream_chunk_bytes))},
          .log_requests = absl::GetFlag(FLAGS_log_requests),
          .echo = absl::GetFlag(FLAGS_echo),
          .buffers = absl::GetFlag(FLAGS_host_pool_bytes) > 0 ? &host_buffers
                                                              : nullptr,
          .regions = &regions,
          .part_timeout = absl::GetFlag(FLAGS_part_timeout),
          .max_held_bytes = held,
          .max_call_bytes = call,
          .max_client_bytes = client,
          .stream_idle_timeout = absl::GetFlag(FLAGS_stream_idle_timeout)};
}

// The memory budget, and what it lets one call send: a call holds up to 9
// bytes per byte of its array (server/held_bytes.h).
void LogMemoryBudget(const sortd::SortServiceImpl::Options& o) {
  const size_t array = o.max_call_bytes / 9;
  LogLine(
      "memory: requests hold at most %zu bytes, one call at most %zu "
      "(--max_held_bytes, --max_call_bytes): arrays of %zu bytes are "
      "admitted in one call whatever their shape%s\n",
      o.max_held_bytes, o.max_call_bytes, array,
      array < o.limits.max_stream_bytes
          ? "; larger streams, up to --max_stream_bytes, only in shapes "
            "that hold less per byte (refused at the message that passes "
            "--max_call_bytes)"
          : "");
}

// Large request and answer arrays in page-locked memory of the first
// device, whose transfers then skip their staging copy.
void UsePinnedMemory(const std::vector<sortd::DeviceSlot>& engines,
                     sortd::HostBufferPool& host_buffers) {
  if (engines.empty() || !absl::GetFlag(FLAGS_host_pool_pinned)) return;
  if (auto memory = engines.front().engine->host_memory()) {
    host_buffers.SetMemory(std::move(memory));
    LogLine("host buffers: page-locked for %s\n",
            engines.front().engine->device_name().c_str());
  }
}

// Gives idle host buffers, the CPU path's idle scratch and heap back after
// --idle_trim_interval without calls.
std::unique_ptr<sortd::IdleTrimmer> StartTrimmer(
    sortd::HostBufferPool& host_buffers, sortd::CpuSorter& cpu,
    sortd::SortServiceImpl& service, sortd::Metrics* metrics) {
  sortd::IdleTrimmer::Options trim_options;
  trim_options.interval = absl::GetFlag(FLAGS_idle_trim_interval);
  trim_options.trim = [&host_buffers, &cpu] {
    host_buffers.Trim();
    cpu.Trim();
    return sortd::TrimHeap();
  };
  return std::make_unique<sortd::IdleTrimmer>(
      trim_options,
      [&service] {
        // Every call counts, Echo and refused ones included (they hold
        // pooled buffers too), not only the scheduler's tasks.
        return sortd::IdleTrimmer::Activity{service.calls_started(),
                                            service.open_calls() > 0};
      },
      [metrics](const sortd::IdleTrimmer::Tick& t) {
        metrics->RecordMemory(t.trimmed, static_cast<double>(t.released_bytes));
      });
}

void LogEngines(const sortd::CpuSorter& cpu,
                const std::vector<sortd::DeviceSlot>& engines) {
  std::string names = cpu.device_name();
  for (const sortd::DeviceSlot& slot : engines) {
    absl::StrAppend(&names, ", ", slot.engine->device_name());
  }
  LogLine("engines: %s\n", names.c_str());
}

int Serve() {
  LogLine("%s starting\n", sortd::VersionText("sortd").c_str());
  if (absl::Status s = CheckFlags(); !s.ok()) return Fail(s);
  absl::StatusOr<sortd::gpu::OpenClEngine::Options> engine_base = EngineBase();
  if (!engine_base.ok()) return Fail(engine_base.status());
  const bool injecting = engine_base->faults.any();
  auto metrics = sortd::Metrics::Create(absl::GetFlag(FLAGS_metrics_listen));
  if (!metrics.ok()) return Fail(metrics.status());
  (*metrics)->SetFaultInjection(injecting);

  const int cpu_threads = absl::GetFlag(FLAGS_cpu_threads);
  const int max_bytes =
      static_cast<int>(absl::GetFlag(FLAGS_max_request_bytes));
  sortd::HostBufferPool host_buffers(
      {.min_bytes =
           static_cast<size_t>(absl::GetFlag(FLAGS_host_pool_min_bytes)),
       .max_idle_bytes =
           static_cast<size_t>(absl::GetFlag(FLAGS_host_pool_bytes))});
  const std::string shm_socket = absl::GetFlag(FLAGS_shm_socket);
  sortd::RegionRegistry regions(
      {.enabled = !shm_socket.empty(),
       .max_bytes = static_cast<size_t>(
           std::max<int64_t>(0, absl::GetFlag(FLAGS_shm_max_bytes)))});
  const sortd::SortServiceImpl::Options service_options =
      ServiceOptions(max_bytes, host_buffers, regions);
  LogMemoryBudget(service_options);
  sortd::SortServiceImpl service(metrics->get(), service_options);
  auto authz =
      sortd::AuthzPolicyFromFlags(!absl::GetFlag(FLAGS_tls_client_ca).empty());
  if (!authz.ok()) return Fail(authz.status());
  service.SetAuthzPolicy(authz->get());
  std::unique_ptr<sortd::ShmSocket> shm;
  if (regions.enabled()) {
    absl::StatusOr<std::unique_ptr<sortd::ShmSocket>> started_shm =
        sortd::ShmSocket::Start(
            {.path = shm_socket,
             .max_connections = static_cast<size_t>(std::max<int32_t>(
                 1, absl::GetFlag(FLAGS_shm_max_connections))),
             .idle_timeout = absl::GetFlag(FLAGS_shm_idle_timeout)},
            &regions);
    if (!started_shm.ok()) return Fail(started_shm.status());
    shm = *std::move(started_shm);
    LogLine(
        "shared memory: sealed memfds registered over %s, at most %zu "
        "bytes\n",
        shm_socket.c_str(),
        static_cast<size_t>(absl::GetFlag(FLAGS_shm_max_bytes)));
  }

  int port = 0;
  const std::string listen = absl::GetFlag(FLAGS_listen);
  absl::StatusOr<std::unique_ptr<grpc::Server>> started =
      StartServer(service, listen, max_bytes, &port);
  if (!started.ok()) return Fail(started.status());
  std::unique_ptr<grpc::Server> server = *std::move(started);
  grpc::HealthCheckServiceInterface* health = server->GetHealthCheckService();
  health->SetServingStatus(false);

  auto engines = sortd::CreateEngines(absl::GetFlag(FLAGS_device),
                                      EngineSetupFromFlags(*engine_base));
  if (!engines.ok()) {
    server->Shutdown();
    return Fail(engines.status());
  }
  UsePinnedMemory(*engines, host_buffers);
  // The CPU path serves small requests, spills and failovers.
  sortd::CpuSorter cpu({.threads = cpu_threads,
                        .scratch_max_idle_bytes = static_cast<size_t>(
                            absl::GetFlag(FLAGS_cpu_scratch_bytes))});
  // As many CPU-path requests at once as the CPU path has threads: the
  // number the router's calibration times them with (sorts of up to 32K
  // keys run whole on the thread that takes them).
  int request_threads = absl::GetFlag(FLAGS_request_threads);
  if (request_threads == 0) request_threads = std::max(2, cpu.threads());
  LogLine("cpu path: %d threads; its requests run %d at a time\n",
          cpu.threads(), request_threads);
  sortd::Scheduler::Options options = SchedulerOptions(request_threads);
  if (!engines->empty()) Route(cpu, *engines->front().engine, &options);
  (*metrics)->SetThresholds(options.sort, options.transpose,
                            options.in_place_min_keys);
  LogEngines(cpu, *engines);
  sortd::Scheduler scheduler(options, &cpu, std::move(*engines),
                             metrics->get());
  // Scrapes read the router's lateness as it fades; the source is cleared
  // (after any scrape reading it) before the scheduler is destroyed.
  (*metrics)->SetLatenessSource(
      [&scheduler](sortd::Op op) { return scheduler.device_late(op); });
  absl::Cleanup no_lateness_source = [&metrics] {
    (*metrics)->SetLatenessSource(nullptr);
  };
  service.SetScheduler(&scheduler);
  std::unique_ptr<sortd::IdleTrimmer> trimmer =
      StartTrimmer(host_buffers, cpu, service, metrics->get());
  health->SetServingStatus(true);
  health->SetServingStatus(kServiceName, true);

  PrintServing(listen, port, **metrics);

  LogLine("%s: draining\n", strsignal(WaitForStopSignal()));
  health->Shutdown();  // NOT_SERVING for all, and stays so
  Drain(service, scheduler, *server, port);
  if (shm != nullptr) shm->Stop();  // no call uses a region any more
  const sortd::HostBufferPool::Stats pool = host_buffers.stats();
  const sortd::CpuSorter::ScratchStats scratch = cpu.scratch_stats();
  LogLine(
      "stopped (host buffers: %llu reused, %llu allocated; CPU scratch: %llu "
      "reused, %llu allocated)\n",
      static_cast<unsigned long long>(pool.reused),
      static_cast<unsigned long long>(pool.allocated),
      static_cast<unsigned long long>(scratch.reused),
      static_cast<unsigned long long>(scratch.allocated));
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
  sortd::KeepLargeBlocksInHeap();
  // Signals are taken by sigwait in Serve(); block them before any thread
  // (gRPC, oneTBB, the metrics server) starts so that none of those threads
  // receives them instead.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  signal(SIGPIPE, SIG_IGN);

  absl::FlagsUsageConfig usage;  // unset members keep their defaults
  usage.version_string = [] { return sortd::VersionText("sortd") + "\n"; };
  absl::SetFlagsUsageConfig(usage);
  absl::SetProgramUsageMessage(
      "GPU sorting service (gRPC sortd.v1.SortService).\n"
      "Usage: sortd [--listen=HOST:PORT] [--metrics_listen=HOST:PORT] "
      "[--device=auto|gpu|opencl-cpu|cpu] [flags]\n"
      "Run with --helpfull for every flag, including Abseil's own.");
  absl::ParseCommandLine(argc, argv);
  return Serve();
}
