// Echo: what Sort does for a request over the network, less the sort:
// the same admission, reading, parsing, validation and response encoding.
// The request's arrays are answered from the buffer they were read into,
// as Sort answers from the buffer its device wrote, so that the two spend
// the same host copies and Echo's throughput is the transport's share of
// Sort's. Requests through shared memory copy their arrays to the
// region's outputs; compact key coding goes through Sort's encoder.
#include <cstring>
#include <memory>

#include "absl/time/clock.h"
#include "server/held_bytes.h"
#include "server/out_of_memory.h"
#include "server/request.h"
#include "server/service.h"
#include "server/service_internal.h"
#include "server/wire.h"

namespace sortd {

grpc::ServerUnaryReactor* SortServiceImpl::Echo(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  if (!options_.echo) {
    grpc::ServerUnaryReactor* reactor = NewUnaryReactor();
    reactor->Finish(grpc::Status(grpc::StatusCode::UNIMPLEMENTED,
                                 "Echo is disabled on this server (--echo)"));
    return reactor;
  }
  return Dispatch("Echo", &SortServiceImpl::EchoCall, context, request,
                  response);
}

namespace {

// 0, 1, ..., count - 1 as 4-byte indices: the permutation of an array that
// is not sorted.
void FillIdentity(std::byte* out, uint32_t count) {
  for (uint32_t i = 0; i < count; ++i) std::memcpy(out + size_t{i} * 4, &i, 4);
}

// Echo's answer where its outputs are placed apart from the request (a
// shared-memory region, compact keys): the job's arrays copied to its
// outputs as they came, with the identity permutation.
void CopyUnsorted(const SortJob& job) {
  const size_t ks = KeySize(job.key_type), vs = ValueSize(job.value_type);
  if (job.count > 0) {
    std::memcpy(job.keys_out, job.keys, job.count * ks);
    if (vs > 0) std::memcpy(job.values_out, job.values, job.count * vs);
  }
  if (job.permutation_out != nullptr) {
    FillIdentity(job.permutation_out, job.count);
  }
}

// How an Echo call received at `received` was served: on the CPU, by no
// sort, alone.
TaskResult EchoResult(absl::Time received) {
  TaskResult result;
  result.path = ExecutionPath::kCpu;
  result.device = "echo (no sort)";
  result.batch_requests = 1;
  result.compute = absl::Now() - received;
  return result;
}

}  // namespace

grpc::ServerUnaryReactor* SortServiceImpl::EchoCall(
    std::shared_ptr<UnaryCall> call, const grpc::ByteBuffer* request) {
  if (absl::Status read = ReadSortRequest(*call, request); !read.ok()) {
    return Refuse(*call, read);
  }
  if (call->sort.part.has_value()) {
    return Refuse(*call, absl::InvalidArgumentError(
                             "`part` is for Sort: Echo answers each call "
                             "with its own arrays"));
  }
  if (absl::Status s = FindRegion(*this, options_.regions, *call); !s.ok()) {
    return Refuse(*call, s);
  }
  const size_t units =
      call->region != nullptr
          ? SharedRequestUnits(call->sort, call->shared.count(),
                               call->region->size())
          : SortRequestUnits(call->sort);
  // (No key type: refused once validated, in EchoAnswer.)
  const size_t work =
      call->sort.key_type.has_value()
          ? EchoWorkBytes(*call->sort.key_type, call->sort.value_type,
                          call->sort.return_permutation,
                          call->sort.key_coding == v1::KEY_CODING_COMPACT,
                          units, call->region != nullptr)
          : 0;
  if (absl::Status s = call->hold->Grow(work); !s.ok()) {
    return Refuse(*call, s);
  }
  TaskResult result = EchoResult(call->received);
  v1::ServedBy by = ServedBy(result);
  by.set_route("echo");
  absl::StatusOr<grpc::ByteBuffer> answer =
      CatchOutOfMemory("this request's arrays",
                       [&] { return EchoAnswer(*call, std::move(by)); });
  if (!answer.ok()) return Refuse(*call, answer.status());
  call->response->Swap(&*answer);
  RecordEnd(*call, absl::OkStatus(), &result);
  call->reactor->Finish(grpc::Status::OK);
  return call->reactor;
}

absl::StatusOr<grpc::ByteBuffer> SortServiceImpl::EchoAnswer(UnaryCall& call,
                                                             v1::ServedBy by) {
  SortJob job;
  if (call.region != nullptr ||
      call.sort.key_coding == v1::KEY_CODING_COMPACT) {
    if (absl::Status s = PlaceSort(call, job); !s.ok()) return s;
    call.units = job.count;
    CopyUnsorted(job);
    return EncodeSort(call, job, std::move(by));
  }
  absl::StatusOr<SortJob> parsed =
      ParseSort(call.sort, options_.limits, call.bytes.data().size());
  if (!parsed.ok()) return parsed.status();
  call.units = parsed->count;
  // The arrays as they came, straight from the request's buffer.
  wire::SortArrays arrays{.key_type = parsed->key_type,
                          .keys = call.bytes.Sub(call.sort.keys),
                          .value_type = parsed->value_type,
                          .values = call.bytes.Sub(call.sort.values)};
  if (call.sort.return_permutation) {
    wire::OutputArray permutation(size_t{parsed->count} * 4, options_.buffers);
    FillIdentity(permutation.data(), parsed->count);
    arrays.permutation = permutation.Share();
  }
  return wire::EncodeSortResponse(arrays, &by);
}

}  // namespace sortd
