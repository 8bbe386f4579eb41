// The idle heap trimmer: when it trims (once per quiet period, never while
// busy), and that a trim really gives fragmented heap memory back.
#include "server/memory.h"

#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <vector>

namespace sortd {
namespace {

// The trimmer's clock in these tests is its own tick count: the probe
// scripts what each tick sees, and the test waits (on a condition variable)
// until the script has been played to its end.
struct Script {
  std::vector<IdleTrimmer::Activity> ticks;  // what probe() returns, in order
  std::mutex mu;
  std::condition_variable cv;
  size_t probes = 0;
  std::vector<size_t> trimmed_at;  // tick indices where a trim happened
  size_t ticks_seen = 0;

  IdleTrimmer::Activity Probe() {
    std::lock_guard<std::mutex> lock(mu);
    const size_t i = probes++;
    return ticks[std::min(i, ticks.size() - 1)];
  }
  void OnTick(const IdleTrimmer::Tick& t) {
    std::lock_guard<std::mutex> lock(mu);
    if (t.trimmed) trimmed_at.push_back(ticks_seen);
    ++ticks_seen;
    cv.notify_all();
  }
  // Waits until `n` ticks have been reported.
  bool WaitTicks(size_t n) {
    std::unique_lock<std::mutex> lock(mu);
    return cv.wait_for(lock, std::chrono::seconds(30),
                       [&] { return ticks_seen >= n; });
  }
};

TEST(IdleTrimmer, TrimsOncePerQuietPeriodAndNeverWhileBusy) {
  Script s;
  using A = IdleTrimmer::Activity;
  s.ticks = {
      A{0, false},   // 0: nothing ever served: the start-up trim
      A{0, false},   // 1: still quiet: no second trim
      A{5, true},    // 2: a burst arrives
      A{9, true},    // 3: still busy
      A{12, false},  // 4: more came and were answered within the tick
      A{12, false},  // 5: a whole quiet interval: trim
      A{12, false},  // 6: quiet: nothing more to give back
      A{12, true},   // 7: busy with the same count (a long request)
      A{12, false},  // 8: done: trim again
      A{12, false},  // 9 and after: quiet
  };
  std::atomic<int> trims{0};
  {
    IdleTrimmer::Options options;
    options.interval = absl::Milliseconds(1);
    options.trim = [&] {
      ++trims;
      return size_t{4096};
    };
    options.resident = [] { return size_t{1} << 20; };
    IdleTrimmer trimmer(
        options, [&] { return s.Probe(); },
        [&](const IdleTrimmer::Tick& t) {
          if (t.trimmed) {
            EXPECT_EQ(t.released_bytes, 4096u);
          }
          EXPECT_EQ(t.resident_bytes, size_t{1} << 20);
          s.OnTick(t);
        });
    ASSERT_TRUE(s.WaitTicks(12));
  }
  std::lock_guard<std::mutex> lock(s.mu);
  EXPECT_EQ(s.trimmed_at, (std::vector<size_t>{0, 5, 8}));
  EXPECT_EQ(trims.load(), 3);
}

TEST(IdleTrimmer, ZeroIntervalStartsNothingAndStopsAtOnce) {
  std::atomic<int> probes{0};
  IdleTrimmer::Options off_options, slow_options;
  off_options.interval = absl::ZeroDuration();
  slow_options.interval = absl::Hours(1);
  {
    IdleTrimmer off(
        off_options,
        [&] {
          ++probes;
          return IdleTrimmer::Activity{};
        },
        nullptr);
  }
  EXPECT_EQ(probes.load(), 0);
  // A long interval does not hold up destruction: the destructor wakes the
  // thread (this test would take an hour otherwise).
  const auto start = std::chrono::steady_clock::now();
  {
    IdleTrimmer slow(
        slow_options,
        [&] {
          ++probes;
          return IdleTrimmer::Activity{};
        },
        nullptr);
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::minutes(1));
  EXPECT_EQ(probes.load(), 0);
}

#if defined(__GLIBC__) && !defined(__SANITIZE_ADDRESS__) && \
    !defined(__SANITIZE_THREAD__)
// glibc keeps holes in its heap after free(); TrimHeap gives them back.
// Blocks of 64 KiB come from the heap (below the mmap threshold); keeping
// every 16th alive leaves 15-block holes that free() cannot return.
TEST(TrimHeap, GivesFragmentedFreeMemoryBack) {
  constexpr size_t kBlock = size_t{64} << 10;
  constexpr size_t kBlocks = 4096;  // 256 MiB
  std::vector<char*> blocks;
  for (size_t i = 0; i < kBlocks; ++i) {
    char* p = static_cast<char*>(std::malloc(kBlock));
    ASSERT_NE(p, nullptr);
    std::memset(p, static_cast<int>(i), kBlock);  // resident
    blocks.push_back(p);
  }
  for (size_t i = 0; i < kBlocks; ++i) {
    if (i % 16 != 15) {
      std::free(blocks[i]);
      blocks[i] = nullptr;
    }
  }
  const size_t before = ResidentBytes();
  ASSERT_GT(before, size_t{200} << 20) << "the holes are not resident";
  const size_t released = TrimHeap();
  EXPECT_GT(released, size_t{150} << 20);
  EXPECT_LT(ResidentBytes(), before - (size_t{150} << 20));
  for (char* p : blocks) std::free(p);
}
#endif

}  // namespace
}  // namespace sortd
