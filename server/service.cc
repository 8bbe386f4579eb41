#include "server/service.h"

#include <chrono>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "server/status.h"

namespace sortd {
namespace {

void FillServedBy(const Sorter& engine, absl::Duration queue_wait,
                  absl::Duration compute, v1::ServedBy* served_by) {
  served_by->set_path(engine.path() == ExecutionPath::kCpu
                          ? v1::EXECUTION_PATH_CPU
                          : v1::EXECUTION_PATH_GPU);
  served_by->set_device(engine.device_name());
  served_by->set_queue_wait_ns(absl::ToInt64Nanoseconds(queue_wait));
  served_by->set_compute_ns(absl::ToInt64Nanoseconds(compute));
}

absl::Status NotReady() {
  return absl::UnavailableError(
      "sortd is starting: its engine is not ready yet; retry shortly");
}

}  // namespace

SortServiceImpl::SortServiceImpl(Metrics* metrics, const Options& options)
    : metrics_(metrics), options_(options), queue_(options.workers) {}

SortServiceImpl::~SortServiceImpl() { Drain(); }

template <typename Request, typename Response, typename Work>
grpc::ServerUnaryReactor* SortServiceImpl::Handle(
    std::string_view method, grpc::CallbackServerContext* context,
    const Request* request, Response* response, Work work) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  const absl::Time received = absl::Now();
  metrics_->AddRequestBytes(method, request->ByteSizeLong());
  queue_.Submit([=, this] {
    const absl::Time started = absl::Now();
    if (options_.log_requests) {
      std::fprintf(stderr, "sortd: start %.*s from %s\n",
                   static_cast<int>(method.size()), method.data(),
                   context->peer().c_str());
    }
    Outcome outcome;
    if (context->IsCancelled()) {
      outcome.status = absl::CancelledError(
          "the call was cancelled before work on it began");
    } else if (context->deadline() < std::chrono::system_clock::now()) {
      outcome.status = absl::DeadlineExceededError(
          "the call's deadline passed before work on it began");
    } else {
      outcome = work(started - received);
    }
    // Never answer half-done: an error carries no partial arrays.
    if (!outcome.status.ok()) response->Clear();
    const double seconds = absl::ToDoubleSeconds(absl::Now() - received);
    const std::string code = absl::StatusCodeToString(outcome.status.code());
    metrics_->RecordRequest(method, code, outcome.path, seconds);
    if (options_.log_requests) {
      std::fprintf(stderr, "sortd: end %.*s %s path=%.*s %.3f ms%s%s\n",
                   static_cast<int>(method.size()), method.data(), code.c_str(),
                   static_cast<int>(outcome.path.size()), outcome.path.data(),
                   seconds * 1e3, outcome.status.ok() ? "" : ": ",
                   std::string(outcome.status.message()).c_str());
    }
    reactor->Finish(ToGrpcStatus(outcome.status));
  });
  return reactor;
}

template <typename Job, typename Call>
absl::StatusOr<Sorter*> SortServiceImpl::Execute(Job job, const char* kernel,
                                                 Call call) {
  Sorter* engine = engine_.load();
  Sorter* fallback = fallback_.load();
  if (engine == nullptr) return NotReady();
  const bool can_fall_back = fallback != nullptr && fallback != engine;
  std::string reason = "engine_unhealthy";
  if (engine->healthy() || !can_fall_back) {
    StageTimes stages;
    job.stages = &stages;
    absl::Status status = call(*engine, job);
    if (status.ok()) {
      const std::string device = engine->device_name();
      for (const StageTime& st : stages) {
        metrics_->ObserveStage(device, kernel, st.stage, st.seconds);
      }
      return engine;
    }
    if (!can_fall_back || absl::IsInvalidArgument(status)) return status;
    reason = absl::StatusCodeToString(status.code());
    std::fprintf(stderr, "sortd: %s failed on %s (%s); answering on %s\n",
                 kernel, engine->device_name().c_str(),
                 status.ToString().c_str(), fallback->device_name().c_str());
  }
  metrics_->AddCpuFallback(reason);
  job.stages = nullptr;
  absl::Status status = call(*fallback, job);
  if (!status.ok()) return status;
  return fallback;
}

SortServiceImpl::Outcome SortServiceImpl::DoSort(const v1::SortRequest& request,
                                                 v1::SortResponse* response,
                                                 absl::Duration queue_wait) {
  if (engine_.load() == nullptr) return {NotReady()};
  const absl::Time start = absl::Now();
  absl::StatusOr<SortJob> job = PrepareSort(request, options_.limits, response);
  if (!job.ok()) return {job.status()};
  absl::StatusOr<Sorter*> served = Execute(
      *job, "sort", [](Sorter& s, const SortJob& j) { return s.Sort(j); });
  if (!served.ok()) return {served.status(), "none"};
  FillServedBy(**served, queue_wait, absl::Now() - start,
               response->mutable_served_by());
  Outcome outcome{absl::OkStatus(), PathName((*served)->path())};
  metrics_->AddKeysSorted(outcome.path, KeyTypeName(job->key_type),
                          static_cast<double>(job->count));
  return outcome;
}

SortServiceImpl::Outcome SortServiceImpl::DoTranspose(
    const v1::TransposeRequest& request, v1::TransposeResponse* response,
    absl::Duration queue_wait) {
  if (engine_.load() == nullptr) return {NotReady()};
  const absl::Time start = absl::Now();
  absl::StatusOr<TransposeJob> job =
      PrepareTranspose(request, options_.limits, response);
  if (!job.ok()) return {job.status()};
  absl::StatusOr<Sorter*> served =
      Execute(*job, "transpose",
              [](Sorter& s, const TransposeJob& j) { return s.Transpose(j); });
  if (!served.ok()) return {served.status(), "none"};
  FillServedBy(**served, queue_wait, absl::Now() - start,
               response->mutable_served_by());
  Outcome outcome{absl::OkStatus(), PathName((*served)->path())};
  metrics_->AddMatricesTransposed(outcome.path,
                                  static_cast<double>(job->count));
  return outcome;
}

grpc::ServerUnaryReactor* SortServiceImpl::Sort(
    grpc::CallbackServerContext* context, const v1::SortRequest* request,
    v1::SortResponse* response) {
  return Handle("Sort", context, request, response,
                [=, this](absl::Duration queue_wait) {
                  return DoSort(*request, response, queue_wait);
                });
}

grpc::ServerUnaryReactor* SortServiceImpl::Transpose(
    grpc::CallbackServerContext* context, const v1::TransposeRequest* request,
    v1::TransposeResponse* response) {
  return Handle("Transpose", context, request, response,
                [=, this](absl::Duration queue_wait) {
                  return DoTranspose(*request, response, queue_wait);
                });
}

}  // namespace sortd
