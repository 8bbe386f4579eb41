// The engine's tuning: the named policy of each kind of device, each broken
// constraint named, and the policy's text read back as overrides.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/transpose.h"
#include "cpu/cpu_sorter.h"
#include "gpu/kernel_sources.h"
#include "gpu/opencl_engine.h"
#include "tests/clang_kernels.h"
#include "tests/fake_devices.h"
#include "tests/opencl_test_util.h"
#include "tests/sort_check.h"

namespace sortd::gpu {
namespace {

using sortd::testing::CheckSort;
using sortd::testing::Extra;
using sortd::testing::KeyOf;
using sortd::testing::Shape;
using ::testing::HasSubstr;

TEST(Policy, FitsTheDeviceAndPrints) {
  const EnginePolicy& p = Engine().policy();
  EXPECT_TRUE(p.CheckFits(Engine().info()).ok());
  EXPECT_THAT(p.ToString(), HasSubstr("radix.radix_bits="));
  EXPECT_THAT(p.ToString(), HasSubstr("transpose.matrices_per_group="));
  // The NVIDIA entry (8-bit passes, each ranked in one warp-level step,
  // one launch per pass) fits an H100's limits.
  DeviceInfo nvidia = Engine().info();
  nvidia.name = "NVIDIA Test GPU";  // no model of kNvidiaModels
  nvidia.vendor = "NVIDIA Corporation";
  nvidia.is_gpu = true;
  nvidia.local_mem_bytes = 48 * 1024;
  nvidia.max_work_group = 1024;
  const EnginePolicy np = EnginePolicy::For(nvidia);
  EXPECT_EQ(np.radix.radix_bits, 8);
  EXPECT_EQ(np.name, "nvidia-ptx");
  // Ballots with early counts (keys placed as ranked), for either key
  // width.
  EXPECT_EQ(np.radix.ranking, TileRanking::kWarpBallots);
  EXPECT_EQ(np.radix.pass, RadixPass::kOneLaunchEarlyCounts);
  // Marked look-back statuses up to their limit, status lines prefetched.
  EXPECT_TRUE(np.radix.MarkedStatus((size_t{1} << 29) - 1));
  EXPECT_TRUE(np.radix.status_prefetch);
  EXPECT_EQ(np.radix.count_unroll, 2);
  // Streaming key loads only where the model's name says they were
  // measured to pay (the H100 80GB HBM3), from 2^26 32-bit keys only.
  EXPECT_EQ(np.radix.stream_keys_32_min, 0u);
  DeviceInfo h100 = nvidia;
  h100.name = "NVIDIA H100 80GB HBM3";
  DeviceInfo h200 = nvidia;
  h200.name = "NVIDIA H200";
  const EnginePolicy hp = EnginePolicy::For(h100);
  EXPECT_EQ(hp.radix.stream_keys_32_min, size_t{1} << 26);
  EXPECT_EQ(EnginePolicy::For(h200).radix.stream_keys_32_min, 0u);
  EXPECT_EQ(EnginePolicy::Named("nvidia-ptx", h100)->radix.stream_keys_32_min,
            size_t{1} << 26);
  EXPECT_TRUE(hp.radix.StreamKeys(32, false, size_t{1} << 26));
  EXPECT_FALSE(hp.radix.StreamKeys(32, false, (size_t{1} << 26) - 1));
  EXPECT_FALSE(hp.radix.StreamKeys(32, true, size_t{1} << 28));
  EXPECT_FALSE(hp.radix.StreamKeys(64, false, size_t{1} << 28));
  EXPECT_THAT(RadixBuildOptions(hp.radix, 32, false, 32, true),
              HasSubstr("-DSTREAM_KEYS=1"));
  EXPECT_THAT(RadixBuildOptions(hp.radix, 32, false, 32),
              Not(HasSubstr("STREAM_KEYS")));
  EXPECT_TRUE(hp.CheckFits(h100).ok()) << hp.ToString();
  DeviceInfo h100_elsewhere = h100;
  h100_elsewhere.vendor = "Another Vendor";
  EXPECT_THAT(hp.CheckFits(h100_elsewhere).message(),
              HasSubstr("radix.stream_keys_32_min needs an NVIDIA GPU"));
  // An NVIDIA GPU older than sm_70 cannot build the PTX: it gets the
  // portable policy, and a PTX policy does not fit it.
  DeviceInfo old_nvidia = nvidia;
  old_nvidia.nv_compute_major = 6;
  const EnginePolicy op = EnginePolicy::For(old_nvidia);
  EXPECT_EQ(op.radix.ranking, TileRanking::kWorkItemCounters);
  EXPECT_TRUE(op.CheckFits(old_nvidia).ok()) << op.ToString();
  EXPECT_FALSE(np.CheckFits(old_nvidia).ok());
  old_nvidia.nv_compute_major = 7;
  EXPECT_EQ(EnginePolicy::For(old_nvidia).radix.ranking,
            TileRanking::kWarpBallots);
  EXPECT_GT(np.radix.Items(32, false), np.radix.Items(32, true));
  EXPECT_TRUE(np.CheckFits(nvidia).ok()) << np.ToString();
  // The same entry is refused by a device of another vendor (PTX).
  DeviceInfo not_nvidia = nvidia;
  not_nvidia.vendor = "Another Vendor";
  EXPECT_FALSE(np.CheckFits(not_nvidia).ok());
  DeviceInfo small = Engine().info();
  small.local_mem_bytes = 8 * 1024;
  small.max_work_group = 128;
  small.is_gpu = true;
  EnginePolicy fitted = EnginePolicy::For(small);
  EXPECT_TRUE(fitted.CheckFits(small).ok()) << fitted.ToString();
  EXPECT_FALSE(p.CheckFits(small).ok());
}

// The first pass of a keys-only sort from scratch places keys unranked
// (radix_unordered_onesweep) where the passes are one launch with early
// counts and the knob is on; never with an index (argsort and payloads
// keep equal keys in input order) or with other pass forms.
TEST(Policy, OnlyKeysOnlyEarlyCountPassesPlaceTheFirstUnranked) {
  for (const char* name : {"nvidia-ptx", "intel-subgroups", "gpu", "cpu"}) {
    absl::StatusOr<EnginePolicy> named =
        EnginePolicy::Named(name, Engine().info());
    ASSERT_TRUE(named.ok()) << named.status();
    const RadixSortPolicy& r = named->radix;
    const bool early = r.pass == RadixPass::kOneLaunchEarlyCounts;
    for (int bits : {32, 64}) {
      const size_t n = size_t{1} << 20;
      EXPECT_EQ(PlanRadixPasses(r, bits, false, n, true).unordered_first, early)
          << name << " " << bits;
      EXPECT_FALSE(PlanRadixPasses(r, bits, true, n, true).unordered_first)
          << name << " " << bits;
      // Without the digit totals the passes take three launches.
      EXPECT_FALSE(PlanRadixPasses(r, bits, false, n, false).unordered_first)
          << name << " " << bits;
      RadixSortPolicy off = r;
      off.unordered_first = false;
      EXPECT_FALSE(PlanRadixPasses(off, bits, false, n, true).unordered_first)
          << name << " " << bits;
    }
  }
  EnginePolicy p = EnginePolicy::For(Engine().info());
  ASSERT_TRUE(ApplyPolicyOverrides("radix.unordered_first=0", &p).ok());
  EXPECT_FALSE(p.radix.unordered_first);
  EXPECT_THAT(p.ToString(), HasSubstr("radix.unordered_first=0"));
}

// This machine's device described as an H100 (NVIDIA, sm_90, 48 KiB of
// local memory): what NVIDIA's policy is chosen and fitted for.
DeviceInfo HopperInfo() {
  DeviceInfo nvidia = Engine().info();
  nvidia.vendor = "NVIDIA Corporation";
  nvidia.is_gpu = true;
  nvidia.local_mem_bytes = 48 * 1024;
  nvidia.max_work_group = 1024;
  nvidia.nv_compute_major = 9;
  return nvidia;
}

// The late walk back: NVIDIA's policy builds it for 32-bit keys without an
// index only (the unranked pass always, the ranked twin from 8192 tiles),
// and nowhere the passes have no late form.
TEST(Policy, LateLookbackForThirtyTwoBitKeysOnlyFromItsTileCount) {
  const DeviceInfo nvidia = HopperInfo();
  const EnginePolicy np = EnginePolicy::For(nvidia);
  ASSERT_EQ(np.name, "nvidia-ptx");
  const RadixSortPolicy& r = np.radix;
  const std::string keys32 = RadixBuildOptions(r, 32, false, 32);
  EXPECT_THAT(keys32, HasSubstr("-DLATE_UNORDERED=1"));
  EXPECT_THAT(keys32, HasSubstr("-DLATE_RANKED=1"));
  for (const std::string& other :
       {RadixBuildOptions(r, 32, true, 16), RadixBuildOptions(r, 64, false, 16),
        RadixBuildOptions(r, 64, true, 8)}) {
    EXPECT_THAT(other, ::testing::Not(HasSubstr("-DLATE_"))) << other;
  }
  const size_t tile = r.Tile(32, false, size_t{1} << 26);
  EXPECT_FALSE(PlanRadixPasses(r, 32, false, 8191 * tile, true).late_ranked);
  EXPECT_TRUE(PlanRadixPasses(r, 32, false, 8192 * tile, true).late_ranked);
  EXPECT_FALSE(PlanRadixPasses(r, 32, true, 8192 * tile, true).late_ranked);
  EXPECT_FALSE(PlanRadixPasses(r, 64, false, 8192 * tile, true).late_ranked);
  // Where the passes have no late form the knobs do nothing: a policy
  // of three-launch passes still fits, and builds no late walk, no early
  // counts and no status prefetch.
  EnginePolicy q = np;
  ASSERT_TRUE(ApplyPolicyOverrides("radix.pass=three-launch", &q).ok());
  EXPECT_EQ(q.radix.late_lookback_tiles_32, 8192u);
  EXPECT_FALSE(q.radix.LateRanked(32, false));
  EXPECT_THAT(RadixBuildOptions(q.radix, 32, false, 32),
              ::testing::Not(HasSubstr("-DLATE_")));
  EXPECT_TRUE(q.CheckFits(nvidia).ok()) << q.CheckFits(nvidia);
  EXPECT_THAT(RadixBuildOptions(q.radix, 32, false, 32),
              ::testing::Not(HasSubstr("-DEARLY_COUNTS")));
  EXPECT_THAT(RadixBuildOptions(q.radix, 64, true, 8),
              ::testing::Not(HasSubstr("-DSTATUS_PREFETCH")));
}

// The Intel policy goes to Intel GPUs with sub-group ranking's extensions,
// and to nothing else: not to an Intel GPU without them, not to another
// vendor's GPU or to a CPU device (PoCL reports "GenuineIntel" and the
// same extensions) that has them.
TEST(IntelPolicy, ChosenByVendorAndExtensions) {
  const EnginePolicy p = EnginePolicy::For(IntelArcInfo());
  EXPECT_EQ(p.name, "intel-subgroups");
  EXPECT_TRUE(p.CheckFits(IntelArcInfo()).ok()) << p.CheckFits(IntelArcInfo());
  EXPECT_EQ(p.radix.ranking, TileRanking::kSubgroup);
  EXPECT_EQ(p.radix.warp_size, 16);
  EXPECT_EQ(p.radix.radix_bits, 8);
  EXPECT_EQ(p.radix.pass, RadixPass::kOneLaunchEarlyCounts);
  EXPECT_FALSE(p.radix.status_prefetch);  // PTX
  EXPECT_EQ(p.transpose.sub_group_size, 32);
  EXPECT_EQ(p.radix.subgroup_ops, SubgroupOps::kKhrBallot);
  // The documented fallback for a device that might not keep every
  // started work-group resident: three launches a pass, no look-back.
  EnginePolicy three = p;
  ASSERT_TRUE(ApplyPolicyOverrides("radix.pass=three-launch", &three).ok());
  EXPECT_TRUE(three.CheckFits(IntelArcInfo()).ok())
      << three.CheckFits(IntelArcInfo());
  EXPECT_THAT(RadixBuildOptions(three.radix, 64, false, 16),
              ::testing::Not(HasSubstr("-DEARLY_COUNTS")));
  // Which built-ins follow the extensions.
  DeviceInfo intel_only = IntelArcInfo();
  intel_only.extensions = "cl_intel_subgroups cl_intel_required_subgroup_size";
  EXPECT_EQ(EnginePolicy::For(intel_only).name, "intel-subgroups");
  EXPECT_EQ(EnginePolicy::For(intel_only).radix.subgroup_ops,
            SubgroupOps::kIntel);
  DeviceInfo khr = IntelArcInfo();
  khr.extensions =
      "cl_khr_subgroups cl_khr_subgroup_shuffle "
      "cl_intel_required_subgroup_size";
  EXPECT_EQ(EnginePolicy::For(khr).radix.subgroup_ops, SubgroupOps::kKhr);
  // An Intel GPU without sub-group shuffles, or that cannot require a
  // sub-group size, gets the portable policy.
  for (const char* extensions :
       {"cl_khr_fp64", "cl_khr_subgroups cl_intel_required_subgroup_size",
        "cl_khr_subgroups cl_khr_subgroup_shuffle cl_intel_subgroups"}) {
    DeviceInfo bare = IntelArcInfo();
    bare.extensions = extensions;
    const EnginePolicy q = EnginePolicy::For(bare);
    EXPECT_EQ(q.name, "gpu") << extensions;
    EXPECT_EQ(q.radix.ranking, TileRanking::kWorkItemCounters) << extensions;
    EXPECT_TRUE(q.CheckFits(bare).ok()) << q.CheckFits(bare);
    // Forced there, it is refused, naming what is missing.
    EXPECT_THAT(p.CheckFits(bare).message(),
                HasSubstr("subgroup ranking with radix.subgroup_ops="
                          "khr-ballot needs the device's cl_khr_subgroups"))
        << extensions;
  }
  DeviceInfo nvidia = IntelArcInfo();
  nvidia.vendor = "NVIDIA Corporation";
  nvidia.nv_compute_major = 9;
  EXPECT_EQ(EnginePolicy::For(nvidia).name, "nvidia-ptx");
  DeviceInfo other = IntelArcInfo();
  other.vendor = "Advanced Micro Devices, Inc.";
  EXPECT_EQ(EnginePolicy::For(other).name, "gpu");
  DeviceInfo cpu = IntelArcInfo();
  cpu.vendor = "GenuineIntel";
  cpu.is_gpu = false;
  cpu.local_mem_bytes = 512 * 1024;
  EXPECT_EQ(EnginePolicy::For(cpu).name, "cpu");
}

// Its tiles use most of 64 KiB of local memory (more than 48 KiB each), and
// a device with less gets them shrunk to fit.
TEST(IntelPolicy, FitsSixtyFourKiBAndShrinksOnLess) {
  const EnginePolicy p = EnginePolicy::For(IntelArcInfo());
  for (int bits : {32, 64}) {
    for (bool with_index : {true, false}) {
      SCOPED_TRACE(absl::StrCat(bits, with_index ? " with index" : ""));
      const size_t bytes = p.radix.ScatterLocalBytes(bits, with_index);
      std::printf(
          "intel-subgroups scatter, %d-bit keys%s: %d keys a tile, "
          "%zu bytes of local memory\n",
          bits, with_index ? " with an index" : "",
          p.radix.Tile(bits, with_index), bytes);
      EXPECT_GT(bytes, 48u * 1024);
      EXPECT_LE(bytes, 64u * 1024);
    }
  }
  EXPECT_EQ(p.radix.Tile(32, true), 256 * 16);
  EXPECT_EQ(p.radix.Tile(64, true), 256 * 12);
  EXPECT_EQ(p.radix.Tile(32, false), 256 * 32);
  EXPECT_EQ(p.radix.Tile(64, false), 256 * 16);
  DeviceInfo smaller = IntelArcInfo();
  smaller.local_mem_bytes = 48 * 1024;
  const EnginePolicy q = EnginePolicy::For(smaller);
  EXPECT_EQ(q.name, "intel-subgroups");
  EXPECT_TRUE(q.CheckFits(smaller).ok()) << q.CheckFits(smaller);
  EXPECT_FALSE(p.CheckFits(smaller).ok());
  for (int bits : {32, 64}) {
    for (bool with_index : {true, false}) {
      EXPECT_LT(q.radix.Tile(bits, with_index), p.radix.Tile(bits, with_index));
      EXPECT_LE(q.radix.ScatterLocalBytes(bits, with_index), 48u * 1024);
    }
  }
  EXPECT_EQ(q.radix.ranking, TileRanking::kSubgroup);
  EXPECT_EQ(q.radix.work_group % q.radix.warp_size, 0);
}

// A named policy runs on any device (as far as it fits there): the named
// entry, fitted as For() fits it.
TEST(IntelPolicy, NamedPoliciesAreForcedWhateverTheVendor) {
  EXPECT_THAT(
      EnginePolicy::Names(),
      ::testing::ElementsAre("nvidia-ptx", "intel-subgroups", "gpu", "cpu"));
  for (const std::string& name : EnginePolicy::Names()) {
    absl::StatusOr<EnginePolicy> p = EnginePolicy::Named(name, IntelArcInfo());
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_EQ(p->name, name);
  }
  EXPECT_EQ(EnginePolicy::Named("intel-subgroups", IntelArcInfo())->ToString(),
            EnginePolicy::For(IntelArcInfo()).ToString());
  // On a CPU device with the extensions (PoCL 5): the Intel policy, fitted
  // to it, and it fits.
  DeviceInfo pocl5 = IntelArcInfo();
  pocl5.vendor = "GenuineIntel";
  pocl5.is_gpu = false;
  pocl5.local_mem_bytes = 512 * 1024;
  pocl5.max_work_group = 4096;
  absl::StatusOr<EnginePolicy> forced =
      EnginePolicy::Named("intel-subgroups", pocl5);
  ASSERT_TRUE(forced.ok());
  EXPECT_EQ(forced->name, "intel-subgroups");
  EXPECT_TRUE(forced->CheckFits(pocl5).ok()) << forced->CheckFits(pocl5);
  EXPECT_EQ(forced->radix.Tile(64, true), 256 * 12);
  const absl::Status unknown =
      EnginePolicy::Named("intel", IntelArcInfo()).status();
  EXPECT_EQ(unknown.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(unknown.message(), HasSubstr("intel-subgroups"));
}

// A vendor policy chosen by the device's vendor and extensions that does
// not build or probe there gives way to its portable twin, and says so; a
// sub-group transpose that does not build gives way to the portable
// kernel. The OpenCL CPU device, described as an Intel GPU with sub-group
// extensions: PoCL without sub-groups (CI's PoCL 3) builds neither the
// sub-group ranking nor the sub-group transpose.
TEST(IntelPolicy, AChosenPolicyThatDoesNotRunGivesWayToItsPortableTwin) {
  absl::StatusOr<Device> device = FindDevice(DeviceKind::kCpu);
  ASSERT_TRUE(device.ok()) << device.status();
  const bool has_subgroups = device->info.HasExtension("cl_khr_subgroups") ||
                             device->info.HasExtension("cl_intel_subgroups");
  device->info.vendor = "Intel(R) Corporation";
  device->info.is_gpu = true;
  device->info.extensions = kSubgroupExtensions;
  ASSERT_EQ(EnginePolicy::For(device->info).name, "intel-subgroups");
  OpenClEngine::Options options = CpuDevice();
  options.policy_name.clear();
  options.device = *device;
  absl::StatusOr<std::unique_ptr<OpenClEngine>> engine =
      OpenClEngine::Create(options);
  ASSERT_TRUE(engine.ok()) << engine.status();
  if (has_subgroups) {
    // PoCL 5: the policy may run as chosen, or give way.
    std::printf("policy %s; %s\n", (*engine)->policy().name.c_str(),
                (*engine)->policy_fallback().c_str());
  } else {
    EXPECT_EQ((*engine)->policy().name, "gpu");
    EXPECT_THAT((*engine)->policy_fallback(),
                HasSubstr("policy intel-subgroups refused ("));
    EXPECT_THAT((*engine)->policy_fallback(),
                HasSubstr("serving with policy gpu"));
    EXPECT_THAT((*engine)->transpose_fallback(),
                HasSubstr("its sub-group kernel does not build"));
  }
  for (bool desc : {false, true}) {
    CheckSort(**engine, testing::Generate<uint32_t>(Shape::kRandom, 50000, 3),
              desc, Extra::kPermutation, "u32 after the fallback");
  }
  std::vector<uint32_t> in(64 * 32), out(in.size()), want(in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    in[i] = static_cast<uint32_t>(i * 0x9E3779B9u + 7);
  }
  const absl::Status t =
      (*engine)->Transpose({.count = 64,
                            .in = reinterpret_cast<const std::byte*>(in.data()),
                            .out = reinterpret_cast<std::byte*>(out.data())});
  ASSERT_TRUE(t.ok()) << t;
  want = in;
  for (size_t m = 0; m < 64; ++m) TransposeBits32(&want[m * 32]);
  EXPECT_EQ(out, want);
  // A policy the caller names is the caller's to keep: no twin.
  if (!has_subgroups) {
    options.policy_name = "intel-subgroups";
    EXPECT_FALSE(OpenClEngine::Create(options).ok());
  }
}

// The -D options of the Intel builds, and the constraints of sub-group
// ranking and warp sizes.
TEST(IntelPolicy, BuildOptionsAndConstraints) {
  const EnginePolicy p = EnginePolicy::For(IntelArcInfo());
  const std::string options = RadixBuildOptions(p.radix, 32, true, 16);
  EXPECT_THAT(
      options,
      HasSubstr("-DRANKING=4 -DEARLY_COUNTS=1"));  // SORTD_RANK_SUBGROUP
  EXPECT_THAT(options, HasSubstr("-DWARP_SIZE=16"));
  EXPECT_THAT(options, HasSubstr("-DSUBGROUP_OPS=1"));  // khr-ballot
  EXPECT_THAT(TransposeBuildOptions(p.transpose, "SUBGROUP_INTEL"),
              HasSubstr("-DSUBGROUP_INTEL=1 -DSUB_GROUP_SIZE=32"));
  EXPECT_THAT(TransposeBuildOptions(p.transpose, ""),
              ::testing::Not(HasSubstr("SUB_GROUP_SIZE")));
  // NVIDIA's builds name no warp size (32) and no sub-group built-ins.
  DeviceInfo nvidia = IntelArcInfo();
  nvidia.vendor = "NVIDIA Corporation";
  nvidia.local_mem_bytes = 48 * 1024;
  nvidia.nv_compute_major = 9;
  nvidia.extensions = "cl_khr_fp64 cl_nv_device_attribute_query";
  const EnginePolicy np = EnginePolicy::For(nvidia);
  for (int bits : {32, 64}) {
    EXPECT_THAT(RadixBuildOptions(np.radix, bits, true, 8),
                ::testing::Not(HasSubstr("WARP_SIZE")));
    EXPECT_THAT(RadixBuildOptions(np.radix, bits, true, 8),
                ::testing::Not(HasSubstr("SUBGROUP_OPS")));
  }
  // The knobs read back.
  EnginePolicy q = p;
  ASSERT_TRUE(ApplyPolicyOverrides("radix.warp_size=32,radix.subgroup_ops="
                                   "intel,transpose.sub_group_size=0",
                                   &q)
                  .ok());
  EXPECT_EQ(q.radix.warp_size, 32);
  EXPECT_EQ(q.radix.subgroup_ops, SubgroupOps::kIntel);
  EXPECT_THAT(q.ToString(), HasSubstr("radix.ranking=subgroup "));
  EXPECT_THAT(q.ToString(), HasSubstr("radix.subgroup_ops=intel"));
  EXPECT_EQ(ApplyPolicyOverrides("radix.subgroup_ops=amd", &q).code(),
            absl::StatusCode::kInvalidArgument);
  // Constraints, each with its sentence.
  q = p;
  q.radix.warp_size = 12;
  EXPECT_THAT(q.CheckFits(IntelArcInfo()).message(),
              HasSubstr("radix.warp_size is 8, 16 or 32"));
  q.radix.warp_size = 32;
  q.radix.work_group = 48;
  EXPECT_THAT(q.CheckFits(IntelArcInfo()).message(),
              HasSubstr("radix.work_group % 32 == 0"));
  q = np;
  q.radix.warp_size = 16;
  EXPECT_THAT(q.CheckFits(nvidia).message(),
              HasSubstr("needs radix.warp_size=32"));
  q = np;
  q.radix.ranking = TileRanking::kSubgroup;
  EXPECT_THAT(q.CheckFits(nvidia).message(),
              HasSubstr("subgroup ranking with radix.subgroup_ops=khr-ballot "
                        "needs the device's"));
  q = p;
  q.radix.ranking = TileRanking::kWarpBallots;
  EXPECT_THAT(q.CheckFits(IntelArcInfo()).message(),
              HasSubstr("ranking needs an NVIDIA GPU that runs PTX"));
  q = p;
  q.transpose.sub_group_size = 16;
  EXPECT_THAT(q.CheckFits(IntelArcInfo()).message(),
              HasSubstr("transpose.sub_group_size is 0 or a multiple of 32"));
  // The portable twin at the same warp size fits any device.
  q = p;
  q.radix.ranking = TileRanking::kWarpEmulated;
  DeviceInfo bare = IntelArcInfo();
  bare.extensions = "";
  EXPECT_TRUE(q.CheckFits(bare).ok()) << q.CheckFits(bare);
}

// Every radix build of the Intel policy, with each kind of sub-group
// built-ins, and its transpose build, compiled by clang's OpenCL C front
// end to SPIR (LLVM IR): what catches an edit that breaks the sub-group
// paths, which PoCL 3 never compiles. Whether they run correctly is for the
// kernel suite on a device with sub-groups (PoCL 5 with
// SORTD_TEST_POLICY=intel-subgroups: bench/device-run.sh).
class IntelKernels : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!testing::ClangKernels::Available()) {
      GTEST_SKIP() << "clang is not installed (scripts/install-deps.sh "
                      "installs it)";
    }
    clang_ = std::make_unique<testing::ClangKernels>("sortd-spir");
    const std::string resource = clang_->dir() / "resource";
    ASSERT_EQ(std::system(("clang -print-resource-dir > " + resource).c_str()),
              0);
    std::ifstream(resource) >> header_;
    header_ += "/include/opencl-c.h";
  }

  // The LLVM IR of program `name` built with `options` as OpenCL C 3.0 with
  // every sub-group extension (clang's full header of built-ins); fails the
  // test (and returns "") when clang refuses it.
  std::string CompileToSpir(const std::string& name,
                            const std::string& options) {
    return clang_->Compile(
        name,
        absl::StrCat("-cl-std=CL3.0 -target spir64 -Xclang -include -Xclang ",
                     header_,
                     " -Dcl_intel_subgroups=1 -Dcl_khr_subgroups=1 "
                     "-Dcl_khr_subgroup_shuffle=1 -Dcl_khr_subgroup_ballot=1 "
                     "-Dcl_intel_required_subgroup_size=1 -Xclang "
                     "-cl-ext=+cl_khr_subgroups,+__opencl_c_subgroups -Werror "
                     "-Wno-ignored-pragmas -fgnu89-inline -S -emit-llvm"),
        options, ".ll");
  }

  std::unique_ptr<testing::ClangKernels> clang_;
  std::string header_;
};

TEST_F(IntelKernels, EveryBuildOfTheIntelPolicyCompilesToSpir) {
  for (SubgroupOps ops :
       {SubgroupOps::kKhrBallot, SubgroupOps::kKhr, SubgroupOps::kIntel}) {
    EnginePolicy p = EnginePolicy::For(IntelArcInfo());
    ASSERT_EQ(p.name, "intel-subgroups");
    p.radix.subgroup_ops = ops;
    for (int bits : {32, 64}) {
      for (bool with_index : {false, true}) {
        for (int items :
             {p.radix.Items(bits, with_index), p.radix.small_items}) {
          const std::string options =
              RadixBuildOptions(p.radix, bits, with_index, items);
          SCOPED_TRACE(options);
          const std::string ir = CompileToSpir("radix_sort", options);
          std::vector<std::string> want = {"intel_reqd_sub_group_size",
                                           "sub_group_scan_inclusive_add",
                                           "sub_group_barrier"};
          want.push_back(ops == SubgroupOps::kKhrBallot
                             ? "sub_group_ballot"
                             : "sub_group_reduce_add");
          want.push_back(ops == SubgroupOps::kIntel ? "intel_sub_group_shuffle"
                                                    : "sub_group_shuffle");
          for (const char* kernel :
               {"radix_encode", "radix_onesweep", "radix_scatter",
                "radix_segments", "radix_sub_group_probe", "radix_decode"}) {
            want.push_back(absl::StrCat("@", kernel, "("));
          }
          for (const std::string& w : want) {
            EXPECT_TRUE(absl::StrContains(ir, w)) << "no " << w << " in the IR";
          }
        }
      }
    }
  }
  const EnginePolicy p = EnginePolicy::For(IntelArcInfo());
  for (const char* subgroup : {"SUBGROUP_KHR", "SUBGROUP_INTEL"}) {
    const std::string ir = CompileToSpir(
        "transpose", TransposeBuildOptions(p.transpose, subgroup));
    EXPECT_TRUE(absl::StrContains(ir, "@transpose32_subgroup(")) << subgroup;
    EXPECT_TRUE(absl::StrContains(ir, "intel_reqd_sub_group_size")) << subgroup;
  }
}

}  // namespace
}  // namespace sortd::gpu
