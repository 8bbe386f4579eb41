// The scheduler's device runners (server/scheduler_runner.cc) against fake
// devices: batches beyond the pipeline depth, a failed batch answered by
// another device or the CPU path, lost devices handing their work over and
// re-created after the back-off. Every wait is on an event, never on a
// sleep.
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
using testing::FakeDevice;
using testing::MakeSort;
using testing::SchedulerTest;
using testing::SortCall;
using testing::U32;

// Each call answered once, correctly, by the CPU path in a device's place.
void ExpectFailedOverToTheCpu(
    const std::vector<std::shared_ptr<SortCall>>& calls) {
  for (const auto& c : calls) {
    c->Wait();
    c->verify();
    EXPECT_EQ(c->answers, 1);
    EXPECT_EQ(c->result.route, Route::kFailover);
    EXPECT_EQ(c->result.path, ExecutionPath::kCpu);
  }
}

// Beyond pipeline_depth, a device takes a further batch only when it is
// full: here a second batch runs beside a lone sort once its two requests
// are in, and not before (it is never taken half full).
TEST_F(SchedulerTest, AFullBatchGoesBeyondThePipelineDepth) {
  Scheduler::Options o = OnePlaceAndOneBeyond();
  o.max_batch_requests = 2;
  o.max_batch_delay = absl::Hours(1);
  auto sched = Make(o);
  gate_.Close();
  auto blocker = U32(6000, 1);
  sched->Submit(blocker->task);
  gate_.WaitEntered(1);  // the lone sort holds the pipeline's one place
  auto a = U32(100, 2), b = U32(100, 3);
  sched->Submit(a->task);
  sched->Submit(b->task);
  gate_.WaitEntered(2);  // the full batch runs while the lone sort waits
  EXPECT_FALSE(blocker->done.HasBeenNotified());
  gate_.Open();
  for (auto* c : {&blocker, &a, &b}) {
    (*c)->Wait();
    (*c)->verify();
  }
  EXPECT_EQ(a->result.batch_requests, 2);
  EXPECT_EQ(b->result.batch_requests, 2);
  EXPECT_EQ(devices_[0]->runs(), 2);
}

// A request that runs alone is full work too: with the pipeline's one
// place held by another, it takes the place beyond.
TEST_F(SchedulerTest, ALoneRequestGoesBeyondThePipelineDepth) {
  auto sched = Make(OnePlaceAndOneBeyond());
  gate_.Close();
  auto first = U32(6000, 1);
  sched->Submit(first->task);
  gate_.WaitEntered(1);
  auto second = U32(7000, 2);
  sched->Submit(second->task);
  gate_.WaitEntered(2);  // both lone sorts on the device at once
  gate_.Open();
  for (auto* c : {&first, &second}) {
    (*c)->Wait();
    (*c)->verify();
    EXPECT_EQ((*c)->result.route, Route::kSolo);
  }
  EXPECT_EQ(devices_[0]->runs(), 2);
}

TEST_F(SchedulerTest, FailedBatchIsAnsweredOnTheCpuPath) {
  Scheduler::Options o = BatchAll();
  o.max_batch_requests = 4;
  o.max_batch_delay = absl::Hours(1);
  auto sched = Make(o);
  devices_[0]->fail_next = 1;
  std::vector<std::shared_ptr<SortCall>> calls;
  for (int i = 0; i < 4; ++i) {
    calls.push_back(MakeSort<int64_t>(300 + i, true, true, true, i));
    sched->Submit(calls.back()->task);
  }
  ExpectFailedOverToTheCpu(calls);
  EXPECT_EQ(sched->stats().failovers, 4u);
  // The device is still healthy: the next batch runs there.
  std::vector<std::shared_ptr<SortCall>> next;
  for (int i = 0; i < 4; ++i) {
    next.push_back(U32(100, 10 + i));
    sched->Submit(next.back()->task);
  }
  for (auto& c : next) {
    c->Wait();
    c->verify();
    EXPECT_EQ(c->result.path, ExecutionPath::kGpu);
  }
}

// Records device state changes; tests wait on them.
class StateListener : public SchedulerListener {
 public:
  void OnDeviceState(const std::string&, bool up) override {
    std::lock_guard<std::mutex> l(mu_);
    (up ? ups_ : downs_)++;
    cv_.notify_all();
  }
  void WaitUps(int n) {
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait(l, [&] { return ups_ >= n; });
  }
  int downs() {
    std::lock_guard<std::mutex> l(mu_);
    return downs_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int ups_ = 0, downs_ = 0;
};

TEST_F(SchedulerTest, LostDeviceSendsWorkToTheCpuUntilRecreated) {
  Scheduler::Options o = BatchAll();
  o.max_batch_delay = absl::ZeroDuration();
  o.reinit_backoff = absl::Hours(1);  // stays down for this test
  StateListener listener;
  std::atomic<int> created{0};
  auto sched =
      Make(o, 1, &listener, [&]() -> absl::StatusOr<std::unique_ptr<Sorter>> {
        ++created;
        return std::unique_ptr<Sorter>(new FakeDevice("fake0", nullptr));
      });
  devices_[0]->fail_next = 1;
  devices_[0]->lose_on_failure = true;
  auto first = U32(1000, 1);
  sched->Submit(first->task);
  first->Wait();
  first->verify();
  EXPECT_EQ(first->result.route, Route::kFailover);
  EXPECT_EQ(sched->healthy_devices(), 0);
  EXPECT_EQ(listener.downs(), 1);
  auto second = U32(1000, 2);
  sched->Submit(second->task);
  second->Wait();
  second->verify();
  EXPECT_EQ(second->result.route, Route::kFailover);
  EXPECT_EQ(second->result.path, ExecutionPath::kCpu);
  EXPECT_EQ(created, 0);
}

// Counts the requests the CPU path answered instead of a device.
class FallbackListener : public SchedulerListener {
 public:
  void OnCpuFallback(std::string_view reason) override {
    std::lock_guard<std::mutex> l(mu_);
    ++reasons_[std::string(reason)];
  }
  std::map<std::string, int> reasons() {
    std::lock_guard<std::mutex> l(mu_);
    return reasons_;
  }

 private:
  std::mutex mu_;
  std::map<std::string, int> reasons_;
};

// Requests waiting for the only device when it is lost are answered by
// the CPU path and counted as fallbacks like the batch that failed.
TEST_F(SchedulerTest, RequestsWaitingForALostDeviceCountAsFallbacks) {
  Scheduler::Options o = BatchAll();
  o.max_batch_requests = 1;
  o.max_batch_delay = absl::ZeroDuration();
  o.pipeline_depth = 1;
  o.reinit_backoff = absl::Hours(1);
  FallbackListener listener;
  auto sched = Make(o, 1, &listener);
  devices_[0]->fail_next = 1;
  devices_[0]->lose_on_failure = true;
  gate_.Close();
  auto first = U32(1000, 1);
  sched->Submit(first->task);
  gate_.WaitEntered(1);
  std::vector<std::shared_ptr<SortCall>> waiting;
  for (int i = 0; i < 3; ++i) {
    waiting.push_back(U32(500, 2 + i));
    sched->Submit(waiting.back()->task);
  }
  gate_.Open();
  first->Wait();
  first->verify();
  EXPECT_EQ(first->result.route, Route::kFailover);
  ExpectFailedOverToTheCpu(waiting);
  EXPECT_EQ(sched->stats().failovers, 4u);
  const std::map<std::string, int> reasons = listener.reasons();
  int fallbacks = 0;
  for (const auto& [reason, n] : reasons) fallbacks += n;
  EXPECT_EQ(fallbacks, 4);
  EXPECT_EQ(reasons.count("no_healthy_device"), 1u);
}

TEST_F(SchedulerTest, LostDeviceIsRecreatedAfterTheBackoff) {
  Scheduler::Options o = BatchAll();
  o.max_batch_delay = absl::ZeroDuration();
  o.reinit_backoff = absl::Milliseconds(1);
  StateListener listener;
  std::atomic<int> created{0};
  auto sched =
      Make(o, 1, &listener, [&]() -> absl::StatusOr<std::unique_ptr<Sorter>> {
        // The first attempt fails (the device is still gone), the second works.
        if (++created == 1) return absl::UnavailableError("still gone");
        return std::unique_ptr<Sorter>(new FakeDevice("fake0", nullptr));
      });
  devices_[0]->fail_next = 1;
  devices_[0]->lose_on_failure = true;
  auto first = U32(1000, 1);
  sched->Submit(first->task);
  first->Wait();
  first->verify();
  EXPECT_EQ(first->result.route, Route::kFailover);
  listener.WaitUps(2);  // initial up, then back after re-creation
  EXPECT_EQ(created, 2);
  EXPECT_EQ(sched->stats().reinits, 1u);
  auto again = U32(1000, 2);
  sched->Submit(again->task);
  again->Wait();
  again->verify();
  EXPECT_EQ(again->result.path, ExecutionPath::kGpu);
}

// Four sorts of several kinds that form one batch.
std::vector<std::shared_ptr<SortCall>> SubmitOneBatch(Scheduler& sched) {
  std::vector<std::shared_ptr<SortCall>> calls;
  for (int i = 0; i < 4; ++i) {
    calls.push_back(MakeSort<int64_t>(300 + 7 * i, i % 2 == 0, true, true, i));
    sched.Submit(calls.back()->task);
  }
  return calls;
}

// A batch that failed on one device is answered, correctly and once, by
// the other device, not by the CPU path.
TEST_F(SchedulerTest, FailedBatchIsAnsweredByAnotherDevice) {
  Scheduler::Options o = BatchAll();
  o.max_batch_requests = 4;
  o.max_batch_delay = absl::Hours(1);
  FailoverListener listener;
  auto sched = Make(o, 2, &listener);
  std::atomic<int> fail{1};  // the first run, on whichever device has it
  for (FakeDevice* d : devices_) d->fail_shared = &fail;
  const auto calls = SubmitOneBatch(*sched);
  std::string answered_by;
  for (const auto& c : calls) {
    c->Wait();
    c->verify();
    EXPECT_EQ(c->answers, 1);
    EXPECT_EQ(c->result.path, ExecutionPath::kGpu);
    EXPECT_EQ(c->result.route, Route::kBatch);
    EXPECT_EQ(c->result.batch_requests, 4);
    if (answered_by.empty()) answered_by = c->result.device;
    EXPECT_EQ(c->result.device, answered_by);
  }
  const std::string failed_on = answered_by == "fake0" ? "fake1" : "fake0";
  EXPECT_EQ(devices_[0]->runs(), 1);
  EXPECT_EQ(devices_[1]->runs(), 1);
  const Scheduler::Stats stats = sched->stats();
  EXPECT_EQ(stats.device_failovers, 4u);
  EXPECT_EQ(stats.failovers, 0u);
  EXPECT_EQ(stats.cpu_runs, 0u);
  EXPECT_EQ(stats.gpu_tasks, 4u);
  EXPECT_THAT(listener.handovers(),
              ::testing::ElementsAre(
                  FailoverListener::Handover{failed_on, answered_by, 4}));
  EXPECT_TRUE(listener.fallbacks().empty());
  EXPECT_EQ(sched->healthy_devices(), 2);
}

// A batch that failed on every device goes to each once, then the CPU path
// answers it.
TEST_F(SchedulerTest, BatchThatFailsOnEveryDeviceIsAnsweredOnTheCpuPath) {
  Scheduler::Options o = BatchAll();
  o.max_batch_requests = 4;
  o.max_batch_delay = absl::Hours(1);
  FailoverListener listener;
  auto sched = Make(o, 2, &listener);
  std::atomic<int> fail{2};  // the first two runs, wherever they are
  for (FakeDevice* d : devices_) d->fail_shared = &fail;
  const auto calls = SubmitOneBatch(*sched);
  ExpectFailedOverToTheCpu(calls);
  EXPECT_EQ(devices_[0]->runs(), 1);  // once each, never back
  EXPECT_EQ(devices_[1]->runs(), 1);
  const Scheduler::Stats stats = sched->stats();
  EXPECT_EQ(stats.device_failovers, 4u);
  EXPECT_EQ(stats.failovers, 4u);
  EXPECT_EQ(stats.cpu_runs, 4u);
  ASSERT_EQ(listener.handovers().size(), 1u);
  EXPECT_EQ(listener.handovers()[0].requests, 4u);
  EXPECT_NE(listener.handovers()[0].from, listener.handovers()[0].to);
  EXPECT_EQ(listener.fallbacks(),
            (std::map<std::string, int>{{"RESOURCE_EXHAUSTED", 4}}));
}

// An error that is the requests' own (a bad argument) is not the device's
// fault: another device would fail them too, so the CPU path answers.
TEST_F(SchedulerTest, RequestsOwnErrorIsNotHandedToAnotherDevice) {
  Scheduler::Options o = BatchAll();
  o.max_batch_requests = 4;
  o.max_batch_delay = absl::Hours(1);
  FailoverListener listener;
  auto sched = Make(o, 2, &listener);
  std::atomic<int> fail{1};
  for (FakeDevice* d : devices_) {
    d->fail_shared = &fail;
    d->fail_code = absl::StatusCode::kInvalidArgument;
  }
  const auto calls = SubmitOneBatch(*sched);
  ExpectFailedOverToTheCpu(calls);
  EXPECT_EQ(devices_[0]->runs() + devices_[1]->runs(), 1);
  const Scheduler::Stats stats = sched->stats();
  EXPECT_EQ(stats.device_failovers, 0u);
  EXPECT_EQ(stats.failovers, 4u);
  EXPECT_TRUE(listener.handovers().empty());
  EXPECT_EQ(listener.fallbacks(),
            (std::map<std::string, int>{{"INVALID_ARGUMENT", 4}}));
}

// A lost device's batch and its later share go to the device still up; the
// CPU path is not needed while one is.
TEST_F(SchedulerTest, LostDeviceHandsItsWorkToTheDeviceStillUp) {
  Scheduler::Options o = BatchAll();
  o.max_batch_requests = 4;
  o.max_batch_delay = absl::Hours(1);
  o.reinit_backoff = absl::Hours(1);  // stays down for this test
  FailoverListener listener;
  auto sched = Make(o, 2, &listener);
  std::atomic<int> fail{1};
  for (FakeDevice* d : devices_) {
    d->fail_shared = &fail;
    d->lose_on_failure = true;
  }
  const auto calls = SubmitOneBatch(*sched);
  std::string survivor;
  for (const auto& c : calls) {
    c->Wait();
    c->verify();
    EXPECT_EQ(c->result.path, ExecutionPath::kGpu);
    survivor = c->result.device;
  }
  EXPECT_EQ(sched->healthy_devices(), 1);
  const std::string lost = survivor == "fake0" ? "fake1" : "fake0";
  EXPECT_EQ(listener.WaitDowns(1), std::vector<std::string>{lost});
  const auto next = SubmitOneBatch(*sched);
  for (const auto& c : next) {
    c->Wait();
    c->verify();
    EXPECT_EQ(c->result.path, ExecutionPath::kGpu);
    EXPECT_EQ(c->result.device, survivor);
  }
  const Scheduler::Stats stats = sched->stats();
  EXPECT_EQ(stats.device_failovers, 4u);
  EXPECT_EQ(stats.failovers, 0u);
  EXPECT_EQ(stats.gpu_tasks, 8u);
  EXPECT_TRUE(listener.fallbacks().empty());
}

// A failed batch waiting for the one device that may still take it goes to
// the CPU path when that device is lost; the lost device's own batch goes
// to the device that failed the first (it has not failed this one).
TEST_F(SchedulerTest, HandoverWaitingForALostDeviceGoesToTheCpuPath) {
  Scheduler::Options o = BatchAll();
  o.max_batch_requests = 1;
  o.max_batch_delay = absl::ZeroDuration();
  o.pipeline_depth = 1;
  o.reinit_backoff = absl::Hours(1);
  FailoverListener listener;
  auto sched = Make(o, 2, &listener);
  gate_.Close();
  auto a = U32(1000, 1);
  sched->Submit(a->task);
  gate_.WaitEntered(1);
  // `a` is held on x; y takes the next batch and fails it while x is busy.
  FakeDevice* x = devices_[0]->entered() == 1 ? devices_[0] : devices_[1];
  FakeDevice* y = x == devices_[0] ? devices_[1] : devices_[0];
  const std::string x_name = x == devices_[0] ? "fake0" : "fake1";
  const std::string y_name = x == devices_[0] ? "fake1" : "fake0";
  x->lose_on_failure = true;
  x->fail_next = 1;
  y->set_gate(nullptr);
  y->fail_next = 1;
  listener.ResetQueue();
  auto b = U32(800, 2);
  sched->Submit(b->task);
  // `b` left the queue for y and came back to it, handed over for x.
  ASSERT_TRUE(listener.WaitRefilled());
  EXPECT_EQ(y->runs(), 1);
  gate_.Open();  // x fails `a` and is lost
  a->Wait();
  b->Wait();
  a->verify();
  b->verify();
  EXPECT_EQ(a->result.path, ExecutionPath::kGpu);
  EXPECT_EQ(a->result.device, y_name);
  EXPECT_EQ(b->result.path, ExecutionPath::kCpu);
  EXPECT_EQ(b->result.route, Route::kFailover);
  EXPECT_EQ(x->runs(), 1);
  EXPECT_EQ(y->runs(), 2);
  const Scheduler::Stats stats = sched->stats();
  EXPECT_EQ(stats.device_failovers, 1u);
  EXPECT_EQ(stats.failovers, 1u);
  EXPECT_THAT(
      listener.handovers(),
      ::testing::ElementsAre(FailoverListener::Handover{x_name, y_name, 1}));
  EXPECT_EQ(listener.fallbacks(),
            (std::map<std::string, int>{{"no_healthy_device", 1}}));
  EXPECT_EQ(listener.WaitDowns(1), std::vector<std::string>{x_name});
}

// A handed-over batch takes a device's slot beyond pipeline_depth, as a
// full batch would: it does not wait for the device's batches in flight.
TEST_F(SchedulerTest, HandoverGoesBeyondThePipelineDepth) {
  Scheduler::Options o = BatchAll();
  o.max_batch_requests = 1;
  o.max_batch_delay = absl::ZeroDuration();
  o.pipeline_depth = 1;
  o.full_pipeline_depth = 2;
  FailoverListener listener;
  auto sched = Make(o, 2, &listener);
  gate_.Close();
  auto a = U32(1000, 1);
  sched->Submit(a->task);
  gate_.WaitEntered(1);
  // `a` is held on x; y takes the next batch and fails it.
  FakeDevice* x = devices_[0]->entered() == 1 ? devices_[0] : devices_[1];
  FakeDevice* y = x == devices_[0] ? devices_[1] : devices_[0];
  y->set_gate(nullptr);
  y->fail_next = 1;
  auto b = U32(800, 2);
  sched->Submit(b->task);
  // x's second runner takes `b` while `a` is still held there.
  const bool taken = gate_.WaitEnteredFor(2, absl::Seconds(30));
  gate_.Open();
  ASSERT_TRUE(taken);
  a->Wait();
  b->Wait();
  a->verify();
  b->verify();
  EXPECT_EQ(b->result.path, ExecutionPath::kGpu);
  EXPECT_EQ(b->result.device, a->result.device);
  EXPECT_EQ(x->runs(), 2);
  EXPECT_EQ(y->runs(), 1);
  EXPECT_EQ(sched->stats().device_failovers, 1u);
  EXPECT_EQ(sched->stats().failovers, 0u);
}

}  // namespace
}  // namespace sortd
