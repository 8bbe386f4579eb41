#include "server/service.h"

#include <chrono>
#include <cstdio>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "server/status.h"

namespace sortd {
namespace {

void FillServedBy(const TaskResult& result, v1::ServedBy* served_by) {
  served_by->set_path(result.path == ExecutionPath::kCpu
                          ? v1::EXECUTION_PATH_CPU
                          : v1::EXECUTION_PATH_GPU);
  served_by->set_device(result.device);
  served_by->set_queue_wait_ns(absl::ToInt64Nanoseconds(result.queue_wait));
  served_by->set_compute_ns(absl::ToInt64Nanoseconds(result.compute));
  served_by->set_batch_requests(result.batch_requests);
  served_by->set_route(RouteName(result.route));
}

}  // namespace

template <typename Request, typename Response, typename Prepare, typename Count>
grpc::ServerUnaryReactor* SortServiceImpl::Handle(
    Op op, grpc::CallbackServerContext* context, const Request* request,
    Response* response, size_t units, Prepare prepare, Count count) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  const absl::Time received = absl::Now();
  const char* method = op == Op::kSort ? "Sort" : "Transpose";
  metrics_->AddRequestBytes(method,
                            static_cast<double>(request->ByteSizeLong()));
  if (options_.log_requests) {
    std::fprintf(stderr, "sortd: start %s from %s\n", method,
                 context->peer().c_str());
  }
  auto task = std::make_shared<Task>();
  task->op = op;
  task->units = units;
  task->deadline = absl::FromChrono(context->deadline());
  task->cancelled = [context] { return context->IsCancelled(); };
  Task* raw = task.get();
  task->prepare = [=, this] { return prepare(raw, options_.limits); };
  task->done = [=, this](const TaskResult& result) {
    const std::string path =
        result.status.ok() ? PathName(result.path) : "none";
    if (result.status.ok()) {
      FillServedBy(result, response->mutable_served_by());
      metrics_->ObserveQueueWait(method,
                                 absl::ToDoubleSeconds(result.queue_wait));
      count(*raw, path);
    } else {
      response->Clear();  // never answer half-done
    }
    const double seconds = absl::ToDoubleSeconds(absl::Now() - received);
    const std::string code = absl::StatusCodeToString(result.status.code());
    metrics_->RecordRequest(method, code, path, seconds);
    if (options_.log_requests) {
      std::fprintf(
          stderr, "sortd: end %s %s path=%s route=%s batch=%d %.3f ms%s%s\n",
          method, code.c_str(), path.c_str(), RouteName(result.route),
          result.batch_requests, seconds * 1e3, result.status.ok() ? "" : ": ",
          std::string(result.status.message()).c_str());
    }
    reactor->Finish(ToGrpcStatus(result.status));
  };
  Scheduler* scheduler = scheduler_.load();
  if (scheduler == nullptr) {
    TaskResult result;
    result.status = absl::UnavailableError(
        "sortd is starting: its engine is not ready yet; retry shortly");
    task->done(result);
    return reactor;
  }
  scheduler->Submit(std::move(task));
  return reactor;
}

grpc::ServerUnaryReactor* SortServiceImpl::Sort(
    grpc::CallbackServerContext* context, const v1::SortRequest* request,
    v1::SortResponse* response) {
  return Handle(
      Op::kSort, context, request, response, SortRequestUnits(*request),
      [=](Task* task, const RequestLimits& limits) -> absl::Status {
        absl::StatusOr<SortJob> job = PrepareSort(*request, limits, response);
        if (!job.ok()) return job.status();
        task->sort = *job;
        return absl::OkStatus();
      },
      [this](const Task& task, const std::string& path) {
        metrics_->AddKeysSorted(path, KeyTypeName(task.sort.key_type),
                                static_cast<double>(task.sort.count));
      });
}

grpc::ServerUnaryReactor* SortServiceImpl::Transpose(
    grpc::CallbackServerContext* context, const v1::TransposeRequest* request,
    v1::TransposeResponse* response) {
  return Handle(
      Op::kTranspose, context, request, response,
      TransposeRequestUnits(*request),
      [=](Task* task, const RequestLimits& limits) -> absl::Status {
        absl::StatusOr<TransposeJob> job =
            PrepareTranspose(*request, limits, response);
        if (!job.ok()) return job.status();
        task->transpose = *job;
        return absl::OkStatus();
      },
      [this](const Task& task, const std::string& path) {
        metrics_->AddMatricesTransposed(
            path, static_cast<double>(task.transpose.count));
      });
}

}  // namespace sortd
