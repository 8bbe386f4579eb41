// Sorts cut across devices (server/scheduler_split.cc) against fake
// devices: a large sort with its scratch admitted is sorted by every device
// at once and merged; not split without scratch, a second device or a free
// one, nor across devices of different kinds; a part that fails sends the
// whole sort to one device again.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/scheduler.h"
#include "tests/server/scheduler_fixture.h"

namespace sortd {
namespace {

using testing::FailoverListener;
using testing::MakeSort;
using testing::SchedulerTest;
using testing::SortCall;
using testing::U32;

// Stages as the scheduler reports them: (device, kernel, stage).
class StageListener : public SchedulerListener {
 public:
  void OnStages(const std::string& device, const char* kernel,
                const StageTimes& stages) override {
    std::lock_guard<std::mutex> l(mu_);
    for (const StageTime& st : stages) {
      seen_.push_back(absl::StrCat(device, " ", kernel, " ", st.stage));
    }
  }
  std::vector<std::string> seen() {
    std::lock_guard<std::mutex> l(mu_);
    return seen_;
  }

 private:
  std::mutex mu_;
  std::vector<std::string> seen_;
};

// Sorts alone of split_min_keys or more, with their scratch admitted, are
// sorted by every device at once and merged: keys, payloads and
// permutations as one device would give them.
TEST_F(SchedulerTest, LargeSortWithAdmittedScratchIsSplitAcrossTheDevices) {
  Scheduler::Options o = OnePlaceAndOneBeyond();
  o.split_min_keys = 6000;
  one_model_ = true;
  StageListener listener;
  auto sched = Make(o, 2, &listener);
  const std::vector<std::shared_ptr<SortCall>> calls = {
      U32(20000, 3), MakeSort<double>(9000, true, true, true, 4)};
  for (const auto& c : calls) {
    c->task->host_scratch_bytes = c->n * 20;  // the most a split holds
    sched->Submit(c->task);
    c->Wait();
    c->verify();
    EXPECT_EQ(c->answers, 1);
    EXPECT_EQ(c->result.path, ExecutionPath::kGpu);
    EXPECT_EQ(c->result.device_runs, 2);
    EXPECT_THAT(c->result.device,
                ::testing::AnyOf("fake+fake #2", "fake #2+fake"));
  }
  EXPECT_EQ(devices_[0]->runs(), 2);
  EXPECT_EQ(devices_[1]->runs(), 2);
  const Scheduler::Stats stats = sched->stats();
  EXPECT_EQ(stats.split_sorts, 2u);
  EXPECT_EQ(stats.split_failures, 0u);
  EXPECT_EQ(stats.gpu_tasks, 2u);
  const std::vector<std::string> seen = listener.seen();
  EXPECT_EQ(std::count_if(seen.begin(), seen.end(),
                          [](const std::string& s) {
                            return s.ends_with("split_sort host_merge");
                          }),
            2);
}

// A sort is cut only when its caller admitted the scratch, it is long
// enough, and two devices are up.
TEST_F(SchedulerTest, SortIsNotSplitWithoutScratchLengthOrASecondDevice) {
  Scheduler::Options o = OnePlaceAndOneBeyond();
  o.split_min_keys = 6000;
  one_model_ = true;
  auto sched = Make(o, 2);
  auto no_scratch = U32(20000, 5);
  auto short_one = U32(5500, 6);
  short_one->task->host_scratch_bytes = 5500 * 8;
  auto too_little = U32(20000, 7);
  too_little->task->host_scratch_bytes = 20000 * 4 - 1;
  for (const auto& c : {no_scratch, short_one, too_little}) {
    sched->Submit(c->task);
    c->Wait();
    c->verify();
    EXPECT_EQ(c->result.device_runs, 1);
    EXPECT_THAT(c->result.device, ::testing::AnyOf("fake", "fake #2"));
  }
  EXPECT_EQ(sched->stats().split_sorts, 0u);

  auto alone = Make(o, 1);
  auto c = U32(20000, 8);
  c->task->host_scratch_bytes = 20000 * 8;
  alone->Submit(c->task);
  c->Wait();
  c->verify();
  EXPECT_EQ(c->result.device_runs, 1);
  EXPECT_EQ(alone->stats().split_sorts, 0u);
}

// Under load every device is at work already: a sort is cut only across
// devices with nothing in flight, here none but its own.
TEST_F(SchedulerTest, SortIsNotSplitOntoABusyDevice) {
  Scheduler::Options o = OnePlaceAndOneBeyond();
  o.split_min_keys = 6000;
  one_model_ = true;
  auto sched = Make(o, 2);
  gate_.Close();
  auto busy = U32(20000, 10);  // no scratch admitted: alone on one device
  sched->Submit(busy->task);
  gate_.WaitEntered(1);
  auto big = U32(20000, 11);
  big->task->host_scratch_bytes = 20000 * 8;
  sched->Submit(big->task);
  gate_.WaitEntered(2);
  gate_.Open();
  for (const auto& c : {busy, big}) {
    c->Wait();
    c->verify();
    EXPECT_EQ(c->result.device_runs, 1);
  }
  EXPECT_NE(busy->result.device, big->result.device);
  EXPECT_EQ(sched->stats().split_sorts, 0u);
}

// A device lost during its part: the sort is not answered half-done but
// sorted again whole by the device left, and the lost one is marked down.
TEST_F(SchedulerTest, SplitSortWhosePartFailsIsSortedAgainOnOneDevice) {
  Scheduler::Options o = OnePlaceAndOneBeyond();
  o.split_min_keys = 6000;
  one_model_ = true;
  FailoverListener listener;
  auto sched = Make(o, 2, &listener);
  devices_[1]->lose_on_failure = true;
  devices_[1]->fail_next = 1;
  auto c = MakeSort<int64_t>(30000, false, false, true, 9);
  c->task->host_scratch_bytes = 30000 * 16;
  sched->Submit(c->task);
  c->Wait();
  c->verify();
  EXPECT_EQ(c->answers, 1);
  EXPECT_EQ(c->result.path, ExecutionPath::kGpu);
  EXPECT_EQ(c->result.device, "fake");
  EXPECT_EQ(c->result.device_runs, 1);
  const Scheduler::Stats stats = sched->stats();
  EXPECT_EQ(stats.split_sorts, 0u);
  EXPECT_EQ(stats.split_failures, 1u);
  EXPECT_EQ(stats.cpu_runs, 0u);
  EXPECT_EQ(sched->healthy_devices(), 1);
}

// Devices of different kinds (here different names) finish their parts
// at different times: a sort is cut only across devices of one kind, and
// across at most kMaxSplitDevices of them.
TEST_F(SchedulerTest, SortIsSplitOnlyAcrossDevicesOfOneKindAndAtMostTwo) {
  Scheduler::Options o = OnePlaceAndOneBeyond();
  o.split_min_keys = 6000;
  auto mixed = Make(o, 2);  // "fake0" and "fake1"
  auto c = U32(20000, 12);
  c->task->host_scratch_bytes = 20000 * 8;
  mixed->Submit(c->task);
  c->Wait();
  c->verify();
  EXPECT_EQ(c->result.device_runs, 1);
  EXPECT_EQ(mixed->stats().split_sorts, 0u);

  devices_.clear();
  one_model_ = true;
  auto three = Make(o, 3);
  auto d = U32(30000, 13);
  d->task->host_scratch_bytes = 30000 * 8;
  three->Submit(d->task);
  d->Wait();
  d->verify();
  EXPECT_EQ(d->result.device_runs,
            static_cast<int>(Scheduler::kMaxSplitDevices));
  EXPECT_EQ(three->stats().split_sorts, 1u);
}

}  // namespace
}  // namespace sortd
