// SortServiceImpl: the gRPC face of sortd (callback API). Each call is
// validated, run on the service's work queue against the current engine,
// and answered once, completely or with a status; gRPC's threads never
// block on a sort.
//
//   SortServiceImpl service(&metrics, options);
//   builder.RegisterService(&service);
//   ... start the server, warm the engine up ...
//   service.SetEngine(&gpu_engine, &cpu_sorter);  // before: UNAVAILABLE
#ifndef SORTD_SERVER_SERVICE_H_
#define SORTD_SERVER_SERVICE_H_

#include <atomic>
#include <string_view>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "server/metrics.h"
#include "server/request.h"
#include "server/sorter.h"
#include "server/work_queue.h"
#include "sortd/v1/sortd.grpc.pb.h"

namespace sortd {

class SortServiceImpl final : public v1::SortService::CallbackService {
 public:
  struct Options {
    RequestLimits limits;
    // Threads that run requests; each may use the engine's own parallelism.
    int workers = 2;
    // Log the start and end of every request to stderr.
    bool log_requests = false;
  };

  SortServiceImpl(Metrics* metrics, const Options& options);
  ~SortServiceImpl() override;

  // Makes `engine` serve requests from now on; when it fails a request
  // (or reports itself unhealthy), `fallback` answers instead. Not owned;
  // `fallback` may be null or the engine itself (no fallback).
  void SetEngine(Sorter* engine, Sorter* fallback = nullptr) {
    fallback_.store(fallback);
    engine_.store(engine);
  }

  // Finishes queued work and stops the work queue; call after the gRPC
  // server has shut down.
  void Drain() { queue_.Stop(); }

  grpc::ServerUnaryReactor* Sort(grpc::CallbackServerContext* context,
                                 const v1::SortRequest* request,
                                 v1::SortResponse* response) override;
  grpc::ServerUnaryReactor* Transpose(grpc::CallbackServerContext* context,
                                      const v1::TransposeRequest* request,
                                      v1::TransposeResponse* response) override;

 private:
  // Outcome of handling one request, for metrics and logs.
  struct Outcome {
    absl::Status status;
    std::string_view path = "none";
  };

  template <typename Request, typename Response, typename Work>
  grpc::ServerUnaryReactor* Handle(std::string_view method,
                                   grpc::CallbackServerContext* context,
                                   const Request* request, Response* response,
                                   Work work);

  // Runs `call` on the engine, or on the fallback when the engine is
  // unhealthy or fails with an engine-side error; records stage timings.
  // Returns the sorter whose answer is in the job's outputs.
  template <typename Job, typename Call>
  absl::StatusOr<Sorter*> Execute(Job job, const char* kernel, Call call);

  Outcome DoSort(const v1::SortRequest& request, v1::SortResponse* response,
                 absl::Duration queue_wait);
  Outcome DoTranspose(const v1::TransposeRequest& request,
                      v1::TransposeResponse* response,
                      absl::Duration queue_wait);

  Metrics* metrics_;
  Options options_;
  std::atomic<Sorter*> engine_{nullptr};
  std::atomic<Sorter*> fallback_{nullptr};
  WorkQueue queue_;
};

}  // namespace sortd

#endif  // SORTD_SERVER_SERVICE_H_
