// OpenCL for sortd: the Khronos C++ bindings configured once for every file
// of the engine, and the conversion of OpenCL error codes to absl::Status.
// Every OpenCL call's result goes through ClStatus (or SORTD_CL_RETURN_IF),
// which names the call and the error.
//
//   cl_int err = queue.enqueueNDRangeKernel(...);
//   SORTD_CL_RETURN_IF(err, "enqueue radix_scatter");
#ifndef SORTD_GPU_CL_H_
#define SORTD_GPU_CL_H_

#define CL_HPP_TARGET_OPENCL_VERSION 300
#define CL_HPP_MINIMUM_OPENCL_VERSION 200
#include <CL/opencl.hpp>
#include <string>

#include "absl/status/status.h"

namespace sortd::gpu {

// "CL_OUT_OF_RESOURCES" for -5, and so on.
const char* ClErrorName(cl_int err);

// OK for CL_SUCCESS. Allocation failures become RESOURCE_EXHAUSTED, a lost
// device UNAVAILABLE, anything else INTERNAL; the message names `what`.
absl::Status ClStatus(cl_int err, const std::string& what);

// Waits until `event` has run (CL_SUCCESS) or failed (its error), polling
// its status between short sleeps. clWaitForEvents and clFinish busy-wait
// on NVIDIA's OpenCL: each thread waiting on a queue holds a core for as
// long as the GPU works, and on a loaded node those are the cores the
// transport needs. The sleeps grow with the wait (a 64th of it, from 5 us
// to 0.2 ms, with the calling thread's timer slack set to 1 us), so that a
// wait ends at most about 2% late. Flushes the event's queue first, so
// that what the event waits for is submitted.
cl_int AwaitEvent(const cl::Event& event);

// Every command enqueued on `queue` so far has run, waited for as
// AwaitEvent waits; the first error of the queue otherwise.
cl_int AwaitQueue(const cl::CommandQueue& queue);

}  // namespace sortd::gpu

#define SORTD_CL_RETURN_IF(err, what)                              \
  do {                                                             \
    if (cl_int sortd_cl_err_ = (err); sortd_cl_err_ != CL_SUCCESS) \
      return ::sortd::gpu::ClStatus(sortd_cl_err_, (what));        \
  } while (0)

#define SORTD_RETURN_IF_ERROR(expr)                               \
  do {                                                            \
    if (absl::Status sortd_status_ = (expr); !sortd_status_.ok()) \
      return sortd_status_;                                       \
  } while (0)

#endif  // SORTD_GPU_CL_H_
