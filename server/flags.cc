#include "server/flags.h"

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "gpu/opencl_engine.h"
#include "gpu/policy.h"
#include "server/grpc_limits.h"

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
ABSL_FLAG(int64_t, large_request_bytes, 0,
          "Sort, Echo and Transpose requests of at least this many bytes "
          "are joined, parsed and placed on --large_request_threads of "
          "sortd's own rather than on gRPC's few polling threads, which stay "
          "free to read and answer small calls meanwhile (1048576 on the "
          "two-GPU host's figures, docs/PERFORMANCE.md). 0: every request "
          "on gRPC's threads.");
ABSL_FLAG(int, large_request_threads, 0,
          "Threads handling requests of at least --large_request_bytes (0: a "
          "quarter of the host's cores, at least 2).");
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
ABSL_FLAG(int64_t, warm_up_keys, int64_t{1} << 20,
          "Keys of the largest sort in each OpenCL device's startup check "
          "(every kernel is run and its answer checked before serving), "
          "which also leaves buffers for sorts up to that size in the "
          "device's pool. Smaller starts sooner, notably on an OpenCL CPU "
          "device; the check's small sizes are always run.");
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
ABSL_FLAG(bool, shm_pinned, false,
          "Page-lock shared-memory regions for the transfers of every GPU "
          "whose driver page-locks adopted memory (NVIDIA's; OpenCL buffers "
          "over the region's pages), so that their arrays move between the "
          "region and the device without the copy through staging. The "
          "pages are the client's and stay charged against --shm_max_bytes; "
          "at most --shm_pinned_max_bytes are page-locked at once. The "
          "pinning runs on a thread of its own after registration (the "
          "region is served through staging until then). Off by default "
          "until measured on the host (docs/decisions/"
          "026-page-locked-regions.md).");
ABSL_FLAG(int64_t, shm_pinned_max_bytes, int64_t{4} << 30,
          "With --shm_pinned: bytes of shared-memory regions page-locked at "
          "once (each region counted once, whatever the number of GPUs); "
          "regions registered past it stay pageable (staging). A starting "
          "value: NVIDIA's transfers slowed down with several GiB "
          "page-locked on the H200 host (docs/decisions/"
          "010-pinned-host-buffers.md); set it from a measurement on the "
          "host.");
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
ABSL_FLAG(int64_t, split_min_keys, 0,
          "A sort through shared memory (--shm_socket) of at least this "
          "many keys is cut across its device and another of the same kind "
          "(path, vendor, driver, name) up with nothing in flight, each "
          "sorting a part at once, and the parts merged on the CPU into the "
          "region, when there is such another device and each part fits one "
          "device run. 0 (the default): never; on the two-GPU H200 host a "
          "2^30-key split took longer than one GPU (docs/decisions/"
          "019-split-sort.md).");
ABSL_FLAG(int64_t, split_scratch_bytes, 0,
          "Idle host scratch of sorts cut across the devices "
          "(--split_min_keys) kept for the next one, in bytes (one mapping "
          "of up to this many; 0: none, each split maps and faults in its "
          "own); given back when sortd goes quiet (--idle_trim_interval). "
          "Count it in the memory limit, as --cpu_scratch_bytes.");
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

namespace sortd {
namespace {

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
      absl::GetFlag(FLAGS_split_min_keys) < 0 ||
      absl::GetFlag(FLAGS_split_scratch_bytes) < 0 ||
      absl::GetFlag(FLAGS_full_pipeline_depth) < 0 ||
      absl::GetFlag(FLAGS_full_pipeline_depth) > 16) {
    return absl::InvalidArgumentError(
        "--max_batch_keys (1 to 2^31), --max_batch_requests, "
        "--max_queued_keys, --max_queued_requests and --pipeline_depth must "
        "be positive, --max_call_keys, --split_min_keys and "
        "--split_scratch_bytes not negative, "
        "--full_pipeline_depth "
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
  if (absl::GetFlag(FLAGS_large_request_bytes) < 0 ||
      absl::GetFlag(FLAGS_large_request_threads) < 0 ||
      absl::GetFlag(FLAGS_large_request_threads) > 1024) {
    return absl::InvalidArgumentError(
        "--large_request_bytes must not be negative, --large_request_threads "
        "0 to 1024");
  }
  if (absl::GetFlag(FLAGS_max_batch_delay) < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("--max_batch_delay must not be negative");
  }
  return absl::OkStatus();
}

// The engine options every device shares: fault injection, only from
// --inject_faults (never from the environment); kernel build diagnostics
// (CONTRIBUTING.md), read from the environment once.
absl::StatusOr<gpu::OpenClEngine::Options> EngineBase() {
  gpu::OpenClEngine::Options engine_base;
  const std::string faults = absl::GetFlag(FLAGS_inject_faults);
  if (absl::Status s = gpu::ParseFaultSpec(faults, &engine_base.faults);
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
  if (absl::GetFlag(FLAGS_warm_up_keys) < 0) {
    return absl::InvalidArgumentError("--warm_up_keys must not be negative");
  }
  engine_base.preallocate_keys =
      static_cast<size_t>(absl::GetFlag(FLAGS_warm_up_keys));
  engine_base.policy_name = absl::GetFlag(FLAGS_kernel_policy);
  engine_base.policy_overrides = absl::GetFlag(FLAGS_kernel_policy_overrides);
  // Names and knobs are checked here, whatever devices there are: under
  // --device=auto a device refusing them would only be passed over.
  const std::vector<std::string> names = gpu::EnginePolicy::Names();
  if (!engine_base.policy_name.empty() &&
      std::find(names.begin(), names.end(), engine_base.policy_name) ==
          names.end()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--kernel_policy=", engine_base.policy_name,
        " names no policy; the policies are ", absl::StrJoin(names, ", ")));
  }
  gpu::EnginePolicy shape;
  if (absl::Status s =
          gpu::ApplyPolicyOverrides(engine_base.policy_overrides, &shape);
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
  return engine_base;
}

EngineSetup EngineSetupFromFlags(const gpu::OpenClEngine::Options& base) {
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

// The service's options but its buffers and regions.
SortServiceImpl::Options ServiceOptions() {
  const auto held = static_cast<size_t>(absl::GetFlag(FLAGS_max_held_bytes));
  const size_t call =
      absl::GetFlag(FLAGS_max_call_bytes) > 0
          ? static_cast<size_t>(absl::GetFlag(FLAGS_max_call_bytes))
          : std::max<size_t>(1, held / 2);
  const size_t client =
      absl::GetFlag(FLAGS_max_client_held_bytes) > 0
          ? static_cast<size_t>(absl::GetFlag(FLAGS_max_client_held_bytes))
          : call;
  return {.limits = {.max_request_bytes = static_cast<size_t>(
                         absl::GetFlag(FLAGS_max_request_bytes)),
                     .max_stream_bytes = static_cast<size_t>(
                         absl::GetFlag(FLAGS_max_stream_bytes)),
                     .stream_chunk_bytes = static_cast<size_t>(
                         absl::GetFlag(FLAGS_stream_chunk_bytes))},
          .log_requests = absl::GetFlag(FLAGS_log_requests),
          .echo = absl::GetFlag(FLAGS_echo),
          .part_timeout = absl::GetFlag(FLAGS_part_timeout),
          .max_held_bytes = held,
          .max_call_bytes = call,
          .max_client_bytes = client,
          .stream_idle_timeout = absl::GetFlag(FLAGS_stream_idle_timeout),
          .large_request_bytes =
              static_cast<size_t>(absl::GetFlag(FLAGS_large_request_bytes)),
          .large_request_threads = absl::GetFlag(FLAGS_large_request_threads)};
}

// The scheduler's options but its CPU workers and router thresholds.
Scheduler::Options SchedulerOptions() {
  Scheduler::Options o;
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
  o.pipeline_depth = absl::GetFlag(FLAGS_pipeline_depth);
  o.full_pipeline_depth = absl::GetFlag(FLAGS_full_pipeline_depth);
  o.split_scratch_bytes = static_cast<size_t>(
      std::max<int64_t>(0, absl::GetFlag(FLAGS_split_scratch_bytes)));
  o.split_min_keys = static_cast<size_t>(
      std::max<int64_t>(0, absl::GetFlag(FLAGS_split_min_keys)));
  o.reinit_backoff = absl::GetFlag(FLAGS_reinit_backoff);
  return o;
}

RouterPins RouterPinsFromFlags() {
  RouterPins pins{
      .cpu_max_keys = absl::GetFlag(FLAGS_cpu_max_keys),
      .solo_min_keys = absl::GetFlag(FLAGS_solo_min_keys),
      .transpose_cpu_max_matrices =
          absl::GetFlag(FLAGS_transpose_cpu_max_matrices),
      .transpose_solo_min_matrices =
          absl::GetFlag(FLAGS_transpose_solo_min_matrices),
      .batch_in_place_min_keys = absl::GetFlag(FLAGS_batch_in_place_min_keys),
      .calibrate_max_keys = absl::GetFlag(FLAGS_calibrate_max_keys)};
  // Requests whose arrays the host buffer pool keeps page-locked are
  // batched where they lie (UsePinnedMemory).
  if (absl::GetFlag(FLAGS_host_pool_pinned) &&
      absl::GetFlag(FLAGS_host_pool_bytes) > 0) {
    pins.pinned_min_bytes =
        static_cast<size_t>(absl::GetFlag(FLAGS_host_pool_min_bytes));
  }
  return pins;
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
  const std::string shm_socket = absl::GetFlag(FLAGS_shm_socket);
  return SortdOptions{
      .grpc = GrpcServerFromFlags(limits),
      .metrics_listen = absl::GetFlag(FLAGS_metrics_listen),
      .device = absl::GetFlag(FLAGS_device),
      .engines = EngineSetupFromFlags(*engine_base),
      .inject_faults = absl::GetFlag(FLAGS_inject_faults),
      .service = ServiceOptions(),
      .host_buffers = {.min_bytes = static_cast<size_t>(
                           absl::GetFlag(FLAGS_host_pool_min_bytes)),
                       .max_idle_bytes = static_cast<size_t>(
                           absl::GetFlag(FLAGS_host_pool_bytes))},
      .host_pool_pinned = absl::GetFlag(FLAGS_host_pool_pinned),
      .shm_pinned = absl::GetFlag(FLAGS_shm_pinned),
      .regions = {.enabled = !shm_socket.empty(),
                  .max_bytes = static_cast<size_t>(
                      std::max<int64_t>(0, absl::GetFlag(FLAGS_shm_max_bytes))),
                  .max_adopted_bytes = static_cast<size_t>(std::max<int64_t>(
                      0, absl::GetFlag(FLAGS_shm_pinned_max_bytes)))},
      .shm = {.path = shm_socket,
              .max_connections = static_cast<size_t>(std::max<int32_t>(
                  1, absl::GetFlag(FLAGS_shm_max_connections))),
              .idle_timeout = absl::GetFlag(FLAGS_shm_idle_timeout)},
      .cpu = {.threads = absl::GetFlag(FLAGS_cpu_threads),
              .scratch_max_idle_bytes =
                  static_cast<size_t>(absl::GetFlag(FLAGS_cpu_scratch_bytes))},
      .request_threads = absl::GetFlag(FLAGS_request_threads),
      .scheduler = SchedulerOptions(),
      .router = RouterPinsFromFlags(),
      .idle_trim_interval = absl::GetFlag(FLAGS_idle_trim_interval),
      .drain_timeout = absl::GetFlag(FLAGS_drain_timeout)};
}

bool IsSortdFlagsFile(absl::string_view filename) {
  // Abseil names a flag's file by its __FILE__ without leading slashes.
  const absl::string_view self = __FILE__;
  return !filename.empty() &&
         (self == filename || (absl::EndsWith(self, filename) &&
                               self[self.size() - filename.size() - 1] == '/'));
}

}  // namespace sortd
