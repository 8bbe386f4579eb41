// Declarations shared by the files that make up EnginePolicy (policy.cc,
// policy_vendors.cc, policy_checks.cc, policy_knobs.cc) and used nowhere
// else: the vendor entries before FitToDevice fits them to a device, and
// the knob names the constraint messages quote. Not part of policy.h's
// interface.
#ifndef SORTD_GPU_POLICY_INTERNAL_H_
#define SORTD_GPU_POLICY_INTERNAL_H_

#include "gpu/device.h"
#include "gpu/policy.h"

namespace sortd::gpu::policy_internal {

// The vendor entries of EnginePolicy::For and EnginePolicy::Named, as
// tuned, not yet fitted to the device (policy_vendors.cc).
EnginePolicy CpuPolicy();
EnginePolicy NvidiaPtxPolicy(const DeviceInfo& device);
EnginePolicy IntelSubgroupPolicy(const DeviceInfo& device);

// The radix.subgroup_ops value naming `ops` ("khr-ballot", "khr",
// "intel"), as ToString prints it (policy_knobs.cc).
const char* SubgroupOpsName(SubgroupOps ops);

}  // namespace sortd::gpu::policy_internal

#endif  // SORTD_GPU_POLICY_INTERNAL_H_
