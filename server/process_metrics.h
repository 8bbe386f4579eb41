// The standard process metrics of Prometheus clients, read from /proc at
// each scrape: process_cpu_seconds_total, process_start_time_seconds,
// process_open_fds, process_max_fds, process_virtual_memory_bytes,
// process_resident_memory_bytes.
//
//   exposer.RegisterCollectable(std::make_shared<ProcessCollector>());
#ifndef SORTD_SERVER_PROCESS_METRICS_H_
#define SORTD_SERVER_PROCESS_METRICS_H_

#include <vector>

#include "prometheus/collectable.h"
#include "prometheus/metric_family.h"

namespace sortd {

class ProcessCollector final : public prometheus::Collectable {
 public:
  std::vector<prometheus::MetricFamily> Collect() const override;
};

}  // namespace sortd

#endif  // SORTD_SERVER_PROCESS_METRICS_H_
