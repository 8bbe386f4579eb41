// libFuzzer target: registrations over sortd's shared-memory socket
// (server/shm_socket.h) as a hostile client could send them: any message
// text, zero to three descriptors, each a memfd (any size, any part of it
// allocated, any seals, read-only or not), a pipe or a file of a directory.
// The input is checked against the rule the socket promises: a region is
// registered exactly when the message is "REGISTER 1" with one descriptor
// that is a writable memfd of allocated pages sealed against shrinking,
// growing and resealing and not against writes. Any crash, sanitizer
// report, answer that breaks the rule, or region that outlives its
// connection is a finding.
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "client/shared_memory.h"
#include "server/shared_memory.h"
#include "server/shm_socket.h"

namespace {

struct Served {
  sortd::RegionRegistry regions{{.enabled = true, .max_bytes = 1 << 20}};
  std::string path;
  std::unique_ptr<sortd::ShmSocket> socket;
};

Served& Server() {
  static Served* served = [] {
    auto* s = new Served;
    char dir[] = "/tmp/fuzz_shm_XXXXXX";
    if (mkdtemp(dir) == nullptr) std::abort();
    s->path = std::string(dir) + "/shm.sock";
    auto started = sortd::ShmSocket::Start({.path = s->path}, &s->regions);
    if (!started.ok()) {
      std::fprintf(stderr, "%s\n", started.status().ToString().c_str());
      std::abort();
    }
    s->socket = *std::move(started);
    return s;
  }();
  return *served;
}

void Finding(const char* what, const std::string& detail) {
  std::fprintf(stderr, "fuzz_shm_register: %s: %s\n", what, detail.c_str());
  std::abort();
}

// Reads little-endian fields off the input, zeros past its end.
struct Reader {
  const uint8_t* data;
  size_t size;
  uint32_t Take(int bytes) {
    uint32_t v = 0;
    for (int i = 0; i < bytes; ++i) {
      v |= uint32_t{size > 0 ? *data : uint8_t{0}} << (8 * i);
      if (size > 0) ++data, --size;
    }
    return v;
  }
};

// One descriptor as the input describes it; *valid says whether the rule
// admits it as a region.
int MakeFd(Reader& in, bool* valid) {
  const uint32_t kind = in.Take(1) % 4;
  const size_t size = in.Take(2) * 16;
  const size_t allocated = in.Take(2) * 16;
  const int seal_bits = static_cast<int>(in.Take(1));
  *valid = false;
  if (kind == 1) {
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) std::abort();
    close(fds[1]);
    return fds[0];
  }
  if (kind == 2) {
    char name[] = "/tmp/fuzz_shm_file_XXXXXX";
    const int fd = mkostemp(name, O_CLOEXEC);
    if (fd < 0) std::abort();
    unlink(name);
    if (ftruncate(fd, static_cast<off_t>(size)) != 0) std::abort();
    return fd;
  }
  int fd = memfd_create("fuzz", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) std::abort();
  if (ftruncate(fd, static_cast<off_t>(size)) != 0) std::abort();
  if (allocated > 0) {
    (void)posix_fallocate(fd, 0, static_cast<off_t>(allocated));
  }
  int seals = 0;
  if (seal_bits & 1) seals |= F_SEAL_SHRINK;
  if (seal_bits & 2) seals |= F_SEAL_GROW;
  if (seal_bits & 4) seals |= F_SEAL_SEAL;
  if (seal_bits & 8) seals |= F_SEAL_WRITE;
  if (seal_bits & 16) seals |= F_SEAL_FUTURE_WRITE;
  if (seals != 0 && fcntl(fd, F_ADD_SEALS, seals) != 0) seals = 0;
  if (kind == 3) {  // the same memfd, read-only
    const int ro = open(("/proc/self/fd/" + std::to_string(fd)).c_str(),
                        O_RDONLY | O_CLOEXEC);
    close(fd);
    return ro;
  }
  // fallocate (before the seals) grows the file to what it allocates.
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const size_t file_size = std::max(size, allocated);
  const size_t pages = (file_size + page - 1) / page;
  const size_t allocated_pages = (allocated + page - 1) / page;
  const int required = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL;
  *valid = file_size > 0 && allocated_pages >= pages &&
           (seals & required) == required &&
           (seals & (F_SEAL_WRITE | F_SEAL_FUTURE_WRITE)) == 0;
  return fd;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Served& server = Server();
  Reader in{data, size};
  const uint32_t head = in.Take(1);
  const size_t count = head % 4;
  std::vector<int> fds;
  bool valid = false;
  for (size_t i = 0; i < count; ++i) {
    bool v = false;
    fds.push_back(MakeFd(in, &v));
    valid = v;
  }
  std::string text = "REGISTER 1";
  if (head & 4) text += "\n";
  if (head & 8) {  // the rest of the input as the message
    text.assign(reinterpret_cast<const char*>(in.data),
                std::min<size_t>(in.size, 100));
  }
  const bool message_ok = text == "REGISTER 1" || text == "REGISTER 1\n";
  const bool expect_ok = message_ok && count == 1 && valid;

  absl::StatusOr<int> socket = sortd::ConnectShmSocket(server.path);
  if (!socket.ok()) Finding("connect", socket.status().ToString());
  if (absl::Status s = sortd::SendWithDescriptors(*socket, text, fds);
      !s.ok()) {
    Finding("send", s.ToString());
  }
  for (int fd : fds) close(fd);
  pollfd p{.fd = *socket, .events = POLLIN, .revents = 0};
  if (poll(&p, 1, 10'000) != 1) Finding("no answer", text);
  char answer[1024];
  const ssize_t n = recv(*socket, answer, sizeof answer, 0);
  const std::string got(answer, n > 0 ? static_cast<size_t>(n) : 0);
  if (text.empty() && fds.empty()) {
    // An empty datagram reads as the end of the connection: no answer.
    if (!got.empty()) Finding("answered an empty datagram", got);
  } else if (expect_ok != (got.rfind("OK ", 0) == 0)) {
    Finding(expect_ok ? "refused a valid region" : "registered an invalid one",
            got);
  } else if (expect_ok) {
    const std::string token = got.substr(3, 32);
    if (token.find_first_not_of("0123456789abcdef") != std::string::npos ||
        server.regions.Find(token) == nullptr) {
      Finding("answered a token it does not know", got);
    }
  } else if (got.rfind("ERROR ", 0) != 0) {
    Finding("answered neither OK nor ERROR", got);
  }
  close(*socket);
  // The region ends with its connection.
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (server.regions.regions() != 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      Finding("a region outlived its connection", got);
    }
    sched_yield();
  }
  return 0;
}
