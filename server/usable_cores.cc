#include "server/usable_cores.h"

#include <sched.h>

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <sstream>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace sortd {
namespace {

// A small system file's text, or empty where it cannot be read.
std::string ReadSmallFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return "";
  std::ostringstream text;
  text << in.rdbuf();
  return text.str().substr(0, 4096);
}

std::optional<int> CoresOf(int64_t quota, int64_t period) {
  if (quota <= 0 || period <= 0) return std::nullopt;
  return static_cast<int>(std::max<int64_t>(1, (quota + period - 1) / period));
}

int AffinityCores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    const int n = CPU_COUNT(&set);
    if (n > 0) return n;
  }
  return std::max(1u, std::thread::hardware_concurrency());
}

}  // namespace

std::optional<int> CoresOfCpuMax(absl::string_view cpu_max) {
  std::vector<absl::string_view> parts = absl::StrSplit(
      absl::StripAsciiWhitespace(cpu_max), ' ', absl::SkipEmpty());
  int64_t quota = 0, period = 0;
  if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &quota) ||
      !absl::SimpleAtoi(parts[1], &period)) {
    return std::nullopt;  // "max PERIOD" (no limit) or unreadable
  }
  return CoresOf(quota, period);
}

std::optional<int> CoresOfCfsQuota(absl::string_view quota,
                                   absl::string_view period) {
  int64_t q = 0, p = 0;
  if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(quota), &q) ||
      !absl::SimpleAtoi(absl::StripAsciiWhitespace(period), &p)) {
    return std::nullopt;
  }
  return CoresOf(q, p);
}

std::optional<std::string> CgroupV2Path(absl::string_view proc_self_cgroup) {
  for (absl::string_view line : absl::StrSplit(proc_self_cgroup, '\n')) {
    if (absl::ConsumePrefix(&line, "0::")) {
      return std::string(absl::StripAsciiWhitespace(line));
    }
  }
  return std::nullopt;
}

std::string CgroupV1CpuPath(absl::string_view proc_self_cgroup) {
  // "ID:CONTROLLERS:PATH", CONTROLLERS a comma-separated list.
  for (absl::string_view line : absl::StrSplit(proc_self_cgroup, '\n')) {
    std::vector<absl::string_view> f =
        absl::StrSplit(line, absl::MaxSplits(':', 2));
    if (f.size() != 3) continue;
    for (absl::string_view c : absl::StrSplit(f[1], ',')) {
      if (c == "cpu" && f[2] != "/") {
        return std::string(absl::StripAsciiWhitespace(f[2]));
      }
    }
  }
  return "";
}

int UsableCoresUnder(const std::string& root, int affinity,
                     absl::string_view proc_self_cgroup) {
  int cores = std::max(1, affinity);
  auto cap = [&cores](std::optional<int> limit) {
    if (limit) cores = std::min(cores, *limit);
  };
  if (std::optional<std::string> path = CgroupV2Path(proc_self_cgroup)) {
    // A limit may be set on any ancestor; inside a container's cgroup
    // namespace the path is "/" and the container's limit is at the root.
    std::string dir = *path;
    while (true) {
      const std::string at = dir == "/" ? "" : dir;
      cap(CoresOfCpuMax(ReadSmallFile(root + at + "/cpu.max")));
      if (at.empty()) break;
      const size_t slash = dir.rfind('/');
      dir =
          slash == 0 || slash == std::string::npos ? "/" : dir.substr(0, slash);
    }
  }
  // cgroup v1's cpu controller (also on hybrid hosts, whose v2 line names
  // no cpu.max): the process's own cgroup, and the root of the hierarchy
  // as a container sees it.
  for (const std::string& dir :
       {root + "/cpu" + CgroupV1CpuPath(proc_self_cgroup), root + "/cpu"}) {
    cap(CoresOfCfsQuota(ReadSmallFile(dir + "/cpu.cfs_quota_us"),
                        ReadSmallFile(dir + "/cpu.cfs_period_us")));
  }
  return cores;
}

int UsableCores() {
  static const int cores = UsableCoresUnder("/sys/fs/cgroup", AffinityCores(),
                                            ReadSmallFile("/proc/self/cgroup"));
  return cores;
}

}  // namespace sortd
