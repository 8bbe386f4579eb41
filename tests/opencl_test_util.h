// What the OpenCL engine's test suites share: the test device (PoCL's CPU
// device in CI; a GPU with SORTD_TEST_DEVICE=gpu) and its policy (the
// device's own, or a named one with SORTD_TEST_POLICY), one engine per test
// process, a policy of tiny tiles, a fresh temporary folder, and a u32
// sort in place that counts how its bytes moved.
#ifndef SORTD_TESTS_OPENCL_TEST_UTIL_H_
#define SORTD_TESTS_OPENCL_TEST_UTIL_H_

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "gpu/opencl_engine.h"

namespace sortd::gpu {

// Sorts `keys` laid out at `base` as [keys | keys out] on `engine`, checks
// the keys out against std::sort, and returns the bytes the sort moved
// each way: straight (direct) or through the staging ring (staged).
inline Sorter::TransferBytes SortU32AndCountTransfers(
    Sorter& engine, std::byte* base, const std::vector<uint32_t>& keys) {
  const size_t n = keys.size(), bytes = n * sizeof(uint32_t);
  std::memcpy(base, keys.data(), bytes);
  const Sorter::TransferBytes before = engine.transfer_bytes();
  EXPECT_TRUE(engine
                  .Sort(SortJob{.key_type = KeyType::kU32,
                                .count = n,
                                .keys = base,
                                .keys_out = base + bytes})
                  .ok());
  const Sorter::TransferBytes after = engine.transfer_bytes();
  std::vector<uint32_t> want = keys, got(n);
  std::sort(want.begin(), want.end());
  std::memcpy(got.data(), base + bytes, bytes);
  EXPECT_EQ(got, want);
  return {.staged = after.staged - before.staged,
          .direct = after.direct - before.direct};
}

inline std::string TempDir(const std::string& name) {
  std::string dir =
      ::testing::TempDir() + "/sortd_" + name + "_" + std::to_string(getpid());
  std::filesystem::remove_all(dir);
  return dir;
}

// The OpenCL CPU device, or a GPU when SORTD_TEST_DEVICE=gpu (to run this
// suite on a GPU machine). With SORTD_TEST_POLICY=NAME (an entry of
// EnginePolicy::Names(), e.g. intel-subgroups) every engine made from these
// options runs that policy instead of the device's own, unless the test
// sets one of its own.
inline OpenClEngine::Options CpuDevice() {
  OpenClEngine::Options o;
  const char* d = std::getenv("SORTD_TEST_DEVICE");
  o.kind = d && std::string(d) == "gpu" ? DeviceKind::kGpu : DeviceKind::kCpu;
  o.preallocate_keys = 0;  // keep each test's warm-up short
  if (const char* p = std::getenv("SORTD_TEST_POLICY")) o.policy_name = p;
  return o;
}

inline OpenClEngine::Options CpuDeviceWithCache(const std::string& dir) {
  OpenClEngine::Options o = CpuDevice();
  o.cache_dir = dir;
  return o;
}

// One engine per test process, on the CPU device, as CI has no GPU.
// Says which device and policy it runs, once.
inline OpenClEngine& Engine() {
  static OpenClEngine* engine = [] {
    auto e = OpenClEngine::Create(CpuDevice());
    EXPECT_TRUE(e.ok()) << e.status();
    if (!e.ok()) return static_cast<OpenClEngine*>(nullptr);
    std::printf("engine under test: %s; policy %s\n",
                (*e)->info().ToString().c_str(),
                (*e)->policy().ToString().c_str());
    return e->release();
  }();
  return *engine;
}

// Tiny tiles (32 keys) so that a few thousand keys cross many tiles and a
// few tens of thousands need three levels of scan.
inline EnginePolicy TinyPolicy() {
  EnginePolicy p;
  p.radix = {.radix_bits = 4, .work_group = 16, .items_32 = 2, .items_64 = 2};
  p.transpose = {.matrices_per_group = 4};
  return p;
}

}  // namespace sortd::gpu

#endif  // SORTD_TESTS_OPENCL_TEST_UTIL_H_
