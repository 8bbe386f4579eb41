// The process metrics (server/process_metrics.h): every standard family,
// one gauge or counter each, with values that follow the process: open
// descriptors, memory, CPU time, the start before now.
#include "server/process_metrics.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <ctime>
#include <map>
#include <string>
#include <vector>

namespace sortd {
namespace {

// Each family's one value, by name.
std::map<std::string, double> Values() {
  std::map<std::string, double> values;
  for (const prometheus::MetricFamily& f : ProcessCollector().Collect()) {
    EXPECT_EQ(f.metric.size(), 1u) << f.name;
    if (f.metric.empty()) continue;
    const prometheus::ClientMetric& m = f.metric.front();
    values[f.name] = f.type == prometheus::MetricType::Counter ? m.counter.value
                                                               : m.gauge.value;
  }
  return values;
}

TEST(ProcessMetrics, EveryStandardFamilyIsThere) {
  const std::map<std::string, double> v = Values();
  for (const char* name :
       {"process_cpu_seconds_total", "process_start_time_seconds",
        "process_open_fds", "process_max_fds", "process_virtual_memory_bytes",
        "process_resident_memory_bytes"}) {
    EXPECT_EQ(v.count(name), 1u) << name;
  }
}

TEST(ProcessMetrics, ValuesFollowTheProcess) {
  const std::map<std::string, double> before = Values();
  EXPECT_GT(before.at("process_resident_memory_bytes"), 0);
  EXPECT_GE(before.at("process_virtual_memory_bytes"),
            before.at("process_resident_memory_bytes"));
  EXPECT_GT(before.at("process_max_fds"), before.at("process_open_fds"));
  const double now = static_cast<double>(std::time(nullptr));
  EXPECT_LE(before.at("process_start_time_seconds"), now + 1);
  EXPECT_GT(before.at("process_start_time_seconds"), now - 24 * 3600);

  std::vector<int> fds;
  for (int i = 0; i < 8; ++i) fds.push_back(open("/dev/null", O_RDONLY));
  // Burn some CPU time: the counter must move.
  const std::clock_t start = std::clock();
  volatile double x = 0;
  while (std::clock() - start < CLOCKS_PER_SEC / 5) x = x + 1;
  const std::map<std::string, double> after = Values();
  for (int fd : fds) close(fd);
  EXPECT_GE(after.at("process_open_fds"), before.at("process_open_fds") + 8);
  EXPECT_GT(after.at("process_cpu_seconds_total"),
            before.at("process_cpu_seconds_total"));
  EXPECT_EQ(after.at("process_start_time_seconds"),
            before.at("process_start_time_seconds"));
}

}  // namespace
}  // namespace sortd
