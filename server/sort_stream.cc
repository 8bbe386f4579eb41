// SortServiceImpl: the SortStream RPC.
#include <algorithm>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/compact_keys.h"
#include "server/log.h"
#include "server/out_of_memory.h"
#include "server/service.h"
#include "server/service_internal.h"
#include "server/status.h"
#include "server/wire.h"

namespace sortd {

// One SortStream call: gathers the chunks, sorts the whole array through
// the scheduler as one task, and streams the answer back in chunks. Lives
// until gRPC calls OnDone, which is after Finish: Finish is called only
// once the task is answered, so the task never outlives its buffers.
class SortStreamReactor final
    : public grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  SortStreamReactor(SortServiceImpl* service,
                    grpc::CallbackServerContext* context)
      : service_(service),
        context_(context),
        limits_(service->options_.limits),
        received_(absl::Now()),
        id_(service->NextRequestId()) {
    service_->open_calls_.Opened();
    // Decided before the start line: a logged start is served.
    const bool refused = service_->draining_.load();
    if (service_->options_.log_requests) {
      LogLine("start SortStream request=%llu from %s\n",
              static_cast<unsigned long long>(id_), context->peer().c_str());
    }
    if (refused) {
      End(SortServiceImpl::Draining());
      return;
    }
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
    service_->metrics_->AddRequestBytes("SortStream",
                                        static_cast<double>(chunk_.Length()));
    absl::Status appended =
        CatchOutOfMemory("this stream's arrays", [this] { return Append(); });
    chunk_.Clear();
    if (!appended.ok()) {
      End(appended);
      return;
    }
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

  void OnDone() override {
    service_->open_calls_.Closed();
    delete this;
  }

 private:
  absl::Status Append() {
    const size_t number = messages_ + 1;
    auto failed = [number](const absl::Status& s) {
      return absl::Status(
          s.code(), absl::StrCat("stream message ", number, ": ", s.message()));
    };
    absl::StatusOr<wire::Received> bytes =
        wire::Received::From(chunk_, service_->options_.buffers);
    if (!bytes.ok()) return failed(bytes.status());
    absl::StatusOr<wire::SortRequest> parsed =
        wire::ParseSortRequest(bytes->data());
    if (!parsed.ok()) return failed(parsed.status());
    if (parsed->shared.has_value()) {
      return failed(absl::InvalidArgumentError(
          "`shared` is for Sort and Echo: a stream carries its arrays"));
    }
    if (parsed->part.has_value()) {
      return failed(absl::InvalidArgumentError(
          "`part` is for Sort: a stream carries its whole array"));
    }
    // `order` and `return_permutation` are read from the first message and
    // ignored in later ones (the contract, sortd.proto).
    if (messages_ > 0) {
      parsed->order = first_order_;
      parsed->key_coding = first_key_coding_;
    }
    absl::StatusOr<SortJob> part =
        ParseSort(*parsed, limits_, bytes->data().size());
    if (!part.ok()) return failed(part.status());
    if (messages_ == 0) {
      key_type_ = part->key_type;
      value_type_ = part->value_type;
      order_ = part->order;
      first_order_ = parsed->order;
      first_key_coding_ = parsed->key_coding;
      permutation_ = parsed->return_permutation;
    } else if (part->key_type != key_type_ || part->value_type != value_type_) {
      return absl::InvalidArgumentError(absl::StrCat(
          "stream message ", number, " sets ",
          wire::KeyFieldName(part->key_type), " with ",
          wire::ValueFieldName(part->value_type), "; the first message set ",
          wire::KeyFieldName(key_type_), " with ",
          wire::ValueFieldName(value_type_),
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
      End(Starting());
      return;
    }
    auto task = std::make_shared<Task>();
    task->op = Op::kSort;
    task->units = count_;
    task->client = PeerOf(*context_).client;
    task->deadline = absl::FromChrono(context_->deadline());
    grpc::CallbackServerContext* context = context_;
    task->cancelled = [context] { return context->IsCancelled(); };
    Task* raw = task.get();
    task->prepare = [this, raw] {
      SortJob& job = raw->sort;
      job.key_type = key_type_;
      job.order = order_;
      job.count = count_;
      job.keys = reinterpret_cast<const std::byte*>(keys_.data());
      job.value_type = value_type_;
      job.values = value_type_ != ValueType::kNone
                       ? reinterpret_cast<const std::byte*>(values_.data())
                       : nullptr;
      out_ = AllocateSortOutputs(job, permutation_, service_->options_.buffers);
      job_ = job;
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
    size_t per_chunk = std::max<size_t>(
        1, limits_.stream_chunk_bytes / (ks + vs + (permutation_ ? 4 : 0)));
    if (first_key_coding_ == v1::KEY_CODING_COMPACT) {
      // Compact chunks cover whole blocks (SortOutputs::CompactSlices).
      per_chunk =
          std::max(compact::kBlockKeys,
                   per_chunk / compact::kBlockKeys * compact::kBlockKeys);
    }
    const size_t at = sent_, n = std::min(per_chunk, count_ - sent_);
    sent_ += n;
    const absl::Status encoded = CatchOutOfMemory("this stream's answer", [&] {
      wire::SortArrays arrays =
          first_key_coding_ == v1::KEY_CODING_COMPACT
              ? out_.CompactSlices(job_, at, n, service_->options_.buffers)
              : out_.Slices(job_, at, n);
      v1::ServedBy by;
      by.set_key_bytes_saved(key_bytes_saved_);
      service_->RecordKeyBytesSaved("SortStream", job_, arrays, by);
      key_bytes_saved_ = by.key_bytes_saved();
      if (sent_ == count_) {
        by = ServedBy(result_);
        by.set_key_bytes_saved(key_bytes_saved_);
      }
      response_ =
          wire::EncodeSortResponse(arrays, sent_ == count_ ? &by : nullptr);
      return absl::OkStatus();
    });
    if (!encoded.ok()) {
      End(encoded);
      return;
    }
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
    metrics->RecordRequest("SortStream",
                           absl::StatusCodeToString(status.code()), path,
                           count_, seconds);
    if (service_->options_.log_requests) {
      LogLine(
          "end SortStream %s request=%llu path=%s keys=%zu messages=%zu "
          "runs=%d %.3f ms%s%s\n",
          absl::StatusCodeToString(status.code()).c_str(),
          static_cast<unsigned long long>(id_), path.c_str(), count_, messages_,
          result_.device_runs, seconds * 1e3, ok ? "" : ": ",
          std::string(status.message()).c_str());
    }
    Finish(FinishStatus(*context_, status));
  }

  SortServiceImpl* service_;
  grpc::CallbackServerContext* context_;
  const RequestLimits limits_;
  const absl::Time received_;
  const uint64_t id_;

  grpc::ByteBuffer chunk_;
  size_t messages_ = 0;
  KeyType key_type_ = KeyType::kU32;
  ValueType value_type_ = ValueType::kNone;
  Order order_ = Order::kAscending;
  int32_t first_order_ = 0;
  int32_t first_key_coding_ = 0;
  int64_t key_bytes_saved_ = 0;  // by the chunks sent so far
  bool permutation_ = false;
  size_t count_ = 0;
  std::string keys_, values_;

  SortJob job_;
  SortOutputs out_;
  TaskResult result_;
  size_t sent_ = 0;
  grpc::ByteBuffer response_;
};

grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>*
SortServiceImpl::SortStream(grpc::CallbackServerContext* context) {
  if (absl::Status s = Authorize(PeerOf(*context), MethodGroup::kSort);
      !s.ok()) {
    return new RefusedStream<grpc::ByteBuffer, grpc::ByteBuffer>(
        &open_calls_, ToGrpcStatus(s));
  }
  return new SortStreamReactor(this, context);
}

}  // namespace sortd
