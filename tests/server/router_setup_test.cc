// The router's thresholds at start (server/router_setup.h): pinned ones
// are taken without timing anything, a failed calibration leaves the
// conservative defaults, and pins override what a calibration chose.
#include "server/router_setup.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>

#include "absl/status/status.h"
#include "cpu/cpu_sorter.h"
#include "tests/stub_engine.h"

namespace sortd {
namespace {

// A device whose sorts and transposes are counted and run by `inner`, or
// fail when it is null.
class CountingDevice : public testing::StubEngine {
 public:
  explicit CountingDevice(Sorter* inner) : inner_(inner) {}
  absl::Status Sort(const SortJob& job) override {
    ++calls;
    if (inner_ == nullptr) return absl::InternalError("device is broken");
    return inner_->Sort(job);
  }
  absl::Status Transpose(const TransposeJob& job) override {
    ++calls;
    if (inner_ == nullptr) return absl::InternalError("device is broken");
    return inner_->Transpose(job);
  }
  std::atomic<int> calls{0};

 private:
  Sorter* inner_;
};

Scheduler::Options BaseOptions() {
  Scheduler::Options o;
  o.cpu_workers = 2;
  o.spill = true;
  return o;
}

RouterPins AllPinned() {
  return {.cpu_max_keys = 1000,
          .solo_min_keys = 500000,
          .transpose_cpu_max_matrices = 10,
          .transpose_solo_min_matrices = 20000,
          .batch_in_place_min_keys = 4096,
          .calibrate_max_keys = 1 << 12};
}

TEST(RouterSetup, PinnedThresholdsAreTakenWithoutCalibrating) {
  CpuSorter cpu({.threads = 1});
  CountingDevice device(&cpu);
  Scheduler::Options o = BaseOptions();
  SetRouterThresholds(AllPinned(), cpu, device, &o);
  EXPECT_EQ(device.calls, 0);
  EXPECT_EQ(o.sort.cpu_max, 1000u);
  EXPECT_EQ(o.sort.solo_min, 500000u);
  // Transposes are counted in rows: 32 a matrix.
  EXPECT_EQ(o.transpose.cpu_max, 10u * 32);
  EXPECT_EQ(o.transpose.solo_min, 20000u * 32);
  EXPECT_EQ(o.in_place_min_keys, 4096u);
  // Nothing spills without calibrated costs.
  EXPECT_EQ(o.sort.spill_max, 0u);
  EXPECT_EQ(o.transpose.spill_max, 0u);
}

TEST(RouterSetup, AFailedCalibrationLeavesTheConservativeDefaults) {
  CpuSorter cpu({.threads = 1});
  CountingDevice device(nullptr);
  RouterPins pins = AllPinned();
  pins.cpu_max_keys = -1;  // one threshold left to the calibration
  Scheduler::Options o = BaseOptions();
  SetRouterThresholds(pins, cpu, device, &o);
  EXPECT_GT(device.calls, 0);
  EXPECT_EQ(o.sort.cpu_max, 4096u);
  EXPECT_EQ(o.sort.solo_min, 500000u);
  EXPECT_EQ(o.sort.spill_max, 0u);
}

TEST(RouterSetup, PinsOverrideWhatTheCalibrationChose) {
  CpuSorter cpu({.threads = 1});
  CpuSorter other({.threads = 1});
  CountingDevice device(&other);
  RouterPins pins = AllPinned();
  pins.cpu_max_keys = -1;
  pins.transpose_cpu_max_matrices = -1;
  Scheduler::Options o = BaseOptions();
  SetRouterThresholds(pins, cpu, device, &o);
  EXPECT_GT(device.calls, 0);
  EXPECT_EQ(o.sort.solo_min, 500000u);
  EXPECT_EQ(o.transpose.solo_min, 20000u * 32);
}

TEST(RouterSetup, WithoutSpillNothingSpillsWhateverTheCalibration) {
  CpuSorter cpu({.threads = 1});
  CpuSorter other({.threads = 1});
  CountingDevice device(&other);
  RouterPins pins = AllPinned();
  pins.cpu_max_keys = -1;
  Scheduler::Options o = BaseOptions();
  o.spill = false;
  SetRouterThresholds(pins, cpu, device, &o);
  EXPECT_EQ(o.sort.spill_max, 0u);
  EXPECT_EQ(o.transpose.spill_max, 0u);
}

}  // namespace
}  // namespace sortd
