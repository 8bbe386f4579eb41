#include "server/service.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <numeric>

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
  served_by->set_device_runs(result.device_runs);
}

// The key field of `response` for `type`, set to `bytes`.
void SetKeys(KeyType type, const std::byte* data, size_t bytes,
             v1::SortResponse* response) {
  const char* p = reinterpret_cast<const char*>(data);
  switch (type) {
    case KeyType::kU32:
      response->set_u32_keys(p, bytes);
      break;
    case KeyType::kI32:
      response->set_i32_keys(p, bytes);
      break;
    case KeyType::kF32:
      response->set_f32_keys(p, bytes);
      break;
    case KeyType::kU64:
      response->set_u64_keys(p, bytes);
      break;
    case KeyType::kI64:
      response->set_i64_keys(p, bytes);
      break;
    case KeyType::kF64:
      response->set_f64_keys(p, bytes);
      break;
  }
}

const char* KeysFieldName(KeyType t) {
  switch (t) {
    case KeyType::kU32:
      return "u32_keys";
    case KeyType::kI32:
      return "i32_keys";
    case KeyType::kF32:
      return "f32_keys";
    case KeyType::kU64:
      return "u64_keys";
    case KeyType::kI64:
      return "i64_keys";
    case KeyType::kF64:
      return "f64_keys";
  }
  return "?";
}

const char* ValuesFieldName(ValueType t) {
  switch (t) {
    case ValueType::kU32:
      return "u32_values";
    case ValueType::kU64:
      return "u64_values";
    case ValueType::kNone:
      break;
  }
  return "no values";
}

}  // namespace

// One SortStream call: gathers the chunks, sorts the whole array through
// the scheduler as one task, and streams the answer back in chunks. Lives
// until gRPC calls OnDone, which is after Finish: Finish is called only
// once the task is answered, so the task never outlives its buffers.
class SortStreamReactor final
    : public grpc::ServerBidiReactor<v1::SortRequest, v1::SortResponse> {
 public:
  SortStreamReactor(SortServiceImpl* service,
                    grpc::CallbackServerContext* context)
      : service_(service),
        context_(context),
        limits_(service->options_.limits),
        received_(absl::Now()) {
    StartRead(&chunk_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {
      if (context_->IsCancelled()) {
        End(absl::CancelledError("the client cancelled the stream"));
      } else {
        Sort();  // the client half-closed: the array is complete
      }
      return;
    }
    service_->metrics_->AddRequestBytes(
        "SortStream", static_cast<double>(chunk_.ByteSizeLong()));
    if (absl::Status s = Append(); !s.ok()) {
      End(s);
      return;
    }
    chunk_.Clear();
    StartRead(&chunk_);
  }

  void OnWriteDone(bool ok) override {
    if (!ok) {
      End(absl::CancelledError("the client went away while answers were sent"));
    } else if (sent_ < count_) {
      WriteNext();
    } else {
      End(absl::OkStatus());
    }
  }

  void OnDone() override { delete this; }

 private:
  absl::Status Append() {
    absl::StatusOr<SortJob> part = ParseSort(chunk_, limits_);
    if (!part.ok()) {
      return absl::Status(part.status().code(),
                          absl::StrCat("stream message ", messages_ + 1, ": ",
                                       part.status().message()));
    }
    if (messages_ == 0) {
      key_type_ = part->key_type;
      value_type_ = part->value_type;
      order_ = part->order;
      permutation_ = chunk_.return_permutation();
    } else if (part->key_type != key_type_ || part->value_type != value_type_) {
      return absl::InvalidArgumentError(absl::StrCat(
          "stream message ", messages_ + 1, " sets ",
          KeysFieldName(part->key_type), " with ",
          ValuesFieldName(part->value_type), "; the first message set ",
          KeysFieldName(key_type_), " with ", ValuesFieldName(value_type_),
          ": every message of a stream uses the same fields"));
    }
    ++messages_;
    const size_t ks = KeySize(key_type_), vs = ValueSize(value_type_);
    if ((count_ + part->count) * (ks + vs) > limits_.max_stream_bytes) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "the stream's array has grown past ", limits_.max_stream_bytes,
          " bytes of keys and values, the most this server sorts in one "
          "stream (--max_stream_bytes)"));
    }
    if (count_ + part->count > std::numeric_limits<uint32_t>::max()) {
      return absl::ResourceExhaustedError(
          "the stream's array has grown past 2^32-1 keys, the most one sort "
          "takes");
    }
    keys_.append(reinterpret_cast<const char*>(part->keys), part->count * ks);
    if (vs > 0) {
      values_.append(reinterpret_cast<const char*>(part->values),
                     part->count * vs);
    }
    count_ += part->count;
    return absl::OkStatus();
  }

  void Sort() {
    if (messages_ == 0) {
      End(absl::InvalidArgumentError(
          "the stream ended before its first message; send at least one "
          "message with a key field set (an empty one sorts an empty "
          "array)"));
      return;
    }
    Scheduler* scheduler = service_->scheduler_.load();
    if (scheduler == nullptr) {
      End(absl::UnavailableError(
          "sortd is starting: its engine is not ready yet; retry shortly"));
      return;
    }
    const size_t ks = KeySize(key_type_), vs = ValueSize(value_type_);
    auto task = std::make_shared<Task>();
    task->op = Op::kSort;
    task->units = count_;
    task->deadline = absl::FromChrono(context_->deadline());
    grpc::CallbackServerContext* context = context_;
    task->cancelled = [context] { return context->IsCancelled(); };
    Task* raw = task.get();
    task->prepare = [this, raw, ks, vs] {
      // Outputs are not zero-filled: the sort writes every byte.
      out_keys_.reset(new std::byte[std::max<size_t>(count_ * ks, 1)]);
      if (vs > 0) out_values_.reset(new std::byte[count_ * vs]);
      if (permutation_) out_perm_.reset(new std::byte[count_ * 4]);
      SortJob& job = raw->sort;
      job.key_type = key_type_;
      job.order = order_;
      job.count = count_;
      job.keys = reinterpret_cast<const std::byte*>(keys_.data());
      job.value_type = value_type_;
      job.values =
          vs > 0 ? reinterpret_cast<const std::byte*>(values_.data()) : nullptr;
      job.keys_out = out_keys_.get();
      job.values_out = out_values_.get();
      job.permutation_out = out_perm_.get();
      return absl::OkStatus();
    };
    task->done = [this](const TaskResult& result) {
      if (!result.status.ok()) {
        End(result.status);
        return;
      }
      result_ = result;
      // The input is no longer needed while the answer streams out.
      std::string().swap(keys_);
      std::string().swap(values_);
      WriteNext();
    };
    scheduler->Submit(std::move(task));
  }

  // Sends the next chunk; the last one carries served_by.
  void WriteNext() {
    const size_t ks = KeySize(key_type_), vs = ValueSize(value_type_);
    const size_t per_chunk = std::max<size_t>(
        1, limits_.stream_chunk_bytes / (ks + vs + (permutation_ ? 4 : 0)));
    const size_t at = sent_, n = std::min(per_chunk, count_ - sent_);
    response_.Clear();
    SetKeys(key_type_, out_keys_.get() + at * ks, n * ks, &response_);
    if (value_type_ == ValueType::kU32) {
      response_.set_u32_values(
          reinterpret_cast<const char*>(out_values_.get() + at * vs), n * vs);
    } else if (value_type_ == ValueType::kU64) {
      response_.set_u64_values(
          reinterpret_cast<const char*>(out_values_.get() + at * vs), n * vs);
    }
    if (permutation_) {
      response_.set_permutation(
          reinterpret_cast<const char*>(out_perm_.get() + at * 4), n * 4);
    }
    sent_ += n;
    if (sent_ == count_) FillServedBy(result_, response_.mutable_served_by());
    StartWrite(&response_);
  }

  // Ends the call once, with metrics.
  void End(const absl::Status& status) {
    const bool ok = status.ok();
    const std::string path = ok ? PathName(result_.path) : "none";
    Metrics* metrics = service_->metrics_;
    if (ok) {
      metrics->ObserveQueueWait("SortStream",
                                absl::ToDoubleSeconds(result_.queue_wait));
      metrics->AddKeysSorted(path, KeyTypeName(key_type_),
                             static_cast<double>(count_));
    }
    const double seconds = absl::ToDoubleSeconds(absl::Now() - received_);
    metrics->RecordRequest(
        "SortStream", absl::StatusCodeToString(status.code()), path, seconds);
    if (service_->options_.log_requests) {
      std::fprintf(stderr,
                   "sortd: end SortStream %s path=%s keys=%zu messages=%zu "
                   "runs=%d %.3f ms%s%s\n",
                   absl::StatusCodeToString(status.code()).c_str(),
                   path.c_str(), count_, messages_, result_.device_runs,
                   seconds * 1e3, ok ? "" : ": ",
                   std::string(status.message()).c_str());
    }
    Finish(ToGrpcStatus(status));
  }

  SortServiceImpl* service_;
  grpc::CallbackServerContext* context_;
  const RequestLimits limits_;
  const absl::Time received_;

  v1::SortRequest chunk_;
  size_t messages_ = 0;
  KeyType key_type_ = KeyType::kU32;
  ValueType value_type_ = ValueType::kNone;
  Order order_ = Order::kAscending;
  bool permutation_ = false;
  size_t count_ = 0;
  std::string keys_, values_;

  std::unique_ptr<std::byte[]> out_keys_, out_values_, out_perm_;
  TaskResult result_;
  size_t sent_ = 0;
  v1::SortResponse response_;
};

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

grpc::ServerBidiReactor<v1::SortRequest, v1::SortResponse>*
SortServiceImpl::SortStream(grpc::CallbackServerContext* context) {
  return new SortStreamReactor(this, context);
}

grpc::ServerUnaryReactor* SortServiceImpl::Echo(
    grpc::CallbackServerContext* context, const v1::SortRequest* request,
    v1::SortResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  if (!options_.echo) {
    reactor->Finish(grpc::Status(grpc::StatusCode::UNIMPLEMENTED,
                                 "Echo is disabled on this server (--echo)"));
    return reactor;
  }
  const absl::Time received = absl::Now();
  metrics_->AddRequestBytes("Echo",
                            static_cast<double>(request->ByteSizeLong()));
  absl::StatusOr<SortJob> job =
      PrepareSort(*request, options_.limits, response);
  if (job.ok()) {
    // What Sort does, less the sort: the same validation, response sizing
    // and serialisation, with the arrays copied as they came.
    const size_t ks = KeySize(job->key_type), vs = ValueSize(job->value_type);
    if (job->count > 0) {
      std::memcpy(job->keys_out, job->keys, job->count * ks);
      if (vs > 0) std::memcpy(job->values_out, job->values, job->count * vs);
    }
    if (job->permutation_out != nullptr) {
      for (uint32_t i = 0; i < job->count; ++i) {
        std::memcpy(job->permutation_out + size_t{i} * 4, &i, 4);
      }
    }
    v1::ServedBy* by = response->mutable_served_by();
    by->set_path(v1::EXECUTION_PATH_CPU);
    by->set_device("echo (no sort)");
    by->set_route("echo");
    by->set_batch_requests(1);
    by->set_compute_ns(absl::ToInt64Nanoseconds(absl::Now() - received));
  } else {
    response->Clear();
  }
  metrics_->RecordRequest("Echo", absl::StatusCodeToString(job.status().code()),
                          job.ok() ? "cpu" : "none",
                          absl::ToDoubleSeconds(absl::Now() - received));
  reactor->Finish(ToGrpcStatus(job.status()));
  return reactor;
}

}  // namespace sortd
