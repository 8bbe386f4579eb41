// The scheduler (server/scheduler.cc) against fake devices that the tests
// can hold, fail and count: batching, routing, backpressure, deadlines,
// cancellation, least-loaded placement, spill and drain. The device
// runners' tests (pipeline depth, failover, lost devices) are in
// scheduler_runner_test.cc, sorts split across devices in
// scheduler_split_test.cc. Every wait is on an event (a notification or a
// counter under a condition variable), never on a sleep.
#include "server/scheduler.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/transpose.h"
#include "server/out_of_memory.h"
#include "tests/server/scheduler_fixture.h"

namespace sortd {
namespace {

using testing::Event;
using testing::FakeDevice;
using testing::Gate;
using ::testing::HasSubstr;
using testing::MakeSort;
using testing::SchedulerTest;
using testing::SortCall;
using testing::SubmitConcurrently;
using testing::U32;

// The headline: concurrent small requests become one device run.
TEST_F(SchedulerTest, ConcurrentSmallRequestsRunAsOneBatch) {
  Scheduler::Options o = BatchAll();
  o.max_batch_requests = 8;
  o.max_batch_delay = absl::Hours(1);  // the batch closes on its count
  auto sched = Make(o);
  std::vector<std::shared_ptr<SortCall>> calls;
  for (int i = 0; i < 8; ++i) {
    calls.push_back(MakeSort<float>(100 + 37 * i, /*desc=*/true,
                                    /*values=*/true, /*perm=*/true, i));
  }
  SubmitConcurrently(*sched, calls);
  for (auto& c : calls) {
    c->Wait();
    c->verify();
    EXPECT_EQ(c->answers, 1);
    EXPECT_EQ(c->result.path, ExecutionPath::kGpu);
    EXPECT_EQ(c->result.route, Route::kBatch);
    EXPECT_EQ(c->result.batch_requests, 8);
  }
  EXPECT_EQ(devices_[0]->runs(), 1);
  EXPECT_EQ(sched->stats().gpu_runs, 1u);
  EXPECT_EQ(sched->stats().gpu_tasks, 8u);
}

// Key types and orders of one width share a batch: packing maps them to
// ordered unsigned bits and back, keeping every sort stable.
TEST_F(SchedulerTest, KeyTypesAndOrdersOfOneWidthShareABatch) {
  Scheduler::Options o = BatchAll();
  o.max_batch_requests = 6;
  o.max_batch_delay = absl::Hours(1);
  auto sched = Make(o);
  for (int wide = 0; wide < 2; ++wide) {
    std::vector<std::shared_ptr<SortCall>> calls;
    for (int i = 0; i < 6; ++i) {
      const bool desc = i % 2;
      const size_t n = 500 + 101 * i;
      switch (i / 2) {
        case 0:
          calls.push_back(wide ? MakeSort<uint64_t>(n, desc, true, true, i)
                               : MakeSort<uint32_t>(n, desc, true, true, i));
          break;
        case 1:
          calls.push_back(wide ? MakeSort<int64_t>(n, desc, true, true, i)
                               : MakeSort<int32_t>(n, desc, true, true, i));
          break;
        default:
          calls.push_back(wide ? MakeSort<double>(n, desc, true, true, i)
                               : MakeSort<float>(n, desc, true, true, i));
      }
      sched->Submit(calls.back()->task);
    }
    for (auto& c : calls) {
      c->Wait();
      c->verify();
      EXPECT_EQ(c->result.batch_requests, 6);
    }
    EXPECT_EQ(devices_[0]->runs(), wide + 1);
  }
}

// Mid-size sorts, longer than a work-group sorts alone, share one device
// run too: the engine sorts a batch as one array, whatever its segments.
TEST_F(SchedulerTest, MidSizeSortsShareOneRun) {
  Scheduler::Options o = BatchAll();
  o.max_batch_requests = 3;
  o.max_batch_delay = absl::Hours(1);  // the batch closes on its count
  auto sched = Make(o);
  std::vector<std::shared_ptr<SortCall>> calls;
  for (int i = 0; i < 3; ++i) {
    calls.push_back(MakeSort<int64_t>(5000 + 1000 * i, false, false, false, i));
  }
  SubmitConcurrently(*sched, calls);
  for (auto& c : calls) {
    c->Wait();
    c->verify();
    EXPECT_EQ(c->result.route, Route::kBatch);
    EXPECT_EQ(c->result.batch_requests, 3);
  }
  EXPECT_EQ(devices_[0]->runs(), 1);
}

TEST_F(SchedulerTest, TransposesBatchIntoOneLaunch) {
  Scheduler::Options o = BatchAll();
  o.max_batch_requests = 5;
  o.max_batch_delay = absl::Hours(1);
  auto sched = Make(o);
  struct Call {
    std::vector<uint32_t> in, out;
    TaskResult result;
    Event done;
  };
  std::vector<std::unique_ptr<Call>> calls;
  std::mt19937 rng(3);
  for (int i = 0; i < 5; ++i) {
    auto c = std::make_unique<Call>();
    c->in.resize(32 * (i + 1));
    for (uint32_t& r : c->in) r = rng();
    c->out.assign(c->in.size(), 0);
    auto task = std::make_shared<Task>();
    task->op = Op::kTranspose;
    task->units = c->in.size();
    Call* raw = c.get();
    task->prepare = [raw, t = task.get()] {
      t->transpose.count = raw->in.size() / 32;
      t->transpose.in = reinterpret_cast<const std::byte*>(raw->in.data());
      t->transpose.out = reinterpret_cast<std::byte*>(raw->out.data());
      return absl::OkStatus();
    };
    task->done = [raw](const TaskResult& r) {
      raw->result = r;
      raw->done.Notify();
    };
    sched->Submit(task);
    calls.push_back(std::move(c));
  }
  for (auto& c : calls) {
    ASSERT_TRUE(c->done.WaitForNotificationWithTimeout(absl::Seconds(60)));
    ASSERT_TRUE(c->result.status.ok()) << c->result.status;
    EXPECT_EQ(c->result.batch_requests, 5);
    for (size_t m = 0; m < c->in.size() / 32; ++m) {
      uint32_t want[32];
      std::memcpy(want, &c->in[m * 32], sizeof(want));
      TransposeBits32(want);
      ASSERT_EQ(0, std::memcmp(want, &c->out[m * 32], sizeof(want))) << m;
    }
  }
  EXPECT_EQ(devices_[0]->runs(), 1);
}

// Many client threads mixing sizes, key types, orders and payloads over two
// devices and the CPU path: every answer correct, each answered once.
TEST_F(SchedulerTest, MixedConcurrentLoadIsAnsweredCorrectlyOnce) {
  Scheduler::Options o;
  o.sort = {.cpu_max = 16, .solo_min = 20000};
  o.max_batch_delay = absl::Microseconds(300);
  o.max_batch_requests = 16;
  auto sched = Make(o, 2);
  constexpr int kThreads = 8, kPerThread = 30;
  std::vector<std::vector<std::shared_ptr<SortCall>>> per(kThreads);
  std::vector<std::thread> clients;
  for (int t = 0; t < kThreads; ++t) {
    clients.emplace_back([&, t] {
      std::mt19937 rng(t);
      const size_t sizes[] = {0, 1, 5, 100, 1000, 4096, 5000, 30000};
      for (int i = 0; i < kPerThread; ++i) {
        const size_t n = sizes[rng() % 8];
        const bool desc = rng() % 2, values = rng() % 2, perm = rng() % 3 == 0;
        const uint64_t seed = t * 1000 + i;
        std::shared_ptr<SortCall> c;
        switch (rng() % 6) {
          case 0:
            c = MakeSort<uint32_t>(n, desc, values, perm, seed);
            break;
          case 1:
            c = MakeSort<int32_t>(n, desc, values, perm, seed);
            break;
          case 2:
            c = MakeSort<float>(n, desc, values, perm, seed);
            break;
          case 3:
            c = MakeSort<uint64_t>(n, desc, values, perm, seed);
            break;
          case 4:
            c = MakeSort<int64_t>(n, desc, values, perm, seed);
            break;
          default:
            c = MakeSort<double>(n, desc, values, perm, seed);
            break;
        }
        sched->Submit(c->task);
        per[t].push_back(c);
      }
    });
  }
  for (auto& t : clients) t.join();
  size_t answered = 0;
  for (auto& calls : per) {
    for (auto& c : calls) {
      c->Wait();
      c->verify();
      EXPECT_EQ(c->answers, 1);
      ++answered;
    }
  }
  EXPECT_EQ(answered, size_t{kThreads * kPerThread});
  const Scheduler::Stats s = sched->stats();
  EXPECT_EQ(s.answered, answered);
  EXPECT_GT(s.cpu_runs, 0u);
  EXPECT_GT(s.gpu_tasks, 0u);
}

// The latest queue figures the listener was given.
class QueueListener : public SchedulerListener {
 public:
  void OnQueue(size_t units, size_t requests, size_t inflight) override {
    std::lock_guard<std::mutex> l(mu_);
    last_ = {units, requests, inflight};
    ++calls_;
  }
  std::tuple<size_t, size_t, size_t> last() {
    std::lock_guard<std::mutex> l(mu_);
    return last_;
  }
  int calls() {
    std::lock_guard<std::mutex> l(mu_);
    return calls_;
  }

 private:
  std::mutex mu_;
  std::tuple<size_t, size_t, size_t> last_{1, 1, 1};
  int calls_ = 0;
};

// The gauges are published after the scheduler's lock is released, from
// many threads at once; the last figures published are the last state:
// nothing queued, nothing in flight.
TEST_F(SchedulerTest, QueueGaugesEndAtTheLastStateUnderConcurrentLoad) {
  Scheduler::Options o;
  o.sort = {.cpu_max = 64, .solo_min = 4000};
  o.max_batch_delay = absl::Microseconds(50);
  o.cpu_workers = 3;
  QueueListener listener;
  auto sched = Make(o, 2, &listener);
  std::vector<std::shared_ptr<SortCall>> calls(400);
  std::vector<std::thread> clients;
  for (int t = 0; t < 4; ++t) {
    clients.emplace_back([&, t] {
      for (int i = t; i < 400; i += 4) {
        calls[i] = MakeSort<uint32_t>(i % 3 == 0   ? 10
                                      : i % 3 == 1 ? 300
                                                   : 5000,
                                      false, false, false, i);
        sched->Submit(calls[i]->task);
      }
    });
  }
  for (auto& t : clients) t.join();
  for (auto& c : calls) {
    c->Wait();
    c->verify();
  }
  sched->Drain(absl::Now() + absl::Minutes(1));
  EXPECT_GT(listener.calls(), 400);
  EXPECT_EQ(listener.last(), std::make_tuple(size_t{0}, size_t{0}, size_t{0}));
}

TEST_F(SchedulerTest, RoutesBySize) {
  Scheduler::Options o;
  o.sort = {.cpu_max = 100, .solo_min = 1000};
  o.max_batch_delay = absl::ZeroDuration();
  o.spill = false;
  auto sched = Make(o);
  auto tiny = U32(50), medium = U32(500), large = U32(5000);
  for (auto* c : {&tiny, &medium, &large}) {
    sched->Submit((*c)->task);
    (*c)->Wait();
    (*c)->verify();
  }
  EXPECT_EQ(tiny->result.route, Route::kCpu);
  EXPECT_EQ(tiny->result.path, ExecutionPath::kCpu);
  EXPECT_EQ(medium->result.route, Route::kBatch);
  EXPECT_EQ(medium->result.path, ExecutionPath::kGpu);
  EXPECT_EQ(large->result.route, Route::kSolo);
  EXPECT_EQ(large->result.path, ExecutionPath::kGpu);
  EXPECT_EQ(devices_[0]->runs(), 2);
}

TEST_F(SchedulerTest, OverloadIsRefusedWithResourceExhausted) {
  Scheduler::Options o = BatchAll();
  o.sort.solo_min = 1;  // every sort alone: one runs, the rest queue
  o.pipeline_depth = 1;
  o.max_queued_requests = 3;
  o.max_queued_units = 10000;
  auto sched = Make(o);
  gate_.Close();
  auto a = U32(100, 1), b = U32(100, 2), c = U32(100, 3), d = U32(100, 4);
  sched->Submit(a->task);
  gate_.WaitEntered(1);  // a holds the device
  sched->Submit(b->task);
  sched->Submit(c->task);
  sched->Submit(d->task);  // the fourth: refused at once
  ASSERT_TRUE(d->done.HasBeenNotified());
  EXPECT_EQ(d->result.status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(d->result.status.message(), HasSubstr("--max_queued_requests"));
  gate_.Open();
  for (auto* x : {&a, &b, &c}) {
    (*x)->Wait();
    (*x)->verify();
  }
  // By keys: 6000 running, 6000 more would pass the 10000 bound.
  gate_.Close();
  auto e = U32(6000, 5), f = U32(6000, 6);
  sched->Submit(e->task);
  gate_.WaitEntered(4);
  sched->Submit(f->task);
  ASSERT_TRUE(f->done.HasBeenNotified());
  EXPECT_EQ(f->result.status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(f->result.status.message(), HasSubstr("--max_queued_keys"));
  gate_.Open();
  e->Wait();
  e->verify();
  EXPECT_EQ(sched->stats().rejected, 2u);
}

// One call far larger than the whole budget is admitted (alone it always
// is) but counts only max_call_units against it: the others keep the rest.
TEST_F(SchedulerTest, OneHugeCallHoldsAtMostItsShareOfTheBudget) {
  Scheduler::Options o = BatchAll();
  o.sort.solo_min = 1;
  o.pipeline_depth = 1;
  o.max_queued_units = 10000;
  o.max_call_units = 2500;
  auto sched = Make(o);
  gate_.Close();
  auto huge = U32(50000, 1);
  sched->Submit(huge->task);
  gate_.WaitEntered(1);  // it holds the device
  std::vector<std::shared_ptr<SortCall>> small;
  for (int i = 0; i < 7; ++i) {  // 7 x 1000 fit the 7500 left
    small.push_back(U32(1000, 10 + i));
    sched->Submit(small.back()->task);
    EXPECT_FALSE(small.back()->done.HasBeenNotified()) << i;
  }
  auto over = U32(1000, 99);
  sched->Submit(over->task);
  ASSERT_TRUE(over->done.HasBeenNotified());
  EXPECT_EQ(over->result.status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(over->result.status.message(), HasSubstr("--max_queued_keys"));
  gate_.Open();
  huge->Wait();
  huge->verify();
  for (auto& c : small) {
    c->Wait();
    c->verify();
  }
  EXPECT_EQ(sched->stats().rejected, 1u);
}

TEST_F(SchedulerTest, ExpiredAndCancelledTasksNeverReachTheDevice) {
  Scheduler::Options o = BatchAll();
  o.sort.solo_min = 5000;
  o.pipeline_depth = 1;
  o.max_batch_requests = 3;
  o.max_batch_delay = absl::Hours(1);
  auto sched = Make(o);
  gate_.Close();
  auto blocker = U32(6000, 1);
  sched->Submit(blocker->task);
  gate_.WaitEntered(1);
  auto late = U32(100, 2), cancelled = U32(100, 3), fine = U32(100, 4);
  late->task->deadline = absl::Now() - absl::Seconds(1);
  cancelled->cancel = true;
  sched->Submit(late->task);
  sched->Submit(cancelled->task);
  sched->Submit(fine->task);
  gate_.Open();
  blocker->Wait();
  late->Wait();
  cancelled->Wait();
  fine->Wait();
  EXPECT_EQ(late->result.status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(cancelled->result.status.code(), absl::StatusCode::kCancelled);
  fine->verify();
  EXPECT_EQ(fine->result.batch_requests, 1);  // its mates were dropped
  EXPECT_EQ(devices_[0]->runs(), 2);
  EXPECT_EQ(sched->stats().dropped, 2u);
}

// Time is the scheduler's clock: with a fake one, the batch closes when
// the fake time reaches its delay, and the times answered are fake ones.
TEST_F(SchedulerTest, BatchDelayAndTimesFollowTheSchedulersClock) {
  std::atomic<int64_t> now_ns{int64_t{1} << 40};
  Scheduler::Options o = BatchAll();
  o.clock = [&now_ns] { return absl::FromUnixNanos(now_ns.load()); };
  o.max_batch_requests = 8;
  o.max_batch_delay = absl::Milliseconds(10);
  auto sched = Make(o);
  auto call = U32(100, 1);
  sched->Submit(call->task);
  now_ns += 10'000'000;  // the batch's delay passes, in fake time only
  call->Wait();
  call->verify();
  EXPECT_EQ(call->result.route, Route::kBatch);
  EXPECT_EQ(call->result.queue_wait, absl::Milliseconds(10));
  EXPECT_EQ(call->result.compute, absl::ZeroDuration());
}

TEST_F(SchedulerTest, NextBatchGoesToTheLeastLoadedDevice) {
  Scheduler::Options o = BatchAll();
  o.sort.solo_min = 1;
  auto sched = Make(o, 2);
  gate_.Close();
  auto a = U32(100, 1), b = U32(100, 2);
  sched->Submit(a->task);
  gate_.WaitEntered(1);
  sched->Submit(b->task);
  gate_.WaitEntered(2);
  EXPECT_EQ(devices_[0]->runs() + devices_[1]->runs(), 0);  // both held
  gate_.Open();
  a->Wait();
  b->Wait();
  a->verify();
  b->verify();
  EXPECT_EQ(devices_[0]->runs(), 1);
  EXPECT_EQ(devices_[1]->runs(), 1);
  EXPECT_NE(a->result.device, b->result.device);
}

TEST_F(SchedulerTest, SpillsToTheCpuWhenTheDeviceIsBackedUp) {
  Scheduler::Options o = BatchAll();
  o.sort.solo_min = 1;
  o.pipeline_depth = 1;
  o.spill = true;
  o.gpu_sort = {.fixed = 1e-3, .per_unit = 1e-6};
  o.cpu_sort = {.fixed = 0, .per_unit = 2e-6};
  auto sched = Make(o);
  // Idle device: the router's thresholds decide (device).
  auto idle = U32(1000, 1);
  sched->Submit(idle->task);
  idle->Wait();
  EXPECT_EQ(idle->result.route, Route::kSolo);
  gate_.Close();
  auto big = U32(20000, 2);
  sched->Submit(big->task);
  gate_.WaitEntered(2);
  // 20000 keys ahead on the device: 1 ms + 21 ms there, 2 ms on the CPU.
  auto small = U32(1000, 3);
  sched->Submit(small->task);
  small->Wait();  // answered while the device is still held
  small->verify();
  EXPECT_EQ(small->result.route, Route::kSpill);
  EXPECT_EQ(small->result.path, ExecutionPath::kCpu);
  gate_.Open();
  big->Wait();
  big->verify();
  EXPECT_EQ(sched->stats().spilled, 1u);
}

TEST_F(SchedulerTest, SmallRequestsOverflowToTheDeviceWhenTheCpuIsBackedUp) {
  Gate cpu_gate;
  FakeDevice slow_cpu("held cpu", &cpu_gate);
  Scheduler::Options o;
  o.sort = {.cpu_max = 10000, .solo_min = SIZE_MAX};
  o.max_batch_delay = absl::ZeroDuration();
  o.cpu_workers = 1;
  o.cpu_sort = {.fixed = 1e-3, .per_unit = 1e-6};
  o.gpu_sort = {.fixed = 1e-4, .per_unit = 1e-7};
  std::vector<DeviceSlot> slots;
  slots.push_back({std::make_unique<FakeDevice>("fake0", nullptr), nullptr});
  Scheduler sched(o, &slow_cpu, std::move(slots));
  cpu_gate.Close();
  auto first = U32(100, 1), queued = U32(5000, 2), small = U32(1000, 3);
  sched.Submit(first->task);
  cpu_gate.WaitEntered(1);     // the CPU worker is busy
  sched.Submit(queued->task);  // waits for it: 5000 keys of CPU backlog
  // Here: 1 ms + 1 ms + 5 ms on the CPU, 0.2 ms on the device.
  sched.Submit(small->task);
  small->Wait();
  small->verify();
  EXPECT_EQ(small->result.path, ExecutionPath::kGpu);
  EXPECT_EQ(small->result.route, Route::kBatch);
  cpu_gate.Open();
  first->Wait();
  queued->Wait();
  first->verify();
  queued->verify();
  EXPECT_EQ(queued->result.route, Route::kCpu);
}

// A device whose answers to overflowed requests come far later than its
// calibrated costs promise (here each run takes 50 ms of the scheduler's
// clock against an estimate of 1.1 ms) stops taking overflow after a few
// answers, while the CPU path stays backed up; once its lateness has
// faded, overflow is tried again. Requests batched by size do not count.
TEST_F(SchedulerTest, OverflowStopsWhileDeviceAnswersComeLate) {
  std::atomic<int64_t> now_ns{int64_t{1} << 40};
  Gate cpu_gate;
  FakeDevice slow_cpu("held cpu", &cpu_gate);
  Scheduler::Options o;
  o.clock = [&now_ns] { return absl::FromUnixNanos(now_ns.load()); };
  o.sort = {.cpu_max = 10000, .solo_min = SIZE_MAX};
  o.max_batch_delay = absl::ZeroDuration();
  o.cpu_workers = 1;
  o.cpu_sort = {.fixed = 1e-3, .per_unit = 1e-6};
  o.gpu_sort = {.fixed = 1e-3, .per_unit = 1e-7};
  auto device = std::make_unique<FakeDevice>("fake0", nullptr);
  device->during_run = [&now_ns] { now_ns += 50'000'000; };
  std::vector<DeviceSlot> slots;
  slots.push_back({std::move(device), nullptr});
  Scheduler sched(o, &slow_cpu, std::move(slots));
  // A batch by size, answered late too, is not an overflow: it counts not.
  auto mid = U32(20000, 3);
  sched.Submit(mid->task);
  mid->Wait();
  mid->verify();
  EXPECT_EQ(mid->result.route, Route::kBatch);
  EXPECT_DOUBLE_EQ(sched.device_late(Op::kSort), 1.0);
  cpu_gate.Close();
  // Opened however the test ends, so that the scheduler can drain.
  struct OpenAtExit {
    Gate* gate;
    ~OpenAtExit() { gate->Open(); }
  } open_at_exit{&cpu_gate};
  auto first = U32(100, 1), queued = U32(500, 2);
  sched.Submit(first->task);
  cpu_gate.WaitEntered(1);
  sched.Submit(queued->task);
  // CPU: 1 ms + 1 ms + 0.5 ms of backlog; device: 1.1 ms, on time.
  std::vector<std::shared_ptr<SortCall>> calls;
  auto small = [&] {
    calls.push_back(U32(1000, 10 + calls.size()));
    sched.Submit(calls.back()->task);
    return calls.back();
  };
  int overflowed = 0;
  for (;;) {
    auto s = small();
    // Routed in Submit, on this thread.
    if (s->task->route == Route::kCpu) break;
    s->Wait();
    s->verify();
    ASSERT_EQ(s->result.route, Route::kBatch);
    ASSERT_EQ(s->result.path, ExecutionPath::kGpu);
    ++overflowed;
    ASSERT_LT(overflowed, 10) << "late answers never stopped overflow";
  }
  EXPECT_GE(overflowed, 2);
  EXPECT_GT(sched.device_late(Op::kSort), 2.0);
  // Twenty half-lives without device answers: on time again, and overflow
  // resumes.
  now_ns += absl::ToInt64Nanoseconds(20 * Placement::Lateness::kHalfLife);
  EXPECT_LT(sched.device_late(Op::kSort), 1.01);
  auto again = small();
  again->Wait();
  again->verify();
  EXPECT_EQ(again->result.route, Route::kBatch);
  cpu_gate.Open();
  for (const auto& c : calls) {
    c->Wait();
    c->verify();
  }
  first->Wait();
  queued->Wait();
  EXPECT_EQ(queued->result.route, Route::kCpu);
}

TEST_F(SchedulerTest, DrainRunsWaitingBatchesAtOnceThenRefuses) {
  Scheduler::Options o = BatchAll();
  o.max_batch_delay = absl::Hours(1);
  o.max_batch_requests = 100;
  auto sched = Make(o);
  std::vector<std::shared_ptr<SortCall>> calls;
  for (int i = 0; i < 3; ++i) {
    calls.push_back(U32(200, i));
    sched->Submit(calls.back()->task);
  }
  sched->Drain(absl::Now() + absl::Seconds(60));
  for (auto& c : calls) {
    ASSERT_TRUE(c->done.HasBeenNotified());
    c->verify();
    EXPECT_EQ(c->result.batch_requests, 3);
  }
  auto late = U32(10, 9);
  sched->Submit(late->task);
  ASSERT_TRUE(late->done.HasBeenNotified());
  EXPECT_EQ(late->result.status.code(), absl::StatusCode::kUnavailable);
}

TEST_F(SchedulerTest, DrainTimeoutAnswersUnstartedRequestsUnavailable) {
  Scheduler::Options o = BatchAll();
  o.sort.solo_min = 1;
  o.pipeline_depth = 1;
  auto sched = Make(o);
  gate_.Close();
  auto running = U32(100, 1), queued1 = U32(100, 2), queued2 = U32(100, 3);
  sched->Submit(running->task);
  gate_.WaitEntered(1);
  sched->Submit(queued1->task);
  sched->Submit(queued2->task);
  std::thread drain(
      [&] { sched->Drain(absl::Now() + absl::Milliseconds(50)); });
  queued1->Wait();
  queued2->Wait();
  EXPECT_EQ(queued1->result.status.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(queued2->result.status.message(), HasSubstr("--drain_timeout"));
  EXPECT_FALSE(running->done.HasBeenNotified());
  gate_.Open();  // the running batch still finishes, correctly
  drain.join();
  ASSERT_TRUE(running->done.HasBeenNotified());
  running->verify();
}

TEST_F(SchedulerTest, WithoutDevicesEverythingRunsOnTheCpuPath) {
  Scheduler sched(Scheduler::Options{}, &cpu_, {});
  auto c = MakeSort<double>(5000, true, true, true, 7);
  sched.Submit(c->task);
  c->Wait();
  c->verify();
  EXPECT_EQ(c->result.path, ExecutionPath::kCpu);
  EXPECT_EQ(c->result.route, Route::kCpu);
}

TEST_F(SchedulerTest, PrepareErrorsAreAnsweredAndReleaseTheirAdmission) {
  Scheduler::Options o = BatchAll();
  o.max_queued_requests = 1;
  auto sched = Make(o);
  for (int i = 0; i < 3; ++i) {
    auto bad = U32(10, i);
    bad->task->prepare = [] { return absl::InvalidArgumentError("bad"); };
    sched->Submit(bad->task);
    ASSERT_TRUE(bad->done.HasBeenNotified());
    EXPECT_EQ(bad->result.status.code(), absl::StatusCode::kInvalidArgument);
  }
  EXPECT_EQ(sched->stats().rejected, 0u);
}

// A request whose output arrays cannot be allocated (the host buffer pool
// throws std::bad_alloc) is refused RESOURCE_EXHAUSTED, gives its admission
// back, and does not keep Drain waiting.
TEST_F(SchedulerTest, PrepareOutOfMemoryIsRefusedAndDrainFinishes) {
  Scheduler::Options o = BatchAll();
  o.max_queued_requests = 1;
  auto sched = Make(o);
  for (int i = 0; i < 3; ++i) {
    auto bad = U32(10, i);
    bad->task->prepare = []() -> absl::Status { throw std::bad_alloc(); };
    sched->Submit(bad->task);
    ASSERT_TRUE(bad->done.HasBeenNotified());
    EXPECT_EQ(bad->result.status.code(), absl::StatusCode::kResourceExhausted);
    EXPECT_THAT(bad->result.status.message(), HasSubstr("host memory"));
  }
  EXPECT_EQ(sched->stats().rejected, 0u);
  EXPECT_EQ(sched->stats().answered, 3u);
  auto good = U32(100, 9);
  sched->Submit(good->task);
  good->Wait();
  good->verify();
  sched->Drain(absl::Now() + absl::Seconds(30));
  EXPECT_EQ(sched->stats().answered, 4u);
}

// Building an answer (the unary, parts and stream paths) runs through the
// same guard: a step that throws std::bad_alloc becomes RESOURCE_EXHAUSTED
// naming what had no memory; any other outcome of the step is its own.
TEST(OutOfMemory, BadAllocBecomesResourceExhaustedAndOtherStatusesPass) {
  int ran = 0;
  const absl::Status thrown = CatchOutOfMemory("this answer", [&] {
    ++ran;
    throw std::bad_alloc();
    return absl::OkStatus();
  });
  EXPECT_EQ(ran, 1);
  EXPECT_EQ(thrown.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(thrown.message(), HasSubstr("no host memory for this answer"));
  EXPECT_TRUE(CatchOutOfMemory("x", [] { return absl::OkStatus(); }).ok());
  EXPECT_EQ(CatchOutOfMemory("x", [] { return absl::DataLossError("lost"); }),
            absl::DataLossError("lost"));
  // A step that yields a value passes it on, or the same refusal.
  EXPECT_EQ(*CatchOutOfMemory("x", [] { return absl::StatusOr<int>(7); }), 7);
  const absl::StatusOr<int> none = CatchOutOfMemory(
      "this request", []() -> absl::StatusOr<int> { throw std::bad_alloc(); });
  EXPECT_EQ(none.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(none.status().message(), HasSubstr("this request"));
}

}  // namespace
}  // namespace sortd
