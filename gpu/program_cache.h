// ProgramCache: OpenCL programs compiled once, cached twice.
//
// In memory by (kernel source name, build options); on disk as program
// binaries keyed by a hash of the platform, device, driver version, build
// options and source text, so a driver update or a kernel edit misses the
// cache instead of loading a stale binary. A disk entry that is truncated,
// corrupt or rejected by the driver is rebuilt from source and rewritten;
// the disk cache can never make a build fail. Thread-safe.
//
//   ProgramCache cache(context, device, "/var/cache/sortd", {});
//   absl::StatusOr<cl::Program> p = cache.Get("radix_sort", "-DKEY_BITS=32");
#ifndef SORTD_GPU_PROGRAM_CACHE_H_
#define SORTD_GPU_PROGRAM_CACHE_H_

#include <map>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "core/mutex.h"
#include "gpu/cl.h"
#include "gpu/device.h"

namespace sortd::gpu {

class ProgramCache {
 public:
  struct Stats {
    int built_from_source = 0;
    int loaded_from_disk = 0;
    int disk_entries_rejected = 0;  // corrupt or refused by the driver
  };

  // Diagnostics for tuning, off by default.
  struct Diagnostics {
    // Appended to every build's options (and so part of the cache keys);
    // on NVIDIA, -cl-nv-verbose shows each kernel's register use.
    std::string extra_options;
    // Every build's log on stderr.
    bool print_build_log = false;
  };

  // `disk_dir` empty: memory only.
  ProgramCache(cl::Context context, Device device, std::string disk_dir,
               Diagnostics diagnostics);

  // The built program for gpu/kernels/<source_name>.cl with `options`.
  // A compile error is INTERNAL and carries the build log.
  absl::StatusOr<cl::Program> Get(const std::string& source_name,
                                  const std::string& options);

  const Diagnostics& diagnostics() const { return diagnostics_; }

  Stats stats() const;
  // Path of the disk entry for these inputs (for tests).
  std::string DiskPath(const std::string& source_name,
                       const std::string& options) const;

 private:
  absl::StatusOr<cl::Program> Build(const std::string& source_name,
                                    const std::string& options);
  absl::StatusOr<cl::Program> LoadFromDisk(const std::string& path);
  void SaveToDisk(const cl::Program& program, const std::string& path);

  cl::Context context_;
  Device device_;
  std::string disk_dir_;
  Diagnostics diagnostics_;
  mutable Mutex mu_;
  std::map<std::pair<std::string, std::string>, cl::Program> programs_
      ABSL_GUARDED_BY(mu_);
  Stats stats_ ABSL_GUARDED_BY(mu_);
};

}  // namespace sortd::gpu

#endif  // SORTD_GPU_PROGRAM_CACHE_H_
