// The OpenCL C sources of gpu/kernels/, embedded at build time, by file name
// without extension ("radix_sort" for gpu/kernels/radix_sort.cl).
//
//   absl::StatusOr<std::string_view> src = FindKernelSource("transpose");
#ifndef SORTD_GPU_KERNEL_SOURCES_H_
#define SORTD_GPU_KERNEL_SOURCES_H_

#include <string>
#include <vector>

namespace sortd::gpu {

struct KernelSource {
  const char* name;
  const char* text;
};

const std::vector<KernelSource>& KernelSources();

inline const char* FindKernelSource(const std::string& name) {
  for (const KernelSource& s : KernelSources()) {
    if (name == s.name) return s.text;
  }
  return nullptr;
}

}  // namespace sortd::gpu

#endif  // SORTD_GPU_KERNEL_SOURCES_H_
