#include "gpu/device.h"

#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace sortd::gpu {
namespace {

// OpenCL strings may carry their terminating NUL.
std::string Trim(std::string s) {
  while (!s.empty() && (s.back() == '\0' || s.back() == ' ')) s.pop_back();
  return s;
}

DeviceInfo Describe(const cl::Platform& p, const cl::Device& d) {
  DeviceInfo info;
  info.platform = Trim(p.getInfo<CL_PLATFORM_NAME>());
  info.platform_version = Trim(p.getInfo<CL_PLATFORM_VERSION>());
  info.name = Trim(d.getInfo<CL_DEVICE_NAME>());
  info.vendor = Trim(d.getInfo<CL_DEVICE_VENDOR>());
  info.driver = Trim(d.getInfo<CL_DRIVER_VERSION>());
  info.extensions = d.getInfo<CL_DEVICE_EXTENSIONS>();
  info.is_gpu = (d.getInfo<CL_DEVICE_TYPE>() & CL_DEVICE_TYPE_GPU) != 0;
  info.compute_units = d.getInfo<CL_DEVICE_MAX_COMPUTE_UNITS>();
  info.local_mem_bytes = d.getInfo<CL_DEVICE_LOCAL_MEM_SIZE>();
  info.global_mem_bytes = d.getInfo<CL_DEVICE_GLOBAL_MEM_SIZE>();
  info.max_alloc_bytes = d.getInfo<CL_DEVICE_MAX_MEM_ALLOC_SIZE>();
  info.max_work_group = d.getInfo<CL_DEVICE_MAX_WORK_GROUP_SIZE>();
  return info;
}

}  // namespace

bool DeviceInfo::HasExtension(const std::string& ext) const {
  return absl::StrContains(absl::StrCat(" ", extensions, " "),
                           absl::StrCat(" ", ext, " "));
}

std::string DeviceInfo::ToString() const {
  return absl::StrCat(name, " (", platform, ", driver ", driver, ", ",
                      compute_units, " CUs)");
}

absl::StatusOr<std::vector<Device>> FindDevices(DeviceKind kind) {
  std::vector<cl::Platform> platforms;
  cl_int err = cl::Platform::get(&platforms);
  if (err != CL_SUCCESS || platforms.empty()) {
    return absl::NotFoundError(
        absl::StrCat("no OpenCL platform (", ClErrorName(err), ")"));
  }
  const cl_device_type type =
      kind == DeviceKind::kGpu ? CL_DEVICE_TYPE_GPU : CL_DEVICE_TYPE_CPU;
  std::vector<Device> found;
  for (const cl::Platform& p : platforms) {
    std::vector<cl::Device> devices;
    if (p.getDevices(type, &devices) != CL_SUCCESS) continue;
    for (const cl::Device& d : devices) {
      if (!d.getInfo<CL_DEVICE_AVAILABLE>()) continue;
      found.push_back(Device{p, d, Describe(p, d)});
    }
  }
  if (found.empty()) {
    return absl::NotFoundError(
        absl::StrCat("no OpenCL ", kind == DeviceKind::kGpu ? "GPU" : "CPU",
                     " device among ", platforms.size(), " platform(s)"));
  }
  return found;
}

absl::StatusOr<Device> FindDevice(DeviceKind kind, size_t index) {
  absl::StatusOr<std::vector<Device>> all = FindDevices(kind);
  if (!all.ok()) return all.status();
  if (index >= all->size()) {
    return absl::NotFoundError(absl::StrCat(
        "OpenCL ", kind == DeviceKind::kGpu ? "GPU" : "CPU", " device ", index,
        " asked for; there are ", all->size()));
  }
  return std::move((*all)[index]);
}

}  // namespace sortd::gpu
