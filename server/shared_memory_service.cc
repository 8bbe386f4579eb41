// SortServiceImpl: the SharedMemory RPC, and the end of long calls at drain.
#include <algorithm>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/compact_keys.h"
#include "server/service.h"
#include "server/service_internal.h"
#include "server/status.h"
#include "server/wire.h"

namespace sortd {

// One SharedMemory stream: registers a region per message and unregisters
// all of them when the stream ends, however it ends (the client closing or
// going away, a refused registration, the server draining).
class SharedMemoryReactor final
    : public grpc::ServerBidiReactor<v1::SharedMemoryRequest,
                                     v1::SharedMemoryResponse> {
 public:
  SharedMemoryReactor(SortServiceImpl* service, RegionRegistry* regions)
      : service_(service), regions_(regions) {
    service_->open_calls_.Opened();
    StartRead(&request_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {
      // The client closed: its regions are gone before it hears so.
      End(grpc::Status::OK);
      return;
    }
    absl::StatusOr<std::string> handle =
        regions_->Register(request_.file(), request_.bytes());
    if (!handle.ok()) {
      End(ToGrpcStatus(handle.status()));
      return;
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (ended_) {  // the server began draining meanwhile
        regions_->Unregister(*handle);
        return;
      }
      handles_.push_back(*handle);
    }
    response_.set_region(*handle);
    response_.set_bytes(request_.bytes());
    StartWrite(&response_);
  }

  void OnWriteDone(bool ok) override {
    if (!ok) {
      End(grpc::Status(grpc::StatusCode::CANCELLED, "the client went away"));
      return;
    }
    StartRead(&request_);
  }

  void OnDone() override {
    // Finish has run (End called it): only what is left to release.
    End(grpc::Status::OK);
    service_->ForgetSharedMemory(this);
    service_->open_calls_.Closed();
    delete this;
  }

  // Unregisters every region and ends the stream with `status`, once.
  void End(const grpc::Status& status) {
    std::vector<std::string> handles;
    bool finish = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      handles.swap(handles_);
      finish = !ended_;
      ended_ = true;
    }
    for (const std::string& h : handles) regions_->Unregister(h);
    if (finish) Finish(status);
  }

 private:
  SortServiceImpl* service_;
  RegionRegistry* regions_;
  v1::SharedMemoryRequest request_;
  v1::SharedMemoryResponse response_;
  std::mutex mu_;
  bool ended_ = false;  // Finish called
  std::vector<std::string> handles_;
};

void SortServiceImpl::ForgetSharedMemory(SharedMemoryReactor* reactor) {
  std::lock_guard<std::mutex> lock(shm_mu_);
  shm_streams_.erase(reactor);
}

void SortServiceImpl::StartDrain() {
  draining_.store(true);
  parts_.Close(absl::UnavailableError(
      "sortd is shutting down: it takes no more parts of arrays; send the "
      "array again (to another replica)"));
  std::lock_guard<std::mutex> lock(shm_mu_);
  for (SharedMemoryReactor* r : shm_streams_) {
    r->End(grpc::Status(grpc::StatusCode::UNAVAILABLE,
                        "sortd is shutting down: its shared-memory regions "
                        "are unregistered"));
  }
}

grpc::ServerBidiReactor<v1::SharedMemoryRequest, v1::SharedMemoryResponse>*
SortServiceImpl::SharedMemory(grpc::CallbackServerContext* context) {
  // A reactor that refuses at once.
  class Refused final
      : public grpc::ServerBidiReactor<v1::SharedMemoryRequest,
                                       v1::SharedMemoryResponse> {
   public:
    Refused(OpenCalls* calls, const grpc::Status& status) : calls_(calls) {
      calls_->Opened();
      Finish(status);
    }
    void OnDone() override {
      calls_->Closed();
      delete this;
    }

   private:
    OpenCalls* calls_;
  };
  (void)context;
  if (options_.regions == nullptr || !options_.regions->enabled()) {
    return new Refused(
        &open_calls_,
        grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                     "shared memory is off on this server (start sortd with "
                     "--shm_dir)"));
  }
  // Under shm_mu_, so that StartDrain either sees this stream or it sees
  // the drain.
  std::lock_guard<std::mutex> lock(shm_mu_);
  if (draining_.load()) {
    return new Refused(&open_calls_, ToGrpcStatus(Draining()));
  }
  auto* reactor = new SharedMemoryReactor(this, options_.regions);
  shm_streams_.insert(reactor);
  return reactor;
}

}  // namespace sortd
