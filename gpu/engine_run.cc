#include "gpu/engine_run.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"

namespace sortd::gpu {
namespace {

// How long a finished, profiled command ran; nullopt if the driver cannot
// say.
std::optional<double> EventSeconds(cl::Event& event) {
  cl_ulong start = 0, end = 0;
  if (event.getProfilingInfo(CL_PROFILING_COMMAND_START, &start) !=
          CL_SUCCESS ||
      event.getProfilingInfo(CL_PROFILING_COMMAND_END, &end) != CL_SUCCESS ||
      end < start) {
    return std::nullopt;  // a driver that cannot say, or says nonsense
  }
  return (end - start) * 1e-9;
}

bool IsTransfer(const std::string& stage) {
  return stage == "upload" || stage == "download";
}

}  // namespace

Run::~Run() {
  // A run that ended early (an error, or host memory running out, thrown
  // through it) may have commands in flight that read its buffers and
  // WriteCopy's sources: they finish before either goes.
  if (!finished_) {
    (void)queue_.finish();
    if (side_used_) (void)lane_.side_queue.finish();
  }
  // Last acquired, first released (see the class comment).
  while (!buffers_.empty()) buffers_.pop_back();
}

absl::StatusOr<cl::Buffer> Run::Allocate(size_t bytes, const char* what) {
  if (bytes > core_.info.max_alloc_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        what, " needs ", bytes, " bytes; ", core_.info.name,
        " allocates at most ", core_.info.max_alloc_bytes, " at once"));
  }
  const size_t capacity = BufferPool::SizeClass(bytes);
  if (bytes_ + capacity > core_.run_budget) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "allocating ", what, " (", capacity, " bytes) would take this run to ",
        bytes_ + capacity, " device bytes; each of the ", core_.lanes,
        " lanes of ", core_.info.name, " may hold ", core_.run_budget,
        " (--device_memory_bytes)"));
  }
  bytes_ += capacity;
  SORTD_RETURN_IF_ERROR(core_.faults.OnAllocate(what));
  absl::StatusOr<PooledBuffer> b = core_.pool->Acquire(bytes, what);
  if (!b.ok()) return b.status();
  buffers_.push_back(std::move(*b));
  return buffers_.back().buffer();
}

absl::Status Run::LaunchKernel(cl::Kernel& kernel, LaunchGrid grid,
                               const char* stage) {
  const auto [groups, group_size] = grid;
  if (groups == 0) return absl::OkStatus();
  SORTD_RETURN_IF_ERROR(core_.faults.OnEnqueue(stage, /*kernel=*/true));
  cl::Event event;
  cl_int err = queue_.enqueueNDRangeKernel(
      kernel, cl::NullRange, cl::NDRange(groups * group_size),
      cl::NDRange(group_size), nullptr, EventFor(event));
  SORTD_CL_RETURN_IF(err, absl::StrCat("enqueue ", stage, " kernel"));
  Record(stage, event);
  return absl::OkStatus();
}

absl::Status Run::Write(cl::Buffer& buffer, size_t bytes, const void* src,
                        size_t offset) {
  if (bytes == 0) return absl::OkStatus();
  SORTD_RETURN_IF_ERROR(core_.faults.OnEnqueue("upload"));
  if (lane_.staging && !core_.pinned->Holds(src, bytes)) {
    core_.staged_bytes += bytes;
    return lane_.staging->Upload(buffer, offset, src, bytes, &events_, &queue_);
  }
  core_.direct_bytes += bytes;
  cl::Event event;
  SORTD_CL_RETURN_IF(queue_.enqueueWriteBuffer(buffer, CL_FALSE, offset, bytes,
                                               src, nullptr, EventFor(event)),
                     "clEnqueueWriteBuffer");
  Record("upload", event);
  return absl::OkStatus();
}

absl::Status Run::Read(cl::Buffer& buffer, size_t bytes, void* dst,
                       size_t offset) {
  if (bytes == 0) return absl::OkStatus();
  SORTD_RETURN_IF_ERROR(core_.faults.OnEnqueue("download"));
  if (lane_.staging && !core_.pinned->Holds(dst, bytes)) {
    core_.staged_bytes += bytes;
    return lane_.staging->Download(buffer, offset, dst, bytes, &events_,
                                   &queue_);
  }
  core_.direct_bytes += bytes;
  cl::Event event;
  SORTD_CL_RETURN_IF(queue_.enqueueReadBuffer(buffer, CL_FALSE, offset, bytes,
                                              dst, nullptr, EventFor(event)),
                     "clEnqueueReadBuffer");
  Record("download", event);
  return absl::OkStatus();
}

absl::Status Run::WriteCopy(cl::Buffer& buffer, size_t bytes, const void* src,
                            const char* what) {
  SORTD_RETURN_IF_ERROR(core_.faults.OnEnqueue("upload"));
  if (bytes == 0) return absl::OkStatus();
  // The run owns the copy before the transfer may read it, so that nothing
  // after the enqueue can free it while the write is in flight.
  std::byte* copy =
      copies_.emplace_back(std::make_unique_for_overwrite<std::byte[]>(bytes))
          .get();
  std::memcpy(copy, src, bytes);
  cl::Event event;
  SORTD_CL_RETURN_IF(queue_.enqueueWriteBuffer(buffer, CL_FALSE, 0, bytes, copy,
                                               nullptr, EventFor(event)),
                     absl::StrCat("clEnqueueWriteBuffer(", what, ")"));
  Record("upload", event);
  return absl::OkStatus();
}

absl::Status Run::Flush() {
  SORTD_CL_RETURN_IF(queue_.flush(), "clFlush");
  return absl::OkStatus();
}

absl::Status Run::ReadLater(cl::Buffer& buffer, size_t bytes, void* dst,
                            cl::Event* done) {
  SORTD_RETURN_IF_ERROR(core_.faults.OnEnqueue("download"));
  cl::Event written;  // the last command enqueued on the lane's queue
  SORTD_CL_RETURN_IF(queue_.enqueueMarkerWithWaitList(nullptr, &written),
                     "clEnqueueMarkerWithWaitList");
  SORTD_CL_RETURN_IF(queue_.flush(), "clFlush");
  side_used_ = true;
  const std::vector<cl::Event> after = {written};
  SORTD_CL_RETURN_IF(lane_.side_queue.enqueueReadBuffer(
                         buffer, CL_FALSE, 0, bytes, dst, &after, done),
                     "clEnqueueReadBuffer(side)");
  SORTD_CL_RETURN_IF(lane_.side_queue.flush(), "clFlush(side)");
  return absl::OkStatus();
}

absl::Status Run::Copy(cl::Buffer& src, size_t src_offset, cl::Buffer& dst,
                       size_t dst_offset, size_t bytes) {
  if (bytes == 0) return absl::OkStatus();
  SORTD_RETURN_IF_ERROR(core_.faults.OnEnqueue("copy"));
  cl::Event event;
  SORTD_CL_RETURN_IF(queue_.enqueueCopyBuffer(src, dst, src_offset, dst_offset,
                                              bytes, nullptr, EventFor(event)),
                     "clEnqueueCopyBuffer");
  Record("copy", event);
  return absl::OkStatus();
}

absl::Status Run::Zero(cl::Buffer& buffer, size_t bytes, const char* stage) {
  cl::Event event;
  SORTD_CL_RETURN_IF(queue_.enqueueFillBuffer(buffer, cl_uint{0}, 0, bytes,
                                              nullptr, EventFor(event)),
                     absl::StrCat("clEnqueueFillBuffer(", stage, ")"));
  Record(stage, event);
  return absl::OkStatus();
}

void Run::DeviceTimes(StageTimes* stages, double* kernel_span) {
  std::map<std::string, double> seconds;
  std::vector<std::string> order;
  // Device timestamps: of the kernels (and fills, copies) alone, and of
  // every command.
  cl_ulong first = ~cl_ulong{0}, last = 0;
  cl_ulong first_any = ~cl_ulong{0}, last_any = 0;
  for (auto& [stage, event] : events_) {
    const std::optional<double> t = EventSeconds(event);
    if (!t) continue;
    if (!seconds.count(stage)) order.push_back(stage);
    seconds[stage] += *t;
    cl_ulong start = 0, end = 0;
    if (event.getProfilingInfo(CL_PROFILING_COMMAND_START, &start) !=
            CL_SUCCESS ||
        event.getProfilingInfo(CL_PROFILING_COMMAND_END, &end) != CL_SUCCESS ||
        start == 0) {
      continue;
    }
    first_any = std::min(first_any, start);
    last_any = std::max(last_any, end);
    if (!IsTransfer(stage)) {
      first = std::min(first, start);
      last = std::max(last, end);
    }
  }
  for (const std::string& s : order) stages->push_back({s, seconds[s]});
  if (last_any > first_any) {
    stages->push_back({"device_span", (last_any - first_any) * 1e-9});
  }
  if (kernel_span != nullptr && last > first) {
    *kernel_span = (last - first) * 1e-9;
  }
}

absl::Status Run::Finish(StageTimes* stages, double* kernel_span) {
  const absl::Time finishing = absl::Now();
  finished_ = true;
  cl_int err = AwaitQueue(queue_);
  if (side_used_) {
    if (const cl_int side = AwaitQueue(lane_.side_queue); err == CL_SUCCESS) {
      err = side;
    }
  }
  if (core_.faults.DeviceLostAtFinish()) {
    err = CL_DEVICE_NOT_AVAILABLE;  // injected: the device is gone
  }
  if (err != CL_SUCCESS) {
    core_.healthy = false;
    core_.pool->Trim();
    return ClStatus(err, "clFinish");
  }
  // A run whose caller takes no times (it failed) leaves the next one to
  // be profiled.
  if (stages == nullptr) return absl::OkStatus();
  const absl::Time finished = absl::Now();
  if (kernel_span != nullptr) *kernel_span = 0.0;
  if (profiled_) {
    core_.last_profiled_ns[kind_].store(EngineCore::SteadyNanos(),
                                        std::memory_order_relaxed);
    DeviceTimes(stages, kernel_span);
  }
  stages->push_back(
      {"host_enqueue", absl::ToDoubleSeconds(finishing - started_)});
  stages->push_back({"host_wait", absl::ToDoubleSeconds(finished - finishing)});
  return absl::OkStatus();
}

}  // namespace sortd::gpu
