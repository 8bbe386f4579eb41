// End to end, the real sortd over mutual TLS with --authz_policy: a client
// allowed only the sort methods sorts and is refused requests that name a
// shared-memory region; a client the policy does not name is refused every
// method; sortd serves on; a policy it cannot use stops it at start.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <future>
#include <string>
#include <vector>

#include "grpcpp/generic/generic_stub.h"
#include "sortd/v1/sortd.pb.h"
#include "tests/raw_grpc.h"
#include "tests/server_process.h"
#include "tests/test_certs.h"

namespace sortd {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using testing::RawStream;
using testing::ServerProcess;
using testing::TestCertificates;
using testing::U32Bytes;
using testing::Unary;

constexpr size_t kSorter = 0, kStranger = 1, kColocated = 2;

class AuthzTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(certs_.Make({"sorter", "stranger", "colocated job"}))
        << certs_.error();
  }
  std::string WritePolicy(const std::string& text) {
    const std::string path = certs_.Path("policy");
    std::ofstream(path) << text;
    return path;
  }
  std::vector<std::string> Flags(const std::vector<std::string>& more) {
    std::vector<std::string> flags = {
        "--device=cpu", "--shm_socket=" + certs_.Path("shm/sortd.sock")};
    for (const std::string& f : certs_.ServerFlags()) flags.push_back(f);
    for (const std::string& f : more) flags.push_back(f);
    return flags;
  }
  // A Sort whose arrays are in a shared-memory region (a token never
  // issued): its status.
  static grpc::Status SharedSort(grpc::GenericStub& stub) {
    v1::SortRequest m;
    m.set_u32_keys("");
    v1::SharedArrays* shared = m.mutable_shared();
    shared->set_region("00000000000000000000000000000000");
    shared->set_count(3);
    shared->set_keys_out_offset(64);
    return Unary(stub, "Sort", m.SerializeAsString()).status;
  }
  static grpc::Status Stream(grpc::GenericStub& stub) {
    v1::SortRequest m;
    m.set_u32_keys(U32Bytes({3, 1, 2}));
    RawStream stream(stub, {m.SerializeAsString()});
    return stream.Await();
  }
  // A Sort of {3, 1, 2}: its status, and whether the answer is sorted.
  static grpc::Status Sort(grpc::GenericStub& stub, bool* sorted) {
    v1::SortRequest m;
    m.set_u32_keys(U32Bytes({3, 1, 2}));
    const testing::UnaryResult r = Unary(stub, "Sort", m.SerializeAsString());
    v1::SortResponse answer;
    *sorted = r.status.ok() && answer.ParseFromString(r.response) &&
              answer.u32_keys() == U32Bytes({1, 2, 3});
    return r.status;
  }

  TestCertificates certs_;
};

TEST_F(AuthzTest, ClientsGetOnlyTheMethodGroupsThePolicyAllows) {
  const std::string policy = WritePolicy(
      "# sort for both; shared memory for the colocated job only\n"
      "[sort]\n"
      "sorter\n"
      "colocated job\n"
      "[shared_memory]\n"
      "colocated job\n");
  ServerProcess server(Flags({"--authz_policy=" + policy}));
  ASSERT_TRUE(server.Start()) << server.Output();
  EXPECT_TRUE(server.WaitForLine("authorization: method groups allowed by",
                                 std::chrono::seconds(5)));

  auto sorter = certs_.Channel(server.address(), kSorter);
  grpc::GenericStub sorter_stub(sorter);
  bool sorted = false;
  grpc::Status s = Sort(sorter_stub, &sorted);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_TRUE(sorted);
  s = Stream(sorter_stub);
  EXPECT_TRUE(s.ok()) << s.error_message();
  s = SharedSort(sorter_stub);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_THAT(s.error_message(), HasSubstr("method group 'shared_memory'"));
  EXPECT_THAT(s.error_message(), Not(HasSubstr("colocated")));
  // The same request from a client allowed shared memory reaches the
  // region lookup: its token was never issued.
  auto colocated = certs_.Channel(server.address(), kColocated);
  grpc::GenericStub colocated_stub(colocated);
  s = SharedSort(colocated_stub);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND) << s.error_message();

  // Not listed: every method of both groups refused, naming the group.
  auto stranger = certs_.Channel(server.address(), kStranger);
  grpc::GenericStub stranger_stub(stranger);
  s = Sort(stranger_stub, &sorted);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_THAT(s.error_message(), HasSubstr("method group 'sort'"));
  EXPECT_THAT(s.error_message(), Not(HasSubstr("sorter")));
  for (const char* method : {"Transpose", "Echo"}) {
    s = Unary(stranger_stub, method, "").status;
    EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED) << method;
  }
  s = Stream(stranger_stub);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  s = SharedSort(stranger_stub);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED);

  // Health stays open to every certificate the handshake admitted.
  {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(30));
    grpc::Slice empty("");  // HealthCheckRequest{}: the whole server
    grpc::ByteBuffer request(&empty, 1), response;
    std::promise<grpc::Status> done;
    stranger_stub.UnaryCall(&context, "/grpc.health.v1.Health/Check", {},
                            &request, &response,
                            [&](grpc::Status st) { done.set_value(st); });
    EXPECT_TRUE(done.get_future().get().ok());
  }

  // sortd serves on.
  s = Sort(sorter_stub, &sorted);
  EXPECT_TRUE(s.ok()) << s.error_message();
  EXPECT_TRUE(sorted);
  EXPECT_EQ(server.Terminate(), 0) << server.Output();
}

TEST_F(AuthzTest, APolicySortdCannotUseStopsItsStart) {
  {
    ServerProcess missing(
        Flags({"--authz_policy=" + certs_.Path("no-such-policy")}));
    EXPECT_FALSE(missing.Start());
    EXPECT_THAT(missing.Output(), HasSubstr("no-such-policy: cannot read"));
  }
  {
    const std::string policy = WritePolicy("[sort]\nsorter\n[admin]\n");
    ServerProcess malformed(Flags({"--authz_policy=" + policy}));
    EXPECT_FALSE(malformed.Start());
    EXPECT_THAT(malformed.Output(),
                HasSubstr("line 3: unknown method group 'admin'"));
  }
  {
    // Without client certificates there are no identities to allow.
    const std::string policy = WritePolicy("[sort]\nsorter\n");
    ServerProcess no_mtls({"--device=cpu", "--authz_policy=" + policy});
    EXPECT_FALSE(no_mtls.Start());
    EXPECT_THAT(no_mtls.Output(), HasSubstr("needs mutual TLS"));
  }
}

}  // namespace
}  // namespace sortd
