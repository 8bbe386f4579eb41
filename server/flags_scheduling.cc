// sortd's flags on how requests are scheduled: the CPU path's threads,
// batching (delay and size), the admission queue's bounds overall and per
// client, the router's thresholds (pinned, or calibrated at startup),
// spilling between the CPU path and the devices, and sorts split across
// devices. Their checks and the scheduler and router options they give are
// beside them.
#include <algorithm>
#include <cstdint>

#include "absl/flags/flag.h"
#include "absl/time/time.h"
#include "server/flags_internal.h"

ABSL_FLAG(int, cpu_threads, 0,
          "Threads of the oneTBB CPU path (0: one per core this process "
          "may use: its CPU affinity, capped by its cgroup's CPU quota, "
          "e.g. a container's CPU limit).");
ABSL_FLAG(int, request_threads, 0,
          "Threads that run CPU-path requests concurrently (0: as many as "
          "the CPU path has threads, at least 2).");
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
ABSL_FLAG(int64_t, calibrate_max_keys, int64_t{1} << 20,
          "Largest sort timed by the startup calibration.");

namespace sortd {

absl::Status CheckThreadFlags() {
  if (absl::GetFlag(FLAGS_cpu_threads) < 0 ||
      absl::GetFlag(FLAGS_request_threads) < 0) {
    return absl::InvalidArgumentError(
        "--cpu_threads and --request_threads must not be negative");
  }
  return absl::OkStatus();
}

absl::Status CheckQueueFlags() {
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
  return absl::OkStatus();
}

absl::Status CheckClientQueueFlags() {
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
  return absl::OkStatus();
}

absl::Status CheckBatchDelayFlag() {
  if (absl::GetFlag(FLAGS_max_batch_delay) < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("--max_batch_delay must not be negative");
  }
  return absl::OkStatus();
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

absl::string_view SchedulingFlagsFile() { return __FILE__; }

}  // namespace sortd
