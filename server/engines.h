// sortd's --device flag turned into OpenCL engines, each with a factory that
// re-creates it after a failure. `auto` takes every GPU, else the OpenCL CPU
// device, else none (the CPU path serves alone), and logs why it passed
// over each; an explicit device that cannot be brought up is an error,
// never a silent substitute.
//
//   EngineSetup setup{.base = options, .cache_dir = dir, .lanes = 2};
//   absl::StatusOr<std::vector<DeviceSlot>> slots =
//       CreateEngines("auto", setup);
#ifndef SORTD_SERVER_ENGINES_H_
#define SORTD_SERVER_ENGINES_H_

#include <cstddef>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/sorter.h"
#include "gpu/opencl_engine.h"
#include "server/host_buffers.h"
#include "server/scheduler.h"
#include "server/shared_memory.h"

namespace sortd {

struct EngineSetup {
  // What every device's engine shares (fault injection, kernel
  // diagnostics); the fields below override its own.
  gpu::OpenClEngine::Options base;
  std::string cache_dir;
  // Command queues per engine (concurrent runs); GPUs get gpu_lanes where
  // more (--full_pipeline_depth). An OpenCL CPU device's runs share the
  // host's cores, so more overlap nothing there, and PoCL 3.1 aborted
  // (pocl_release_dlhandle_cache) with three runs at once under load.
  int lanes = 2;
  int gpu_lanes = 0;
  size_t memory_budget_bytes = 0;
  size_t pool_bytes = 0;
  // Split each GPU into sub-devices (--sub_devices), of this many compute
  // units each where the device allows (--sub_device_units; 0: its own
  // parts).
  bool sub_devices = false;
  unsigned sub_device_units = 0;
};

// The engines of `flag` (--device: auto, gpu, gpu:N, opencl-cpu,
// opencl-cpu:N, cpu, comma-separated); empty for cpu. INVALID_ARGUMENT for
// a flag that does not parse; an explicit device's own error when it cannot
// be brought up.
absl::StatusOr<std::vector<DeviceSlot>> CreateEngines(const std::string& flag,
                                                      const EngineSetup& setup);

// Large request and answer arrays in page-locked memory of the first of
// `engines`, whose transfers then skip their staging copy, when `pinned`
// (--host_pool_pinned) and its engine has such memory. Where the first
// device's driver page-locks host memory for all of its devices
// (SharesPageLockedMemory), every other device of that driver skips the
// copy too (Sorter::ShareHostMemory), and so does each device re-created
// after a failure (its factory is wrapped). `any_vendor`: every device's,
// for tests on PoCL.
void UsePinnedMemory(std::vector<DeviceSlot>& engines, bool pinned,
                     HostBufferPool& host_buffers, bool any_vendor = false);

// Whether host memory `engine`'s driver page-locks is page-locked for
// every device of that driver: NVIDIA's, under unified addressing (every
// 64-bit Linux host), treats it so in every context.
bool SharesPageLockedMemory(const Sorter& engine);

// Whether adopting memory (HostMemory::Adopt) page-locks it on `engine`'s
// device: NVIDIA's driver does for CL_MEM_USE_HOST_PTR buffers; others
// (PoCL, the portable path) may copy, and then gain nothing.
bool AdoptionPageLocks(const Sorter& engine);

// Shared-memory regions adopted by the host memory of every device whose
// driver page-locks them (AdoptionPageLocks), so that their arrays move
// between the region and the device without staging, when `pinned`
// (--shm_pinned). Each such device's factory is wrapped so that a device
// re-created after a failure adopts the regions again with its new host
// memory (RegionRegistry::Repin); `regions` must outlive the factories.
// `any_vendor`: every device's, for tests on PoCL.
void PinRegions(std::vector<DeviceSlot>& engines, bool pinned,
                RegionRegistry& regions, bool any_vendor = false);

// Logs the engines requests run on: the CPU path's, then each device's.
void LogEngines(const Sorter& cpu, const std::vector<DeviceSlot>& engines);

}  // namespace sortd

#endif  // SORTD_SERVER_ENGINES_H_
