// Test support: raw gRPC calls with bytes as any client can send them (a
// unary call through the generic stub, a SortStream of raw messages that
// records when it half-closed and when the first answer came).
#ifndef SORTD_TESTS_RAW_GRPC_H_
#define SORTD_TESTS_RAW_GRPC_H_

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "tests/byte_buffer.h"
#include "tests/server_process.h"

namespace sortd::testing {

using Clock = std::chrono::steady_clock;

inline std::string U32Bytes(std::initializer_list<uint32_t> keys) {
  std::string s;
  for (uint32_t k : keys) s.append(reinterpret_cast<const char*>(&k), 4);
  return s;
}

inline std::shared_ptr<grpc::Channel> Channel(const ServerProcess& server) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);
  return grpc::CreateCustomChannel(server.address(),
                                   grpc::InsecureChannelCredentials(), args);
}

struct UnaryResult {
  grpc::Status status;
  std::string response;
  // The answer's initial and trailing metadata, as text.
  std::multimap<std::string, std::string> initial_metadata;
  std::multimap<std::string, std::string> trailing_metadata;
};

// One unary call with a raw request and, optionally, request metadata.
inline UnaryResult Unary(
    grpc::GenericStub& stub, const std::string& method,
    const std::string& bytes,
    const std::vector<std::pair<std::string, std::string>>& metadata = {}) {
  grpc::Slice slice(bytes);
  grpc::ByteBuffer request(&slice, 1), response;
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::seconds(30));
  for (const auto& [key, value] : metadata) context.AddMetadata(key, value);
  std::promise<grpc::Status> done;
  stub.UnaryCall(&context, "/sortd.v1.SortService/" + method, {}, &request,
                 &response, [&](grpc::Status s) { done.set_value(s); });
  UnaryResult r;
  r.status = done.get_future().get();
  r.response = Flatten(response);
  for (const auto& [key, value] : context.GetServerInitialMetadata()) {
    r.initial_metadata.emplace(std::string(key.data(), key.size()),
                               std::string(value.data(), value.size()));
  }
  for (const auto& [key, value] : context.GetServerTrailingMetadata()) {
    r.trailing_metadata.emplace(std::string(key.data(), key.size()),
                                std::string(value.data(), value.size()));
  }
  return r;
}

// One SortStream call with raw messages: sends them in order, half-closes,
// reads every answer chunk. Records when the half-close was sent and when
// the first answer arrived.
class RawStream final
    : public grpc::ClientBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  RawStream(grpc::GenericStub& stub, std::vector<std::string> messages)
      : messages_(std::move(messages)) {
    context_.set_deadline(std::chrono::system_clock::now() +
                          std::chrono::seconds(300));
    stub.PrepareBidiStreamingCall(&context_, "/sortd.v1.SortService/SortStream",
                                  {}, this);
    StartRead(&in_);
    WriteNextOrClose();
    StartCall();
  }

  void OnWriteDone(bool ok) override {
    if (ok) WriteNextOrClose();
  }
  void OnWritesDoneDone(bool) override {
    std::lock_guard<std::mutex> l(mu_);
    closed_at_ = Clock::now();
  }
  void OnReadDone(bool ok) override {
    if (!ok) return;
    {
      std::lock_guard<std::mutex> l(mu_);
      if (responses_.empty()) first_answer_at_ = Clock::now();
      responses_.push_back(Flatten(in_));
    }
    StartRead(&in_);
  }
  void OnDone(const grpc::Status& s) override {
    std::lock_guard<std::mutex> l(mu_);
    status_ = s;
    done_ = true;
    cv_.notify_all();
  }

  // Waits for the end of the call.
  grpc::Status Await() {
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait(l, [this] { return done_; });
    return status_;
  }
  // Call after Await().
  const std::vector<std::string>& responses() const { return responses_; }
  Clock::time_point closed_at() const { return closed_at_; }
  Clock::time_point first_answer_at() const { return first_answer_at_; }

 private:
  void WriteNextOrClose() {
    if (next_ < messages_.size()) {
      out_ = grpc::ByteBuffer();
      grpc::Slice slice(messages_[next_]);
      out_ = grpc::ByteBuffer(&slice, 1);
      ++next_;
      StartWrite(&out_);
    } else {
      StartWritesDone();
    }
  }

  grpc::ClientContext context_;
  std::vector<std::string> messages_;
  size_t next_ = 0;
  grpc::ByteBuffer out_, in_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  grpc::Status status_;
  std::vector<std::string> responses_;
  Clock::time_point closed_at_, first_answer_at_;
};

}  // namespace sortd::testing

#endif  // SORTD_TESTS_RAW_GRPC_H_
