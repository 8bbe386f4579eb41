// Devices as their OpenCL drivers describe them, for the tests that choose
// and fit policies, or compile kernels, without the device itself.
#ifndef SORTD_TESTS_FAKE_DEVICES_H_
#define SORTD_TESTS_FAKE_DEVICES_H_

#include <cstddef>

#include "gpu/device.h"

namespace sortd::gpu {

// Sub-group ranking's extensions, as Intel's GPU driver lists them.
inline constexpr char kSubgroupExtensions[] =
    "cl_khr_fp64 cl_khr_subgroups cl_khr_subgroup_ballot "
    "cl_khr_subgroup_shuffle cl_intel_subgroups "
    "cl_intel_required_subgroup_size";

// An H100: NVIDIA, sm_90, 48 KiB of local memory per work-group.
inline DeviceInfo H100Info() {
  DeviceInfo d;
  d.name = "NVIDIA H100 80GB HBM3";
  d.vendor = "NVIDIA Corporation";
  d.is_gpu = true;
  d.compute_units = 132;
  d.local_mem_bytes = 48 * 1024;
  d.global_mem_bytes = size_t{80} << 30;
  d.max_alloc_bytes = size_t{20} << 30;
  d.max_work_group = 1024;
  d.nv_compute_major = 9;
  return d;
}

// An Intel Arc A770: 64 KiB of shared local memory per work-group, the
// sub-group extensions.
inline DeviceInfo IntelArcInfo() {
  DeviceInfo d;
  d.name = "Intel(R) Arc(TM) A770 Graphics";
  d.vendor = "Intel(R) Corporation";
  d.is_gpu = true;
  d.compute_units = 512;
  d.local_mem_bytes = 64 * 1024;
  d.global_mem_bytes = size_t{16} << 30;
  d.max_alloc_bytes = size_t{4} << 30;
  d.max_work_group = 1024;
  d.extensions = kSubgroupExtensions;
  return d;
}

}  // namespace sortd::gpu

#endif  // SORTD_TESTS_FAKE_DEVICES_H_
