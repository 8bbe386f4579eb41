// End to end: sorting through shared memory with the real sortd. A client
// hands sortd a sealed memfd over the Unix socket of --shm_socket, writes
// its arrays there, and gets them sorted without array bytes on the gRPC
// socket; every descriptor that could let a client take pages away from
// under the server, or charge the server for its memory, is refused, and
// no client can name, stall or reach past its own regions.
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "client/client.h"
#include "client/shared_memory.h"
#include "tests/http_get.h"
#include "tests/raw_grpc.h"
#include "tests/reference.h"
#include "tests/server_process.h"

namespace sortd {
namespace {

using ::testing::HasSubstr;
using ::testing::MatchesRegex;
using testing::ServerProcess;

// A fresh directory only this user may enter.
std::string PrivateDir() {
  char dir[] = "/tmp/sortd_shm_XXXXXX";
  EXPECT_NE(mkdtemp(dir), nullptr);
  chmod(dir, 0700);
  return dir;
}

// A memfd of `bytes` bytes with `seals` added, its pages allocated or not.
int Memfd(size_t bytes, int seals, bool allocate = true) {
  const int fd = memfd_create("test", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  EXPECT_GE(fd, 0);
  EXPECT_EQ(ftruncate(fd, static_cast<off_t>(bytes)), 0);
  if (allocate && bytes > 0) {
    EXPECT_EQ(posix_fallocate(fd, 0, static_cast<off_t>(bytes)), 0);
  }
  if (seals != 0) {
    EXPECT_EQ(fcntl(fd, F_ADD_SEALS, seals), 0);
  }
  return fd;
}
constexpr int kSeals = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL;

// Sends `text` with `fds` attached over `socket` and reads the answer.
std::string Exchange(int socket, const std::string& text,
                     const std::vector<int>& fds) {
  EXPECT_TRUE(SendWithDescriptors(socket, text, fds).ok());
  char answer[1024];
  const ssize_t n = recv(socket, answer, sizeof answer, 0);
  return n > 0 ? std::string(answer, static_cast<size_t>(n)) : "";
}

class SharedMemoryTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(PrivateDir());
    server_ = new ServerProcess(
        {"--device=cpu", "--cpu_threads=2", "--shm_socket=" + Socket(),
         "--shm_max_bytes=268435456", "--shm_idle_timeout=1s"});
    ASSERT_TRUE(server_->Start()) << server_->Output();
  }
  static void TearDownTestSuite() {
    EXPECT_EQ(server_->Terminate(), 0) << server_->Output();
    delete server_;
    std::filesystem::remove_all(*dir_);
    delete dir_;
  }
  static std::string Socket() { return *dir_ + "/sortd.sock"; }
  void SetUp() override {
    auto client = Client::Create(server_->address());
    ASSERT_TRUE(client.ok()) << client.status();
    client_ = std::move(*client);
  }

  // A u32 sort of `n` keys with u64 values and the permutation, laid out
  // as [keys | values | keys out | values out | permutation].
  static v1::SortRequest Layout(const std::string& token, size_t n) {
    v1::SortRequest r;
    r.set_u32_keys("");
    r.set_u64_values("");
    r.set_return_permutation(true);
    v1::SharedArrays* s = r.mutable_shared();
    s->set_region(token);
    s->set_count(n);
    s->set_keys_offset(0);
    s->set_values_offset(n * 4);
    s->set_keys_out_offset(n * 12);
    s->set_values_out_offset(n * 16);
    s->set_permutation_offset(n * 24);
    return r;
  }

  // Waits (up to 10 s) until a sort naming `token` is NOT_FOUND.
  bool BecomesUnknown(const std::string& token) {
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (std::chrono::steady_clock::now() < deadline) {
      if (client_->Sort(Layout(token, 10)).status().code() ==
          absl::StatusCode::kNotFound) {
        return true;
      }
    }
    return false;
  }

  static ServerProcess* server_;
  static std::string* dir_;
  std::unique_ptr<Client> client_;
};

ServerProcess* SharedMemoryTest::server_ = nullptr;
std::string* SharedMemoryTest::dir_ = nullptr;

TEST_F(SharedMemoryTest, SortsInTheRegionWithoutArraysOnTheWire) {
  constexpr size_t n = 100'000;
  auto region = SharedRegion::Create(Socket(), n * 28);
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
    const v1::SortRequest request = Layout((*region)->token(), n);
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
  auto region = SharedRegion::Create(Socket(), n * 28);
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
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    v1::SortRequest request = Layout((*region)->token(), n);
    c.edit(request);
    absl::StatusOr<v1::SortResponse> r = client_->Sort(request);
    EXPECT_EQ(r.status().code(), c.code) << r.status();
    EXPECT_THAT(r.status().message(), HasSubstr(c.says));
  }
}

// Tokens are capabilities: 128 random bits, and a guess (or a token that
// has ended) is answered the same way, without saying what exists.
TEST_F(SharedMemoryTest, TokensAreUnguessableAndRevealNothing) {
  auto a = SharedRegion::Create(Socket(), 4096);
  auto b = SharedRegion::Create(Socket(), 4096);
  ASSERT_TRUE(a.ok() && b.ok()) << a.status() << b.status();
  EXPECT_THAT((*a)->token(), MatchesRegex("[0-9a-f]{32}"));
  EXPECT_NE((*a)->token(), (*b)->token());
  std::string guess = (*a)->token();
  guess[31] = guess[31] == '0' ? '1' : '0';
  absl::StatusOr<v1::SortResponse> r = client_->Sort(Layout(guess, 10));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound) << r.status();
  EXPECT_THAT(std::string(r.status().message()),
              ::testing::Not(HasSubstr(guess)));
  const std::string ended = (*b)->token();
  b->reset();
  ASSERT_TRUE(BecomesUnknown(ended));
  EXPECT_EQ(client_->Sort(Layout(ended, 10)).status().message(),
            r.status().message());
  std::memset((*a)->data(), 0, 4096);
  EXPECT_TRUE(client_->Sort(Layout((*a)->token(), 100)).ok());
}

// Only a sealed memfd of allocated pages, open for writing, is mapped:
// nothing the client keeps can shrink it under the server (SIGBUS), and
// the server is never charged for pages the client did not allocate.
TEST_F(SharedMemoryTest, OnlySealedAllocatedMemfdsAreMapped) {
  const std::string outside = PrivateDir() + "/file";
  const int plain = open(outside.c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0600);
  ASSERT_GE(plain, 0);
  ASSERT_EQ(ftruncate(plain, 4096), 0);
  int pipe_fds[2];
  ASSERT_EQ(pipe2(pipe_fds, O_CLOEXEC), 0);
  const int read_only = [] {
    const int fd = Memfd(4096, kSeals);
    const int ro = open(("/proc/self/fd/" + std::to_string(fd)).c_str(),
                        O_RDONLY | O_CLOEXEC);
    close(fd);
    return ro;
  }();
  struct Case {
    const char* name;
    int fd;
    const char* says;
  };
  const Case cases[] = {
      {"a file of a directory", plain, "not a memfd"},
      {"a pipe", pipe_fds[0], "not a regular file"},
      {"an unsealed memfd", Memfd(4096, 0), "not sealed"},
      {"a memfd that may still shrink", Memfd(4096, F_SEAL_GROW | F_SEAL_SEAL),
       "not sealed"},
      {"a memfd whose seals may change",
       Memfd(4096, F_SEAL_SHRINK | F_SEAL_GROW), "not sealed"},
      {"a memfd sealed against writes", Memfd(4096, kSeals | F_SEAL_WRITE),
       "sealed against writes"},
      {"a sparse memfd", Memfd(size_t{64} << 20, kSeals, false),
       "not yet allocated"},
      {"an empty memfd", Memfd(0, kSeals), "empty"},
      {"a read-only descriptor", read_only, "reading and writing"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    absl::StatusOr<int> socket = ConnectShmSocket(Socket());
    ASSERT_TRUE(socket.ok()) << socket.status();
    auto r = RegisterMemfd(*socket, c.fd);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument)
        << r.status();
    EXPECT_THAT(r.status().message(), HasSubstr(c.says));
    close(*socket);
    close(c.fd);
  }
  close(pipe_fds[1]);
  std::filesystem::remove_all(std::filesystem::path(outside).parent_path());
  // And a registered region cannot be shrunk by its client.
  const int fd = Memfd(1 << 20, kSeals);
  absl::StatusOr<int> socket = ConnectShmSocket(Socket());
  ASSERT_TRUE(socket.ok());
  auto r = RegisterMemfd(*socket, fd);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_NE(ftruncate(fd, 0), 0);
  EXPECT_EQ(errno, EPERM);
  EXPECT_TRUE(client_->Echo(Layout(r->first, 1000)).ok());
  close(fd);
  close(*socket);
}

// Messages that are not one registration with one descriptor are refused,
// and every descriptor they carried is closed; the connection serves on.
TEST_F(SharedMemoryTest, MalformedRegistrationsAreRefused) {
  absl::StatusOr<int> socket = ConnectShmSocket(Socket());
  ASSERT_TRUE(socket.ok());
  const int a = Memfd(4096, kSeals), b = Memfd(4096, kSeals);
  EXPECT_THAT(Exchange(*socket, "REGISTER 1\n", {}),
              HasSubstr("exactly one file descriptor"));
  EXPECT_THAT(Exchange(*socket, "REGISTER 1\n", {a, b}),
              HasSubstr("exactly one file descriptor"));
  EXPECT_THAT(Exchange(*socket, "OPEN /etc/passwd\n", {a}),
              HasSubstr("expected the message"));
  EXPECT_THAT(Exchange(*socket, std::string(200, 'x'), {a}),
              HasSubstr("expected the message"));
  EXPECT_THAT(Exchange(*socket, "REGISTER 1\n", {a}),
              MatchesRegex("OK [0-9a-f]{32} 4096\n"));
  close(a);
  close(b);
  close(*socket);
}

// Registration runs on its own thread without blocking calls: connections
// that never send anything hold up neither other registrations nor
// sorts, and are closed after --shm_idle_timeout.
TEST_F(SharedMemoryTest, SilentConnectionsHoldNothingUpAndAreClosed) {
  std::vector<int> silent;
  for (int i = 0; i < 8; ++i) {
    absl::StatusOr<int> s = ConnectShmSocket(Socket());
    ASSERT_TRUE(s.ok());
    silent.push_back(*s);
  }
  const auto start = std::chrono::steady_clock::now();
  auto region = SharedRegion::Create(Socket(), 4096);
  ASSERT_TRUE(region.ok()) << region.status();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(1));
  for (int s : silent) {
    char byte;
    // Closed by the server (idle for 1 s here): recv sees the end.
    pollfd p{.fd = s, .events = POLLIN, .revents = 0};
    ASSERT_EQ(poll(&p, 1, 10'000), 1);
    EXPECT_EQ(recv(s, &byte, 1, 0), 0);
    close(s);
  }
  // The region of a connection that registered one stays.
  std::memset((*region)->data(), 0, 4096);
  EXPECT_TRUE(client_->Sort(Layout((*region)->token(), 100)).ok());
}

TEST_F(SharedMemoryTest, RegionsAreBoundedByResidentBytes) {
  // --shm_max_bytes is 256 MiB here.
  auto big = SharedRegion::Create(Socket(), size_t{300} << 20);
  EXPECT_EQ(big.status().code(), absl::StatusCode::kResourceExhausted)
      << big.status();
  EXPECT_THAT(big.status().message(), HasSubstr("--shm_max_bytes"));
  auto first = SharedRegion::Create(Socket(), size_t{200} << 20);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(SharedRegion::Create(Socket(), size_t{100} << 20).status().code(),
            absl::StatusCode::kResourceExhausted);
  const std::string token = (*first)->token();
  first->reset();  // its bytes come back once the server sees the close
  ASSERT_TRUE(BecomesUnknown(token));
  EXPECT_TRUE(SharedRegion::Create(Socket(), size_t{100} << 20).ok());
}

// The RPC that registered files by name is gone.
TEST_F(SharedMemoryTest, RegistrationByNameIsGone) {
  grpc::GenericStub stub(testing::Channel(*server_));
  testing::UnaryResult r = testing::Unary(stub, "SharedMemory", "");
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::UNIMPLEMENTED)
      << r.status.error_message();
}

TEST(SharedMemoryOff, WithoutASocketNothingIsMapped) {
  ServerProcess server({"--device=cpu"});
  ASSERT_TRUE(server.Start()) << server.Output();
  auto client = Client::Create(server.address());
  ASSERT_TRUE(client.ok());
  v1::SortRequest request;
  request.set_u32_keys("");
  request.mutable_shared()->set_region("x");
  absl::StatusOr<v1::SortResponse> r = (*client)->Sort(request);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(r.status().message(), HasSubstr("--shm_socket"));
  EXPECT_EQ(server.Terminate(), 0);
}

TEST(SharedMemoryOff, AMissingDirectoryIsMadeForSortdsGroupOnly) {
  const std::string parent = PrivateDir();
  chmod(parent.c_str(), 0777);  // like a Kubernetes emptyDir
  const std::string dir = parent + "/shm";
  ServerProcess server({"--device=cpu", "--shm_socket=" + dir + "/s.sock"});
  ASSERT_TRUE(server.Start()) << server.Output();
  struct stat st {};
  ASSERT_EQ(stat(dir.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0770u);
  ASSERT_EQ(lstat((dir + "/s.sock").c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  EXPECT_EQ(st.st_mode & 0777, 0660u);
  EXPECT_EQ(server.Terminate(), 0);
  EXPECT_FALSE(std::filesystem::exists(dir + "/s.sock"))
      << "the socket outlived sortd";
  std::filesystem::remove_all(parent);
}

TEST(SharedMemoryOff, AnUnsafeSocketPathStopsStartup) {
  const std::string dir = PrivateDir();
  const std::string file = dir + "/not-a-socket";
  close(open(file.c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0600));
  std::filesystem::create_directory_symlink(dir, dir + "-link");
  const std::string writable = PrivateDir();
  chmod(writable.c_str(), 0777);
  struct Case {
    std::string path;
    const char* says;
  };
  const Case cases[] = {
      {file, "not a socket"},
      {dir + "-link/s.sock", "symbolic links are refused"},
      {writable + "/s.sock", "writable by every user"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.path);
    ServerProcess server({"--device=cpu", "--shm_socket=" + c.path});
    EXPECT_FALSE(server.Start());
    EXPECT_THAT(server.Output(), HasSubstr(c.says));
    EXPECT_NE(server.Terminate(), 0);
  }
  std::filesystem::remove(dir + "-link");
  std::filesystem::remove_all(dir);
  std::filesystem::remove_all(writable);
}

TEST(SharedMemoryOff, ADirectoryOfAnotherUserStopsStartup) {
  const std::string dir = PrivateDir();
  if (chown(dir.c_str(), 65534, 65534) != 0) {
    std::filesystem::remove_all(dir);
    GTEST_SKIP() << "cannot give a directory to another user here";
  }
  ServerProcess server({"--device=cpu", "--shm_socket=" + dir + "/s.sock"});
  EXPECT_FALSE(server.Start());
  EXPECT_THAT(server.Output(), HasSubstr("belongs to uid 65534"));
  EXPECT_NE(server.Terminate(), 0);
  std::filesystem::remove_all(dir);
}

// A client that keeps its regions does not hold up a drain.
TEST(SharedMemoryOff, OpenRegionsDoNotHoldUpShutdown) {
  const std::string dir = PrivateDir();
  ServerProcess server({"--device=cpu", "--shm_socket=" + dir + "/s.sock",
                        "--drain_timeout=20s"});
  ASSERT_TRUE(server.Start()) << server.Output();
  auto region = SharedRegion::Create(dir + "/s.sock", 4096);
  ASSERT_TRUE(region.ok()) << region.status();
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(server.Terminate(), 0) << server.Output();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(15))
      << "the drain waited for the open registration";
  region->reset();
  std::filesystem::remove_all(dir);
}

// Waits until a scrape of the metrics contains `text` (each scrape is an
// event, not a guess at how long something takes; at most 30 s).
bool WaitForMetric(const ServerProcess& server, const std::string& text) {
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (std::chrono::steady_clock::now() < deadline) {
    if (HttpGet(server.metrics_address(), "/metrics").find(text) !=
        std::string::npos) {
      return true;
    }
  }
  return false;
}

// sortd_shm_regions counts the regions registered, all clients; with
// --shm_pinned and no device whose driver page-locks adopted memory (the
// CPU path here), none is adopted.
TEST(SharedMemoryMetrics, RegionsAndAdoptedBytesAreExported) {
  const std::string dir = PrivateDir();
  ServerProcess server({"--device=cpu", "--shm_socket=" + dir + "/s.sock",
                        "--metrics_listen=127.0.0.1:0", "--shm_pinned"});
  ASSERT_TRUE(server.Start()) << server.Output();
  EXPECT_TRUE(WaitForMetric(server, "sortd_shm_regions 0\n"));
  auto first = SharedRegion::Create(dir + "/s.sock", 1 << 20);
  ASSERT_TRUE(first.ok()) << first.status();
  auto second = SharedRegion::Create(dir + "/s.sock", 4096);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_TRUE(WaitForMetric(server, "sortd_shm_regions 2\n"));
  EXPECT_TRUE(WaitForMetric(server, "sortd_shm_adopted_bytes 0\n"));
  first->reset();  // unregistered once the server sees the close
  EXPECT_TRUE(WaitForMetric(server, "sortd_shm_regions 1\n"));
  EXPECT_THAT(server.Output(), HasSubstr("shared-memory regions: pageable"));
  EXPECT_EQ(server.Terminate(), 0) << server.Output();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace sortd
