// sortd's flags on request sizes and memory: the largest request and
// stream, the memory all calls, one call and one client may hold, the
// requests handled on threads of sortd's own, and the host pools (request
// and answer buffers, CPU-path scratch). Their checks and the service and
// host buffer pool options they give are beside them.
#include <algorithm>
#include <climits>
#include <cstdint>
#include <string>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "server/flags_internal.h"

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
ABSL_FLAG(int64_t, large_request_bytes, int64_t{1} << 20,
          "Sort, Echo and Transpose requests of at least this many bytes "
          "are joined, parsed and placed on --large_request_threads of "
          "sortd's own rather than on gRPC's few polling threads, which stay "
          "free to read and answer small calls meanwhile (docs/decisions/"
          "018-small-calls-beside-large.md). 0: every request on gRPC's "
          "threads.");
ABSL_FLAG(int, large_request_threads, 0,
          "Threads handling requests of at least --large_request_bytes (0: a "
          "quarter of the cores sortd may use, at least 2).");
ABSL_FLAG(int64_t, stream_chunk_bytes, int64_t{2} << 20,
          "Array bytes (keys, values and permutation together) per "
          "SortStream response message; the default stays under gRPC's "
          "default 4 MiB receive limit of other clients "
          "(docs/PERFORMANCE.md: chunk size measured).");
ABSL_FLAG(int64_t, host_pool_bytes, int64_t{4} << 30,
          "Idle host memory kept for the arrays of large requests and "
          "answers, in bytes: a reused buffer costs no page faults, a fresh "
          "64 MiB one 16384 of them. Keep it at least "
          "--host_pinned_max_bytes: page-locked buffers freed and taken "
          "again under load stall the GPUs (NVIDIA: 4x fewer 16M-key sorts "
          "with 1 GiB beside a 4 GiB cap). Emptied when sortd goes quiet "
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
ABSL_FLAG(bool, host_pool_pinned, true,
          "Take the pool's buffers from page-locked memory of the first "
          "OpenCL device, which its transfers read and write in place (and, "
          "with NVIDIA's driver, every other GPU's); false: pageable memory, "
          "copied through the engine's staging buffers.");

namespace sortd {

absl::Status CheckRequestSizeFlag() {
  const int64_t max_bytes = absl::GetFlag(FLAGS_max_request_bytes);
  if (max_bytes <= 0 || max_bytes > INT_MAX) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--max_request_bytes=", max_bytes, ": expected 1 to ", INT_MAX));
  }
  return absl::OkStatus();
}

absl::Status CheckBufferFlags() {
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
  return absl::OkStatus();
}

absl::Status CheckHeldBytesFlags() {
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
  return absl::OkStatus();
}

absl::Status CheckLargeRequestFlags() {
  if (absl::GetFlag(FLAGS_large_request_bytes) < 0 ||
      absl::GetFlag(FLAGS_large_request_threads) < 0 ||
      absl::GetFlag(FLAGS_large_request_threads) > 1024) {
    return absl::InvalidArgumentError(
        "--large_request_bytes must not be negative, --large_request_threads "
        "0 to 1024");
  }
  return absl::OkStatus();
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

HostBufferPool::Options HostBufferOptions() {
  return {.min_bytes =
              static_cast<size_t>(absl::GetFlag(FLAGS_host_pool_min_bytes)),
          .max_idle_bytes =
              static_cast<size_t>(absl::GetFlag(FLAGS_host_pool_bytes))};
}

absl::string_view MemoryFlagsFile() { return __FILE__; }

}  // namespace sortd
