// SortServiceImpl: the gRPC face of sortd (callback API). Each call becomes
// a scheduler task (server/scheduler.h): admitted or refused at once,
// validated, routed, batched, run, and answered exactly once, completely or
// with a status. gRPC's threads never block on a sort.
//
// Every method takes and returns raw byte buffers (server/wire.h): requests
// are parsed in place, so a malformed one gets INVALID_ARGUMENT saying what
// was wrong, and answers are sent from the arrays the engine wrote.
//
//   SortServiceImpl service(&metrics, options);
//   builder.RegisterService(&service);
//   ... start the server, bring the engines up, calibrate ...
//   service.SetScheduler(&scheduler);   // before: UNAVAILABLE
#ifndef SORTD_SERVER_SERVICE_H_
#define SORTD_SERVER_SERVICE_H_

#include <atomic>
#include <functional>
#include <memory>
#include <string_view>

#include "absl/time/time.h"
#include "core/mutex.h"
#include "grpcpp/grpcpp.h"
#include "server/admission.h"
#include "server/authz.h"
#include "server/handler_pool.h"
#include "server/metrics.h"
#include "server/parts.h"
#include "server/peer.h"
#include "server/request.h"
#include "server/scheduler.h"
#include "server/shared_memory.h"
#include "sortd/v1/sortd.grpc.pb.h"

namespace sortd {

class SortStreamReactor;
class StreamIdleWatch;

// Counts the calls that gRPC has not finished with: from a reactor's
// creation to its OnDone, which comes after the answer was handed to the
// transport.
class OpenCalls {
 public:
  void Opened() { open_.fetch_add(1, std::memory_order_relaxed); }
  void Closed() {
    if (open_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      // The last one: wake a drain waiting for none (under the mutex, so
      // that a waiter between its check and its wait is not missed).
      MutexLock lock(&mu_);
      none_.NotifyAll();
    }
  }
  int64_t open() const { return open_.load(std::memory_order_relaxed); }
  // Whether none is open by `deadline`.
  bool WaitForNone(absl::Time deadline) {
    const auto until = absl::ToChronoTime(deadline);
    MutexLock lock(&mu_);
    while (open_.load(std::memory_order_acquire) != 0) {
      if (!none_.WaitUntil(&mu_, until)) {
        return open_.load(std::memory_order_acquire) == 0;
      }
    }
    return true;
  }

 private:
  std::atomic<int64_t> open_{0};
  Mutex mu_;  // orders Closed's notification with a waiter's check
  CondVar none_;
};

// The generated service with every method taking raw byte buffers.
using RawSortService = v1::SortService::WithRawCallbackMethod_Sort<
    v1::SortService::WithRawCallbackMethod_Transpose<
        v1::SortService::WithRawCallbackMethod_SortStream<
            v1::SortService::WithRawCallbackMethod_Echo<
                v1::SortService::Service>>>>;

class SortServiceImpl final : public RawSortService {
 public:
  struct Options {
    RequestLimits limits;
    // Log the start and end of every request to stderr.
    bool log_requests = false;
    // Serve the Echo RPC (--echo).
    bool echo = true;
    // Where large request and answer arrays live (not owned; null: the
    // allocator).
    HostBufferPool* buffers = nullptr;
    // Shared-memory regions of co-located clients (not owned; null: requests
    // naming a region answer FAILED_PRECONDITION).
    RegionRegistry* regions = nullptr;
    // How long the parts of an array sent in parts (SortRequest.part) may
    // take to come together (--part_timeout).
    absl::Duration part_timeout = absl::Seconds(10);
    // The memory every call together may hold, and one call, in bytes
    // (--max_held_bytes, --max_call_bytes; server/held_bytes.h says what
    // a call is charged). A call is charged before it holds; one that
    // would pass either bound is refused RESOURCE_EXHAUSTED.
    size_t max_held_bytes = size_t{16} << 30;
    size_t max_call_bytes = size_t{8} << 30;
    // What the calls of one client (Peer::client) may hold together.
    size_t max_client_bytes = size_t{8} << 30;
    // A SortStream on which no message comes for this long, while sortd
    // waits for one, is ended DEADLINE_EXCEEDED (--stream_idle_timeout;
    // zero or infinite: never).
    absl::Duration stream_idle_timeout = absl::Seconds(30);
    // Unary requests of at least this many bytes are handled (joined,
    // parsed, Echo's arrays copied) on the service's own threads, not on
    // gRPC's polling threads (--large_request_bytes; 0: every request on
    // gRPC's threads), and this many threads do it
    // (--large_request_threads; 0: HandlerPool::DefaultThreads()).
    size_t large_request_bytes = 0;
    int large_request_threads = 0;
  };

  SortServiceImpl(Metrics* metrics, const Options& options);
  ~SortServiceImpl() override;

  // Initial metadata naming this process (random, new at each start), on
  // the answer to a unary call whose request metadata holds
  // kWantInstanceHeader: clients that send an array in parts over several
  // connections split only over connections that reach the same process.
  // (Only when asked: on every answer it cost 1K-key sorts 4% of their
  // requests/s.)
  static constexpr char kInstanceHeader[] = "sortd-instance";
  static constexpr char kWantInstanceHeader[] = "sortd-want-instance";

  // Requests run through `scheduler` from now on (not owned).
  void SetScheduler(Scheduler* scheduler) { scheduler_.store(scheduler); }

  // Calls are checked against `policy` (not owned; null: every client the
  // TLS handshake admitted may call every method). Set before serving.
  void SetAuthzPolicy(const AuthzPolicy* policy) { authz_ = policy; }
  // OK, or PERMISSION_DENIED when the policy denies `peer` the group.
  absl::Status Authorize(const Peer& peer, MethodGroup group) const {
    return authz_ == nullptr ? absl::OkStatus() : authz_->Check(group, peer);
  }

  // Begins the drain: every new call is answered UNAVAILABLE, and so is
  // every part of an array still waiting for the others: a drain does not
  // wait for clients that keep them open. Calls already running go on.
  void StartDrain();

  // Waits until gRPC has finished with every call (their answers handed
  // to the transport), or `deadline`; returns whether it has.
  bool WaitForCalls(absl::Time deadline) {
    return open_calls_.WaitForNone(deadline);
  }
  // Joins the threads that handle large requests, once gRPC has finished
  // every call (after the server's Wait): none of them runs on into the
  // scheduler while it is drained and destroyed.
  void StopHandlers() { handlers_.reset(); }
  // Calls started since the start (each numbered, streams included), and
  // calls gRPC has not finished with.
  uint64_t calls_started() const { return next_request_id_.load(); }
  int64_t open_calls() const { return open_calls_.open(); }

  grpc::ServerUnaryReactor* Sort(grpc::CallbackServerContext* context,
                                 const grpc::ByteBuffer* request,
                                 grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* Transpose(grpc::CallbackServerContext* context,
                                      const grpc::ByteBuffer* request,
                                      grpc::ByteBuffer* response) override;
  grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* SortStream(
      grpc::CallbackServerContext* context) override;
  grpc::ServerUnaryReactor* Echo(grpc::CallbackServerContext* context,
                                 const grpc::ByteBuffer* request,
                                 grpc::ByteBuffer* response) override;

 private:
  struct UnaryCall;
  struct PartGroup;
  // A unary method's work once its call is admitted: reads the request
  // (ReadRequest), then answers or submits it.
  using UnaryHandler = grpc::ServerUnaryReactor* (
      SortServiceImpl::*)(std::shared_ptr<UnaryCall>, const grpc::ByteBuffer*);
  // Begins the call (BeginCall) and runs `handler` at once, or, for a
  // large request, on handlers_: its reactor goes back to gRPC at once and
  // is finished from there.
  grpc::ServerUnaryReactor* Dispatch(const char* method, UnaryHandler handler,
                                     grpc::CallbackServerContext* context,
                                     const grpc::ByteBuffer* request,
                                     grpc::ByteBuffer* response);
  grpc::ServerUnaryReactor* SortCall(std::shared_ptr<UnaryCall> call,
                                     const grpc::ByteBuffer* request);
  grpc::ServerUnaryReactor* TransposeCall(std::shared_ptr<UnaryCall> call,
                                          const grpc::ByteBuffer* request);
  grpc::ServerUnaryReactor* EchoCall(std::shared_ptr<UnaryCall> call,
                                     const grpc::ByteBuffer* request);
  // Starts a unary call: its metrics and log line, the drain, the
  // client's authorization and the memory its request takes (`admitted`
  // says if it was refused).
  std::shared_ptr<UnaryCall> BeginCall(const char* method,
                                       grpc::CallbackServerContext* context,
                                       const grpc::ByteBuffer* request,
                                       grpc::ByteBuffer* response,
                                       absl::Status* admitted);
  // Joins an admitted call's request from gRPC's slices into call.bytes and
  // frees gRPC's copy.
  absl::Status ReadRequest(UnaryCall& call, const grpc::ByteBuffer* request);
  // ReadRequest, then the SortRequest parsed from the bytes into call.sort.
  absl::Status ReadSortRequest(UnaryCall& call,
                               const grpc::ByteBuffer* request);
  // Submits a parsed call's task and answers the call when it is done:
  // `finish` turns a successful result into the response's bytes.
  grpc::ServerUnaryReactor* Submit(
      std::shared_ptr<UnaryCall> call, std::shared_ptr<Task> task,
      std::function<grpc::ByteBuffer(const TaskResult&)> finish);
  // Answers a call that never reached the scheduler.
  grpc::ServerUnaryReactor* Refuse(const UnaryCall& call,
                                   const absl::Status& status);
  // What a parsed sort of `keys` keys holds beyond its request
  // (server/held_bytes.h).
  static size_t SortWorkBytes(const UnaryCall& call, size_t keys);
  // Points a parsed sort at its arrays: into the request's bytes and freshly
  // allocated outputs, or into a shared-memory region.
  absl::Status PlaceSort(UnaryCall& call, SortJob& job);
  // Echo's answer to an admitted, parsed call: its arrays as they came.
  absl::StatusOr<grpc::ByteBuffer> EchoAnswer(UnaryCall& call, v1::ServedBy by);
  // The answer's bytes for a placed sort.
  grpc::ByteBuffer EncodeSort(UnaryCall& call, const SortJob& job,
                              v1::ServedBy by);
  // With compact keys in `arrays`: adds the bytes they saved to `by` and
  // to the metrics.
  void RecordKeyBytesSaved(const char* method, const SortJob& job,
                           const wire::SortArrays& arrays, v1::ServedBy& by);
  // A Sort call that carries one part of an array (SortRequest.part): it
  // waits for the others, and the last to come sorts the whole.
  grpc::ServerUnaryReactor* SortPart(std::shared_ptr<UnaryCall> call);
  // Sorts a whole group of parts as one array and answers every part.
  void SortWhole(std::vector<PartAssembler::Part> parts);
  absl::Status JoinParts(PartGroup& group, SortJob& job);
  void AnswerParts(PartGroup& group, const SortJob& job,
                   const TaskResult& result);
  // Metrics and the log line of a call's end.
  void RecordEnd(const UnaryCall& call, const absl::Status& status,
                 const TaskResult* result);
  // Numbers the requests of this process, for the log lines.
  uint64_t NextRequestId() { return next_request_id_.fetch_add(1) + 1; }
  std::atomic<uint64_t> next_request_id_{0};

  friend class SortStreamReactor;
  friend class StreamIdleWatch;
  // (In sort_stream.cc, where the watch is defined.)
  static std::shared_ptr<StreamIdleWatch> NewStreamIdleWatch(
      absl::Duration timeout);
  // A unary call's reactor, counted in open_calls_; `hold`, when given,
  // is set to its charge against held_, released when gRPC is done with
  // the call (its answer sent).
  grpc::ServerUnaryReactor* NewUnaryReactor(Admission::Hold** hold = nullptr);
  static absl::Status Draining();
  OpenCalls open_calls_;
  std::atomic<bool> draining_{false};

  static std::string NewInstanceId();

  Metrics* metrics_;
  Options options_;
  const AuthzPolicy* authz_ = nullptr;
  // The bytes every call holds (Options::max_held_bytes).
  Admission held_;
  PartAssembler parts_;
  std::shared_ptr<StreamIdleWatch>
      stream_watch_;  // shared: its type is sort_stream.cc's
  const std::string instance_;
  std::atomic<Scheduler*> scheduler_{nullptr};
  // Last: destroyed first (unless StopHandlers came before), while every
  // member the handlers use is alive.
  std::unique_ptr<HandlerPool> handlers_;
};

}  // namespace sortd

#endif  // SORTD_SERVER_SERVICE_H_
