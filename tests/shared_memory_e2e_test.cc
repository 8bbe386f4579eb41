// End to end: sorting through shared memory with the real sortd. A client
// registers a file of the server's --shm_dir, writes its arrays there, and
// gets them sorted without array bytes on the socket; every way of naming
// memory the server must not touch is refused.
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "client/client.h"
#include "client/shared_memory.h"
#include "tests/reference.h"
#include "tests/server_process.h"

namespace sortd {
namespace {

using ::testing::HasSubstr;
using testing::ServerProcess;

// A fresh directory only this user may write.
std::string PrivateDir() {
  char dir[] = "/tmp/sortd_shm_XXXXXX";
  EXPECT_NE(mkdtemp(dir), nullptr);
  chmod(dir, 0700);
  return dir;
}

class SharedMemoryTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(PrivateDir());
    server_ =
        new ServerProcess({"--device=cpu", "--cpu_threads=2",
                           "--shm_dir=" + *dir_, "--shm_max_bytes=268435456"});
    ASSERT_TRUE(server_->Start()) << server_->Output();
  }
  static void TearDownTestSuite() {
    EXPECT_EQ(server_->Terminate(), 0) << server_->Output();
    delete server_;
    std::filesystem::remove_all(*dir_);
    delete dir_;
  }
  void SetUp() override {
    auto client = Client::Create(server_->address());
    ASSERT_TRUE(client.ok()) << client.status();
    client_ = std::move(*client);
  }

  // A u32 sort of `n` keys with u64 values and the permutation, laid out
  // as [keys | values | keys out | values out | permutation].
  static v1::SortRequest Layout(const SharedRegion& region, size_t n) {
    v1::SortRequest r;
    r.set_u32_keys("");
    r.set_u64_values("");
    r.set_return_permutation(true);
    v1::SharedArrays* s = r.mutable_shared();
    s->set_region(region.handle());
    s->set_count(n);
    s->set_keys_offset(0);
    s->set_values_offset(n * 4);
    s->set_keys_out_offset(n * 12);
    s->set_values_out_offset(n * 16);
    s->set_permutation_offset(n * 24);
    return r;
  }

  static ServerProcess* server_;
  static std::string* dir_;
  std::unique_ptr<Client> client_;
};

ServerProcess* SharedMemoryTest::server_ = nullptr;
std::string* SharedMemoryTest::dir_ = nullptr;

TEST_F(SharedMemoryTest, SortsInTheRegionWithoutArraysOnTheWire) {
  constexpr size_t n = 100'000;
  auto region = SharedRegion::Create(*client_, *dir_, n * 28);
  ASSERT_TRUE(region.ok()) << region.status();
  const std::vector<uint32_t> keys =
      testing::Generate<uint32_t>(testing::Shape::kFewDistinct, n, 9);
  std::vector<uint64_t> values(n);
  for (size_t i = 0; i < n; ++i) values[i] = i * 977;
  std::byte* base = (*region)->data();
  std::memcpy(base, keys.data(), n * 4);
  std::memcpy(base + n * 4, values.data(), n * 8);

  for (const char* method : {"Sort", "Echo"}) {
    SCOPED_TRACE(method);
    const v1::SortRequest request = Layout(**region, n);
    absl::StatusOr<v1::SortResponse> r = std::string(method) == "Sort"
                                             ? client_->Sort(request)
                                             : client_->Echo(request);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->keys_case(), v1::SortResponse::kU32Keys);
    EXPECT_TRUE(r->u32_keys().empty()) << "the keys are in the region";
    EXPECT_TRUE(r->permutation().empty());
    std::vector<uint32_t> perm(n), out_keys(n);
    std::vector<uint64_t> out_values(n);
    std::memcpy(out_keys.data(), base + n * 12, n * 4);
    std::memcpy(out_values.data(), base + n * 16, n * 8);
    std::memcpy(perm.data(), base + n * 24, n * 4);
    std::vector<uint32_t> want(n);
    if (std::string(method) == "Sort") {
      want = testing::RefPermutation(keys, false);
    } else {
      for (size_t i = 0; i < n; ++i) want[i] = static_cast<uint32_t>(i);
    }
    ASSERT_EQ(perm, want);
    for (size_t i = 0; i < n; ++i) {
      ASSERT_EQ(out_keys[i], keys[want[i]]) << i;
      ASSERT_EQ(out_values[i], values[want[i]]) << i;
    }
  }
}

TEST_F(SharedMemoryTest, RangesOutsideTheRegionOrOverlappingAreRefused) {
  constexpr size_t n = 1000;
  auto region = SharedRegion::Create(*client_, *dir_, n * 28);
  ASSERT_TRUE(region.ok()) << region.status();
  struct Case {
    const char* name;
    std::function<void(v1::SortRequest&)> edit;
    absl::StatusCode code;
    const char* says;
  };
  const Case cases[] = {
      {"past the end",
       [](v1::SortRequest& r) { r.mutable_shared()->set_keys_offset(n * 27); },
       absl::StatusCode::kInvalidArgument, "outside the region"},
      {"an offset that wraps",
       [](v1::SortRequest& r) {
         r.mutable_shared()->set_keys_out_offset(~uint64_t{0} - 8);
       },
       absl::StatusCode::kInvalidArgument, "outside the region"},
      {"output over an input",
       [](v1::SortRequest& r) {
         r.mutable_shared()->set_values_out_offset(n * 4 + 8);
       },
       absl::StatusCode::kInvalidArgument, "overlap"},
      {"two outputs overlapping",
       [](v1::SortRequest& r) {
         r.mutable_shared()->set_permutation_offset(n * 12 + 4);
       },
       absl::StatusCode::kInvalidArgument, "overlap"},
      {"keys in the message too",
       [](v1::SortRequest& r) { r.set_u32_keys(std::string(8, 'k')); },
       absl::StatusCode::kInvalidArgument, "must be empty"},
      {"more keys than the region holds",
       [](v1::SortRequest& r) { r.mutable_shared()->set_count(n * 100); },
       absl::StatusCode::kInvalidArgument, "outside the region"},
      {"a count past 2^32",
       [](v1::SortRequest& r) {
         r.mutable_shared()->set_count(uint64_t{1} << 40);
       },
       absl::StatusCode::kResourceExhausted, "at most 2^32-1 keys"},
      {"an unknown handle",
       [](v1::SortRequest& r) { r.mutable_shared()->set_region("nope"); },
       absl::StatusCode::kNotFound, "not registered"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    v1::SortRequest request = Layout(**region, n);
    c.edit(request);
    absl::StatusOr<v1::SortResponse> r = client_->Sort(request);
    EXPECT_EQ(r.status().code(), c.code) << r.status();
    EXPECT_THAT(r.status().message(), HasSubstr(c.says));
  }
}

// A client that shrinks its file under the server cannot bring it down:
// the request that touched the missing pages is DATA_LOSS, the server
// serves on.
TEST_F(SharedMemoryTest, AFileShrunkUnderTheServerLosesOnlyItsAnswer) {
  constexpr size_t n = 1 << 16;
  auto region = SharedRegion::Create(*client_, *dir_, n * 28);
  ASSERT_TRUE(region.ok()) << region.status();
  std::string file;
  for (const auto& e : std::filesystem::directory_iterator(*dir_)) {
    file = e.path();  // the only file in the directory
  }
  ASSERT_FALSE(file.empty());
  ASSERT_EQ(truncate(file.c_str(), 0), 0);
  absl::StatusOr<v1::SortResponse> r = client_->Sort(Layout(**region, n));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss) << r.status();
  EXPECT_THAT(r.status().message(), HasSubstr("shrank"));
  // Another region still sorts.
  auto fresh = SharedRegion::Create(*client_, *dir_, 4096);
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  std::memset((*fresh)->data(), 0, 4096);
  EXPECT_TRUE(client_->Sort(Layout(**fresh, 100)).ok());
}

TEST_F(SharedMemoryTest, AClosedRegionCanNoLongerBeNamed) {
  std::string handle;
  v1::SortRequest request;
  {
    auto region = SharedRegion::Create(*client_, *dir_, 4096);
    ASSERT_TRUE(region.ok()) << region.status();
    request = Layout(**region, 10);
    ASSERT_TRUE(client_->Sort(request).ok());
  }  // the stream closes: the server unmaps it
  absl::StatusOr<v1::SortResponse> r = client_->Sort(request);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound) << r.status();
}

// Registers `file` (a name in the server's directory, or anything a
// client might send) directly over the SharedMemory stream.
grpc::Status Register(Client& client, const std::string& file, size_t bytes) {
  grpc::ClientContext context;
  auto stream = client.SharedMemoryStream(&context);
  v1::SharedMemoryRequest request;
  request.set_file(file);
  request.set_bytes(bytes);
  v1::SharedMemoryResponse response;
  if (stream->Write(request) && stream->Read(&response)) {
    stream->WritesDone();
  }
  return stream->Finish();
}

TEST_F(SharedMemoryTest, OnlyPlainFilesOfTheDirectoryAreMapped) {
  const std::string dir = *dir_;
  const std::string outside = PrivateDir() + "/secret";
  {
    const int fd = open(outside.c_str(), O_CREAT | O_RDWR, 0600);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(ftruncate(fd, 4096), 0);
    close(fd);
  }
  ASSERT_EQ(symlink(outside.c_str(), (dir + "/link").c_str()), 0);
  ASSERT_EQ(link(outside.c_str(), (dir + "/hard").c_str()), 0);
  {
    const int fd = open((dir + "/small").c_str(), O_CREAT | O_RDWR, 0600);
    ASSERT_EQ(ftruncate(fd, 100), 0);
    close(fd);
  }
  mkdir((dir + "/sub").c_str(), 0700);
  struct Case {
    std::string file;
    size_t bytes;
    grpc::StatusCode code;
    const char* says;
  };
  const Case cases[] = {
      {"../" +
           std::filesystem::path(outside).parent_path().filename().string() +
           "/secret",
       4096, grpc::StatusCode::INVALID_ARGUMENT, "directly inside"},
      {outside, 4096, grpc::StatusCode::INVALID_ARGUMENT, "directly inside"},
      {"link", 4096, grpc::StatusCode::NOT_FOUND, "symbolic links"},
      {"hard", 4096, grpc::StatusCode::PERMISSION_DENIED, "links"},
      {"sub", 4096, grpc::StatusCode::NOT_FOUND, "cannot open"},
      {"small", 4096, grpc::StatusCode::INVALID_ARGUMENT, "holds 100 bytes"},
      {"missing", 4096, grpc::StatusCode::NOT_FOUND, "cannot open"},
      {"small", size_t{1} << 40, grpc::StatusCode::INVALID_ARGUMENT,
       "holds 100 bytes"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.file);
    const grpc::Status s = Register(*client_, c.file, c.bytes);
    EXPECT_EQ(s.error_code(), c.code) << s.error_message();
    EXPECT_THAT(s.error_message(), HasSubstr(c.says));
  }
  // Beyond --shm_max_bytes (256 MiB here).
  auto big = SharedRegion::Create(*client_, dir, size_t{300} << 20);
  EXPECT_EQ(big.status().code(), absl::StatusCode::kResourceExhausted)
      << big.status();
  std::filesystem::remove_all(std::filesystem::path(outside).parent_path());
}

TEST(SharedMemoryOff, WithoutADirectoryNothingIsMapped) {
  ServerProcess server({"--device=cpu"});
  ASSERT_TRUE(server.Start()) << server.Output();
  auto client = Client::Create(server.address());
  ASSERT_TRUE(client.ok());
  const grpc::Status s = Register(**client, "anything", 4096);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(s.error_message(), HasSubstr("--shm_dir"));
  v1::SortRequest request;
  request.set_u32_keys("");
  request.mutable_shared()->set_region("x");
  EXPECT_EQ((*client)->Sort(request).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(server.Terminate(), 0);
}

TEST(SharedMemoryOff, AMissingDirectoryIsMadeForSortdsGroupOnly) {
  const std::string parent = PrivateDir();
  chmod(parent.c_str(), 0777);  // like a Kubernetes emptyDir
  const std::string dir = parent + "/shm";
  ServerProcess server({"--device=cpu", "--shm_dir=" + dir});
  ASSERT_TRUE(server.Start()) << server.Output();
  struct stat st {};
  ASSERT_EQ(stat(dir.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0770u);
  EXPECT_EQ(server.Terminate(), 0);
  std::filesystem::remove_all(parent);
}

TEST(SharedMemoryOff, ADirectoryOfAnotherUserStopsStartup) {
  const std::string dir = PrivateDir();
  if (chown(dir.c_str(), 65534, 65534) != 0) {
    std::filesystem::remove_all(dir);
    GTEST_SKIP() << "cannot give a directory to another user here";
  }
  ServerProcess server({"--device=cpu", "--shm_dir=" + dir});
  EXPECT_FALSE(server.Start());
  EXPECT_THAT(server.Output(), HasSubstr("belongs to uid 65534"));
  EXPECT_NE(server.Terminate(), 0);
  std::filesystem::remove_all(dir);
}

// A client that keeps its regions does not hold up a drain.
TEST(SharedMemoryOff, OpenRegionsDoNotHoldUpShutdown) {
  const std::string dir = PrivateDir();
  ServerProcess server(
      {"--device=cpu", "--shm_dir=" + dir, "--drain_timeout=20s"});
  ASSERT_TRUE(server.Start()) << server.Output();
  auto client = Client::Create(server.address());
  ASSERT_TRUE(client.ok());
  auto region = SharedRegion::Create(**client, dir, 4096);
  ASSERT_TRUE(region.ok()) << region.status();
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(server.Terminate(), 0) << server.Output();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(15))
      << "the drain waited for the open SharedMemory stream";
  region->reset();
  std::filesystem::remove_all(dir);
}

TEST(SharedMemoryOff, ADirectoryOthersMayWriteStopsStartup) {
  const std::string dir = PrivateDir();
  chmod(dir.c_str(), 0777);
  ServerProcess server({"--device=cpu", "--shm_dir=" + dir});
  EXPECT_FALSE(server.Start());
  EXPECT_THAT(server.Output(), HasSubstr("writable by every user"));
  EXPECT_NE(server.Terminate(), 0);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace sortd
