// SortServiceImpl: the gRPC face of sortd (callback API). Each call becomes
// a scheduler task (server/scheduler.h): admitted or refused at once,
// validated, routed, batched, run, and answered exactly once, completely or
// with a status. gRPC's threads never block on a sort.
//
//   SortServiceImpl service(&metrics, options);
//   builder.RegisterService(&service);
//   ... start the server, bring the engines up, calibrate ...
//   service.SetScheduler(&scheduler);   // before: UNAVAILABLE
#ifndef SORTD_SERVER_SERVICE_H_
#define SORTD_SERVER_SERVICE_H_

#include <atomic>
#include <string_view>

#include "grpcpp/grpcpp.h"
#include "server/metrics.h"
#include "server/request.h"
#include "server/scheduler.h"
#include "sortd/v1/sortd.grpc.pb.h"

namespace sortd {

class SortServiceImpl final : public v1::SortService::CallbackService {
 public:
  struct Options {
    RequestLimits limits;
    // Log the start and end of every request to stderr.
    bool log_requests = false;
    // Serve the Echo RPC (--echo).
    bool echo = true;
  };

  SortServiceImpl(Metrics* metrics, const Options& options)
      : metrics_(metrics), options_(options) {}

  // Requests run through `scheduler` from now on (not owned).
  void SetScheduler(Scheduler* scheduler) { scheduler_.store(scheduler); }

  grpc::ServerUnaryReactor* Sort(grpc::CallbackServerContext* context,
                                 const v1::SortRequest* request,
                                 v1::SortResponse* response) override;
  grpc::ServerUnaryReactor* Transpose(grpc::CallbackServerContext* context,
                                      const v1::TransposeRequest* request,
                                      v1::TransposeResponse* response) override;
  grpc::ServerBidiReactor<v1::SortRequest, v1::SortResponse>* SortStream(
      grpc::CallbackServerContext* context) override;
  grpc::ServerUnaryReactor* Echo(grpc::CallbackServerContext* context,
                                 const v1::SortRequest* request,
                                 v1::SortResponse* response) override;

 private:
  // Fills the task's common parts, submits it, and answers the call when it
  // is done. `prepare` and `count` fill in the request-specific parts.
  template <typename Request, typename Response, typename Prepare,
            typename Count>
  grpc::ServerUnaryReactor* Handle(Op op, grpc::CallbackServerContext* context,
                                   const Request* request, Response* response,
                                   size_t units, Prepare prepare, Count count);

  friend class SortStreamReactor;

  Metrics* metrics_;
  Options options_;
  std::atomic<Scheduler*> scheduler_{nullptr};
};

}  // namespace sortd

#endif  // SORTD_SERVER_SERVICE_H_
