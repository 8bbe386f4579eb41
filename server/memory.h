// Giving memory back to the system when sortd goes quiet.
//
// glibc keeps freed heap memory in its arenas, and after a large block is
// freed it raises its mmap threshold so that later blocks of that size come
// from the arenas too. After a burst of large requests a process can hold
// hundreds of MB it no longer uses, which on a node with memory limits is
// memory nobody else can have (measured on the 2-core VM: 753 MB resident
// after mixed load, 407 MB after one malloc_trim; decision record
// docs/decisions/009-idle-heap-trim.md). The trimmer watches how
// many requests have arrived; once that has not changed for a whole
// interval and nothing is in flight, it trims the heap once, and again only
// after the next burst.
//
//   IdleTrimmer trimmer(IdleTrimmer::Options{}, [&] {
//     auto s = scheduler.stats();
//     return IdleTrimmer::Activity{s.submitted,
//                                  s.submitted != s.answered + s.rejected};
//   }, [&](const IdleTrimmer::Tick& t) { metrics.RecordMemory(...); });
#ifndef SORTD_SERVER_MEMORY_H_
#define SORTD_SERVER_MEMORY_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <thread>

#include "absl/time/time.h"
#include "core/mutex.h"

namespace sortd {

// Resident memory of this process (VmRSS), 0 where it cannot be read.
size_t ResidentBytes();

// Returns free heap memory to the system (malloc_trim with glibc; nothing
// elsewhere). The result is resident bytes before minus after, 0 if RSS
// did not fall.
size_t TrimHeap();

// Makes glibc keep blocks of up to 32 MiB (its largest setting) in its
// heap, and freed memory there until TrimHeap, instead of mapping and
// unmapping each large block: gRPC's message buffers and the CPU path's
// arrays are then reused without page faults (decision 001). Call once,
// before any thread starts; a no-op without glibc.
void KeepLargeBlocksInHeap();

class IdleTrimmer {
 public:
  struct Activity {
    uint64_t progress = 0;  // a counter that moves with every request
    bool busy = false;      // work admitted and not yet answered
  };
  struct Tick {
    size_t resident_bytes = 0;
    bool trimmed = false;
    size_t released_bytes = 0;  // by this tick's trim
  };
  struct Options {
    absl::Duration interval = absl::Seconds(1);
    // What a trim does; TrimHeap by default (tests count calls instead).
    std::function<size_t()> trim;
    // Where resident memory is read; ResidentBytes by default.
    std::function<size_t()> resident;
  };

  // Starts a thread that calls `probe` every interval and `on_tick` after
  // (with the resident size, and whether it trimmed). A zero or negative
  // interval starts nothing.
  IdleTrimmer(Options options, std::function<Activity()> probe,
              std::function<void(const Tick&)> on_tick);
  // Stops the thread (at once, not after the interval).
  ~IdleTrimmer();

  IdleTrimmer(const IdleTrimmer&) = delete;
  IdleTrimmer& operator=(const IdleTrimmer&) = delete;

 private:
  void Loop() ABSL_LOCKS_EXCLUDED(mu_);

  Options options_;
  std::function<Activity()> probe_;
  std::function<void(const Tick&)> on_tick_;
  Mutex mu_;
  CondVar cv_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace sortd

#endif  // SORTD_SERVER_MEMORY_H_
