// Startup calibration of the router: times the CPU path and a device engine
// on the same generated inputs and derives where each operation's requests
// should go (server/scheduler.h), plus the linear cost models that the
// scheduler uses to spill work to the CPU when the devices are backed up.
//
//   absl::StatusOr<Calibration> c = Calibrate(cpu, *engine, {});
//   if (c.ok()) { options.sort = c->sort; options.gpu_sort = c->gpu_sort; }
//   std::fputs(c->report.c_str(), stderr);
#ifndef SORTD_SERVER_CALIBRATE_H_
#define SORTD_SERVER_CALIBRATE_H_

#include <cstddef>
#include <string>

#include "absl/status/statusor.h"
#include "core/sorter.h"
#include "server/scheduler.h"

namespace sortd {

struct CalibrationOptions {
  // Largest single sort timed (keys); transposes go up to a sixteenth of
  // it in matrices.
  size_t max_keys = size_t{1} << 20;
  // Timed repetitions per point; the median is used.
  int repeats = 3;
  // Batching stops paying once a lone request costs at most this factor
  // more than its share of a batch.
  double solo_gain = 1.25;
};

struct Calibration {
  Thresholds sort, transpose;
  CostModel cpu_sort, gpu_sort, cpu_transpose, gpu_transpose;
  // One line per measured point and the thresholds chosen, for the log.
  std::string report;
};

absl::StatusOr<Calibration> Calibrate(Sorter& cpu, Sorter& device,
                                      const CalibrationOptions& options);

}  // namespace sortd

#endif  // SORTD_SERVER_CALIBRATE_H_
