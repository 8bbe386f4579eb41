// The scheduler against fake devices that the tests can hold, fail and
// count: batching, routing, backpressure, deadlines, cancellation, failover,
// re-creation, least-loaded placement, spill and drain. Every wait is on an
// event (a notification or a counter under a condition variable), never on
// a sleep.
#include "server/scheduler.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <random>
#include <string>
#include <string_view>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/transpose.h"
#include "cpu/cpu_sorter.h"
#include "server/out_of_memory.h"
#include "tests/reference.h"
#include "tests/sort_check.h"

namespace sortd {
namespace {

using ::testing::HasSubstr;

// Shared by fake devices: counts runs that entered any of them and holds
// them at the door while closed.
class Gate {
 public:
  void Close() {
    std::lock_guard<std::mutex> l(mu_);
    open_ = false;
  }
  void Open() {
    std::lock_guard<std::mutex> l(mu_);
    open_ = true;
    cv_.notify_all();
  }
  void Enter() {
    std::unique_lock<std::mutex> l(mu_);
    ++entered_;
    cv_.notify_all();
    cv_.wait(l, [this] { return open_; });
  }
  // Blocks until `n` runs have entered in all.
  void WaitEntered(int n) {
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait(l, [&] { return entered_ >= n; });
  }
  // The same, giving up after `timeout`: whether they have.
  bool WaitEnteredFor(int n, absl::Duration timeout) {
    std::unique_lock<std::mutex> l(mu_);
    return cv_.wait_for(l, absl::ToChronoNanoseconds(timeout),
                        [&] { return entered_ >= n; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = true;
  int entered_ = 0;
};

// A one-shot event on std::mutex (which ThreadSanitizer sees: Debian's
// Abseil is not instrumented, so absl::Notification would look racy).
class Event {
 public:
  // Notifies under the lock: a waiter may destroy the event as soon as it
  // wakes, which must not be while notify_all still touches it.
  void Notify() {
    std::lock_guard<std::mutex> l(mu_);
    set_ = true;
    cv_.notify_all();
  }
  bool HasBeenNotified() {
    std::lock_guard<std::mutex> l(mu_);
    return set_;
  }
  bool WaitForNotificationWithTimeout(absl::Duration timeout) {
    std::unique_lock<std::mutex> l(mu_);
    return cv_.wait_for(l, absl::ToChronoSeconds(timeout),
                        [this] { return set_; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool set_ = false;
};

// A "device" that computes on the CPU path, one run at a time like the
// OpenCL engine, and can be held, failed, or made to report itself lost.
class FakeDevice final : public Sorter {
 public:
  FakeDevice(std::string name, Gate* gate)
      : name_(std::move(name)), gate_(gate), cpu_({.threads = 1}) {}

  ExecutionPath path() const override { return ExecutionPath::kGpu; }
  std::string device_name() const override { return name_; }
  bool healthy() const override { return healthy_; }

  absl::Status Sort(const SortJob& job) override {
    return Run(1, [&] { return cpu_.Sort(job); });
  }
  absl::Status SortSegments(const SortJob& job,
                            absl::Span<const uint32_t> offsets) override {
    return Run(offsets.size() - 1,
               [&] { return cpu_.SortSegments(job, offsets); });
  }
  absl::Status Transpose(const TransposeJob& job) override {
    return Run(1, [&] { return cpu_.Transpose(job); });
  }

  int runs() const { return runs_; }
  // Runs that reached the device, counted before its gate.
  int entered() const { return entered_; }
  // Replaces the gate; only before the scheduler gives the device a run.
  void set_gate(Gate* gate) { gate_ = gate; }
  std::atomic<int> fail_next{0};
  // Runs of any device that share this counter fail while it is positive
  // (whichever device the scheduler picks first); set before submitting.
  std::atomic<int>* fail_shared = nullptr;
  // What a failure that does not lose the device returns (set before the
  // scheduler gets the device).
  absl::StatusCode fail_code = absl::StatusCode::kResourceExhausted;
  // Called in each run (set before the scheduler gets the device).
  std::function<void()> during_run;
  bool lose_on_failure = false;

 private:
  template <typename F>
  absl::Status Run(size_t segments, F work) {
    ++entered_;
    if (gate_ != nullptr) gate_->Enter();
    std::lock_guard<std::mutex> l(mu_);
    ++runs_;
    last_segments_ = segments;
    const bool fail = fail_next > 0 ||
                      (fail_shared != nullptr && fail_shared->fetch_sub(1) > 0);
    if (fail) {
      if (fail_next > 0) --fail_next;
      if (lose_on_failure) {
        healthy_ = false;
        return absl::UnavailableError("fake device lost");
      }
      return absl::Status(fail_code, "fake device failed");
    }
    if (during_run) during_run();
    return work();
  }

  std::string name_;
  Gate* gate_;
  CpuSorter cpu_;
  std::mutex mu_;
  std::atomic<int> runs_{0};
  std::atomic<int> entered_{0};
  size_t last_segments_ = 0;
  std::atomic<bool> healthy_{true};
};

// One sort call: inputs, outputs, the task and what it was answered.
struct SortCall {
  KeyType type = KeyType::kU32;
  bool desc = false;
  bool values = false, perm = false;
  std::string keys, vals;  // little-endian arrays
  size_t n = 0;
  std::string out, vout, pout;
  std::shared_ptr<Task> task;
  std::function<void()> verify;
  TaskResult result;
  std::atomic<int> answers{0};
  Event done;
  std::atomic<bool> cancel{false};

  void Wait() {
    ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(60)));
  }
};

template <typename K>
std::shared_ptr<SortCall> MakeSort(size_t n, bool desc, bool values, bool perm,
                                   uint64_t seed) {
  auto c = std::make_shared<SortCall>();
  const std::vector<K> keys =
      testing::Generate<K>(testing::Shape::kSpecial, n, seed);
  std::vector<uint64_t> vals(n);
  for (size_t i = 0; i < n; ++i) vals[i] = seed * 1000003 + i;
  c->type = testing::KeyTypeOf<K>();
  c->desc = desc;
  c->values = values;
  c->perm = perm;
  c->n = n;
  c->keys = testing::Bytes(keys);
  c->vals = testing::Bytes(vals);
  c->out.assign(c->keys.size(), '\xAB');
  c->vout.assign(n * 8, '\xAB');
  c->pout.assign(n * 4, '\xAB');
  SortCall* raw = c.get();
  c->verify = [raw, keys, vals] {
    ASSERT_TRUE(raw->result.status.ok()) << raw->result.status;
    const std::vector<uint32_t> want = testing::RefPermutation(keys, raw->desc);
    const std::vector<K> got = testing::FromBytes<K>(raw->out);
    ASSERT_EQ(got.size(), keys.size());
    for (size_t i = 0; i < keys.size(); ++i) {
      ASSERT_EQ(0, std::memcmp(&got[i], &keys[want[i]], sizeof(K))) << i;
    }
    if (raw->values) {
      const std::vector<uint64_t> v = testing::FromBytes<uint64_t>(raw->vout);
      for (size_t i = 0; i < keys.size(); ++i) {
        ASSERT_EQ(v[i], vals[want[i]]) << i;
      }
    }
    if (raw->perm) {
      ASSERT_EQ(testing::FromBytes<uint32_t>(raw->pout), want);
    }
  };
  auto task = std::make_shared<Task>();
  task->op = Op::kSort;
  task->units = n;
  task->cancelled = [raw] { return raw->cancel.load(); };
  task->prepare = [raw, t = task.get()] {
    SortJob& j = t->sort;
    j.key_type = raw->type;
    j.order = raw->desc ? Order::kDescending : Order::kAscending;
    j.count = raw->n;
    j.keys = reinterpret_cast<const std::byte*>(raw->keys.data());
    j.keys_out = reinterpret_cast<std::byte*>(raw->out.data());
    if (raw->values) {
      j.value_type = ValueType::kU64;
      j.values = reinterpret_cast<const std::byte*>(raw->vals.data());
      j.values_out = reinterpret_cast<std::byte*>(raw->vout.data());
    }
    if (raw->perm)
      j.permutation_out = reinterpret_cast<std::byte*>(raw->pout.data());
    return absl::OkStatus();
  };
  task->done = [raw](const TaskResult& r) {
    raw->result = r;
    if (raw->answers.fetch_add(1) == 0) raw->done.Notify();
  };
  c->task = task;
  return c;
}

std::shared_ptr<SortCall> U32(size_t n, uint64_t seed = 1) {
  return MakeSort<uint32_t>(n, false, false, false, seed);
}

class SchedulerTest : public ::testing::Test {
 protected:
  SchedulerTest() : cpu_({.threads = 2}) {}

  // A scheduler over `count` fake devices sharing gate_.
  std::unique_ptr<Scheduler> Make(const Scheduler::Options& options,
                                  int count = 1,
                                  SchedulerListener* listener = nullptr,
                                  EngineFactory factory = nullptr) {
    std::vector<DeviceSlot> slots;
    for (int d = 0; d < count; ++d) {
      auto dev = std::make_unique<FakeDevice>(
          one_model_ ? "fake" : absl::StrCat("fake", d), &gate_);
      devices_.push_back(dev.get());
      slots.push_back({std::move(dev), factory});
    }
    return std::make_unique<Scheduler>(options, &cpu_, std::move(slots),
                                       listener);
  }

  // Everything batched (nothing on the CPU path by size), nothing solo.
  static Scheduler::Options BatchAll() {
    Scheduler::Options o;
    o.sort = {.cpu_max = 0, .solo_min = SIZE_MAX};
    o.transpose = {.cpu_max = 0, .solo_min = SIZE_MAX};
    o.spill = false;
    return o;
  }
  // One batch in flight, a second beyond it for full work; sorts of 5000
  // keys or more alone.
  static Scheduler::Options OnePlaceAndOneBeyond() {
    Scheduler::Options o = BatchAll();
    o.sort.solo_min = 5000;
    o.pipeline_depth = 1;
    o.full_pipeline_depth = 2;
    return o;
  }

  CpuSorter cpu_;
  Gate gate_;
  // Make's devices all of one model ("fake", "fake #2", ...): a split
  // sort cuts only across devices of one kind.
  bool one_model_ = false;
  std::vector<FakeDevice*> devices_;
};

// Submits each call from a thread of its own, all at once.
void SubmitConcurrently(Scheduler& sched,
                        const std::vector<std::shared_ptr<SortCall>>& calls) {
  std::vector<std::thread> clients;
  for (const auto& c : calls) {
    clients.emplace_back([&sched, c] { sched.Submit(c->task); });
  }
  for (auto& t : clients) t.join();
}

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

// Records handovers between devices, CPU fallbacks, device states and the
// published queue length; tests wait on them.
class FailoverListener : public SchedulerListener {
 public:
  struct Handover {
    std::string from, to;
    size_t requests;
    bool operator==(const Handover&) const = default;
  };
  void OnDeviceFailover(const std::string& from, const std::string& to,
                        size_t requests) override {
    std::lock_guard<std::mutex> l(mu_);
    handovers_.push_back({from, to, requests});
  }
  void OnCpuFallback(std::string_view reason) override {
    std::lock_guard<std::mutex> l(mu_);
    ++fallbacks_[std::string(reason)];
  }
  void OnDeviceState(const std::string& device, bool up) override {
    std::lock_guard<std::mutex> l(mu_);
    if (!up) downs_.push_back(device);
    cv_.notify_all();
  }
  void OnQueue(size_t, size_t requests, size_t) override {
    std::lock_guard<std::mutex> l(mu_);
    if (requests == 0) emptied_ = true;
    if (requests > 0 && emptied_) refilled_ = true;
    cv_.notify_all();
  }
  // Forgets the queue lengths seen so far.
  void ResetQueue() {
    std::lock_guard<std::mutex> l(mu_);
    emptied_ = refilled_ = false;
  }
  // Waits until the queue, since ResetQueue, emptied and then held work
  // again.
  bool WaitRefilled() {
    std::unique_lock<std::mutex> l(mu_);
    return cv_.wait_for(l, std::chrono::seconds(60),
                        [this] { return refilled_; });
  }
  std::vector<Handover> handovers() {
    std::lock_guard<std::mutex> l(mu_);
    return handovers_;
  }
  std::map<std::string, int> fallbacks() {
    std::lock_guard<std::mutex> l(mu_);
    return fallbacks_;
  }
  // The devices reported down, once `n` have been (the report may follow
  // the answers that other devices gave in their place).
  std::vector<std::string> WaitDowns(size_t n) {
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait_for(l, std::chrono::seconds(60),
                 [&] { return downs_.size() >= n; });
    return downs_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Handover> handovers_;
  std::map<std::string, int> fallbacks_;
  std::vector<std::string> downs_;
  bool emptied_ = false, refilled_ = false;
};

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
