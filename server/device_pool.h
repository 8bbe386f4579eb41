// DevicePool: the scheduler's devices, each with its engine, its leases
// (batches in flight) and its health. A device takes another batch only
// while it has fewer than `pipeline_depth` (or a deeper depth the caller
// names, at most the runs its engine serves at once) in flight and no
// healthy device has fewer (the next batch goes to the least loaded). A device
// whose engine reports itself unhealthy is marked down and re-created through
// its factory after a back-off that doubles on each failed try, up to a cap.
//
// Not thread-safe: the scheduler calls it under its lock, and creates
// engines (CreateEngine) outside it. Times are the caller's (the
// scheduler's clock), so tests drive it with fake ones.
//
//   DevicePool pool(std::move(slots), {.pipeline_depth = 2});
//   if (pool.MayLease(d)) { pool.Lease(d, units); ... pool.Return(d, units); }
//   if (!pool[d].engine->healthy()) pool.MarkDown(d, now);
//   if (pool.WantsReinit(d)) {
//     pool.BeginReinit(d);                      // under the lock
//     ... wait until pool[d].next_attempt ...
//     EngineFactory make = pool.FreeEngine(d);  // under the lock
//     auto engine = make();                     // outside it
//     pool.EndReinit(d, std::move(engine), now);
//   }
#ifndef SORTD_SERVER_DEVICE_POOL_H_
#define SORTD_SERVER_DEVICE_POOL_H_

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "core/sorter.h"

namespace sortd {

using EngineFactory = std::function<absl::StatusOr<std::unique_ptr<Sorter>>()>;

struct DeviceSlot {
  std::unique_ptr<Sorter> engine;
  // Re-creates the engine after it turned unhealthy; empty: never.
  EngineFactory factory;
};

class DevicePool {
 public:
  struct Options {
    int pipeline_depth = 2;
    absl::Duration reinit_backoff = absl::Seconds(1);
    absl::Duration max_reinit_backoff = absl::Seconds(60);
  };
  struct Device {
    std::unique_ptr<Sorter> engine;  // null while being re-created
    EngineFactory factory;
    std::string name;  // unique in the pool
    bool up = true;
    bool reinit_running = false;
    int inflight = 0;  // batches leased
    size_t inflight_units = 0;
    absl::Duration backoff;
    absl::Time next_attempt;
  };
  // What a re-creation came to, for the log and the listener.
  struct Reinit {
    bool up = false;
    absl::Status error;  // when not up
    absl::Duration next_try;
  };

  // Slots without an engine are left out.
  DevicePool(std::vector<DeviceSlot> slots, const Options& options);

  size_t size() const { return devices_.size(); }
  Device& operator[](size_t i) { return devices_[i]; }
  const Device& operator[](size_t i) const { return devices_[i]; }

  // Whether device `i` may take another batch now: it has fewer than
  // `depth` (default: pipeline_depth; a larger one at most the runs its
  // engine serves at once) in flight and no healthy device has fewer.
  bool MayLease(size_t i) const { return MayLease(i, options_.pipeline_depth); }
  bool MayLease(size_t i, int depth) const;
  // Whether device `i` is up with fewer than Depth(i, depth) in flight,
  // whatever the others hold: for a batch that only some devices may take
  // (one another device failed), which goes to the first of them with room
  // rather than waiting for it to be the least loaded of all.
  bool HasRoom(size_t i, int depth) const {
    return devices_[i].up && devices_[i].inflight < Depth(i, depth);
  }
  // The batches device `i` may hold at once when asked for `depth`: never
  // fewer than pipeline_depth, beyond it at most its engine's concurrent
  // runs.
  int Depth(size_t i, int depth) const;
  void Lease(size_t i, size_t units);
  void Return(size_t i, size_t units);

  int devices_up() const;
  // Units leased to healthy devices.
  size_t inflight_units() const;
  // The largest sort (`shape`) / transpose every device takes in one run:
  // `limit` lowered to each device's own.
  size_t max_batch_keys(const SortJob& shape, size_t segments,
                        size_t limit) const;
  size_t max_transpose_matrices(size_t limit) const;

  // Marks device `i` down; its first re-creation is due a back-off later.
  void MarkDown(size_t i, absl::Time now);
  // Whether device `i` is down with a factory, nothing in flight and no
  // re-creation claimed.
  bool WantsReinit(size_t i) const;
  // Claims the re-creation of device `i` (one runner does it; the caller
  // then waits until next_attempt).
  void BeginReinit(size_t i) { devices_[i].reinit_running = true; }
  // Frees the broken engine and returns the factory to call, outside the
  // lock; EndReinit takes what it made.
  EngineFactory FreeEngine(size_t i);
  Reinit EndReinit(size_t i, absl::StatusOr<std::unique_ptr<Sorter>> engine,
                   absl::Time now);
  // Gives up a claimed re-creation that never called the factory.
  void AbortReinit(size_t i) { devices_[i].reinit_running = false; }

 private:
  const Options options_;
  std::vector<Device> devices_;
};

}  // namespace sortd

#endif  // SORTD_SERVER_DEVICE_POOL_H_
