// End to end, the real sortd: one client cannot fill the scheduler's queue.
// A client (one certificate) whose requests wait in the queue gets, past
// --max_client_queued_requests, RESOURCE_EXHAUSTED naming that flag, while
// another client (another certificate) is still admitted and answered.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <future>
#include <string>
#include <vector>

#include "sortd/v1/sortd.pb.h"
#include "tests/e2e_util.h"
#include "tests/raw_grpc.h"
#include "tests/reference.h"
#include "tests/server_process.h"
#include "tests/test_certs.h"

namespace sortd {
namespace {

using ::testing::HasSubstr;
using testing::ServerProcess;
using testing::TestCertificates;
using testing::Unary;

// A Sort request of `keys` as u32 keys.
std::string SortRequest(const std::vector<uint32_t>& keys) {
  v1::SortRequest m;
  m.set_u32_keys(std::string(reinterpret_cast<const char*>(keys.data()),
                             keys.size() * sizeof(uint32_t)));
  return m.SerializeAsString();
}

// The keys of a Sort answer (empty when it does not parse).
std::vector<uint32_t> AnswerKeys(const std::string& response) {
  v1::SortResponse answer;
  if (!answer.ParseFromString(response)) return {};
  const std::string& bytes = answer.u32_keys();
  std::vector<uint32_t> keys(bytes.size() / sizeof(uint32_t));
  std::memcpy(keys.data(), bytes.data(), keys.size() * sizeof(uint32_t));
  return keys;
}

// The queue holds 8 requests, a client's share 4. Client A's sorts wait
// for a batch of 8 (the batching delay is an hour): with 4 of them queued,
// A's fifth is refused, naming --max_client_queued_requests, although the
// queue has room; client B's 4 sorts are admitted, complete the batch, and
// every admitted sort is answered correctly. Without the share A's fifth
// was queued, and with A holding the whole queue B's were refused.
TEST(QueueShare, OneClientCannotFillTheQueue) {
  TestCertificates certs;
  ASSERT_TRUE(certs.Make({"client a", "client b"})) << certs.error();
  std::vector<std::string> flags =
      OpenClArgs({"--metrics_listen=127.0.0.1:0", "--max_batch_requests=8",
                  "--max_batch_delay=1h", "--max_queued_requests=8",
                  "--max_client_queued_requests=4"});
  for (const std::string& f : certs.ServerFlags()) flags.push_back(f);
  ServerProcess server(flags);
  ASSERT_TRUE(server.Start()) << server.Output();
  auto a_channel = certs.Channel(server.address(), 0);
  auto b_channel = certs.Channel(server.address(), 1);
  grpc::GenericStub a(a_channel), b(b_channel);

  std::vector<std::vector<uint32_t>> inputs;
  for (int i = 0; i < 8; ++i) {
    inputs.push_back(
        testing::Generate<uint32_t>(testing::Shape::kRandom, 1000 + i, i));
  }
  auto sort = [&](grpc::GenericStub& stub, int i) {
    return std::async(std::launch::async, [&stub, &inputs, i] {
      return Unary(stub, "Sort", SortRequest(inputs[i]));
    });
  };
  std::vector<std::future<testing::UnaryResult>> pending;
  for (int i = 0; i < 4; ++i) pending.push_back(sort(a, i));
  ASSERT_TRUE(WaitForMetric(server, "sortd_queued_requests 4\n"))
      << server.Output();

  // A's share is full, the queue is not.
  const testing::UnaryResult refused =
      Unary(a, "Sort", SortRequest(std::vector<uint32_t>(1000, 7)));
  ASSERT_EQ(refused.status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED)
      << refused.status.error_message();
  EXPECT_THAT(refused.status.error_message(),
              HasSubstr("--max_client_queued_requests"));
  EXPECT_THAT(refused.status.error_message(), HasSubstr("has 4 requests"));
  EXPECT_THAT(refused.trailing_metadata,
              ::testing::Contains(::testing::Key("grpc-retry-pushback-ms")));

  // B is admitted: its sorts complete A's batch.
  for (int i = 4; i < 8; ++i) pending.push_back(sort(b, i));
  for (int i = 0; i < 8; ++i) {
    SCOPED_TRACE(i);
    const testing::UnaryResult r = pending[i].get();
    ASSERT_TRUE(r.status.ok()) << r.status.error_message();
    std::vector<uint32_t> want = inputs[i];
    std::sort(want.begin(), want.end());
    EXPECT_EQ(AnswerKeys(r.response), want);
  }
  // Answered, A's requests give its share back.
  const std::vector<uint32_t> few = {3, 1, 2};
  pending.clear();
  for (int i = 0; i < 4; ++i) {
    pending.push_back(std::async(std::launch::async, [&] {
      return Unary(a, "Sort", SortRequest(few));
    }));
  }
  ASSERT_TRUE(WaitForMetric(server, "sortd_queued_requests 4\n"))
      << server.Output();
  EXPECT_EQ(server.Terminate(SIGTERM), 0) << server.Output();
  for (auto& p : pending) {
    const testing::UnaryResult r = p.get();
    ASSERT_TRUE(r.status.ok()) << r.status.error_message();
    EXPECT_EQ(AnswerKeys(r.response), std::vector<uint32_t>({1, 2, 3}));
  }
}

// Bad values stop startup with a message naming the flag.
TEST(QueueShare, ASharePastTheQueueStopsStartup) {
  for (const char* flag :
       {"--max_client_queued_requests=5000", "--max_client_queued_keys=-1"}) {
    SCOPED_TRACE(flag);
    ServerProcess server({"--device=cpu", flag});
    EXPECT_FALSE(server.Start(std::chrono::seconds(30)));
    const std::string name =
        std::string(flag).substr(0, std::string(flag).find('='));
    EXPECT_THAT(server.Output(), HasSubstr(name));
  }
}

}  // namespace
}  // namespace sortd
