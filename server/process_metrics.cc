#include "server/process_metrics.h"

#include <dirent.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

namespace sortd {
namespace {

prometheus::MetricFamily Family(const char* name, const char* help,
                                prometheus::MetricType type, double value) {
  prometheus::MetricFamily f;
  f.name = name;
  f.help = help;
  f.type = type;
  prometheus::ClientMetric m;
  if (type == prometheus::MetricType::Counter) {
    m.counter.value = value;
  } else {
    m.gauge.value = value;
  }
  f.metric.push_back(m);
  return f;
}

// Seconds since the epoch at which the system booted (/proc/stat btime).
double BootTime() {
  std::ifstream in("/proc/stat");
  std::string key;
  double value = 0;
  while (in >> key) {
    if (key == "btime") {
      in >> value;
      return value;
    }
    std::string rest;
    std::getline(in, rest);
  }
  return 0;
}

size_t OpenFds() {
  size_t n = 0;
  if (DIR* d = opendir("/proc/self/fd")) {
    while (dirent* e = readdir(d)) n += e->d_name[0] != '.';
    closedir(d);
    if (n > 0) --n;  // the directory's own descriptor
  }
  return n;
}

}  // namespace

std::vector<prometheus::MetricFamily> ProcessCollector::Collect() const {
  using prometheus::MetricType;
  // /proc/self/stat: fields after the command name's closing parenthesis;
  // utime, stime (14, 15), starttime (22), vsize (23), rss pages (24).
  std::ifstream in("/proc/self/stat");
  std::string stat((std::istreambuf_iterator<char>(in)),
                   std::istreambuf_iterator<char>());
  const size_t close = stat.rfind(')');
  std::istringstream fields(
      close == std::string::npos ? "" : stat.substr(close + 2));
  std::string field;
  double utime = 0, stime = 0, start = 0, vsize = 0, rss = 0;
  for (int i = 3; fields >> field; ++i) {
    if (i == 14) utime = std::stod(field);
    if (i == 15) stime = std::stod(field);
    if (i == 22) start = std::stod(field);
    if (i == 23) vsize = std::stod(field);
    if (i == 24) {
      rss = std::stod(field);
      break;
    }
  }
  const double ticks = static_cast<double>(sysconf(_SC_CLK_TCK));
  const double page = static_cast<double>(sysconf(_SC_PAGESIZE));
  rlimit fds{};
  getrlimit(RLIMIT_NOFILE, &fds);
  return {
      Family("process_cpu_seconds_total",
             "User and system CPU time spent in seconds", MetricType::Counter,
             (utime + stime) / ticks),
      Family("process_start_time_seconds",
             "Start time of the process since unix epoch in seconds",
             MetricType::Gauge, BootTime() + start / ticks),
      Family("process_open_fds", "Number of open file descriptors",
             MetricType::Gauge, static_cast<double>(OpenFds())),
      Family("process_max_fds", "Maximum number of open file descriptors",
             MetricType::Gauge, static_cast<double>(fds.rlim_cur)),
      Family("process_virtual_memory_bytes", "Virtual memory size in bytes",
             MetricType::Gauge, vsize),
      Family("process_resident_memory_bytes", "Resident memory size in bytes",
             MetricType::Gauge, rss * page),
  };
}

}  // namespace sortd
