// The host memory sortd keeps, as the daemon sets it up: the budget logged
// at start, the trimmer that gives idle memory back when sortd goes quiet
// (server/memory.h), and the pools' reuse logged at stop.
#ifndef SORTD_SERVER_MEMORY_SETUP_H_
#define SORTD_SERVER_MEMORY_SETUP_H_

#include <memory>

#include "absl/time/time.h"
#include "cpu/cpu_sorter.h"
#include "server/host_buffers.h"
#include "server/memory.h"
#include "server/metrics.h"
#include "server/scheduler.h"
#include "server/service.h"

namespace sortd {

// Logs the memory budget, and what it lets one call send: a call holds up
// to 9 bytes per byte of its array (server/held_bytes.h).
void LogMemoryBudget(const SortServiceImpl::Options& options);

// Gives idle host buffers, the CPU path's and the split sorts' idle
// scratch and heap back after `interval` (--idle_trim_interval) without
// calls, recording each tick in `metrics`. Everything passed must outlive
// the trimmer.
std::unique_ptr<IdleTrimmer> StartIdleTrimmer(
    absl::Duration interval, HostBufferPool& host_buffers, CpuSorter& cpu,
    Scheduler& scheduler, const SortServiceImpl& service, Metrics* metrics);

// Logs the stop, with how often the host buffers and the CPU path's
// scratch were reused rather than allocated.
void LogStopped(const HostBufferPool& host_buffers, const CpuSorter& cpu);

}  // namespace sortd

#endif  // SORTD_SERVER_MEMORY_SETUP_H_
