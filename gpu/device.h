// Discovery of OpenCL devices and what sortd needs to know about them.
//
//   auto dev = FindDevice(DeviceKind::kGpu);   // NOT_FOUND when none
//   if (dev.ok()) LOG(dev->info.ToString());
#ifndef SORTD_GPU_DEVICE_H_
#define SORTD_GPU_DEVICE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "gpu/cl.h"

namespace sortd::gpu {

enum class DeviceKind { kGpu, kCpu };

struct DeviceInfo {
  std::string platform;
  std::string platform_version;
  std::string name;
  std::string vendor;
  std::string driver;
  std::string extensions;
  bool is_gpu = false;
  uint32_t compute_units = 0;
  uint64_t local_mem_bytes = 0;
  uint64_t global_mem_bytes = 0;
  uint64_t max_alloc_bytes = 0;
  size_t max_work_group = 0;
  // NVIDIA's compute capability major number (cl_nv_device_attribute_query;
  // 9 on Hopper), 0 where the device does not say.
  uint32_t nv_compute_major = 0;

  bool HasExtension(const std::string& ext) const;
  // "NVIDIA H100 80GB HBM3 (NVIDIA CUDA, driver 580.159.04, 132 CUs,
  // compute 9)".
  std::string ToString() const;
};

struct Device {
  cl::Platform platform;
  cl::Device device;
  DeviceInfo info;
};

// The available devices of `kind` across all platforms, in platform order
// (NOT_FOUND when there are none).
absl::StatusOr<std::vector<Device>> FindDevices(DeviceKind kind);

// The `index`-th of those devices (0: the first).
absl::StatusOr<Device> FindDevice(DeviceKind kind, size_t index = 0);

// The parts of `device` that each get a worker. With `by_affinity`, a device
// that partitions by affinity domain (Intel's multi-tile GPUs: one
// sub-device per tile) is split that way; with `units` > 0, a device that
// partitions equally is split into sub-devices of that many compute units.
// Otherwise, or when the device cannot be split so, the whole device.
// Parts are named "<name> [part i/n]".
std::vector<Device> SplitDevice(const Device& device, bool by_affinity,
                                unsigned units);

}  // namespace sortd::gpu

#endif  // SORTD_GPU_DEVICE_H_
