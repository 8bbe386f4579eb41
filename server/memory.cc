#include "server/memory.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <utility>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace sortd {

size_t ResidentBytes() {
  // /proc/self/statm: size resident shared ... in pages.
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) return 0;
  unsigned long long size = 0, resident = 0;
  const int n = std::fscanf(f, "%llu %llu", &size, &resident);
  std::fclose(f);
  if (n != 2) return 0;
  return static_cast<size_t>(resident) *
         static_cast<size_t>(sysconf(_SC_PAGESIZE));
}

void KeepLargeBlocksInHeap() {
#if defined(__GLIBC__)
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
#endif
}

size_t TrimHeap() {
  const size_t before = ResidentBytes();
#if defined(__GLIBC__)
  malloc_trim(0);
#endif
  const size_t after = ResidentBytes();
  return before > after ? before - after : 0;
}

IdleTrimmer::IdleTrimmer(Options options, std::function<Activity()> probe,
                         std::function<void(const Tick&)> on_tick)
    : options_(std::move(options)),
      probe_(std::move(probe)),
      on_tick_(std::move(on_tick)) {
  if (!options_.trim) options_.trim = TrimHeap;
  if (!options_.resident) options_.resident = ResidentBytes;
  if (options_.interval > absl::ZeroDuration()) {
    thread_ = std::thread([this] { Loop(); });
  }
}

IdleTrimmer::~IdleTrimmer() {
  {
    MutexLock lock(&mu_);
    stop_ = true;
    cv_.NotifyAll();
  }
  if (thread_.joinable()) thread_.join();
}

void IdleTrimmer::Loop() {
  const auto interval = absl::ToChronoNanoseconds(options_.interval);
  // Trim once per quiet period: `dirty` is set by any activity and cleared
  // by the trim that follows it. The first tick counts as activity, so a
  // server that never served anything trims once after start-up (program
  // builds and calibration leave garbage too).
  uint64_t last_progress = 0;
  bool dirty = true;
  mu_.Lock();
  for (;;) {
    // An interval's wait, cut short by stop_.
    const auto deadline = std::chrono::steady_clock::now() + interval;
    while (!stop_ && cv_.WaitUntil(&mu_, deadline)) {
    }
    if (stop_) break;
    mu_.Unlock();
    const Activity now = probe_();
    Tick tick;
    if (now.busy || now.progress != last_progress) {
      last_progress = now.progress;
      dirty = true;
    } else if (dirty) {
      tick.trimmed = true;
      tick.released_bytes = options_.trim();
      dirty = false;
    }
    tick.resident_bytes = options_.resident();
    if (on_tick_) on_tick_(tick);
    mu_.Lock();
  }
  mu_.Unlock();
}

}  // namespace sortd
