#include "client/shared_memory.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"

namespace sortd {
namespace {

std::string Errno() { return std::strerror(errno); }

// Parses sortd's answer: "OK <token> <bytes>" or "ERROR <code> <message>".
absl::StatusOr<std::pair<std::string, size_t>> ParseAnswer(
    absl::string_view text) {
  if (!text.empty() && text.back() == '\n') text.remove_suffix(1);
  std::vector<absl::string_view> words =
      absl::StrSplit(text, absl::MaxSplits(' ', 2));
  if (words.size() == 3 && words[0] == "OK") {
    size_t bytes = 0;
    if (absl::SimpleAtoi(words[2], &bytes) && !words[1].empty()) {
      return std::make_pair(std::string(words[1]), bytes);
    }
  }
  int code = 0;
  if (words.size() == 3 && words[0] == "ERROR" &&
      absl::SimpleAtoi(words[1], &code) && code > 0 && code <= 16) {
    return absl::Status(static_cast<absl::StatusCode>(code),
                        absl::StrCat("sortd refused the region: ", words[2]));
  }
  return absl::InternalError(
      absl::StrCat("sortd's shared-memory socket answered '", text,
                   "', not a registration"));
}

}  // namespace

absl::StatusOr<int> ConnectShmSocket(const std::string& socket_path) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (socket_path.empty() || socket_path.size() >= sizeof address.sun_path) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", socket_path, "' is not a Unix socket path"));
  }
  std::memcpy(address.sun_path, socket_path.data(), socket_path.size());
  const int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::InternalError(absl::StrCat("socket: ", Errno()));
  if (connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) {
    const std::string error = Errno();
    close(fd);
    return absl::UnavailableError(absl::StrCat(
        "cannot connect to sortd's shared-memory socket ", socket_path, ": ",
        error, " (is sortd running with --shm_socket=", socket_path, "?)"));
  }
  return fd;
}

absl::Status SendWithDescriptors(int socket, absl::string_view text,
                                 const std::vector<int>& fds) {
  constexpr size_t kMaxFds = 8;
  if (fds.size() > kMaxFds) {
    return absl::InvalidArgumentError("at most 8 descriptors a message");
  }
  iovec iov{.iov_base = const_cast<char*>(text.data()), .iov_len = text.size()};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFds)] = {};
  msghdr message{};
  message.msg_iov = &iov;
  message.msg_iovlen = 1;
  if (!fds.empty()) {
    message.msg_control = control;
    message.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
    cmsghdr* header = CMSG_FIRSTHDR(&message);
    header->cmsg_level = SOL_SOCKET;
    header->cmsg_type = SCM_RIGHTS;
    header->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
    std::memcpy(CMSG_DATA(header), fds.data(), sizeof(int) * fds.size());
  }
  if (sendmsg(socket, &message, MSG_NOSIGNAL) < 0) {
    return absl::UnavailableError(
        absl::StrCat("sending to sortd's shared-memory socket: ", Errno()));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::pair<std::string, size_t>> RegisterMemfd(
    int socket, int fd, absl::Duration timeout) {
  if (absl::Status s = SendWithDescriptors(socket, "REGISTER 1\n", {fd});
      !s.ok()) {
    return s;
  }
  pollfd p{.fd = socket, .events = POLLIN, .revents = 0};
  const int ready =
      poll(&p, 1, static_cast<int>(absl::ToInt64Milliseconds(timeout)));
  if (ready <= 0) {
    return absl::DeadlineExceededError(
        "sortd did not answer the registration in time");
  }
  char answer[1024];
  const ssize_t n = recv(socket, answer, sizeof answer, 0);
  if (n <= 0) {
    return absl::UnavailableError(
        n == 0 ? std::string("sortd closed the shared-memory connection")
               : absl::StrCat("reading sortd's answer: ", Errno()));
  }
  return ParseAnswer(absl::string_view(answer, static_cast<size_t>(n)));
}

absl::StatusOr<std::unique_ptr<SharedRegion>> SharedRegion::Create(
    const std::string& socket_path, size_t bytes, absl::Duration timeout) {
  if (bytes == 0) return absl::InvalidArgumentError("a region of 0 bytes");
  const int fd = memfd_create("sortd-region", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) {
    return absl::ResourceExhaustedError(
        absl::StrCat("memfd_create: ", Errno()));
  }
  // Every page allocated now (so that running out of memory says so here,
  // and the pages are this process's), then sealed so that neither side
  // can lose a page the other maps.
  int error = ftruncate(fd, static_cast<off_t>(bytes)) == 0
                  ? posix_fallocate(fd, 0, static_cast<off_t>(bytes))
                  : errno;
  if (error == 0 &&
      fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
    error = errno;
  }
  void* base = MAP_FAILED;
  if (error == 0) {
    base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (base == MAP_FAILED) error = errno;
  }
  if (base == MAP_FAILED) {
    close(fd);
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot size, seal or map a memfd of ", bytes,
                     " bytes: ", std::strerror(error)));
  }
  std::unique_ptr<SharedRegion> region(new SharedRegion);
  region->data_ = static_cast<std::byte*>(base);
  region->size_ = bytes;
  absl::StatusOr<int> socket = ConnectShmSocket(socket_path);
  if (!socket.ok()) {
    close(fd);
    return socket.status();
  }
  region->socket_ = *socket;
  absl::StatusOr<std::pair<std::string, size_t>> registered =
      RegisterMemfd(region->socket_, fd, timeout);
  close(fd);  // the mappings on both sides keep the memory
  if (!registered.ok()) return registered.status();
  region->token_ = std::move(registered->first);
  return region;
}

SharedRegion::~SharedRegion() {
  if (socket_ >= 0) close(socket_);
  if (data_ != nullptr) munmap(data_, size_);
}

}  // namespace sortd
