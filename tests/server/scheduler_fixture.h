// Test support for the scheduler's tests (server/scheduler*.cc): fake
// devices that compute on the CPU path and can be held at a gate, failed or
// lost; sort calls with their expected answers; the fixture that builds a
// scheduler over them; a listener of handovers, fallbacks and device
// states. Every wait is on an event, never on a sleep.
#ifndef SORTD_TESTS_SERVER_SCHEDULER_FIXTURE_H_
#define SORTD_TESTS_SERVER_SCHEDULER_FIXTURE_H_

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "cpu/cpu_sorter.h"
#include "server/scheduler.h"
#include "tests/reference.h"
#include "tests/sort_check.h"

namespace sortd::testing {

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

inline std::shared_ptr<SortCall> U32(size_t n, uint64_t seed = 1) {
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
inline void SubmitConcurrently(
    Scheduler& sched, const std::vector<std::shared_ptr<SortCall>>& calls) {
  std::vector<std::thread> clients;
  for (const auto& c : calls) {
    clients.emplace_back([&sched, c] { sched.Submit(c->task); });
  }
  for (auto& t : clients) t.join();
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

}  // namespace sortd::testing

#endif  // SORTD_TESTS_SERVER_SCHEDULER_FIXTURE_H_
