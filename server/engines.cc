#include "server/engines.h"

#include <algorithm>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/algorithm/container.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "server/log.h"

namespace sortd {
namespace {

using gpu::DeviceKind;
using gpu::OpenClEngine;

// The devices a --device flag names.
struct DeviceList {
  struct Entry {
    DeviceKind kind;
    size_t index;
  };
  std::vector<Entry> entries;
  bool auto_mode = false;
  bool cpu_only = false;
};

absl::Status AddEntry(absl::string_view item, const std::string& flag,
                      DeviceList& list) {
  std::string_view name(item.data(), item.size());
  size_t index = 0;
  bool indexed = false;
  if (size_t colon = name.find(':'); colon != std::string_view::npos) {
    if (!absl::SimpleAtoi(
            absl::string_view(name.data() + colon + 1, name.size() - colon - 1),
            &index)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--device: bad index in '", std::string(name), "'"));
    }
    name = name.substr(0, colon);
    indexed = true;
  }
  if (name == "cpu" && !indexed) {
    if (flag != "cpu") {
      return absl::InvalidArgumentError(
          "--device=cpu serves on the CPU path alone; it combines with no "
          "other device");
    }
    list.cpu_only = true;
  } else if (name == "auto" && !indexed) {
    list.auto_mode = true;
  } else if (name == "gpu") {
    if (indexed) {
      list.entries.push_back({DeviceKind::kGpu, index});
    } else {
      auto all = gpu::FindDevices(DeviceKind::kGpu);
      if (!all.ok()) return all.status();
      for (size_t d = 0; d < all->size(); ++d) {
        list.entries.push_back({DeviceKind::kGpu, d});
      }
    }
  } else if (name == "opencl-cpu") {
    list.entries.push_back({DeviceKind::kCpu, index});
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "--device: unknown entry '", std::string(item.data(), item.size()),
        "'; expected auto, gpu, gpu:N, opencl-cpu, opencl-cpu:N or cpu"));
  }
  return absl::OkStatus();
}

absl::StatusOr<DeviceList> ParseDeviceFlag(const std::string& flag) {
  DeviceList list;
  for (absl::string_view item : absl::StrSplit(flag, ',')) {
    absl::Status s = AddEntry(absl::StripAsciiWhitespace(item), flag, list);
    if (!s.ok()) return s;
  }
  if (list.auto_mode) {
    if (!list.entries.empty()) {
      return absl::InvalidArgumentError(
          "--device=auto combines with no other entry");
    }
    auto gpus = gpu::FindDevices(DeviceKind::kGpu);
    if (gpus.ok()) {
      for (size_t d = 0; d < gpus->size(); ++d) {
        list.entries.push_back({DeviceKind::kGpu, d});
      }
    } else {
      LogAt(LogLevel::kWarning, "--device=auto: %s\n",
            gpus.status().ToString().c_str());
      list.entries.push_back({DeviceKind::kCpu, 0});
    }
  }
  return list;
}

// Each device, or each of its parts (sub-devices): one engine each.
struct Part {
  DeviceKind kind;
  gpu::Device device;
};

absl::StatusOr<std::vector<Part>> FindParts(const DeviceList& list,
                                            const EngineSetup& setup) {
  std::vector<Part> parts;
  for (const DeviceList::Entry& entry : list.entries) {
    auto found = gpu::FindDevice(entry.kind, entry.index);
    if (!found.ok()) {
      if (list.auto_mode) {
        LogAt(LogLevel::kWarning, "--device=auto: %s\n",
              found.status().ToString().c_str());
        continue;
      }
      return found.status();
    }
    for (gpu::Device& d : gpu::SplitDevice(
             *found, entry.kind == DeviceKind::kGpu && setup.sub_devices,
             setup.sub_device_units)) {
      parts.push_back({entry.kind, std::move(d)});
    }
  }
  return parts;
}

// NVIDIA's driver: it page-locks memory adopted under CL_MEM_USE_HOST_PTR,
// and page-locked memory of one of its contexts counts in all of them.
bool NvidiaDriver(const Sorter& engine) {
  return absl::StrContains(engine.vendor_driver().first, "NVIDIA");
}

// Brings up one part's engine: a slot, or the reason it cannot serve.
absl::StatusOr<DeviceSlot> BringUp(const Part& part, int index,
                                   const EngineSetup& setup) {
  OpenClEngine::Options options = setup.base;
  // Faults aimed at another device's engine (--inject_faults=...,device=N).
  if (options.faults.device >= 0 && options.faults.device != index) {
    options.faults = {};
  }
  options.kind = part.kind;
  options.device = part.device;
  options.cache_dir = setup.cache_dir;
  options.lanes = part.kind == DeviceKind::kGpu
                      ? std::max(setup.lanes, setup.gpu_lanes)
                      : setup.lanes;
  options.memory_budget_bytes = setup.memory_budget_bytes;
  options.pool_bytes = setup.pool_bytes;
  EngineFactory factory =
      [options]() -> absl::StatusOr<std::unique_ptr<Sorter>> {
    auto engine = OpenClEngine::Create(options);
    if (!engine.ok()) return engine.status();
    return std::unique_ptr<Sorter>(std::move(*engine));
  };
  // Create() builds the programs and verifies a warm-up of every kernel
  // against a reference: an engine that answers wrongly is never used.
  auto engine = OpenClEngine::Create(options);
  if (!engine.ok()) return engine.status();
  for (const std::string* fallback :
       {&(*engine)->policy_fallback(), &(*engine)->transpose_fallback()}) {
    if (!fallback->empty())
      LogAt(LogLevel::kWarning, "%s\n", fallback->c_str());
  }
  LogLine("OpenCL device %s (path %s)\n", (*engine)->info().ToString().c_str(),
          PathName((*engine)->path()));
  LogLine("policy %s\n", (*engine)->policy().ToString().c_str());
  if (const std::vector<std::string> idle =
          (*engine)->policy().radix.IdleKnobs();
      !idle.empty()) {
    LogAt(LogLevel::kWarning,
          "%s: policy knobs set without effect under the policy's "
          "pass form and ranking: %s\n",
          (*engine)->info().name.c_str(), absl::StrJoin(idle, " ").c_str());
  }
  const SortJob u32{.key_type = KeyType::kU32};
  LogLine(
      "device memory: %zu bytes per lane; u32 sorts of more than %zu keys "
      "run in device-sized runs\n",
      (*engine)->run_budget_bytes(), (*engine)->max_sort_keys(u32));
  return DeviceSlot{std::unique_ptr<Sorter>(std::move(*engine)),
                    std::move(factory)};
}

}  // namespace

absl::StatusOr<std::vector<DeviceSlot>> CreateEngines(
    const std::string& flag, const EngineSetup& setup) {
  absl::StatusOr<DeviceList> list = ParseDeviceFlag(flag);
  if (!list.ok()) return list.status();
  if (list->cpu_only) return std::vector<DeviceSlot>{};
  absl::StatusOr<std::vector<Part>> parts = FindParts(*list, setup);
  if (!parts.ok()) return parts.status();
  if (const int aimed = setup.base.faults.device; aimed >= 0) {
    if (static_cast<size_t>(aimed) >= parts->size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--inject_faults: device=", aimed, ", but --device=", flag, " has ",
          parts->size(), " device(s)"));
    }
    LogAt(LogLevel::kWarning, "--inject_faults: on device %d (%s) only\n",
          aimed, (*parts)[aimed].device.info.name.c_str());
  }
  std::vector<DeviceSlot> slots;
  for (const Part& part : *parts) {
    absl::StatusOr<DeviceSlot> slot =
        BringUp(part, static_cast<int>(&part - parts->data()), setup);
    if (slot.ok()) {
      slots.push_back(*std::move(slot));
      continue;
    }
    const char* kind = part.kind == DeviceKind::kGpu ? "GPU" : "CPU";
    if (!list->auto_mode) {
      return absl::Status(
          slot.status().code(),
          absl::StrCat("--device=", flag, ": cannot bring up the OpenCL ", kind,
                       " device ", part.device.info.name, ": ",
                       slot.status().message()));
    }
    LogAt(LogLevel::kWarning,
          "--device=auto: passing over the OpenCL %s device %s: %s\n", kind,
          part.device.info.name.c_str(), slot.status().ToString().c_str());
  }
  if (slots.empty())
    LogAt(LogLevel::kWarning, "no OpenCL device: serving on the CPU path\n");
  // --device=auto on a node whose GPU is missing (or failed) still serves,
  // slowly: say so where nobody can miss it. --device=gpu refuses instead.
  if (list->auto_mode &&
      std::none_of(slots.begin(), slots.end(), [](const DeviceSlot& s) {
        return s.engine->path() == ExecutionPath::kGpu;
      })) {
    LogAt(LogLevel::kWarning,
          "--device=auto found no usable GPU: SERVING WITHOUT A GPU, "
          "on %s (work is labelled path=%s); start with --device=gpu to refuse "
          "to start without one\n",
          slots.empty() ? "the CPU path alone" : "the OpenCL CPU device",
          slots.empty() ? "cpu" : "opencl-cpu");
  }
  return slots;
}

void UsePinnedMemory(std::vector<DeviceSlot>& engines, bool pinned,
                     HostBufferPool& host_buffers, bool any_vendor) {
  if (engines.empty() || !pinned) return;
  std::shared_ptr<HostMemory> memory = engines.front().engine->host_memory();
  if (memory == nullptr) return;
  host_buffers.SetMemory(memory);
  auto shares = [any_vendor](const Sorter& engine) {
    return any_vendor || SharesPageLockedMemory(engine);
  };
  int others = 0;
  if (shares(*engines.front().engine)) {
    for (size_t i = 0; i < engines.size(); ++i) {
      DeviceSlot& slot = engines[i];
      if (!shares(*slot.engine)) continue;
      if (i > 0 && slot.engine->host_memory() != nullptr) {
        slot.engine->ShareHostMemory(memory);
        ++others;
      }
      if (!slot.factory) continue;
      // The first device re-created has memory of its own; the arrays
      // stay in the first one's, which outlives it.
      slot.factory = [inner = std::move(slot.factory), memory,
                      shares]() -> absl::StatusOr<std::unique_ptr<Sorter>> {
        absl::StatusOr<std::unique_ptr<Sorter>> engine = inner();
        if (engine.ok() && *engine != nullptr && shares(**engine)) {
          (*engine)->ShareHostMemory(memory);
        }
        return engine;
      };
    }
  }
  LogLine("host buffers: page-locked for %s%s\n",
          engines.front().engine->device_name().c_str(),
          others > 0 ? absl::StrCat(" and ", others, " more device(s)").c_str()
                     : "");
}

bool SharesPageLockedMemory(const Sorter& engine) {
  return NvidiaDriver(engine);
}

bool AdoptionPageLocks(const Sorter& engine) { return NvidiaDriver(engine); }

void PinRegions(std::vector<DeviceSlot>& engines, bool pinned,
                RegionRegistry& regions, bool any_vendor) {
  if (!pinned || !regions.enabled()) return;
  std::vector<std::shared_ptr<HostMemory>> memories;
  for (DeviceSlot& slot : engines) {
    if (!any_vendor && !AdoptionPageLocks(*slot.engine)) continue;
    std::shared_ptr<HostMemory> memory = slot.engine->host_memory();
    if (memory == nullptr) continue;
    if (absl::c_find(memories, memory) == memories.end()) {
      memories.push_back(memory);
    }
    if (!slot.factory) continue;
    // A device re-created after a failure has new host memory: the
    // regions move to it (RegionRegistry::Repin), and its old context is
    // let go once the worker has released them. Re-creations of one
    // device never overlap (DevicePool), so `adopter` needs no lock.
    auto adopter = std::make_shared<std::shared_ptr<HostMemory>>(memory);
    slot.factory = [inner = std::move(slot.factory), adopter, &regions,
                    any_vendor]() -> absl::StatusOr<std::unique_ptr<Sorter>> {
      absl::StatusOr<std::unique_ptr<Sorter>> engine = inner();
      if (!engine.ok() || *engine == nullptr) return engine;
      std::shared_ptr<HostMemory> fresh;
      if (any_vendor || AdoptionPageLocks(**engine)) {
        fresh = (*engine)->host_memory();
      }
      regions.Repin(*adopter, fresh);
      *adopter = std::move(fresh);
      return engine;
    };
  }
  if (memories.empty()) {
    LogLine(
        "shared-memory regions: pageable (--shm_pinned: no device whose "
        "driver page-locks adopted memory)\n");
    return;
  }
  LogLine(
      "shared-memory regions: adopted by the host memory of %zu "
      "device(s), up to %zu bytes at once (--shm_pinned, "
      "--shm_pinned_max_bytes)\n",
      memories.size(), regions.max_adopted_bytes());
  regions.PinWith(std::move(memories));
}

void LogEngines(const Sorter& cpu, const std::vector<DeviceSlot>& engines) {
  std::string names = cpu.device_name();
  for (const DeviceSlot& slot : engines) {
    absl::StrAppend(&names, ", ", slot.engine->device_name());
  }
  LogLine("engines: %s\n", names.c_str());
}

}  // namespace sortd
