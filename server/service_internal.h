// What the parts of SortServiceImpl, spread over several files, share:
// the state of one unary call and the conversions of an answer.
#ifndef SORTD_SERVER_SERVICE_INTERNAL_H_
#define SORTD_SERVER_SERVICE_INTERNAL_H_

#include <memory>

#include "absl/status/status.h"
#include "server/service.h"
#include "server/wire.h"

namespace sortd {

// A bidirectional stream that answers `status` at once, counted in `calls`.
template <typename Request, typename Response>
class RefusedStream final : public grpc::ServerBidiReactor<Request, Response> {
 public:
  RefusedStream(OpenCalls* calls, const grpc::Status& status) : calls_(calls) {
    calls_->Opened();
    this->Finish(status);
  }
  void OnDone() override {
    calls_->Closed();
    delete this;
  }

 private:
  OpenCalls* calls_;
};

// served_by of an answer.
v1::ServedBy ServedBy(const TaskResult& result);
// The answer while the engine is not ready.
absl::Status Starting();

// Resolves SortRequest.shared: the region it names, held by the call. The
// client needs the shared_memory method group (--authz_policy) first.
template <typename Call>
absl::Status FindRegion(const SortServiceImpl& service, RegionRegistry* regions,
                        Call& call) {
  if (!call.sort.shared.has_value()) return absl::OkStatus();
  if (absl::Status s = service.Authorize(call.peer, MethodGroup::kSharedMemory);
      !s.ok()) {
    return s;
  }
  if (regions == nullptr || !regions->enabled()) {
    return absl::FailedPreconditionError(
        "shared memory is off on this server (start sortd with "
        "--shm_socket)");
  }
  call.shared = *call.sort.shared;
  call.region = regions->Find(call.shared.region());
  if (call.region == nullptr) {
    return absl::NotFoundError(
        "shared.region names no registered region (never registered, or the "
        "connection that registered it has closed)");
  }
  return absl::OkStatus();
}

// What one unary call holds while it runs: the request's bytes, what was
// parsed from them (pointing into them) and the arrays of the answer.
struct SortServiceImpl::UnaryCall {
  const char* method = "";
  uint64_t id = 0;  // the request=N of its log lines
  grpc::CallbackServerContext* context = nullptr;
  Peer peer;  // who called
  grpc::ServerUnaryReactor* reactor = nullptr;
  // The call's charge against the service's memory budget, the reactor's
  // (released when gRPC is done with the call): grown only before the
  // call is answered.
  Admission::Hold* hold = nullptr;
  grpc::ByteBuffer* response = nullptr;
  absl::Time received;
  // Keys of a sort, rows of a transpose (32 a matrix); 0 until read.
  size_t units = 0;
  wire::Received bytes;
  wire::SortRequest sort;
  SortOutputs sort_out;
  // With SortRequest.shared: the region (held while the call runs).
  std::shared_ptr<Region> region;
  v1::SharedArrays shared;
  wire::TransposeRequest transpose;
  wire::OutputArray matrices;
};

}  // namespace sortd

#endif  // SORTD_SERVER_SERVICE_INTERNAL_H_
