// server/engines.cc on real engines (the OpenCL CPU device in CI; a GPU
// with SORTD_TEST_DEVICE=gpu). The request pool's page-locked memory,
// taken from the first device, shared with the others (UsePinnedMemory):
// only where the driver page-locks memory for all its devices; with the
// test seam, another device and a re-created one sort arrays from it
// without staging. Shared-memory regions adopted through PinRegions and
// RegionRegistry: only devices whose driver page-locks adopted memory are
// asked; with the test seam, a region adopted on the registry's worker is
// then sorted without staging, and let go again.
#include "server/engines.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "gpu/opencl_engine.h"
#include "gpu/pinned_memory.h"
#include "server/host_buffers.h"
#include "server/shared_memory.h"
#include "tests/opencl_test_util.h"
#include "tests/sealed_memfd.h"
#include "tests/sort_check.h"

namespace sortd {
namespace {

using gpu::OpenClEngine;
using gpu::PinnedHostMemory;
using sortd::testing::Shape;

using testing::SealedMemfd;

// Polls `done` until it holds, for at most 30 s.
template <typename F>
bool Eventually(F done) {
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::yield();
  }
  return true;
}

// Two engines on the OpenCL CPU device, made as CreateEngines makes them,
// with the factories that re-create them.
std::vector<DeviceSlot> TwoEngines() {
  OpenClEngine::Options options = gpu::CpuDevice();
  options.staging.chunk_bytes = 4096;
  std::vector<DeviceSlot> slots;
  for (int i = 0; i < 2; ++i) {
    EngineFactory factory =
        [options]() -> absl::StatusOr<std::unique_ptr<Sorter>> {
      auto made = OpenClEngine::Create(options);
      if (!made.ok()) return made.status();
      return std::unique_ptr<Sorter>(std::move(*made));
    };
    auto engine = factory();
    EXPECT_TRUE(engine.ok()) << engine.status();
    if (!engine.ok()) return {};
    slots.push_back(DeviceSlot{.engine = *std::move(engine),
                               .factory = std::move(factory)});
  }
  return slots;
}

// The bytes a sort of n u32 keys laid out as [keys | keys out] in `base`
// moved straight (not staged) on `engine`; the answer is checked.
uint64_t DirectBytesOfASort(Sorter& engine, std::byte* base, size_t n) {
  return gpu::SortU32AndCountTransfers(
             engine, base, testing::Generate<uint32_t>(Shape::kRandom, n, 31))
      .direct;
}

// Without the test seam: the second device moves the first one's arrays
// straight only where the driver page-locks for all its devices (NVIDIA's,
// with SORTD_TEST_DEVICE=gpu), and stages them elsewhere (PoCL).
TEST(PoolMemoryOnEngines, OnlyDriversThatPageLockForAllDevicesShareIt) {
  std::vector<DeviceSlot> slots = TwoEngines();
  ASSERT_EQ(slots.size(), 2u);
  const bool shares = SharesPageLockedMemory(*slots[0].engine);
  HostBufferPool pool({.min_bytes = 4096});
  UsePinnedMemory(slots, /*pinned=*/true, pool);
  const size_t n = 40'000;
  grpc::Slice array = pool.Allocate(2 * n * 4);
  auto* base =
      const_cast<std::byte*>(reinterpret_cast<const std::byte*>(array.begin()));
  // The first device's own memory.
  EXPECT_EQ(DirectBytesOfASort(*slots[0].engine, base, n), 2 * n * 4);
  EXPECT_EQ(DirectBytesOfASort(*slots[1].engine, base, n),
            shares ? 2 * n * 4 : 0u);
}

// With the test seam, and regions pinned too (PinRegions wraps the same
// factories, as sortd's start-up does).
TEST(PoolMemoryOnEngines, EveryDeviceAndARecreatedOneSortItWithoutStaging) {
  RegionRegistry registry({.enabled = true, .max_bytes = 1 << 20});
  std::vector<DeviceSlot> slots = TwoEngines();
  ASSERT_EQ(slots.size(), 2u);
  HostBufferPool pool({.min_bytes = 4096});
  UsePinnedMemory(slots, /*pinned=*/true, pool, /*any_vendor=*/true);
  PinRegions(slots, /*pinned=*/true, registry, /*any_vendor=*/true);
  const size_t n = 40'000;
  grpc::Slice array = pool.Allocate(2 * n * 4);
  auto* base =
      const_cast<std::byte*>(reinterpret_cast<const std::byte*>(array.begin()));
  for (DeviceSlot& slot : slots) {
    EXPECT_EQ(DirectBytesOfASort(*slot.engine, base, n), 2 * n * 4);
  }
  // Each device re-created after a failure (its wrapped factory): the
  // arrays stay in the first device's memory, moved straight still.
  for (DeviceSlot& slot : slots) {
    absl::StatusOr<std::unique_ptr<Sorter>> fresh = slot.factory();
    ASSERT_TRUE(fresh.ok()) << fresh.status();
    EXPECT_NE((*fresh)->host_memory(), slots[0].engine->host_memory());
    EXPECT_EQ(DirectBytesOfASort(**fresh, base, n), 2 * n * 4);
  }
  // Memory from elsewhere is still staged.
  std::vector<std::byte> pageable(2 * n * 4);
  EXPECT_EQ(DirectBytesOfASort(*slots[1].engine, pageable.data(), n), 0u);
}

class RegionsOnAnEngine : public ::testing::Test {
 protected:
  void SetUp() override {
    OpenClEngine::Options options = gpu::CpuDevice();
    options.staging.chunk_bytes = 4096;
    auto engine = OpenClEngine::Create(options);
    ASSERT_TRUE(engine.ok()) << engine.status();
    engine_ = engine->get();
    pinned_ = dynamic_cast<PinnedHostMemory*>(engine_->host_memory().get());
    ASSERT_NE(pinned_, nullptr);
    // As CreateEngines makes it: a new engine on the same device.
    EngineFactory factory =
        [options]() -> absl::StatusOr<std::unique_ptr<Sorter>> {
      auto made = OpenClEngine::Create(options);
      if (!made.ok()) return made.status();
      return std::unique_ptr<Sorter>(std::move(*made));
    };
    slots_.push_back(DeviceSlot{.engine = *std::move(engine),
                                .factory = std::move(factory)});
  }

  // Registers a region of `bytes`; returns it.
  std::shared_ptr<Region> Register(size_t bytes, std::string* token) {
    const int fd = SealedMemfd(bytes);
    absl::StatusOr<RegionRegistry::Registered> r = registry_.Register(fd);
    close(fd);
    EXPECT_TRUE(r.ok()) << r.status();
    if (!r.ok()) return nullptr;
    *token = r->token;
    return registry_.Find(r->token);
  }

  RegionRegistry registry_{{.enabled = true, .max_bytes = 64 << 20}};
  std::vector<DeviceSlot> slots_;
  OpenClEngine* engine_ = nullptr;
  PinnedHostMemory* pinned_ = nullptr;
};

TEST_F(RegionsOnAnEngine, OnlyDevicesWhoseDriverPageLocksAdopt) {
  const bool nvidia = AdoptionPageLocks(*engine_);
  EXPECT_EQ(nvidia,
            engine_->vendor_driver().first.find("NVIDIA") != std::string::npos);
  if (nvidia) GTEST_SKIP() << "a device whose driver page-locks";
  PinRegions(slots_, /*pinned=*/true, registry_);
  std::string token;
  std::shared_ptr<Region> region = Register(1 << 20, &token);
  ASSERT_NE(region, nullptr);
  // No memory was handed to the registry: nothing is ever posted.
  EXPECT_EQ(region->adopted(), 0);
  EXPECT_EQ(registry_.adopted_bytes(), 0u);
  EXPECT_FALSE(pinned_->Holds(region->base(), 4096));
}

TEST_F(RegionsOnAnEngine, AnAdoptedRegionIsSortedWithoutStaging) {
  const size_t n = 50'000, bytes = n * 4;
  std::string before_token, token;
  std::shared_ptr<Region> before = Register(1 << 20, &before_token);
  PinRegions(slots_, /*pinned=*/true, registry_, /*any_vendor=*/true);
  std::shared_ptr<Region> region = Register(2 * bytes + 4096, &token);
  ASSERT_NE(before, nullptr);
  ASSERT_NE(region, nullptr);
  ASSERT_TRUE(Eventually([&] { return region->adopted() == 1; }));
  ASSERT_TRUE(Eventually([&] { return before->adopted() == 1; }));
  EXPECT_EQ(registry_.adopted_bytes(), before->charged() + region->charged());
  EXPECT_TRUE(pinned_->Holds(region->base(), region->size()));

  const auto keys = sortd::testing::Generate<uint32_t>(Shape::kRandom, n, 5);
  std::vector<uint32_t> want = keys;
  std::sort(want.begin(), want.end());
  std::memcpy(region->base(), keys.data(), bytes);
  const Sorter::TransferBytes start = engine_->transfer_bytes();
  SortJob job{.key_type = KeyType::kU32,
              .count = n,
              .keys = region->base(),
              .keys_out = region->base() + bytes};
  ASSERT_TRUE(engine_->Sort(job).ok());
  const Sorter::TransferBytes end = engine_->transfer_bytes();
  EXPECT_EQ(end.direct - start.direct, 2 * bytes);
  EXPECT_EQ(end.staged, start.staged);
  std::vector<uint32_t> got(n);
  std::memcpy(got.data(), region->base() + bytes, bytes);
  EXPECT_EQ(got, want);

  // Let go: the engine's memory no longer counts the pages, and the
  // registry's count comes back down.
  const std::byte* base = region->base();
  region.reset();
  registry_.Unregister(token);
  ASSERT_TRUE(Eventually(
      [&] { return registry_.adopted_bytes() == before->charged(); }));
  EXPECT_FALSE(pinned_->Holds(base, 4096));
}

// A device re-created after a failure (DevicePool calls the slot's
// factory, which PinRegions wrapped) adopts the regions with its new host
// memory; the old memory lets them go.
TEST_F(RegionsOnAnEngine, ARecreatedDeviceAdoptsTheRegionsAgain) {
  PinRegions(slots_, /*pinned=*/true, registry_, /*any_vendor=*/true);
  std::string token;
  std::shared_ptr<Region> region = Register(1 << 20, &token);
  ASSERT_NE(region, nullptr);
  ASSERT_TRUE(Eventually([&] { return pinned_->Holds(region->base(), 4096); }));
  const size_t adopted = registry_.adopted_bytes();
  EXPECT_EQ(adopted, region->charged());

  absl::StatusOr<std::unique_ptr<Sorter>> fresh = slots_[0].factory();
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  auto* fresh_pinned =
      dynamic_cast<PinnedHostMemory*>((*fresh)->host_memory().get());
  ASSERT_NE(fresh_pinned, nullptr);
  ASSERT_NE(fresh_pinned, pinned_);
  ASSERT_TRUE(Eventually(
      [&] { return fresh_pinned->Holds(region->base(), region->size()); }));
  EXPECT_FALSE(pinned_->Holds(region->base(), 4096)) << "the old one let go";
  EXPECT_EQ(region->adopted(), 1);
  EXPECT_EQ(registry_.adopted_bytes(), adopted);

  // Regions registered after the re-creation go to the new memory.
  std::string later_token;
  std::shared_ptr<Region> later = Register(1 << 20, &later_token);
  ASSERT_NE(later, nullptr);
  ASSERT_TRUE(
      Eventually([&] { return fresh_pinned->Holds(later->base(), 4096); }));
  EXPECT_FALSE(pinned_->Holds(later->base(), 4096));
}

}  // namespace
}  // namespace sortd
