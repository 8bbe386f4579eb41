// Page-locked host memory of one OpenCL context (gpu/pinned_memory.h), on
// the test device's context: at most its cap given out at once, ranges
// held only inside one block, memory adopted only where nothing overlaps,
// and another context's blocks counted once shared.
#include "gpu/pinned_memory.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <memory>

#include "gpu/device.h"
#include "tests/opencl_test_util.h"

namespace sortd::gpu {
namespace {

std::shared_ptr<PinnedHostMemory> Make(size_t max_bytes) {
  absl::StatusOr<Device> device = FindDevice(CpuDevice().kind);
  EXPECT_TRUE(device.ok()) << device.status();
  if (!device.ok()) return nullptr;
  absl::StatusOr<std::shared_ptr<PinnedHostMemory>> memory =
      PinnedHostMemory::Create(cl::Context(device->device), device->device,
                               max_bytes);
  EXPECT_TRUE(memory.ok()) << memory.status();
  return memory.ok() ? *memory : nullptr;
}

TEST(PinnedHostMemory, GivesOutAtMostItsCapAtOnce) {
  std::shared_ptr<PinnedHostMemory> memory = Make(size_t{1} << 20);
  ASSERT_NE(memory, nullptr);
  EXPECT_EQ(memory->Allocate((1 << 20) + 1), nullptr);  // never fits
  EXPECT_EQ(memory->Available(), size_t{1} << 20);
  void* a = memory->Allocate(768 << 10);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(memory->Available(), size_t{256} << 10);
  EXPECT_EQ(memory->Allocate(512 << 10), nullptr);
  void* b = memory->Allocate(256 << 10);  // exactly the cap
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(memory->stats().bytes, size_t{1} << 20);
  EXPECT_EQ(memory->stats().blocks, 2u);
  memory->Free(a, 768 << 10);
  void* c = memory->Allocate(512 << 10);  // freed memory can be had again
  ASSERT_NE(c, nullptr);
  memory->Free(b, 256 << 10);
  memory->Free(c, 512 << 10);
  EXPECT_EQ(memory->stats().bytes, 0u);
  EXPECT_EQ(memory->Available(), size_t{1} << 20);
}

TEST(PinnedHostMemory, HoldsOnlyRangesInsideOneBlock) {
  std::shared_ptr<PinnedHostMemory> memory = Make(SIZE_MAX);
  ASSERT_NE(memory, nullptr);
  auto* a = static_cast<std::byte*>(memory->Allocate(64 << 10));
  ASSERT_NE(a, nullptr);
  EXPECT_TRUE(memory->Holds(a, 64 << 10));
  EXPECT_TRUE(memory->Holds(a + 100, 1000));
  EXPECT_FALSE(memory->Holds(a, (64 << 10) + 1));  // past its end
  const auto* before =
      reinterpret_cast<const std::byte*>(reinterpret_cast<uintptr_t>(a) - 1);
  EXPECT_FALSE(memory->Holds(before, 2));  // from before its start
  std::byte local[16];
  EXPECT_FALSE(memory->Holds(local, sizeof(local)));
  memory->Free(a, 64 << 10);
  EXPECT_FALSE(memory->Holds(a, 1)) << "freed";
}

// Adopt takes a range before the driver sees it: a range overlapping one
// adopted or given out already, or one not page-aligned, is refused, and
// the range is free again once its handle goes.
TEST(PinnedHostMemory, AdoptRefusesOverlapsAndUnalignedRanges) {
  std::shared_ptr<PinnedHostMemory> memory = Make(SIZE_MAX);
  ASSERT_NE(memory, nullptr);
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const size_t size = 8 * page;
  void* mapped = mmap(nullptr, size, PROT_READ | PROT_WRITE,
                      MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(mapped, MAP_FAILED);
  auto* base = static_cast<std::byte*>(mapped);

  EXPECT_EQ(memory->Adopt(base + 64, page), nullptr) << "not page-aligned";
  std::shared_ptr<void> middle = memory->Adopt(base + 2 * page, 4 * page);
  ASSERT_NE(middle, nullptr);
  EXPECT_EQ(memory->Adopt(base, 3 * page), nullptr) << "overlaps its start";
  EXPECT_EQ(memory->Adopt(base + 5 * page, 3 * page), nullptr)
      << "overlaps its end";
  EXPECT_EQ(memory->Adopt(base + 3 * page, page), nullptr) << "inside it";
  EXPECT_EQ(memory->Adopt(base, size), nullptr) << "around it";
  std::shared_ptr<void> before = memory->Adopt(base, 2 * page);
  EXPECT_NE(before, nullptr) << "adjacent, not overlapping";
  EXPECT_TRUE(memory->Holds(base + 2 * page, 4 * page));
  middle.reset();
  EXPECT_FALSE(memory->Holds(base + 2 * page, page));
  std::shared_ptr<void> again = memory->Adopt(base + 2 * page, 6 * page);
  EXPECT_NE(again, nullptr) << "free once let go";
  again.reset();
  before.reset();

  // Memory given out here is not adopted over.
  void* block = memory->Allocate(4 * page);
  ASSERT_NE(block, nullptr);
  const uintptr_t start = reinterpret_cast<uintptr_t>(block) / page * page;
  EXPECT_EQ(memory->Adopt(reinterpret_cast<void*>(start), 5 * page), nullptr)
      << "given out here";
  memory->Free(block, 4 * page);
  munmap(mapped, size);
}

// Another context's memory, once shared, counts as held here (its arrays
// then skip this context's staging copy); not before, and not after the
// sharing ends.
TEST(PinnedHostMemory, SharedBlocksOfAnotherContextCountAsHeld) {
  std::shared_ptr<PinnedHostMemory> first = Make(SIZE_MAX);
  std::shared_ptr<PinnedHostMemory> second = Make(SIZE_MAX);
  ASSERT_NE(first, nullptr);
  ASSERT_NE(second, nullptr);
  void* block = first->Allocate(64 << 10);
  ASSERT_NE(block, nullptr);
  EXPECT_FALSE(second->Holds(block, 64 << 10));
  second->ShareFrom(first);
  EXPECT_TRUE(second->Holds(block, 64 << 10));
  EXPECT_FALSE(second->Holds(block, (64 << 10) + 1));
  EXPECT_EQ(second->stats().bytes, 0u);  // not its own
  second->ShareFrom(nullptr);
  EXPECT_FALSE(second->Holds(block, 64 << 10));
  first->Free(block, 64 << 10);
}

}  // namespace
}  // namespace sortd::gpu
