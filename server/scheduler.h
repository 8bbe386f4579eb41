// Scheduler: sortd's core. Every admitted request becomes a Task; the
// scheduler routes it by size, gathers concurrent GPU-bound requests into
// batches, runs batches on the least loaded device, fails them over to
// another device and then to the CPU path when a device errs, and answers
// every task exactly once.
//
//   tiny  (<= cpu_max units)        -> oneTBB CPU path, no batching delay
//   medium                          -> joins a batch of its class: one
//                                      segmented sort / one transpose launch
//   large (>= solo_min units)       -> runs alone on a device
//   up to spill_max units, when the devices' backlog would finish it
//   later than the CPU path         -> CPU ("spill")
//   tiny, when the CPU path's backlog would finish it later than a device
//                                   -> a device batch (overflow)
//
// Units are keys for sorts and 32-bit rows (32 per matrix) for transposes.
// A batch closes when it holds max_batch_requests or max_batch_keys units,
// or when its oldest request has waited max_batch_delay. Sorts batch with
// sorts of the same key width, payload type and permutation request: key
// types and orders are normalised to ordered unsigned bits while packing.
// Sorts longer than the devices' fused segment (for their key width) run
// alone: in a batch they would cost launches of their own.
//
// Clients (Task::client, server/peer.h) are admitted up to their share
// of the queue (Options::max_client_queued_requests and _units), and
// share the queues in fair shares of work: the CPU path's
// (server/fair_queue.h, where bulk tasks also leave a worker to small
// ones) and, within each batching class and the solo queue, the devices'
// (FairTasks in server/batcher.h).
//
// A request larger than a device's memory budget runs alone in device-sized
// runs: sorts are merged on the CPU (server/runs.h), transposes are cut
// between matrices.
//
// Each device has a runner thread per batch it may hold: while one
// runner's batch is on the device, the next runner gathers and packs the
// following batch, so the device is not idle while the host packs. A
// runner takes a batch only when its device has fewer than
// `pipeline_depth` in flight and no healthy device has fewer; beyond that,
// up to `full_pipeline_depth` (and the runs its engine serves at once),
// only when the next batch to go is full or a solo task no longer than a
// full batch (Batchers::TakeFull): the devices
// are behind, and its transfers overlap the others' kernels
// (Placement::MayTake). The runner that takes a batch runs it: a thread
// that handed batches to others cost small batches 13-16% of their rate
// (docs/decisions/032-device-runners.md).
//
// An engine error on a batch that is the device's fault (see FailOver) hands
// the batch over whole to another device that is up and has not failed it:
// the first of them with a batch slot free takes it, before any new batch
// (it has waited once already). A batch goes to each device at most once;
// one that every device up has failed, or whose error is the requests' own
// fault (a bad argument), re-runs its requests on the CPU path. A device
// that reports itself unhealthy is re-created through its factory after a
// back-off, the other devices and then the CPU path answering meanwhile.
//
// Spill and overflow weigh the devices by their calibrated costs scaled by
// how late the answers to overflowed requests have lately come against
// them (Placement::Lateness): the calibration times runs on an idle host, and
// with the CPU path saturated a batch's host stages take several times
// longer, so that overflowed requests' answers came at p99 10-11 ms where
// well under one was estimated.
//
// The parts, each with its own tests: Admission (the budget), Placement
// (server/placement.h: routes, the CPU backlog, lateness and pipeline
// depth; the router in it, server/router.h, a pure function of a request
// and the load), Batchers
// (per-class queues), DevicePool (leases, health, re-creation), the batch
// codec (server/batch_codec.h) and sorts in runs (server/runs.h). The
// scheduler holds one lock over its queues and devices and calls the
// listener and the log only after releasing it.
//
//   Scheduler sched(options, &cpu, std::move(devices), &listener);
//   auto task = std::make_shared<Task>();
//   task->prepare = [&] { ... fill task->sort ...; return absl::OkStatus(); };
//   task->done = [](const TaskResult& r) { ... };
//   sched.Submit(task);            // done() runs exactly once, maybe inline
//   sched.Drain(absl::Now() + absl::Seconds(30));
#ifndef SORTD_SERVER_SCHEDULER_H_
#define SORTD_SERVER_SCHEDULER_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "core/mutex.h"
#include "core/sorter.h"
#include "server/admission.h"
#include "server/batch_codec.h"
#include "server/batcher.h"
#include "server/device_pool.h"
#include "server/fair_queue.h"
#include "server/placement.h"
#include "server/router.h"
#include "server/split_sort.h"
#include "server/task.h"

namespace sortd {

// Events for metrics and logs; every method may be called from any thread.
class SchedulerListener {
 public:
  virtual ~SchedulerListener() = default;
  virtual void OnRoute(Op /*op*/, Route /*route*/) {}
  // One device run: a batch, or a request alone.
  virtual void OnBatch(Op /*op*/, const std::string& /*device*/,
                       size_t /*requests*/, size_t /*units*/) {}
  // `kernel`: sort, segmented_sort (a batch of sorts) or transpose.
  virtual void OnStages(const std::string& /*device*/, const char* /*kernel*/,
                        const StageTimes& /*stages*/) {}
  virtual void OnCpuFallback(std::string_view /*reason*/) {}
  virtual void OnQueue(size_t /*queued_units*/, size_t /*queued_requests*/,
                       size_t /*inflight_requests*/) {}
  // The router's device lateness for `op` (Placement::Lateness):
  // 1 at the start, then after each answer to an overflowed request.
  virtual void OnDeviceLateness(Op /*op*/, double /*factor*/) {}
  virtual void OnDeviceState(const std::string& /*device*/, bool /*up*/) {}
  // When a device engine is (re-)created.
  virtual void OnDeviceInfo(const std::string& /*device*/,
                            const std::string& /*vendor*/,
                            const std::string& /*driver*/) {}
  // After each device run.
  virtual void OnDeviceMemory(
      const std::string& /*device*/,
      const std::vector<std::pair<std::string, double>>& /*bytes*/) {}
  // After each device run: its engine's Sorter::transfer_bytes(), totals
  // since the engine was (re-)created.
  virtual void OnDeviceTransfers(const std::string& /*device*/,
                                 const Sorter::TransferBytes& /*bytes*/) {}
  // Device `to` took `requests` that device `from` failed (a handover; the
  // CPU path's takeovers are OnCpuFallback).
  virtual void OnDeviceFailover(const std::string& /*from*/,
                                const std::string& /*to*/,
                                size_t /*requests*/) {}
};

class Scheduler {
 public:
  // A split sort measured and merged is over at most this many devices:
  // the host merge of two runs is the one tested and benchmarked
  // (docs/decisions/019-split-sort.md); the code takes any number.
  static constexpr size_t kMaxSplitDevices = 2;
  struct Options {
    absl::Duration max_batch_delay = absl::Microseconds(100);
    size_t max_batch_units = size_t{1} << 22;
    size_t max_batch_requests = 256;
    // Batched sorts whose arrays lie in the engine's page-locked memory are
    // sorted where they lie when they hold this many keys or more on
    // average, else packed (batch::SortTogether; SIZE_MAX: always packed).
    size_t in_place_min_keys = 0;
    // Admission bounds over every task not yet answered.
    size_t max_queued_units = size_t{1} << 28;
    size_t max_queued_requests = 4096;
    // Units one task counts against max_queued_units at most, so that one
    // huge call (a long SortStream) cannot hold the whole budget and
    // starve every other client while it runs.
    size_t max_call_units = size_t{1} << 26;
    // What the tasks of one client (Task::client) may count together
    // against those bounds, so that one client cannot fill the queue and
    // have every other client's calls refused. Half of each by default:
    // one client alone still has a deep queue to batch from, and whatever
    // it sends, the others keep the other half.
    size_t max_client_queued_units = size_t{1} << 27;
    size_t max_client_queued_requests = 2048;
    Thresholds sort, transpose;
    // Calibrated costs; spilling needs both of an operation's models.
    CostModel cpu_sort, gpu_sort, cpu_transpose, gpu_transpose;
    bool spill = true;
    int cpu_workers = 2;
    // CPU-path tasks of this many units or more run on at most
    // cpu_workers - 1 workers at once (server/fair_queue.h).
    size_t cpu_bulk_units = size_t{1} << 20;
    int pipeline_depth = 2;
    // A sort alone of this many keys or more, whose host scratch its caller
    // has admitted (Task::host_scratch_bytes), is cut across its device and
    // others of its kind up with nothing in flight, kMaxSplitDevices in all
    // at most (server/split_sort.h), when there is one; 0: never.
    size_t split_min_keys = 0;
    // Idle scratch of split sorts kept for the next one, in bytes (0:
    // none; SplitScratchCache).
    size_t split_scratch_bytes = 0;
    // Batches in flight per device while the next batch is full
    // (max_batch_units or max_batch_requests) or a solo task no longer
    // than a full batch: then the devices are behind,
    // and a further batch's transfers overlap the others' kernels without
    // splitting arriving requests into smaller batches. At most this many
    // runners per device (0: pipeline_depth, no more).
    int full_pipeline_depth = 0;
    absl::Duration reinit_backoff = absl::Seconds(1);
    absl::Duration max_reinit_backoff = absl::Seconds(60);
    // The time of queue waits, batch deadlines, back-offs and the drain
    // deadline (tests pass a fake one; waits last the difference between
    // its times); empty: absl::Now.
    std::function<absl::Time()> clock;
  };

  struct Stats {
    uint64_t submitted = 0, rejected = 0, answered = 0;
    uint64_t cpu_runs = 0;   // tasks the CPU path ran
    uint64_t gpu_runs = 0;   // engine calls for batches or solo tasks
    uint64_t gpu_tasks = 0;  // tasks answered by a device
    // failovers: tasks the CPU path took from a failed or lost device;
    // device_failovers: tasks a device took from another that failed them
    // (one task handed on twice counts twice);
    // dropped: tasks whose deadline passed before they ran.
    uint64_t spilled = 0, failovers = 0, device_failovers = 0, reinits = 0,
             dropped = 0;
    // Sorts answered by several devices at once, and split sorts that
    // failed (each then sorted on one device or the CPU path).
    uint64_t split_sorts = 0, split_failures = 0;
    size_t largest_batch = 0;
  };

  // `cpu` is not owned and must outlive the scheduler; `listener` may be
  // null. With no devices every task runs on the CPU path.
  Scheduler(const Options& options, Sorter* cpu,
            std::vector<DeviceSlot> devices,
            SchedulerListener* listener = nullptr);
  ~Scheduler();

  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  void Submit(std::shared_ptr<Task> task) ABSL_LOCKS_EXCLUDED(mu_);

  // Stops batching delays, runs what is queued (and what is submitted
  // meanwhile: calls already accepted by gRPC) until `deadline`, then
  // answers whatever has not started UNAVAILABLE, waits for running work
  // and stops every thread; later submissions get UNAVAILABLE.
  void Drain(absl::Time deadline) ABSL_LOCKS_EXCLUDED(mu_);

  // The parts of Drain, for a server that must also wait for gRPC's own
  // shutdown: StartDrain closes batches at once (submissions are still
  // served); AbandonQueued answers every task not yet started UNAVAILABLE
  // and refuses later submissions.
  void StartDrain() ABSL_LOCKS_EXCLUDED(mu_);
  void AbandonQueued() ABSL_LOCKS_EXCLUDED(mu_);

  Stats stats() const ABSL_LOCKS_EXCLUDED(mu_);
  int healthy_devices() const ABSL_LOCKS_EXCLUDED(mu_);
  // Gives idle memory the scheduler keeps back to the system (the split
  // sorts' scratch), for sortd's idle trim.
  void TrimIdle() { split_scratch_.Trim(); }
  // The factor the router scales device estimates of `op` by now.
  double device_late(Op op) const ABSL_LOCKS_EXCLUDED(mu_);
  const Options& options() const { return options_; }

 private:
  // The figures OnQueue reports, taken under the lock and published after
  // it; a snapshot older than one already published is dropped.
  struct QueueSnapshot {
    uint64_t seq = 0;
    size_t units = 0, requests = 0, inflight = 0;
  };

  static Options Normalized(Options options);
  static Batchers::Limits BatchLimits(const Options& options,
                                      const DevicePool& pool);
  absl::Time Now() const;
  QueueSnapshot QueueLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Publish(const QueueSnapshot& queue) ABSL_LOCKS_EXCLUDED(publish_mu_);
  void EnqueueCpu(std::shared_ptr<Task> task, Route route);
  void RunCpu(const std::shared_ptr<Task>& task);
  // Submit after admission: prepare, route, queue or answer.
  void SubmitAdmitted(const std::shared_ptr<Task>& task);
  // The device whose runner holds a lease on it, read without mu_ by that
  // runner: the pool's slots never move (sized at construction) and a
  // device is re-created (its engine replaced) only with nothing in flight.
  // The analysis cannot see a lease, hence no checking here.
  DevicePool::Device& LeasedDevice(size_t device_index)
      ABSL_NO_THREAD_SAFETY_ANALYSIS {
    return pool_[device_index];
  }
  // Drops one of the task's holds; the last releases its admission (and is
  // the caller's last touch of the scheduler).
  void Unhold(Task& task);
  // A batch a device failed, waiting for another device to take it.
  struct Handover {
    Batch batch;
    size_t units = 0;
    std::vector<bool> tried;  // by device: ran it and failed
    std::string from;         // the device it failed on last
  };
  // Whether a failed run's error is the device's fault, so that another
  // device may succeed where it failed (see FailOver).
  static bool DeviceFault(const absl::Status& error);
  // Whether device `d` is up and has not failed `h`.
  bool MayTakeLocked(const Handover& h, size_t d) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Moves into `out` the waiting handovers that no device up may take.
  void StrandedHandoversLocked(Batch* out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Queues `batch` for another device up that has not failed it (`tried`,
  // with `device_index` added) and snapshots the queue into `queue`; false,
  // leaving `batch` as it is, where no device may take it.
  bool HandOverLocked(size_t device_index, Batch& batch,
                      std::vector<bool> tried, QueueSnapshot* queue)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Each runner thread's loop (server/scheduler_runner.cc). Requires mu_
  // not held: it takes mu_ and holds it except around publishing, running
  // a batch, giving the packing buffer back and re-creating the device.
  void RunnerLoop(size_t device_index) ABSL_LOCKS_EXCLUDED(mu_);
  // The runner's steps. Each returns with the lock held, releasing it only
  // where the loop did.
  // The device is down: gives the packing buffer back, or re-creates the
  // device when its turn has come, or waits.
  void WaitWhileDown(size_t device_index, batch::PackBuffer* pack)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Runs the first handover this device may take, if it has room: true when
  // it ran one.
  bool RunHandover(size_t device_index, batch::PackBuffer* pack)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Takes the next batch this device may lease into `batch`: true. Else
  // waits (for work, room or the batching delay) and returns false.
  bool TakeBatchOrWait(size_t device_index, batch::PackBuffer* pack,
                       Batch* batch) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Re-creates a device that is down, after its back-off; releases the
  // lock around the factory.
  void Reinit(size_t device_index) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Runs `batch` on the device; `tried` marks the devices that failed it
  // before (empty: none). True when it gave the runner's lease of
  // `leased_units` back itself: a split sort does, before it answers, so
  // that the caller's next request finds every device idle.
  bool RunBatch(size_t device_index, Batch& batch, std::vector<bool> tried,
                batch::PackBuffer* pack, size_t leased_units);
  // Moves the tasks of `batch` still within their deadlines at `now` into
  // the result, and answers the others with their Expired status.
  Batch TakeLive(Batch& batch, absl::Time now);
  enum class SplitOutcome { kNotSplit, kAnswered, kFailedOver };
  // Cuts `live` across the devices when it is one sort to split
  // (SplitWanted) and answers it (kAnswered; the runner's lease given
  // back). kFailedOver: a part failed on this device, now unhealthy, and
  // FailOver took the task (moving `tried`). kNotSplit: the caller runs it
  // on this device alone.
  SplitOutcome TrySplit(size_t device_index, Batch& live,
                        std::vector<bool>& tried, absl::Time start,
                        size_t leased_units);
  // Whether `live` (a batch no device has failed: `tried` empty) is one
  // sort to cut across the devices (server/scheduler_split.cc).
  bool SplitWanted(const Batch& live, const std::vector<bool>& tried) const;
  // Sorts `task` on device `device_index` and every other device up at
  // once, and answers it: true. False when it did not answer: fewer than
  // two devices could take a part, or a part failed (`error`; the devices
  // whose engines turned unhealthy are marked down, except
  // `device_index`, which the caller's failover handles), and nothing was
  // written to the task's outputs.
  // On success the runner's own lease (`leased_units`) is given back too.
  bool RunSplit(size_t device_index, const std::shared_ptr<Task>& task,
                absl::Time start, size_t leased_units, absl::Status* error);
  // After a split sort on `devices` (the runner's first): returns the
  // others' leases of `share` units each, and the runner's of
  // `leased_units` when it succeeded (`ok`), counts the outcome, and marks
  // down the others whose engines turned unhealthy.
  void EndSplit(const std::vector<size_t>& devices, size_t share,
                size_t leased_units, bool ok);
  // Reports a split sort's stages, runs and devices' memory (by device,
  // read before their leases were given back; none where that found no
  // memory), and answers its task.
  using DeviceMemory = std::vector<std::pair<std::string, double>>;
  void AnswerSplit(const std::shared_ptr<Task>& task,
                   const std::vector<std::string>& names, ExecutionPath path,
                   const std::vector<DeviceMemory>& memory, SplitReport& report,
                   absl::Time start);
  // Under the lock: device `device_index` and the other devices up with
  // nothing in flight, whose engines each take a part of `job` in one run;
  // empty when fewer than two, or when a part is beyond a device's memory.
  std::vector<size_t> SplitDevicesLocked(size_t device_index,
                                         const SortJob& job) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status RunOnEngine(Sorter& engine, Batch& batch, StageTimes* stages,
                           batch::PackBuffer* pack, int* device_runs);
  // A failed device run: marks the device down if its engine says so, and
  // hands the batch to another device up that has not failed it (`tried`),
  // or else sends it to the CPU path, as it does every queued task when no
  // device is left up and every handover only the lost device could take.
  void FailOver(size_t device_index, Batch& batch, std::vector<bool> tried,
                const absl::Status& error);
  // Answers a task and releases its admission.
  void Answer(const std::shared_ptr<Task>& task, TaskResult result);
  // CANCELLED / DEADLINE_EXCEEDED when the task must not run.
  static absl::Status Expired(const Task& task, absl::Time now);

  const Options options_;
  Sorter* cpu_;
  SchedulerListener* listener_;
  SchedulerListener null_listener_;
  Admission admission_;

  mutable Mutex mu_;
  CondVar cv_;  // runners: work, state changes
  DevicePool pool_ ABSL_GUARDED_BY(mu_);
  Batchers batchers_ ABSL_GUARDED_BY(mu_);
  // Routes, the CPU path's backlog, lateness and pipeline depth.
  Placement placement_ ABSL_GUARDED_BY(mu_);
  // Failed batches waiting for another device, oldest first, and their
  // units and requests.
  std::deque<Handover> handovers_ ABSL_GUARDED_BY(mu_);
  size_t handover_units_ ABSL_GUARDED_BY(mu_) = 0;
  size_t handover_requests_ ABSL_GUARDED_BY(mu_) = 0;
  bool draining_ ABSL_GUARDED_BY(mu_) = false;  // batches close at once
  // The drain deadline passed: unstarted tasks answer an error.
  bool abandoning_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;  // runners exit
  Stats stats_ ABSL_GUARDED_BY(mu_);
  // Admitted and not yet answered.
  size_t inflight_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t queue_seq_ ABSL_GUARDED_BY(mu_) = 0;

  std::vector<std::vector<std::thread>> runners_;  // by device
  Mutex publish_mu_;
  uint64_t published_seq_ ABSL_GUARDED_BY(publish_mu_) = 0;
  FairQueue cpu_queue_;
  SplitScratchCache split_scratch_;
};

}  // namespace sortd

#endif  // SORTD_SERVER_SCHEDULER_H_
