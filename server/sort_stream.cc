// SortServiceImpl: the SortStream RPC.
#include <algorithm>
#include <atomic>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "core/compact_keys.h"
#include "core/mutex.h"
#include "server/log.h"
#include "server/out_of_memory.h"
#include "server/service.h"
#include "server/service_internal.h"
#include "server/status.h"
#include "server/stream_assembler.h"
#include "server/wire.h"

namespace sortd {

// Ends the SortStreams that wait for a client's next message longer than
// the idle timeout, from a thread of its own. A stream is listed from its
// creation until gRPC is done with it (OnDone); a stream the watch is
// ending is kept alive by a reference of the watch's (Ref/Unref).
class StreamIdleWatch {
 public:
  explicit StreamIdleWatch(absl::Duration timeout);
  ~StreamIdleWatch();
  StreamIdleWatch(const StreamIdleWatch&) = delete;
  StreamIdleWatch& operator=(const StreamIdleWatch&) = delete;

  bool on() const { return on_; }
  absl::Duration timeout() const { return timeout_; }
  void Add(SortStreamReactor* stream) ABSL_LOCKS_EXCLUDED(mu_);
  void Remove(SortStreamReactor* stream) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  void Loop() ABSL_LOCKS_EXCLUDED(mu_);

  const absl::Duration timeout_;
  const bool on_;
  Mutex mu_;
  CondVar changed_;
  std::set<SortStreamReactor*> streams_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

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
        id_(service->NextRequestId()),
        hold_(&service->held_),
        stream_(limits_, service->options_.buffers, &hold_) {
    hold_.SetClient(PeerOf(*context).client);
    service_->open_calls_.Opened();
    Touch();
    service_->stream_watch_->Add(this);
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
    MutexLock lock(&mu_);
    Read();
  }

  void OnReadDone(bool ok) override {
    MutexLock lock(&mu_);
    reading_.store(false);
    Touch();
    if (ended_.load()) return;  // ended while it waited (the idle watch)
    if (!ok) {
      if (context_->IsCancelled()) {
        End(absl::CancelledError("the client cancelled the stream"));
      } else {
        Sort();  // the client half-closed: the array is complete
      }
      return;
    }
    const size_t message_bytes = chunk_.Length();
    service_->metrics_->AddRequestBytes("SortStream",
                                        static_cast<double>(message_bytes));
    absl::Status appended = stream_.Append(chunk_);
    if (!appended.ok()) {
      // The stream ends; what it holds goes with it (OnDone).
      End(appended);
      return;
    }
    Read();
  }

  // Called by the idle watch (with a reference held, no lock of the
  // watch's): ends the stream if it still waits for the client, for its
  // next message or to take an answer chunk, and has waited the whole
  // timeout.
  void EndIfIdle() {
    MutexLock lock(&mu_);
    const absl::Duration idle = IdleFor();
    const StreamIdleWatch& watch = *service_->stream_watch_;
    if (ended_.load() || idle < watch.timeout()) return;
    if (writing_.load()) {
      // A write cannot be called off by Finish: the call is cancelled, and
      // its write ends (OnWriteDone) saying why.
      write_idle_.store(true);
      context_->TryCancel();
      return;
    }
    if (!reading_.load()) return;
    End(absl::DeadlineExceededError(absl::StrCat(
        "no stream message came for ", absl::FormatDuration(idle),
        " (--stream_idle_timeout=", absl::FormatDuration(watch.timeout()),
        "); the stream is ended and "
        "what it held released: send its messages without pausing, then "
        "half-close")));
  }
  // Whether it waits for the client (its next message, or its taking an
  // answer chunk); since when.
  bool waiting() const {
    return (reading_.load() || writing_.load()) && !ended_.load() &&
           !write_idle_.load();
  }
  absl::Duration IdleFor() const {
    return absl::Now() - absl::FromUnixNanos(last_.load());
  }
  absl::Time last_activity() const { return absl::FromUnixNanos(last_.load()); }

  void Ref() { refs_.fetch_add(1); }
  void Unref() {
    if (refs_.fetch_sub(1) == 1) delete this;
  }

  void OnWriteDone(bool ok) override {
    writing_.store(false);
    Touch();
    if (!ok) {
      End(write_idle_.load()
              ? absl::DeadlineExceededError(absl::StrCat(
                    "the client took no answer chunk for ",
                    absl::FormatDuration(service_->stream_watch_->timeout()),
                    " (--stream_idle_timeout): the stream is cancelled and "
                    "what it held released"))
              : absl::CancelledError(
                    "the client went away while answers were sent"));
    } else if (sent_ < stream_.count()) {
      WriteNext();
    } else {
      End(absl::OkStatus());
    }
  }

  void OnDone() override {
    service_->stream_watch_->Remove(this);
    // What it held goes now: gRPC is done with the call (Finish was
    // called, so an EndIfIdle under way touches none of it).
    stream_.Release();
    out_ = SortOutputs();
    response_.Clear();
    hold_.Reset();
    service_->open_calls_.Closed();
    Unref();
  }

 private:
  void Touch() { last_.store(absl::ToUnixNanos(absl::Now())); }
  void Read() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    Touch();
    reading_.store(true);
    StartRead(&chunk_);
  }

  void Sort() {
    if (stream_.messages() == 0) {
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
    task->units = stream_.count();
    task->client = PeerOf(*context_).client;
    task->deadline = absl::FromChrono(context_->deadline());
    grpc::CallbackServerContext* context = context_;
    task->cancelled = [context] { return context->IsCancelled(); };
    Task* raw = task.get();
    task->prepare = [this, raw] {
      SortJob& job = raw->sort;
      job.key_type = stream_.key_type();
      job.order = stream_.order();
      job.count = stream_.count();
      job.value_type = stream_.value_type();
      stream_.Join(job);
      out_ = AllocateSortOutputs(job, stream_.permutation(),
                                 service_->options_.buffers);
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
      stream_.Release();
      WriteNext();
    };
    scheduler->Submit(std::move(task));
  }

  // Sends the next chunk; the last one carries served_by.
  void WriteNext() {
    const size_t ks = KeySize(stream_.key_type()),
                 vs = ValueSize(stream_.value_type());
    size_t per_chunk =
        std::max<size_t>(1, limits_.stream_chunk_bytes /
                                (ks + vs + (stream_.permutation() ? 4 : 0)));
    if (stream_.key_coding() == v1::KEY_CODING_COMPACT) {
      // Compact chunks cover whole blocks (SortOutputs::CompactSlices).
      per_chunk =
          std::max(compact::kBlockKeys,
                   per_chunk / compact::kBlockKeys * compact::kBlockKeys);
    }
    const size_t at = sent_, n = std::min(per_chunk, stream_.count() - sent_);
    sent_ += n;
    const absl::Status encoded = CatchOutOfMemory("this stream's answer", [&] {
      wire::SortArrays arrays =
          stream_.key_coding() == v1::KEY_CODING_COMPACT
              ? out_.CompactSlices(job_, at, n, service_->options_.buffers)
              : out_.Slices(job_, at, n);
      v1::ServedBy by;
      by.set_key_bytes_saved(key_bytes_saved_);
      service_->RecordKeyBytesSaved("SortStream", job_, arrays, by);
      key_bytes_saved_ = by.key_bytes_saved();
      if (sent_ == stream_.count()) {
        by = ServedBy(result_);
        by.set_key_bytes_saved(key_bytes_saved_);
      }
      response_ = wire::EncodeSortResponse(
          arrays, sent_ == stream_.count() ? &by : nullptr);
      return absl::OkStatus();
    });
    if (!encoded.ok()) {
      End(encoded);
      return;
    }
    Touch();
    writing_.store(true);
    StartWrite(&response_);
  }

  // Ends the call once, with metrics.
  void End(const absl::Status& status) {
    if (ended_.exchange(true)) return;
    const bool ok = status.ok();
    const std::string path = ok ? PathName(result_.path) : "none";
    Metrics* metrics = service_->metrics_;
    if (ok) {
      metrics->ObserveQueueWait("SortStream",
                                absl::ToDoubleSeconds(result_.queue_wait));
      metrics->AddKeysSorted(path, KeyTypeName(stream_.key_type()),
                             static_cast<double>(stream_.count()));
    }
    const double seconds = absl::ToDoubleSeconds(absl::Now() - received_);
    metrics->RecordRequest("SortStream",
                           absl::StatusCodeToString(status.code()), path,
                           stream_.count(), seconds);
    if (service_->options_.log_requests) {
      LogLine(
          "end SortStream %s request=%llu path=%s keys=%zu messages=%zu "
          "runs=%d %.3f ms%s%s\n",
          absl::StatusCodeToString(status.code()).c_str(),
          static_cast<unsigned long long>(id_), path.c_str(), stream_.count(),
          stream_.messages(), result_.device_runs, seconds * 1e3,
          ok ? "" : ": ", std::string(status.message()).c_str());
    }
    Finish(FinishStatus(*context_, status));
  }

  SortServiceImpl* service_;
  grpc::CallbackServerContext* context_;
  const RequestLimits limits_;
  const absl::Time received_;
  const uint64_t id_;

  grpc::ByteBuffer chunk_;
  int64_t key_bytes_saved_ = 0;  // by the chunks sent so far
  // Charged to the service's budget before each byte is held; all of it
  // released in OnDone.
  Admission::Hold hold_;
  // The messages received, until joined and sorted; charged to hold_.
  StreamAssembler stream_;

  // reading_: between StartRead and OnReadDone, set with mu_ held (and
  // read by EndIfIdle under it). ended_: Finish called (once).
  Mutex mu_;
  std::atomic<bool> reading_{false}, ended_{false};
  // writing_: between StartWrite and OnWriteDone; write_idle_: the idle
  // watch cancelled the call while a write waited.
  std::atomic<bool> writing_{false}, write_idle_{false};
  std::atomic<int64_t> last_{0};  // the last read's start or end, Unix ns
  // gRPC's reference (until OnDone) and the idle watch's, while it ends it.
  std::atomic<int> refs_{1};

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

std::shared_ptr<StreamIdleWatch> SortServiceImpl::NewStreamIdleWatch(
    absl::Duration timeout) {
  return std::make_shared<StreamIdleWatch>(timeout);
}

SortServiceImpl::~SortServiceImpl() = default;

StreamIdleWatch::StreamIdleWatch(absl::Duration timeout)
    : timeout_(timeout),
      on_(timeout > absl::ZeroDuration() &&
          timeout != absl::InfiniteDuration()) {
  if (on_) thread_ = std::thread([this] { Loop(); });
}

StreamIdleWatch::~StreamIdleWatch() {
  {
    MutexLock lock(&mu_);
    stopping_ = true;
  }
  changed_.NotifyAll();
  if (thread_.joinable()) thread_.join();
}

void StreamIdleWatch::Add(SortStreamReactor* stream) {
  if (!on_) return;
  MutexLock lock(&mu_);
  streams_.insert(stream);
  changed_.NotifyAll();
}

void StreamIdleWatch::Remove(SortStreamReactor* stream) {
  if (!on_) return;
  MutexLock lock(&mu_);
  streams_.erase(stream);
}

void StreamIdleWatch::Loop() {
  mu_.Lock();
  while (!stopping_) {
    // Streams idle past the timeout, referenced so that they outlive
    // their ending outside the lock; and the next time one may be.
    std::vector<SortStreamReactor*> idle;
    absl::Time next = absl::InfiniteFuture();
    const absl::Time now = absl::Now();
    for (SortStreamReactor* s : streams_) {
      if (!s->waiting()) continue;
      const absl::Time due = s->last_activity() + timeout_;
      if (due <= now) {
        s->Ref();
        idle.push_back(s);
      } else {
        next = std::min(next, due);
      }
    }
    if (!idle.empty()) {
      mu_.Unlock();
      for (SortStreamReactor* s : idle) {
        s->EndIfIdle();
        s->Unref();
      }
      mu_.Lock();
      continue;
    }
    // A stream that is not waiting now may start to at any time (without
    // a word to the watch, which would cost every message a lock): looked
    // at again within a quarter of the timeout, so that an idle stream
    // ends between 1 and 1.25 timeouts after its last message.
    next = std::min(next, now + timeout_ / 4);
    changed_.WaitUntil(&mu_, absl::ToChronoTime(next));
  }
  mu_.Unlock();
}

}  // namespace sortd
