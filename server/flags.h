// sortd's command-line flags, read and checked in one place into the
// options of the pieces the daemon is built of. The flags are defined by
// subject in flags.cc and the flags_*.cc beside it (flags_internal.h lists
// them), except the gRPC connection limits (grpc_limits.cc) and
// --authz_policy (authz_flags.cc, read when the policy file is loaded);
// docs/reference.md has the table.
//
//   absl::ParseCommandLine(argc, argv);
//   absl::StatusOr<SortdOptions> options = SortdOptionsFromFlags();
//   if (!options.ok()) ... INVALID_ARGUMENT naming the flag ...
#ifndef SORTD_SERVER_FLAGS_H_
#define SORTD_SERVER_FLAGS_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "cpu/cpu_sorter.h"
#include "server/engines.h"
#include "server/grpc_server.h"
#include "server/host_buffers.h"
#include "server/router_setup.h"
#include "server/scheduler.h"
#include "server/service.h"
#include "server/shared_memory.h"
#include "server/shm_socket.h"

namespace sortd {

struct SortdOptions {
  // --listen, the gRPC limits and the TLS files.
  GrpcServerOptions grpc;
  // --metrics_listen; empty: no endpoint.
  std::string metrics_listen;
  // --device, and what the engines it names are created with. Fault
  // injection is on when engines.base.faults.any().
  std::string device;
  EngineSetup engines;
  // --inject_faults as given, for the startup warning.
  std::string inject_faults;
  // The service's limits; its buffers and regions are the caller's to set
  // (buffers only when host_buffers.max_idle_bytes is not 0: the pool is
  // on).
  SortServiceImpl::Options service;
  HostBufferPool::Options host_buffers;
  // --host_pool_pinned: take the pool's memory from the first device.
  bool host_pool_pinned = true;
  // --shm_pinned: shared-memory regions adopted by every device.
  bool shm_pinned = true;
  // Shared memory is on when regions.enabled (--shm_socket given).
  RegionRegistry::Options regions;
  ShmSocket::Options shm;
  CpuSorter::Options cpu;
  // --request_threads; 0: as many as the CPU path has threads, at least 2.
  int request_threads = 0;
  // Everything but cpu_workers (request_threads, resolved) and the
  // router's thresholds (SetRouterThresholds from `router`).
  Scheduler::Options scheduler;
  RouterPins router;
  absl::Duration idle_trim_interval;
  absl::Duration drain_timeout;
};

// The options the flags give, or INVALID_ARGUMENT naming the first flag
// (or group of flags) out of range.
absl::StatusOr<SortdOptions> SortdOptionsFromFlags();

// --log_level and --log_format, applied to the log from here on; or
// INVALID_ARGUMENT naming the flag.
absl::Status SetLogOptionsFromFlags();

// Fault injection is for tests only: a sortd running with it says so, in a
// warning.
void WarnOfFaultInjection(const SortdOptions& options);

// Whether `filename`, a flag's file as Abseil's usage output names it, is
// flags.cc or one of the flags_*.cc beside it: --help, --helpshort and
// --helppackage list their flags (Abseil's default lists the program's
// main file's, which defines none).
bool IsSortdFlagsFile(absl::string_view filename);

}  // namespace sortd

#endif  // SORTD_SERVER_FLAGS_H_
