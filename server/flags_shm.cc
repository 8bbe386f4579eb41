// sortd's shared-memory flags: the socket co-located clients register
// regions over, how much those regions may hold and page-lock, and the
// socket's connection limits; with the registry's and the socket's options
// they give. Shared memory is off unless --shm_socket is given.
#include <algorithm>
#include <cstdint>
#include <string>

#include "absl/flags/flag.h"
#include "absl/time/time.h"
#include "server/flags_internal.h"

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
ABSL_FLAG(bool, shm_pinned, true,
          "Page-lock shared-memory regions for the transfers of every GPU "
          "whose driver page-locks adopted memory (NVIDIA's; OpenCL buffers "
          "over the region's pages), so that their arrays move between the "
          "region and the device without the copy through staging. The "
          "pages are the client's and stay charged against --shm_max_bytes; "
          "at most --shm_pinned_max_bytes are page-locked at once. The "
          "pinning runs on a thread of its own after registration (the "
          "region is served through staging until then) "
          "(docs/decisions/026-page-locked-regions.md).");
ABSL_FLAG(int64_t, shm_pinned_max_bytes, int64_t{8} << 30,
          "With --shm_pinned: bytes of shared-memory regions page-locked at "
          "once (each region counted once, whatever the number of GPUs); "
          "regions registered past it stay pageable (staging). On the H200 "
          "host 4 GiB of pinned regions moved at the full rate (docs/"
          "decisions/026-page-locked-regions.md).");
ABSL_FLAG(int32_t, shm_max_connections, 256,
          "Clients connected to --shm_socket at once, at most.");
ABSL_FLAG(absl::Duration, shm_idle_timeout, absl::Seconds(10),
          "A connection to --shm_socket that has registered no region this "
          "long after it opened is closed.");

namespace sortd {

RegionRegistry::Options RegionOptions() {
  return {.enabled = !absl::GetFlag(FLAGS_shm_socket).empty(),
          .max_bytes = static_cast<size_t>(
              std::max<int64_t>(0, absl::GetFlag(FLAGS_shm_max_bytes))),
          .max_adopted_bytes = static_cast<size_t>(
              std::max<int64_t>(0, absl::GetFlag(FLAGS_shm_pinned_max_bytes)))};
}

ShmSocket::Options ShmSocketOptions() {
  return {.path = absl::GetFlag(FLAGS_shm_socket),
          .max_connections = static_cast<size_t>(
              std::max<int32_t>(1, absl::GetFlag(FLAGS_shm_max_connections))),
          .idle_timeout = absl::GetFlag(FLAGS_shm_idle_timeout)};
}

absl::string_view SharedMemoryFlagsFile() { return __FILE__; }

}  // namespace sortd
