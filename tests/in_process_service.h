// Test support: sortd's service served from the test's own process, on a
// free loopback port: the gRPC server of server/grpc_server.h, the service,
// and a scheduler over the CPU path and the devices a test gives, started
// in sortd_main's order and stopped by its drain. Left out: the router's
// calibration (the scheduler's thresholds are the test's), the host buffer
// pool, shared memory and the idle trimmer, which their own tests set up.
// For the tests of one unit of the service or of the client library: no
// process to start, no kernels to build, and the service's parts in reach
// (its metrics, its health, when it gets its scheduler).
//
//   InProcessService sortd;
//   ASSERT_TRUE(sortd.Start().ok());
//   std::unique_ptr<Client> client = sortd.Connect();
#ifndef SORTD_TESTS_IN_PROCESS_SERVICE_H_
#define SORTD_TESTS_IN_PROCESS_SERVICE_H_

#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/client.h"
#include "cpu/cpu_sorter.h"
#include "grpc/grpc.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"
#include "prometheus/text_serializer.h"
#include "server/device_pool.h"
#include "server/grpc_server.h"
#include "server/metrics.h"
#include "server/scheduler.h"
#include "server/service.h"
#include "tests/byte_buffer.h"

namespace sortd::testing {

// A free loopback port, plaintext, gRPC's other settings sortd's
// defaults.
inline GrpcServerOptions LoopbackGrpc() {
  GrpcServerOptions o;
  o.listen = "127.0.0.1:0";
  return o;
}
// A client that tries each call once, so that a test sees the service's
// first answer.
inline ClientOptions OneAttempt() {
  ClientOptions o;
  o.max_attempts = 1;
  return o;
}

class InProcessService {
 public:
  struct Options {
    SortServiceImpl::Options service;
    Scheduler::Options scheduler;
    GrpcServerOptions grpc = LoopbackGrpc();
    CpuSorter::Options cpu{.threads = 2};
    // Engines beside the CPU path (none: every call on the CPU).
    std::vector<DeviceSlot> devices;
    // Whether Start gives the service its scheduler and turns health
    // SERVING; false leaves both as they are before the engines are up.
    bool serving = true;
  };

  InProcessService() : InProcessService(Options()) {}
  explicit InProcessService(Options options) : options_(std::move(options)) {
    // gRPC's library stays initialised for the process: the last server or
    // channel going would otherwise shut it down, and that waits for its
    // poller (seconds) at the end of every test.
    static const bool kInitialised = (grpc_init(), true);
    (void)kInitialised;
  }
  // sortd's drain (server/shutdown.cc): new calls refused, those in
  // flight answered, gRPC's server stopped, the service's threads joined,
  // then the scheduler drained.
  ~InProcessService() {
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    if (scheduler_ != nullptr) scheduler_->StartDrain();
    if (service_ != nullptr) {
      service_->StartDrain();
      if (!service_->WaitForCalls(deadline) && scheduler_ != nullptr) {
        scheduler_->AbandonQueued();
      }
    }
    if (server_ != nullptr) {
      server_->Shutdown(absl::ToChronoTime(deadline));
      server_->Wait();
    }
    if (service_ != nullptr) {
      service_->StopHandlers();
      service_->SetScheduler(nullptr);
    }
    if (scheduler_ != nullptr) scheduler_->Drain(absl::Now());
  }
  InProcessService(const InProcessService&) = delete;
  InProcessService& operator=(const InProcessService&) = delete;

  absl::Status Start() {
    auto metrics = Metrics::Create("");
    if (!metrics.ok()) return metrics.status();
    metrics_ = *std::move(metrics);
    service_ =
        std::make_unique<SortServiceImpl>(metrics_.get(), options_.service);
    auto server = StartGrpcServer(*service_, options_.grpc, &port_);
    if (!server.ok()) return server.status();
    server_ = *std::move(server);
    cpu_.emplace(options_.cpu);
    scheduler_ = std::make_unique<Scheduler>(options_.scheduler, &*cpu_,
                                             std::move(options_.devices),
                                             metrics_.get());
    if (options_.serving) MarkServing();
    return absl::OkStatus();
  }

  // What sortd does once its engines are up: the service takes calls and
  // health says SERVING.
  void MarkServing() {
    service_->SetScheduler(scheduler_.get());
    grpc::HealthCheckServiceInterface* health =
        server_->GetHealthCheckService();
    health->SetServingStatus(true);
    health->SetServingStatus(v1::SortService::service_full_name(), true);
  }

  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
  int port() const { return port_; }
  SortServiceImpl& service() { return *service_; }
  Metrics& metrics() { return *metrics_; }
  Scheduler& scheduler() { return *scheduler_; }
  CpuSorter& cpu() { return *cpu_; }
  grpc::Server& server() { return *server_; }

  // A client of the service (null, with a test failure, if it cannot be
  // made).
  std::unique_ptr<Client> Connect(
      const ClientOptions& options = OneAttempt()) const {
    absl::StatusOr<std::unique_ptr<Client>> client =
        Client::Create(address(), options);
    EXPECT_TRUE(client.ok()) << client.status();
    return client.ok() ? *std::move(client) : nullptr;
  }

  // One call of `method` ("Sort", "Echo", ...) with `request` as it is,
  // on a channel of its own, as a client other than the library would
  // send it: the status, and the answer's bytes.
  std::pair<grpc::Status, std::string> RawCall(
      const std::string& method, const std::string& request) const {
    grpc::GenericStub stub(Channel());
    grpc::Slice slice(request);
    grpc::ByteBuffer in(&slice, 1), out;
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(60));
    std::promise<grpc::Status> done;
    stub.UnaryCall(&context, "/sortd.v1.SortService/" + method, {}, &in, &out,
                   [&](grpc::Status s) { done.set_value(s); });
    grpc::Status status = done.get_future().get();
    return {status, Flatten(out)};
  }

  // The service's metrics as Prometheus would scrape them.
  std::string MetricsText() const {
    return prometheus::TextSerializer().Serialize(metrics_->Collect());
  }

  // A plaintext channel of its own to the service.
  std::shared_ptr<grpc::Channel> Channel() const {
    return grpc::CreateChannel(address(), grpc::InsecureChannelCredentials());
  }

 private:
  Options options_;
  int port_ = 0;
  // Destroyed from the last: the server (shut down above) before the
  // scheduler, the scheduler before the CPU path and the service, the
  // metrics, which every other part reports to, last.
  std::unique_ptr<Metrics> metrics_;
  std::unique_ptr<SortServiceImpl> service_;
  std::optional<CpuSorter> cpu_;
  std::unique_ptr<Scheduler> scheduler_;
  std::unique_ptr<grpc::Server> server_;
};

}  // namespace sortd::testing

#endif  // SORTD_TESTS_IN_PROCESS_SERVICE_H_
