#include "server/router_setup.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "server/calibrate.h"
#include "server/log.h"

namespace sortd {
namespace {

// The sizes that may spill to the CPU path: above its range, up to
// spill_max (the calibrated range, where a pin lowered cpu_max).
std::string SpillRanges(const Scheduler::Options& o) {
  auto range = [](const Thresholds& t, size_t per, const char* unit) {
    if (t.spill_max <= t.cpu_max) return std::string();
    return absl::StrCat(
        t.cpu_max / per + 1, "-",
        t.spill_max == SIZE_MAX ? "any" : absl::StrCat(t.spill_max / per), " ",
        unit);
  };
  const std::string sorts = range(o.sort, 1, "keys");
  const std::string transposes = range(o.transpose, 32, "matrices");
  if (sorts.empty() && transposes.empty()) return "no requests";
  if (transposes.empty()) return absl::StrCat("sorts of ", sorts);
  if (sorts.empty()) return absl::StrCat("transposes of ", transposes);
  return absl::StrCat("sorts of ", sorts, " and transposes of ", transposes);
}

// Times the CPU path and `device`, and takes the thresholds and costs the
// timings give; on failure leaves `o` as it is.
void CalibrateThresholds(const RouterPins& pins, Sorter& cpu, Sorter& device,
                         Scheduler::Options* o) {
  CalibrationOptions copts;
  copts.max_keys =
      static_cast<size_t>(std::max<int64_t>(pins.calibrate_max_keys, 1024));
  // Under load the CPU path runs as many requests at once as it has
  // workers (--request_threads: small sorts whole on the worker, large
  // ones in its arena).
  copts.cpu_callers = o->cpu_workers;
  copts.max_batch_keys = o->max_batch_units;
  // Requests whose arrays the host buffer pool keeps page-locked are
  // batched where they lie (UsePinnedMemory).
  copts.pinned_min_bytes = pins.pinned_min_bytes;
  const absl::Time start = absl::Now();
  absl::StatusOr<Calibration> c = Calibrate(cpu, device, copts);
  if (c.ok()) {
    std::fputs(c->report.c_str(), stderr);
    LogLine("calibration took %s\n",
            absl::FormatDuration(absl::Now() - start).c_str());
    ApplyCalibration(*c, o);
  } else {
    LogAt(LogLevel::kWarning, "calibration failed (%s); default thresholds\n",
          c.status().ToString().c_str());
  }
}

void LogThresholds(const Scheduler::Options& o) {
  if (o.sort.solo_min <= o.sort.cpu_max) {
    LogAt(LogLevel::kWarning,
          "router: --solo_min_keys=%zu is at most the CPU path's %zu keys: "
          "sorts up to %zu keys go to the CPU path first\n",
          o.sort.solo_min, o.sort.cpu_max, o.sort.cpu_max);
  }
  LogLine(
      "router: sorts of <= %zu keys on the CPU path, >= %zu "
      "alone on a device; transposes of <= %zu matrices on the CPU "
      "path, >= %zu alone; batches in between, each of at most %zu keys "
      "(rows) and %zu requests (--max_batch_keys, --max_batch_requests), "
      "closed after --max_batch_delay=%s; batched sorts in page-locked "
      "memory sorted where they lie from %zu keys a request, packed below "
      "(--batch_in_place_min_keys); while the devices are backed up, %s "
      "spill to the CPU path (--spill_to_cpu)\n",
      o.sort.cpu_max, o.sort.solo_min, o.transpose.cpu_max / 32,
      o.transpose.solo_min == SIZE_MAX ? SIZE_MAX
                                       : (o.transpose.solo_min + 31) / 32,
      o.max_batch_units, o.max_batch_requests,
      absl::FormatDuration(o.max_batch_delay).c_str(), o.in_place_min_keys,
      SpillRanges(o).c_str());
}

}  // namespace

void SetRouterThresholds(const RouterPins& pins, Sorter& cpu, Sorter& device,
                         Scheduler::Options* o) {
  // Nothing spills without calibrated costs.
  o->sort = {.cpu_max = 4096, .solo_min = size_t{1} << 20, .spill_max = 0};
  o->transpose = {
      .cpu_max = 256 * 32, .solo_min = size_t{1} << 20, .spill_max = 0};
  if (pins.cpu_max_keys < 0 || pins.solo_min_keys < 0 ||
      pins.transpose_cpu_max_matrices < 0 ||
      pins.transpose_solo_min_matrices < 0) {
    CalibrateThresholds(pins, cpu, device, o);
  }
  if (pins.batch_in_place_min_keys >= 0) {
    o->in_place_min_keys = static_cast<size_t>(pins.batch_in_place_min_keys);
  }
  if (pins.cpu_max_keys >= 0) {
    o->sort.cpu_max = static_cast<size_t>(pins.cpu_max_keys);
  }
  if (pins.solo_min_keys >= 0) {
    o->sort.solo_min = static_cast<size_t>(pins.solo_min_keys);
  }
  if (pins.transpose_cpu_max_matrices >= 0) {
    o->transpose.cpu_max =
        static_cast<size_t>(pins.transpose_cpu_max_matrices) * 32;
  }
  if (pins.transpose_solo_min_matrices >= 0) {
    o->transpose.solo_min =
        static_cast<size_t>(pins.transpose_solo_min_matrices) * 32;
  }
  if (!o->spill) o->sort.spill_max = o->transpose.spill_max = 0;
  LogThresholds(*o);
}

}  // namespace sortd
