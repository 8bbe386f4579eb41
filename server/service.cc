#include "server/service.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "core/compact_keys.h"
#include "server/held_bytes.h"
#include "server/log.h"
#include "server/out_of_memory.h"
#include "server/service_internal.h"
#include "server/status.h"
#include "server/wire.h"
#include "tbb/parallel_for.h"

namespace sortd {

namespace {

v1::ExecutionPath WirePath(ExecutionPath path) {
  switch (path) {
    case ExecutionPath::kCpu:
      return v1::EXECUTION_PATH_CPU;
    case ExecutionPath::kGpu:
      return v1::EXECUTION_PATH_GPU;
    case ExecutionPath::kOpenClCpu:
      return v1::EXECUTION_PATH_OPENCL_CPU;
  }
  return v1::EXECUTION_PATH_UNSPECIFIED;
}

}  // namespace

v1::ServedBy ServedBy(const TaskResult& result) {
  v1::ServedBy by;
  by.set_path(WirePath(result.path));
  by.set_device(result.device);
  by.set_queue_wait_ns(absl::ToInt64Nanoseconds(result.queue_wait));
  by.set_compute_ns(absl::ToInt64Nanoseconds(result.compute));
  by.set_batch_requests(result.batch_requests);
  by.set_route(RouteName(result.route));
  by.set_device_runs(result.device_runs);
  return by;
}

absl::Status Starting() {
  return absl::UnavailableError(
      "sortd is starting: its engine is not ready yet; retry shortly");
}

namespace {

class CountedUnaryReactor final : public grpc::ServerUnaryReactor {
 public:
  CountedUnaryReactor(OpenCalls* calls, Admission* budget)
      : calls_(calls), hold(budget) {
    calls_->Opened();
  }
  void OnDone() override {
    hold.Reset();  // the answer is sent: its bytes are gone
    calls_->Closed();
    delete this;
  }

 private:
  OpenCalls* calls_;

 public:
  Admission::Hold hold;
};

}  // namespace

SortServiceImpl::SortServiceImpl(Metrics* metrics, const Options& options)
    : metrics_(metrics),
      options_(options),
      held_({.max_units = options.max_held_bytes,
             .max_requests = SIZE_MAX,
             .max_call_units = options.max_call_bytes,
             .strict = true,
             .max_client_units = options.max_client_bytes,
             .unit = "bytes",
             .units_flag = "--max_held_bytes",
             .call_flag = "--max_call_bytes",
             .client_flag = "--max_client_held_bytes",
             .on_change =
                 [metrics](size_t bytes) {
                   if (metrics != nullptr) {
                     metrics->SetHeldBytes(static_cast<double>(bytes));
                   }
                 }}),
      parts_({.timeout = options.part_timeout,
              .max_waiting_bytes = options.limits.max_stream_bytes,
              .on_change =
                  [metrics](size_t parts, size_t bytes) {
                    if (metrics != nullptr) {
                      metrics->SetWaitingParts(static_cast<double>(parts),
                                               static_cast<double>(bytes));
                    }
                  }}),
      stream_watch_(NewStreamIdleWatch(options.stream_idle_timeout)),
      instance_(NewInstanceId()) {
  if (metrics_ != nullptr) {
    metrics_->SetHeldBytesLimit(static_cast<double>(options.max_held_bytes));
  }
  if (options.large_request_bytes > 0) {
    handlers_ = std::make_unique<HandlerPool>(
        options.large_request_threads > 0 ? options.large_request_threads
                                          : HandlerPool::DefaultThreads());
  }
}

grpc::ServerUnaryReactor* SortServiceImpl::Dispatch(
    const char* method, UnaryHandler handler,
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  // Admitted or refused here, on arrival, whatever thread handles it: a
  // drain refuses only calls that came after it began, and the bytes of a
  // call waiting for a handler thread are already charged.
  absl::Status admitted;
  std::shared_ptr<UnaryCall> call =
      BeginCall(method, context, request, response, &admitted);
  if (!admitted.ok()) return Refuse(*call, admitted);
  if (handlers_ == nullptr ||
      request->Length() < options_.large_request_bytes) {
    return (this->*handler)(std::move(call), request);
  }
  // gRPC keeps the request, response and context until the reactor is
  // finished; a reactor may be finished before gRPC has bound it.
  grpc::ServerUnaryReactor* reactor = call->reactor;
  handlers_->Post([this, handler, call = std::move(call), request]() mutable {
    if (call->context->IsCancelled()) {
      Refuse(*call, absl::CancelledError(
                        "the call was cancelled while it waited for a "
                        "handler thread"));
      return;
    }
    (this->*handler)(std::move(call), request);
  });
  return reactor;
}

grpc::ServerUnaryReactor* SortServiceImpl::NewUnaryReactor(
    Admission::Hold** hold) {
  auto* reactor = new CountedUnaryReactor(&open_calls_, &held_);
  if (hold != nullptr) *hold = &reactor->hold;
  return reactor;
}

absl::Status SortServiceImpl::Draining() {
  return absl::UnavailableError(
      "sortd is shutting down and takes no new requests; retry on another "
      "replica");
}

void SortServiceImpl::StartDrain() {
  draining_.store(true);
  parts_.Close(absl::UnavailableError(
      "sortd is shutting down: it takes no more parts of arrays; send the "
      "array again (to another replica)"));
}

std::string SortServiceImpl::NewInstanceId() {
  std::random_device rd;
  const uint64_t id = (uint64_t{rd()} << 32) ^ rd();
  return absl::StrCat(absl::Hex(id, absl::kZeroPad16));
}

void SortServiceImpl::RecordEnd(const UnaryCall& call,
                                const absl::Status& status,
                                const TaskResult* result) {
  const char* method = call.method;
  const absl::Time received = call.received;
  const bool ok = status.ok() && result != nullptr;
  const std::string path = ok ? PathName(result->path) : "none";
  const double seconds = absl::ToDoubleSeconds(absl::Now() - received);
  const std::string code = absl::StatusCodeToString(status.code());
  metrics_->RecordRequest(method, code, path, call.units, seconds);
  if (ok) {
    metrics_->ObserveQueueWait(method,
                               absl::ToDoubleSeconds(result->queue_wait));
  }
  if (options_.log_requests) {
    LogLine("end %s %s request=%llu path=%s route=%s batch=%d %.3f ms%s%s\n",
            method, code.c_str(), static_cast<unsigned long long>(call.id),
            path.c_str(), result != nullptr ? RouteName(result->route) : "none",
            result != nullptr ? result->batch_requests : 0, seconds * 1e3,
            status.ok() ? "" : ": ", std::string(status.message()).c_str());
  }
}

grpc::ServerUnaryReactor* SortServiceImpl::Refuse(const UnaryCall& call,
                                                  const absl::Status& status) {
  RecordEnd(call, status, nullptr);
  call.reactor->Finish(FinishStatus(*call.context, status));
  return call.reactor;
}

grpc::ServerUnaryReactor* SortServiceImpl::Submit(
    std::shared_ptr<UnaryCall> call, std::shared_ptr<Task> task,
    std::function<grpc::ByteBuffer(const TaskResult&)> finish) {
  grpc::ServerUnaryReactor* reactor = call->reactor;
  grpc::CallbackServerContext* context = call->context;
  call->units = task->units;
  task->client = call->peer.client;
  task->deadline = absl::FromChrono(context->deadline());
  task->cancelled = [context] { return context->IsCancelled(); };
  task->done = [this, call,
                finish = std::move(finish)](const TaskResult& result) {
    absl::Status status = result.status;
    grpc::ByteBuffer answer;
    if (status.ok()) {
      status = CatchOutOfMemory("this request's answer", [&] {
        answer = finish(result);
        return absl::OkStatus();
      });
    }
    if (status.ok()) {
      call->response->Swap(&answer);
      RecordEnd(*call, status, &result);
    } else {
      RecordEnd(*call, status, nullptr);
    }
    call->reactor->Finish(FinishStatus(*call->context, status));
  };
  Scheduler* scheduler = scheduler_.load();
  if (scheduler == nullptr) {
    TaskResult result;
    result.status = Starting();
    task->done(result);
    return reactor;
  }
  scheduler->Submit(std::move(task));
  return reactor;
}

std::shared_ptr<SortServiceImpl::UnaryCall> SortServiceImpl::BeginCall(
    const char* method, grpc::CallbackServerContext* context,
    const grpc::ByteBuffer* request, grpc::ByteBuffer* response,
    absl::Status* admitted) {
  auto call = std::make_shared<UnaryCall>();
  call->method = method;
  call->context = context;
  call->reactor = NewUnaryReactor(&call->hold);
  call->response = response;
  call->received = absl::Now();
  call->id = NextRequestId();
  if (context->client_metadata().count(kWantInstanceHeader) > 0) {
    context->AddInitialMetadata(kInstanceHeader, instance_);
  }
  metrics_->AddRequestBytes(method, static_cast<double>(request->Length()));
  // A call is refused if the drain began before this point, served if not;
  // its start line comes after, so that a logged start is always served.
  const bool refused = draining_.load();
  if (options_.log_requests) {
    LogLine("start %s request=%llu from %s\n", method,
            static_cast<unsigned long long>(call->id), context->peer().c_str());
  }
  if (refused) {
    *admitted = Draining();
    return call;
  }
  call->peer = PeerOf(*context);
  if (absl::Status s = Authorize(call->peer, MethodGroup::kSort); !s.ok()) {
    *admitted = s;
    return call;
  }
  call->hold->SetClient(call->peer.client);
  // gRPC's copy of the request and sortd's (joined from its slices), both
  // admitted before sortd copies a byte; refused, gRPC's copy goes at once.
  if (absl::Status s = call->hold->Grow(2 * request->Length()); !s.ok()) {
    const_cast<grpc::ByteBuffer*>(request)->Clear();
    *admitted = s;
  }
  return call;
}

absl::Status SortServiceImpl::ReadRequest(UnaryCall& call,
                                          const grpc::ByteBuffer* request) {
  const size_t message_bytes = request->Length();
  absl::StatusOr<wire::Received> bytes = CatchOutOfMemory("this request", [&] {
    return wire::Received::From(*request, options_.buffers);
  });
  if (!bytes.ok()) return bytes.status();
  call.bytes = *std::move(bytes);
  // gRPC's own copy of the request is not read again: free it now rather
  // than when the call ends, so a request in flight holds its bytes once.
  const_cast<grpc::ByteBuffer*>(request)->Clear();
  call.hold->Shrink(message_bytes);
  return absl::OkStatus();
}

absl::Status SortServiceImpl::ReadSortRequest(UnaryCall& call,
                                              const grpc::ByteBuffer* request) {
  if (absl::Status read = ReadRequest(call, request); !read.ok()) return read;
  absl::StatusOr<wire::SortRequest> parsed =
      wire::ParseSortRequest(call.bytes.data());
  if (!parsed.ok()) return parsed.status();
  call.sort = *parsed;
  return absl::OkStatus();
}

size_t SortServiceImpl::SortWorkBytes(const UnaryCall& call, size_t keys) {
  if (!call.sort.key_type.has_value()) return 0;  // refused once validated
  return sortd::SortWorkBytes(*call.sort.key_type, call.sort.value_type,
                              call.sort.return_permutation,
                              call.sort.key_coding == v1::KEY_CODING_COMPACT,
                              keys, call.region != nullptr);
}

absl::Status SortServiceImpl::PlaceSort(UnaryCall& call, SortJob& job) {
  if (call.region != nullptr &&
      (!call.sort.keys.empty() || !call.sort.values.empty())) {
    return absl::InvalidArgumentError(
        "with `shared`, the key and value fields name the types and must be "
        "empty: the arrays are in the region");
  }
  absl::StatusOr<SortJob> parsed =
      ParseSort(call.sort, options_.limits, call.bytes.data().size());
  if (!parsed.ok()) return parsed.status();
  job = *parsed;
  if (call.region != nullptr) {
    return PlaceInRegion(call.shared, call.sort.return_permutation,
                         *call.region, options_.limits, job);
  }
  call.sort_out =
      AllocateSortOutputs(job, call.sort.return_permutation, options_.buffers);
  return absl::OkStatus();
}

grpc::ByteBuffer SortServiceImpl::EncodeSort(UnaryCall& call,
                                             const SortJob& job,
                                             v1::ServedBy by) {
  if (call.region != nullptr) {
    // The arrays are in the region: the answer names the types only.
    return wire::EncodeSortResponse(
        {.key_type = job.key_type, .value_type = job.value_type}, &by);
  }
  if (call.sort.key_coding != v1::KEY_CODING_COMPACT) {
    return wire::EncodeSortResponse(call.sort_out.Slices(job, 0, job.count),
                                    &by);
  }
  wire::SortArrays arrays =
      call.sort_out.CompactSlices(job, 0, job.count, options_.buffers);
  RecordKeyBytesSaved(call.method, job, arrays, by);
  return wire::EncodeSortResponse(arrays, &by);
}

void SortServiceImpl::RecordKeyBytesSaved(const char* method,
                                          const SortJob& job,
                                          const wire::SortArrays& arrays,
                                          v1::ServedBy& by) {
  if (!arrays.compact.has_value()) return;
  const int64_t saved =
      static_cast<int64_t>(arrays.compact->count * KeySize(job.key_type)) -
      static_cast<int64_t>(arrays.compact->MessageBytes());
  by.set_key_bytes_saved(by.key_bytes_saved() + saved);
  metrics_->AddKeyBytesSaved(method, static_cast<double>(saved));
}

grpc::ServerUnaryReactor* SortServiceImpl::Sort(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  return Dispatch("Sort", &SortServiceImpl::SortCall, context, request,
                  response);
}

grpc::ServerUnaryReactor* SortServiceImpl::SortCall(
    std::shared_ptr<UnaryCall> call, const grpc::ByteBuffer* request) {
  if (absl::Status read = ReadSortRequest(*call, request); !read.ok()) {
    return Refuse(*call, read);
  }
  if (absl::Status s = FindRegion(*this, options_.regions, *call); !s.ok()) {
    return Refuse(*call, s);
  }
  if (call->sort.part.has_value()) return SortPart(std::move(call));
  auto task = std::make_shared<Task>();
  task->op = Op::kSort;
  task->units = call->region != nullptr
                    ? SharedRequestUnits(call->sort, call->shared.count(),
                                         call->region->size())
                    : SortRequestUnits(call->sort);
  if (absl::Status s = call->hold->Grow(SortWorkBytes(*call, task->units));
      !s.ok()) {
    return Refuse(*call, s);
  }
  if (call->region != nullptr) {
    // What was just charged is all scratch (the answer's arrays are in the
    // region), charged whatever the route: a sort cut across the devices
    // holds its own scratch instead of the CPU path's.
    task->host_scratch_bytes = SortWorkBytes(*call, task->units);
  }
  UnaryCall* c = call.get();
  Task* t = task.get();
  task->prepare = [this, c, t] { return PlaceSort(*c, t->sort); };
  return Submit(
      std::move(call), std::move(task), [this, c, t](const TaskResult& result) {
        const SortJob& job = t->sort;
        // Counted once encoded: encoding may run out of memory (Submit).
        grpc::ByteBuffer answer = EncodeSort(*c, job, ServedBy(result));
        metrics_->AddKeysSorted(PathName(result.path),
                                KeyTypeName(job.key_type),
                                static_cast<double>(job.count));
        return answer;
      });
}
grpc::ServerUnaryReactor* SortServiceImpl::Transpose(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  return Dispatch("Transpose", &SortServiceImpl::TransposeCall, context,
                  request, response);
}

grpc::ServerUnaryReactor* SortServiceImpl::TransposeCall(
    std::shared_ptr<UnaryCall> call, const grpc::ByteBuffer* request) {
  if (absl::Status read = ReadRequest(*call, request); !read.ok()) {
    return Refuse(*call, read);
  }
  absl::StatusOr<wire::TransposeRequest> parsed =
      wire::ParseTransposeRequest(call->bytes.data());
  if (!parsed.ok()) return Refuse(*call, parsed.status());
  call->transpose = *parsed;

  // The answer's matrices, as many bytes as the request's.
  if (absl::Status s = call->hold->Grow(call->transpose.matrices.size());
      !s.ok()) {
    return Refuse(*call, s);
  }
  auto task = std::make_shared<Task>();
  task->op = Op::kTranspose;
  task->units = TransposeRequestUnits(call->transpose);
  UnaryCall* c = call.get();
  Task* t = task.get();
  task->prepare = [this, c, t] {
    absl::StatusOr<TransposeJob> job =
        ParseTranspose(c->transpose, options_.limits, c->bytes.data().size());
    if (!job.ok()) return job.status();
    t->transpose = *job;
    c->matrices =
        wire::OutputArray(c->transpose.matrices.size(), options_.buffers);
    t->transpose.out = c->matrices.data();
    return absl::OkStatus();
  };
  return Submit(
      std::move(call), std::move(task), [this, c, t](const TaskResult& result) {
        metrics_->AddMatricesTransposed(
            PathName(result.path), static_cast<double>(t->transpose.count));
        return wire::EncodeTransposeResponse(c->matrices.Share(),
                                             ServedBy(result));
      });
}

}  // namespace sortd
