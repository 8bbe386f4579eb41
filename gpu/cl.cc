#include "gpu/cl.h"

#include <sys/prctl.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include "absl/strings/str_cat.h"

namespace sortd::gpu {

const char* ClErrorName(cl_int err) {
  switch (err) {
#define SORTD_CL_ERR(e) \
  case e:               \
    return #e;
    SORTD_CL_ERR(CL_SUCCESS)
    SORTD_CL_ERR(CL_DEVICE_NOT_FOUND)
    SORTD_CL_ERR(CL_DEVICE_NOT_AVAILABLE)
    SORTD_CL_ERR(CL_COMPILER_NOT_AVAILABLE)
    SORTD_CL_ERR(CL_MEM_OBJECT_ALLOCATION_FAILURE)
    SORTD_CL_ERR(CL_OUT_OF_RESOURCES)
    SORTD_CL_ERR(CL_OUT_OF_HOST_MEMORY)
    SORTD_CL_ERR(CL_PROFILING_INFO_NOT_AVAILABLE)
    SORTD_CL_ERR(CL_BUILD_PROGRAM_FAILURE)
    SORTD_CL_ERR(CL_INVALID_VALUE)
    SORTD_CL_ERR(CL_INVALID_DEVICE)
    SORTD_CL_ERR(CL_INVALID_BINARY)
    SORTD_CL_ERR(CL_INVALID_BUILD_OPTIONS)
    SORTD_CL_ERR(CL_INVALID_PROGRAM)
    SORTD_CL_ERR(CL_INVALID_PROGRAM_EXECUTABLE)
    SORTD_CL_ERR(CL_INVALID_KERNEL_NAME)
    SORTD_CL_ERR(CL_INVALID_KERNEL)
    SORTD_CL_ERR(CL_INVALID_ARG_INDEX)
    SORTD_CL_ERR(CL_INVALID_ARG_VALUE)
    SORTD_CL_ERR(CL_INVALID_ARG_SIZE)
    SORTD_CL_ERR(CL_INVALID_KERNEL_ARGS)
    SORTD_CL_ERR(CL_INVALID_WORK_DIMENSION)
    SORTD_CL_ERR(CL_INVALID_WORK_GROUP_SIZE)
    SORTD_CL_ERR(CL_INVALID_WORK_ITEM_SIZE)
    SORTD_CL_ERR(CL_INVALID_GLOBAL_OFFSET)
    SORTD_CL_ERR(CL_INVALID_EVENT_WAIT_LIST)
    SORTD_CL_ERR(CL_INVALID_EVENT)
    SORTD_CL_ERR(CL_INVALID_OPERATION)
    SORTD_CL_ERR(CL_INVALID_BUFFER_SIZE)
    SORTD_CL_ERR(CL_INVALID_GLOBAL_WORK_SIZE)
    SORTD_CL_ERR(CL_INVALID_MEM_OBJECT)
    SORTD_CL_ERR(CL_INVALID_COMMAND_QUEUE)
    SORTD_CL_ERR(CL_INVALID_CONTEXT)
    SORTD_CL_ERR(CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST)
    SORTD_CL_ERR(CL_MISALIGNED_SUB_BUFFER_OFFSET)
#undef SORTD_CL_ERR
    default:
      return "CL_UNKNOWN_ERROR";
  }
}

absl::Status ClStatus(cl_int err, const std::string& what) {
  if (err == CL_SUCCESS) return absl::OkStatus();
  std::string msg =
      absl::StrCat(what, " failed: ", ClErrorName(err), " (", err, ")");
  switch (err) {
    case CL_MEM_OBJECT_ALLOCATION_FAILURE:
    case CL_OUT_OF_RESOURCES:
    case CL_OUT_OF_HOST_MEMORY:
    case CL_INVALID_BUFFER_SIZE:
      return absl::ResourceExhaustedError(msg);
    case CL_DEVICE_NOT_AVAILABLE:
    case CL_DEVICE_NOT_FOUND:
    case CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST:
      return absl::UnavailableError(msg);
    default:
      return absl::InternalError(msg);
  }
}

cl_int AwaitEvent(const cl::Event& event) {
  using std::chrono::microseconds;
  cl_command_queue queue = nullptr;
  if (clGetEventInfo(event(), CL_EVENT_COMMAND_QUEUE, sizeof queue, &queue,
                     nullptr) == CL_SUCCESS &&
      queue != nullptr) {
    (void)clFlush(queue);
  }
  // The sleeps are short: the kernel's default slack (50 us) would add
  // more than they last. Set once for each thread that waits.
  thread_local const bool fine_timer =
      prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0) == 0;
  (void)fine_timer;
  const auto start = std::chrono::steady_clock::now();
  for (;;) {
    cl_int status = CL_QUEUED;
    const cl_int err =
        clGetEventInfo(event(), CL_EVENT_COMMAND_EXECUTION_STATUS,
                       sizeof status, &status, nullptr);
    if (err != CL_SUCCESS) return err;
    if (status == CL_COMPLETE) return CL_SUCCESS;
    if (status < 0) return status;  // the command failed: its error code
    const auto waited = std::chrono::duration_cast<microseconds>(
        std::chrono::steady_clock::now() - start);
    std::this_thread::sleep_for(
        std::clamp(waited / 64, microseconds(5), microseconds(200)));
  }
}

cl_int AwaitQueue(const cl::CommandQueue& queue) {
  cl::Event marker;
  cl_int err = queue.enqueueMarkerWithWaitList(nullptr, &marker);
  if (err == CL_SUCCESS) err = AwaitEvent(marker);
  // Returns at once now; it reports an error of a command before the
  // marker that the marker's status does not carry.
  const cl_int finished = queue.finish();
  return err != CL_SUCCESS ? err : finished;
}

}  // namespace sortd::gpu
