// The vendor policies on a device (gpu/policy_vendors.cc): the
// intel-subgroups policy's sorts, segmented sorts and transposes where the
// device has its extensions, and a policy forced by name or refused.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gpu/opencl_engine.h"
#include "tests/engine_checks.h"
#include "tests/opencl_test_util.h"
#include "tests/sort_check.h"

namespace sortd::gpu {
namespace {

using sortd::testing::CheckSort;
using sortd::testing::Extra;
using sortd::testing::KeyOf;
using sortd::testing::Shape;
using ::testing::HasSubstr;

// The Intel policy as For() makes it for an Intel GPU, forced on the test
// device (EnginePolicy::Named): where the device has sub-group ranking's
// extensions, as it is; elsewhere (PoCL 3) with its portable twin
// (kWarpEmulated ranking of the same warps and tiles). Every key type and
// order, payloads and permutations, across its tile and small-tile
// lengths; segments of every route; transposes.
TEST(IntelPolicy, SortsSegmentsAndTransposes) {
  OpenClEngine::Options options = CpuDevice();
  const DeviceInfo& info = Engine().info();
  absl::StatusOr<EnginePolicy> p = EnginePolicy::Named("intel-subgroups", info);
  ASSERT_TRUE(p.ok()) << p.status();
  const bool subgroups = BestSubgroupOps(info).has_value();
  std::printf("device %s; extensions: %s\n", info.ToString().c_str(),
              info.extensions.c_str());
  if (!subgroups) {
    p->radix.ranking = TileRanking::kWarpEmulated;
    std::printf(
        "no sub-group ranking here: intel-subgroups with its twin, "
        "warp-emulated ranking\n");
  }
  options.policy = *p;
  auto engine = OpenClEngine::Create(options);
  ASSERT_TRUE(engine.ok()) << engine.status();
  const EnginePolicy& policy = (*engine)->policy();
  std::printf("policy %s; radix sub-groups seen: %d; transpose kernel: %s\n",
              policy.ToString().c_str(), (*engine)->radix_sub_group_size(),
              (*engine)->transpose_kernel());
  EXPECT_EQ((*engine)->radix_sub_group_size(),
            subgroups ? policy.radix.warp_size : 0);
  EXPECT_EQ(policy.radix.warp_size, 16);
  if (subgroups) {
    EXPECT_STREQ((*engine)->transpose_kernel(), "subgroup");
  }
  const size_t small_max = policy.radix.small_max;
  for (KeyType type : kAllKeyTypes) {
    DispatchKeyType(type, [&]<KeyType T>() {
      using K = KeyOf<T>;
      const int bits = sizeof(K) * 8;
      for (Extra extra :
           {Extra::kNone, Extra::kU32Values, Extra::kU64ValuesAndPermutation}) {
        const size_t tile = policy.radix.Tile(bits, extra != Extra::kNone);
        for (size_t n : {size_t{4097}, tile - 1, tile + 1, 3 * tile + 5,
                         small_max, small_max + 1}) {
          for (bool desc : {false, true}) {
            // Either side of the small-array build's limit, one order per
            // payload kind (both orders run at the shorter lengths).
            if (n >= small_max && desc != (extra == Extra::kU32Values)) {
              continue;
            }
            const Shape shape = (n + desc) % 3 == 0   ? Shape::kRandom
                                : (n + desc) % 3 == 1 ? Shape::kSpecial
                                                      : Shape::kFewDistinct;
            CheckSort(**engine, sortd::testing::Generate<K>(shape, n, 8), desc,
                      extra,
                      absl::StrCat("intel ", KeyTypeName(type), " n=", n));
          }
        }
      }
      size_t total = 0;
      const std::vector<uint32_t> offsets =
          MixedOffsets(policy.bitonic.Block(bits), 12, &total);
      CheckSegmented(**engine,
                     sortd::testing::Generate<K>(Shape::kRandom, total, 9),
                     offsets, type == KeyType::kF32, true);
    });
  }
  for (size_t count : {size_t{1}, size_t{7}, size_t{9}, size_t{4001}}) {
    CheckTranspose(**engine, count, static_cast<unsigned>(count) + 5);
  }
}

// A named policy is forced through Options::policy_name; one that does not
// fit the device, or that does not exist, is refused before anything is
// built.
TEST(IntelPolicy, ForcedByNameOrRefused) {
  OpenClEngine::Options options = CpuDevice();
  options.policy_name = "cpu";
  auto cpu = OpenClEngine::Create(options);
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  EXPECT_EQ((*cpu)->policy().name, "cpu");
  options.policy_name = "no-such-policy";
  EXPECT_EQ(OpenClEngine::Create(options).status().code(),
            absl::StatusCode::kNotFound);
  if (!absl::StrContains(Engine().info().vendor, "NVIDIA")) {
    options.policy_name = "nvidia-ptx";
    const absl::Status s = OpenClEngine::Create(options).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(s.message(), HasSubstr("policy nvidia-ptx does not fit"));
  }
  if (!BestSubgroupOps(Engine().info())) {
    options.policy_name = "intel-subgroups";
    const absl::Status s = OpenClEngine::Create(options).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(s.message(), HasSubstr("subgroup ranking"));
  }
}

}  // namespace
}  // namespace sortd::gpu
