#include "server/device_pool.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace sortd {

DevicePool::DevicePool(std::vector<DeviceSlot> slots, const Options& options)
    : options_(options) {
  for (DeviceSlot& slot : slots) {
    if (slot.engine == nullptr) continue;
    Device dev;
    dev.name = slot.engine->device_name();
    // Two workers on one kind of device (or one device twice) stay apart
    // in logs and metrics.
    int same = 0;
    for (const Device& other : devices_) {
      same += other.name.starts_with(dev.name);
    }
    if (same > 0) dev.name = absl::StrCat(dev.name, " #", same + 1);
    dev.engine = std::move(slot.engine);
    dev.factory = std::move(slot.factory);
    dev.backoff = options_.reinit_backoff;
    devices_.push_back(std::move(dev));
  }
}

int DevicePool::Depth(size_t i, int depth) const {
  const Device& dev = devices_[i];
  const int runs = dev.engine != nullptr ? dev.engine->concurrent_runs() : 0;
  return runs > 0 ? std::max(options_.pipeline_depth, std::min(depth, runs))
                  : depth;
}

bool DevicePool::MayLease(size_t i, int depth) const {
  const Device& dev = devices_[i];
  if (!dev.up || dev.inflight >= Depth(i, depth)) return false;
  for (const Device& other : devices_) {
    if (other.up && other.inflight < dev.inflight) return false;
  }
  return true;
}

void DevicePool::Lease(size_t i, size_t units) {
  ++devices_[i].inflight;
  devices_[i].inflight_units += units;
}

void DevicePool::Return(size_t i, size_t units) {
  --devices_[i].inflight;
  devices_[i].inflight_units -= units;
}

int DevicePool::devices_up() const {
  int up = 0;
  for (const Device& d : devices_) up += d.up;
  return up;
}

size_t DevicePool::inflight_units() const {
  size_t units = 0;
  for (const Device& d : devices_) {
    if (d.up) units += d.inflight_units;
  }
  return units;
}

size_t DevicePool::max_batch_keys(const SortJob& shape, size_t segments,
                                  size_t limit) const {
  for (const Device& d : devices_) {
    if (size_t m = d.engine->max_batch_keys(shape, segments); m > 0) {
      limit = std::min(limit, m);
    }
  }
  return limit;
}

size_t DevicePool::max_transpose_matrices(size_t limit) const {
  for (const Device& d : devices_) {
    if (size_t m = d.engine->max_transpose_matrices(); m > 0) {
      limit = std::min(limit, m);
    }
  }
  return limit;
}

void DevicePool::MarkDown(size_t i, absl::Time now) {
  Device& dev = devices_[i];
  dev.up = false;
  dev.backoff = options_.reinit_backoff;
  dev.next_attempt = now + dev.backoff;
}

bool DevicePool::WantsReinit(size_t i) const {
  const Device& dev = devices_[i];
  return !dev.up && dev.factory && !dev.reinit_running && dev.inflight == 0;
}

EngineFactory DevicePool::FreeEngine(size_t i) {
  Device& dev = devices_[i];
  dev.engine.reset();  // free the broken context before making a new one
  return dev.factory;
}

DevicePool::Reinit DevicePool::EndReinit(
    size_t i, absl::StatusOr<std::unique_ptr<Sorter>> engine, absl::Time now) {
  Device& dev = devices_[i];
  dev.reinit_running = false;
  if (engine.ok() && *engine != nullptr) {
    dev.engine = std::move(*engine);
    dev.up = true;
    dev.backoff = options_.reinit_backoff;
    return {.up = true, .error = absl::OkStatus(), .next_try = {}};
  }
  dev.backoff = std::min(dev.backoff * 2, options_.max_reinit_backoff);
  dev.next_attempt = now + dev.backoff;
  return {.up = false,
          .error = engine.ok()
                       ? absl::InternalError("the factory made no engine")
                       : engine.status(),
          .next_try = dev.backoff};
}

}  // namespace sortd
