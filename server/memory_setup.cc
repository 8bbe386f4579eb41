#include "server/memory_setup.h"

#include "server/log.h"

namespace sortd {

void LogMemoryBudget(const SortServiceImpl::Options& o) {
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

std::unique_ptr<IdleTrimmer> StartIdleTrimmer(
    absl::Duration interval, HostBufferPool& host_buffers, CpuSorter& cpu,
    Scheduler& scheduler, const SortServiceImpl& service, Metrics* metrics) {
  IdleTrimmer::Options trim_options;
  trim_options.interval = interval;
  trim_options.trim = [&host_buffers, &cpu, &scheduler] {
    host_buffers.Trim();
    cpu.Trim();
    scheduler.TrimIdle();
    return TrimHeap();
  };
  return std::make_unique<IdleTrimmer>(
      trim_options,
      [&service] {
        // Every call counts, Echo and refused ones included (they hold
        // pooled buffers too), not only the scheduler's tasks.
        return IdleTrimmer::Activity{service.calls_started(),
                                     service.open_calls() > 0};
      },
      [metrics](const IdleTrimmer::Tick& t) {
        metrics->RecordMemory(t.trimmed, static_cast<double>(t.released_bytes));
      });
}

void LogStopped(const HostBufferPool& host_buffers, const CpuSorter& cpu) {
  const HostBufferPool::Stats pool = host_buffers.stats();
  const CpuSorter::ScratchStats scratch = cpu.scratch_stats();
  LogLine(
      "stopped (host buffers: %llu reused, %llu allocated; CPU scratch: %llu "
      "reused, %llu allocated)\n",
      static_cast<unsigned long long>(pool.reused),
      static_cast<unsigned long long>(pool.allocated),
      static_cast<unsigned long long>(scratch.reused),
      static_cast<unsigned long long>(scratch.allocated));
}

}  // namespace sortd
