#include "gpu/device.h"

#include <algorithm>
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
  if (info.HasExtension("cl_nv_device_attribute_query")) {
    constexpr cl_device_info kComputeCapabilityMajorNv = 0x4000;
    cl_uint major = 0;
    if (clGetDeviceInfo(d(), kComputeCapabilityMajorNv, sizeof(major), &major,
                        nullptr) == CL_SUCCESS) {
      info.nv_compute_major = major;
    }
  }
  return info;
}

}  // namespace

bool DeviceInfo::HasExtension(const std::string& ext) const {
  return absl::StrContains(absl::StrCat(" ", extensions, " "),
                           absl::StrCat(" ", ext, " "));
}

std::string DeviceInfo::ToString() const {
  return absl::StrCat(
      name, " (", platform, ", driver ", driver, ", ", compute_units, " CUs",
      nv_compute_major != 0 ? absl::StrCat(", compute ", nv_compute_major)
                            : std::string(),
      ")");
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

std::vector<Device> SplitDevice(const Device& device, bool by_affinity,
                                unsigned units) {
  std::vector<cl_device_partition_property> kinds;
  if (device.device.getInfo(CL_DEVICE_PARTITION_PROPERTIES, &kinds) !=
      CL_SUCCESS) {
    return {device};
  }
  auto supports = [&](cl_device_partition_property p) {
    return std::find(kinds.begin(), kinds.end(), p) != kinds.end();
  };
  cl::Device whole = device.device;  // createSubDevices is not const
  std::vector<cl::Device> parts;
  if (by_affinity && supports(CL_DEVICE_PARTITION_BY_AFFINITY_DOMAIN)) {
    const cl_device_partition_property props[] = {
        CL_DEVICE_PARTITION_BY_AFFINITY_DOMAIN,
        CL_DEVICE_AFFINITY_DOMAIN_NEXT_PARTITIONABLE, 0};
    if (whole.createSubDevices(props, &parts) != CL_SUCCESS) {
      parts.clear();
    }
  }
  if (parts.empty() && units > 0 && units < device.info.compute_units &&
      supports(CL_DEVICE_PARTITION_EQUALLY)) {
    const cl_device_partition_property props[] = {
        CL_DEVICE_PARTITION_EQUALLY,
        static_cast<cl_device_partition_property>(units), 0};
    if (whole.createSubDevices(props, &parts) != CL_SUCCESS) {
      parts.clear();
    }
  }
  if (parts.size() < 2) return {device};
  std::vector<Device> out;
  for (size_t i = 0; i < parts.size(); ++i) {
    Device d{device.platform, parts[i], Describe(device.platform, parts[i])};
    d.info.name =
        absl::StrCat(d.info.name, " [part ", i + 1, "/", parts.size(), "]");
    out.push_back(std::move(d));
  }
  return out;
}

absl::StatusOr<Device> FindDevice(DeviceKind kind, size_t index) {
  absl::StatusOr<std::vector<Device>> all = FindDevices(kind);
  if (!all.ok()) return all.status();
  if (index >= all->size()) {
    return absl::NotFoundError(
        absl::StrCat("OpenCL ", kind == DeviceKind::kGpu ? "GPU" : "CPU",
                     " device ", index, " asked for; there are ", all->size()));
  }
  return std::move((*all)[index]);
}

}  // namespace sortd::gpu
