// RegionRegistry's adoption of regions by devices' host memory (PinWith):
// on the registry's worker thread, never on the registering thread; once
// per region; within max_adopted_bytes; let go before the region is
// unmapped, whichever thread drops it last.
#include "server/shared_memory.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/host_memory.h"
#include "tests/sealed_memfd.h"

namespace sortd {
namespace {

constexpr auto kDeadline = std::chrono::seconds(30);

using testing::SealedMemfd;

// A HostMemory that adopts anything, counting calls per address, and whose
// handles check on release that the range is still mapped. With a gate
// closed, Adopt blocks until the test opens it.
class FakeMemory final : public HostMemory {
 public:
  struct State {
    std::mutex mu;
    std::condition_variable cv;
    std::map<void*, int> adopts;  // calls by address
    int started = 0;              // Adopt calls entered
    int released = 0;
    int released_unmapped = 0;  // released after the pages were gone
    std::vector<std::thread::id> release_threads;
    bool gate_open = true;

    // Waits, up to a deadline, for `done` (which may read the registry's
    // state as well as this one's: it is looked at again every few ms).
    bool WaitFor(const std::function<bool()>& done) {
      const auto deadline = std::chrono::steady_clock::now() + kDeadline;
      std::unique_lock<std::mutex> lock(mu);
      while (!done()) {
        if (std::chrono::steady_clock::now() > deadline) return false;
        cv.wait_for(lock, std::chrono::milliseconds(5));
      }
      return true;
    }
    int total_adopts() {
      int n = 0;
      for (const auto& [address, count] : adopts) n += count;
      return n;
    }
  };

  void* Allocate(size_t) override { return nullptr; }
  void Free(void*, size_t) override {}
  std::shared_ptr<void> Adopt(void* data, size_t bytes) override {
    std::unique_lock<std::mutex> lock(state_->mu);
    ++state_->started;
    state_->cv.notify_all();
    state_->cv.wait(lock, [&] { return state_->gate_open; });
    ++state_->adopts[data];
    state_->cv.notify_all();
    return std::shared_ptr<void>(data, [state = state_, bytes](void* p) {
      const bool mapped = msync(p, bytes, MS_ASYNC) == 0;
      std::lock_guard<std::mutex> lock(state->mu);
      ++state->released;
      if (!mapped) ++state->released_unmapped;
      state->release_threads.push_back(std::this_thread::get_id());
      state->cv.notify_all();
    });
  }

  void SetGate(bool open) {
    std::lock_guard<std::mutex> lock(state_->mu);
    state_->gate_open = open;
    state_->cv.notify_all();
  }
  State& state() { return *state_; }

 private:
  std::shared_ptr<State> state_ = std::make_shared<State>();
};

const size_t kPage = static_cast<size_t>(sysconf(_SC_PAGESIZE));

class RegionRegistryTest : public ::testing::Test {
 protected:
  // Registers a region of `bytes` and returns its token.
  std::string Register(RegionRegistry& registry, size_t bytes) {
    const int fd = SealedMemfd(bytes);
    absl::StatusOr<RegionRegistry::Registered> r = registry.Register(fd);
    close(fd);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? r->token : "";
  }

  std::shared_ptr<FakeMemory> memory_ = std::make_shared<FakeMemory>();
  FakeMemory::State& state_ = memory_->state();
};

TEST_F(RegionRegistryTest, AdoptsRegionsBeforeAndAfterPinWithExactlyOnce) {
  RegionRegistry registry({.enabled = true, .max_bytes = 64 * kPage});
  const std::string before = Register(registry, 4 * kPage);
  EXPECT_EQ(state_.started, 0) << "adopted before PinWith";
  registry.PinWith({memory_});
  registry.PinWith({memory_});  // only the first call counts
  const std::string after = Register(registry, 8 * kPage);
  ASSERT_TRUE(state_.WaitFor([&] { return state_.total_adopts() >= 2; }));
  // The worker runs in order: once a third region is adopted, every job
  // for the first two has run.
  const std::string third = Register(registry, 2 * kPage);
  ASSERT_TRUE(state_.WaitFor([&] { return state_.total_adopts() >= 3; }));
  for (const std::string& token : {before, after, third}) {
    std::shared_ptr<Region> region = registry.Find(token);
    ASSERT_NE(region, nullptr);
    ASSERT_TRUE(state_.WaitFor([&] { return region->adopted() == 1; }));
    std::lock_guard<std::mutex> lock(state_.mu);
    EXPECT_EQ(state_.adopts[region->base()], 1) << "adopted more than once";
  }
  {
    std::lock_guard<std::mutex> lock(state_.mu);
    EXPECT_EQ(state_.total_adopts(), 3);
  }
  EXPECT_EQ(registry.adopted_bytes(), 14 * kPage);
}

TEST_F(RegionRegistryTest, RegionsPastTheCapStayPageable) {
  RegionRegistry registry({.enabled = true,
                           .max_bytes = 64 * kPage,
                           .max_adopted_bytes = 6 * kPage});
  registry.PinWith({memory_});
  const std::string first = Register(registry, 4 * kPage);
  const std::string second = Register(registry, 4 * kPage);  // 8 > 6
  const std::string small = Register(registry, 2 * kPage);   // fits: 6
  ASSERT_TRUE(state_.WaitFor([&] { return state_.total_adopts() >= 2; }));
  ASSERT_TRUE(
      state_.WaitFor([&] { return registry.Find(small)->adopted() == 1; }));
  EXPECT_EQ(registry.Find(first)->adopted(), 1);
  EXPECT_EQ(registry.Find(second)->adopted(), 0) << "past the cap";
  EXPECT_EQ(registry.adopted_bytes(), 6 * kPage);

  // Letting the first go frees its share of the cap for later regions.
  registry.Unregister(first);
  ASSERT_TRUE(state_.WaitFor([&] { return state_.released >= 1; }));
  const std::string later = Register(registry, 4 * kPage);
  ASSERT_TRUE(
      state_.WaitFor([&] { return registry.Find(later)->adopted() == 1; }));
  EXPECT_EQ(registry.Find(second)->adopted(), 0) << "not adopted later";
  EXPECT_EQ(registry.adopted_bytes(), 6 * kPage);
}

TEST_F(RegionRegistryTest, LettingGoReleasesOnTheWorkerBeforeUnmapping) {
  RegionRegistry registry({.enabled = true, .max_bytes = 64 * kPage});
  registry.PinWith({memory_});
  const std::string token = Register(registry, 4 * kPage);
  ASSERT_TRUE(state_.WaitFor([&] { return state_.total_adopts() >= 1; }));
  ASSERT_TRUE(
      state_.WaitFor([&] { return registry.adopted_bytes() == 4 * kPage; }));

  // A request still holds the region: unregistering lets nothing go yet.
  std::shared_ptr<Region> held = registry.Find(token);
  ASSERT_NE(held, nullptr);
  registry.Unregister(token);
  EXPECT_EQ(registry.Find(token), nullptr);
  {
    std::lock_guard<std::mutex> lock(state_.mu);
    EXPECT_EQ(state_.released, 0) << "released while a request holds it";
  }
  EXPECT_EQ(msync(held->base(), held->size(), MS_ASYNC), 0);
  held.reset();  // the last holder, on this thread
  ASSERT_TRUE(state_.WaitFor([&] { return state_.released >= 1; }));
  // The bytes are uncounted after the unmapping, in the same job.
  ASSERT_TRUE(state_.WaitFor([&] { return registry.adopted_bytes() == 0; }));
  std::lock_guard<std::mutex> lock(state_.mu);
  EXPECT_EQ(state_.released, 1);
  EXPECT_EQ(state_.released_unmapped, 0) << "unmapped before released";
  ASSERT_EQ(state_.release_threads.size(), 1u);
  EXPECT_NE(state_.release_threads[0], std::this_thread::get_id())
      << "released on the thread that dropped the region";
}

TEST_F(RegionRegistryTest, RegistrationDoesNotWaitForASlowAdoption) {
  RegionRegistry registry({.enabled = true, .max_bytes = 64 * kPage});
  memory_->SetGate(false);
  registry.PinWith({memory_});
  const std::string first = Register(registry, 4 * kPage);
  ASSERT_TRUE(state_.WaitFor([&] { return state_.started >= 1; }));
  // The worker is stuck inside the first Adopt; registering, finding and
  // unregistering on this thread go on regardless.
  const std::string second = Register(registry, 4 * kPage);
  const std::string third = Register(registry, 4 * kPage);
  std::shared_ptr<Region> region = registry.Find(second);
  ASSERT_NE(region, nullptr);
  EXPECT_EQ(region->adopted(), 0) << "served through staging meanwhile";
  registry.Unregister(third);  // gone before its turn: never adopted
  {
    std::lock_guard<std::mutex> lock(state_.mu);
    EXPECT_EQ(state_.started, 1);
    EXPECT_EQ(state_.total_adopts(), 0);
  }
  memory_->SetGate(true);
  ASSERT_TRUE(state_.WaitFor([&] { return state_.total_adopts() >= 2; }));
  ASSERT_TRUE(state_.WaitFor([&] { return region->adopted() == 1; }));
  // Once a fourth is adopted, the third's turn has passed.
  const std::string fourth = Register(registry, 2 * kPage);
  ASSERT_TRUE(state_.WaitFor([&] { return state_.total_adopts() >= 3; }));
  EXPECT_EQ(registry.Find(first)->adopted(), 1);
  std::lock_guard<std::mutex> lock(state_.mu);
  EXPECT_EQ(state_.total_adopts(), 3) << "an unregistered region adopted";
}

// A device re-created after a failure has new host memory: Repin moves
// every region from the old memory to it on the worker, the old hold let
// go first, within the share of the cap each region holds already.
TEST_F(RegionRegistryTest, RepinMovesEveryRegionToTheNewMemory) {
  RegionRegistry registry({.enabled = true,
                           .max_bytes = 64 * kPage,
                           .max_adopted_bytes = 8 * kPage});
  auto fresh = std::make_shared<FakeMemory>();
  FakeMemory::State& fresh_state = fresh->state();
  registry.PinWith({memory_});
  std::vector<std::shared_ptr<Region>> regions;
  std::vector<std::string> tokens;
  for (size_t pages : {4, 4, 2}) {  // the last is past the cap
    tokens.push_back(Register(registry, pages * kPage));
    regions.push_back(registry.Find(tokens.back()));
  }
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(state_.WaitFor([&] { return regions[i]->adopted() == 1; }));
  }
  registry.Repin(memory_, fresh);
  ASSERT_TRUE(fresh_state.WaitFor([&] {
    return fresh_state.total_adopts() >= 2 && regions[0]->adopted() == 1 &&
           regions[1]->adopted() == 1;
  }));
  {
    std::lock_guard<std::mutex> lock(state_.mu);
    EXPECT_EQ(state_.released, 2) << "the old memory's holds";
    EXPECT_EQ(state_.released_unmapped, 0);
    EXPECT_EQ(state_.total_adopts(), 2);
  }
  EXPECT_EQ(regions[2]->adopted(), 0) << "past the cap: stays pageable";
  EXPECT_EQ(registry.adopted_bytes(), 8 * kPage);

  // Registered from now on (once the cap has room): adopted by the new
  // memory only.
  regions.clear();
  for (const std::string& token : tokens) registry.Unregister(token);
  ASSERT_TRUE(fresh_state.WaitFor([&] { return fresh_state.released >= 2; }));
  std::shared_ptr<Region> later = registry.Find(Register(registry, kPage));
  ASSERT_TRUE(fresh_state.WaitFor([&] { return later->adopted() == 1; }));
  std::lock_guard<std::mutex> lock(fresh_state.mu);
  EXPECT_EQ(fresh_state.total_adopts(), 3);
  EXPECT_EQ(fresh_state.released_unmapped, 0);
  std::lock_guard<std::mutex> old_lock(state_.mu);
  EXPECT_EQ(state_.total_adopts(), 2) << "adopted by the old memory";
}

// A re-created device without host memory to adopt: the regions are let
// go and their share of the cap comes back.
TEST_F(RegionRegistryTest, RepinToNoMemoryLetsEveryRegionGo) {
  RegionRegistry registry({.enabled = true, .max_bytes = 64 * kPage});
  registry.PinWith({memory_});
  std::shared_ptr<Region> region = registry.Find(Register(registry, 4 * kPage));
  ASSERT_TRUE(state_.WaitFor([&] { return region->adopted() == 1; }));
  registry.Repin(memory_, nullptr);
  ASSERT_TRUE(state_.WaitFor([&] { return registry.adopted_bytes() == 0; }));
  EXPECT_EQ(region->adopted(), 0);
  std::lock_guard<std::mutex> lock(state_.mu);
  EXPECT_EQ(state_.released, 1);
  EXPECT_EQ(state_.released_unmapped, 0);
}

TEST_F(RegionRegistryTest, DestroyingTheRegistryReleasesEveryRegionInOrder) {
  {
    RegionRegistry registry({.enabled = true, .max_bytes = 64 * kPage});
    registry.PinWith({memory_});
    std::vector<std::string> tokens;
    for (int i = 0; i < 3; ++i) tokens.push_back(Register(registry, 2 * kPage));
    for (const std::string& token : tokens) {
      std::shared_ptr<Region> region = registry.Find(token);
      ASSERT_TRUE(state_.WaitFor([&] { return region->adopted() == 1; }));
    }
  }
  std::lock_guard<std::mutex> lock(state_.mu);
  EXPECT_EQ(state_.released, 3);
  EXPECT_EQ(state_.released_unmapped, 0);
}

// A region that outlives its registry (a request finishing late) still
// lets go before it is unmapped, on the thread that drops it.
TEST_F(RegionRegistryTest, ARegionOutlivingItsRegistryLetsGoInOrder) {
  std::shared_ptr<Region> held;
  {
    RegionRegistry registry({.enabled = true, .max_bytes = 64 * kPage});
    registry.PinWith({memory_});
    const std::string token = Register(registry, 2 * kPage);
    ASSERT_TRUE(state_.WaitFor([&] { return state_.total_adopts() >= 1; }));
    held = registry.Find(token);
    ASSERT_NE(held, nullptr);
    ASSERT_TRUE(state_.WaitFor([&] { return held->adopted() == 1; }));
  }
  {
    std::lock_guard<std::mutex> lock(state_.mu);
    EXPECT_EQ(state_.released, 0);
  }
  held.reset();
  std::lock_guard<std::mutex> lock(state_.mu);
  EXPECT_EQ(state_.released, 1);
  EXPECT_EQ(state_.released_unmapped, 0);
}

}  // namespace
}  // namespace sortd
