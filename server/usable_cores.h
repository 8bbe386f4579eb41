// The number of cores this process can use: its CPU affinity mask, capped by
// the CPU quota of its cgroup (a container's CPU limit). Defaults that scale
// with the machine (the CPU path's threads, the handler pool) use it, so a
// container limited to 4 cores of a 64-core node runs 4 threads, not 64
// (std::thread::hardware_concurrency and oneTBB 2021 see the node).
#ifndef SORTD_SERVER_USABLE_CORES_H_
#define SORTD_SERVER_USABLE_CORES_H_

#include <optional>
#include <string>

#include "absl/strings/string_view.h"

namespace sortd {

// At least 1.
int UsableCores();

// The pieces UsableCores reads, apart for tests. The cores of a cgroup v2
// `cpu.max` ("QUOTA PERIOD" or "max PERIOD"), rounded up; nullopt where it
// sets no limit or does not parse.
std::optional<int> CoresOfCpuMax(absl::string_view cpu_max);
// The same for cgroup v1's cpu.cfs_quota_us and cpu.cfs_period_us (a quota
// of -1: no limit).
std::optional<int> CoresOfCfsQuota(absl::string_view quota,
                                   absl::string_view period);
// The cgroup v2 path of this process from /proc/self/cgroup's text (its
// "0::PATH" line), or nullopt on a cgroup v1 host.
std::optional<std::string> CgroupV2Path(absl::string_view proc_self_cgroup);
// The cgroup v1 path of this process's cpu controller ("" at the root or
// where there is none).
std::string CgroupV1CpuPath(absl::string_view proc_self_cgroup);
// The tightest limit among `affinity` and the quotas of a cgroup v2 path and
// its ancestors below `root` (/sys/fs/cgroup), and of cgroup v1's cpu
// controller there.
int UsableCoresUnder(const std::string& root, int affinity,
                     absl::string_view proc_self_cgroup);

}  // namespace sortd

#endif  // SORTD_SERVER_USABLE_CORES_H_
