#include "server/shm_socket.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/log.h"

namespace sortd {
namespace {

constexpr std::string_view kRegister = "REGISTER 1";
// Descriptors read from one message at most; more are closed and refused.
constexpr int kMaxFds = 8;

std::string Errno() { return std::strerror(errno); }

std::string DirectoryOf(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

absl::Status PrepareDirectory(const std::string& dir) {
  // Made here when missing, so that a world-writable mount (a Kubernetes
  // emptyDir is 0777) can hold a directory only sortd's group may enter;
  // setgid, so that the socket takes the directory's group.
  if (mkdir(dir.c_str(), 02770) == 0) chmod(dir.c_str(), 02770);
  struct stat st {};
  if (lstat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat("--shm_socket's directory ", dir,
                     " is not a directory (symbolic links are refused)"));
  }
  if (st.st_uid != geteuid() && st.st_uid != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "--shm_socket's directory ", dir, " belongs to uid ", st.st_uid,
        ", neither sortd's user nor root: its owner could put another "
        "socket in sortd's place"));
  }
  if (st.st_mode & S_IWOTH) {
    return absl::FailedPreconditionError(absl::StrCat(
        "--shm_socket's directory ", dir,
        " is writable by every user: any local user could replace the "
        "socket; give it to sortd's user and its clients' group (mode 0770 "
        "or stricter)"));
  }
  return absl::OkStatus();
}

// One message read from a connection.
struct Message {
  char text[64];
  size_t length = 0;
  bool truncated = false;  // its text or descriptors did not fit
  std::vector<int> fds;    // the descriptors it carried, to be closed
  int error = 0;           // errno, where reading failed
};

// Reads one message from `fd` into `m`: false (with m->error) when
// recvmsg failed.
bool Receive(int fd, Message* m) {
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFds)];
  iovec iov{.iov_base = m->text, .iov_len = sizeof m->text};
  msghdr message{};
  message.msg_iov = &iov;
  message.msg_iovlen = 1;
  message.msg_control = control;
  message.msg_controllen = sizeof control;
  const ssize_t n = recvmsg(fd, &message, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
  if (n < 0) {
    m->error = errno;
    return false;
  }
  for (cmsghdr* h = CMSG_FIRSTHDR(&message); h != nullptr;
       h = CMSG_NXTHDR(&message, h)) {
    if (h->cmsg_level != SOL_SOCKET || h->cmsg_type != SCM_RIGHTS) continue;
    const size_t count = (h->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t k = 0; k < count; ++k) {
      int received;
      std::memcpy(&received, CMSG_DATA(h) + k * sizeof(int), sizeof received);
      m->fds.push_back(received);
    }
  }
  m->length = static_cast<size_t>(n);
  m->truncated = (message.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) != 0;
  return true;
}

// Answers the client on `fd`; false when it does not take the answer (its
// socket's buffer is full: it does not read).
bool Send(int fd, const std::string& text) {
  return send(fd, text.data(), text.size(), MSG_DONTWAIT | MSG_NOSIGNAL) ==
         static_cast<ssize_t>(text.size());
}

// poll's timeout until `deadline` (at least 1 ms; -1: none).
int PollTimeoutMs(absl::Time deadline, absl::Time now) {
  if (deadline == absl::InfiniteFuture()) return -1;
  return static_cast<int>(
      std::max<int64_t>(1, absl::ToInt64Milliseconds(deadline - now) + 1));
}

std::string Reply(const absl::Status& status) {
  std::string message(status.message());
  for (char& c : message) {
    if (c == '\n') c = ' ';
  }
  return absl::StrCat("ERROR ", static_cast<int>(status.code()), " ", message,
                      "\n");
}

}  // namespace

// One client connection, owned by the loop thread.
struct ShmSocket::Connection {
  int fd = -1;
  std::vector<std::string> tokens;
  absl::Time opened;
  uid_t uid = 0;
  pid_t pid = 0;
  bool logged = false;  // a refusal: one log line per connection
};

absl::StatusOr<std::unique_ptr<ShmSocket>> ShmSocket::Start(
    const Options& options, RegionRegistry* regions) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (options.path.empty() || options.path.size() >= sizeof(address.sun_path)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--shm_socket='", options.path, "': expected a path of 1 to ",
        sizeof(address.sun_path) - 1, " bytes"));
  }
  if (absl::Status s = PrepareDirectory(DirectoryOf(options.path)); !s.ok()) {
    return s;
  }
  struct stat st {};
  if (lstat(options.path.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode)) {
      return absl::FailedPreconditionError(
          absl::StrCat("--shm_socket=", options.path,
                       " exists and is not a socket; sortd replaces only a "
                       "socket left by an earlier run"));
    }
    unlink(options.path.c_str());
  }
  std::memcpy(address.sun_path, options.path.data(), options.path.size());
  const int fd =
      socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::InternalError(absl::StrCat("socket: ", Errno()));
  if (bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 ||
      chmod(options.path.c_str(), 0660) != 0 || listen(fd, 64) != 0) {
    const std::string error = Errno();
    close(fd);
    unlink(options.path.c_str());
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot listen on --shm_socket=", options.path, ": ", error));
  }
  const int wake = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake < 0) {
    close(fd);
    unlink(options.path.c_str());
    return absl::InternalError(absl::StrCat("eventfd: ", Errno()));
  }
  std::unique_ptr<ShmSocket> socket(new ShmSocket(options, regions, fd, wake));
  socket->thread_ = std::thread([s = socket.get()] { s->Loop(); });
  return socket;
}

ShmSocket::ShmSocket(const Options& options, RegionRegistry* regions,
                     int listen_fd, int wake_fd)
    : options_(options),
      regions_(regions),
      listen_fd_(listen_fd),
      wake_fd_(wake_fd) {}

ShmSocket::~ShmSocket() {
  Stop();
  close(listen_fd_);
  close(wake_fd_);
}

void ShmSocket::Stop() {
  if (stopping_.exchange(true)) return;
  const uint64_t one = 1;
  (void)!write(wake_fd_, &one, sizeof one);
  if (thread_.joinable()) thread_.join();
  unlink(options_.path.c_str());
}

ShmSocket::Counts ShmSocket::counts() const {
  return {.registered = registered_.load(),
          .refused = refused_.load(),
          .connections = connections_.load(),
          .dropped = dropped_.load(),
          .open = open_.load()};
}

void ShmSocket::Drop(std::vector<Connection>& connections, size_t i) {
  for (const std::string& t : connections[i].tokens) regions_->Unregister(t);
  close(connections[i].fd);
  connections.erase(connections.begin() + static_cast<ptrdiff_t>(i));
}

absl::Time ShmSocket::DropIdle(std::vector<Connection>& connections,
                               absl::Time now) {
  absl::Time next_deadline = absl::InfiniteFuture();
  for (size_t i = 0; i < connections.size();) {
    Connection& c = connections[i];
    if (c.tokens.empty() && now - c.opened >= options_.idle_timeout) {
      ++dropped_;
      Drop(connections, i);
      continue;
    }
    if (c.tokens.empty()) {
      next_deadline = std::min(next_deadline, c.opened + options_.idle_timeout);
    }
    ++i;
  }
  return next_deadline;
}

void ShmSocket::Accept(std::vector<Connection>& connections) {
  const int fd =
      accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
  if (fd < 0) return;
  Connection c;
  c.fd = fd;
  c.opened = absl::Now();
  ucred credentials{};
  socklen_t length = sizeof credentials;
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &credentials, &length) == 0) {
    c.uid = credentials.uid;
    c.pid = credentials.pid;
  }
  if (connections.size() >= options_.max_connections) {
    ++dropped_;
    Send(fd, Reply(absl::ResourceExhaustedError(
                 absl::StrCat(connections.size(),
                              " clients are connected, the most this server "
                              "takes; try again later"))));
    close(fd);
  } else {
    ++connections_;
    connections.push_back(c);
  }
}

absl::StatusOr<RegionRegistry::Registered> ShmSocket::Registration(
    const Connection& c, std::string_view request, bool truncated,
    const std::vector<int>& fds) {
  if (!request.empty() && request.back() == '\n') request.remove_suffix(1);
  if (truncated || request != kRegister) {
    return absl::InvalidArgumentError(
        "expected the message \"REGISTER 1\" with one file descriptor");
  }
  if (fds.size() != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a registration carries exactly one file descriptor, this one ",
        fds.size()));
  }
  if (c.tokens.size() >= options_.max_regions_per_connection) {
    return absl::ResourceExhaustedError(
        absl::StrCat("this connection has ", c.tokens.size(),
                     " regions, the most one connection may register"));
  }
  return regions_->Register(fds[0]);
}

bool ShmSocket::Serve(Connection& c) {
  Message m;
  if (!Receive(c.fd, &m)) {
    return m.error == EAGAIN || m.error == EWOULDBLOCK || m.error == EINTR;
  }
  if (m.length == 0 && m.fds.empty()) return false;  // the client closed
  const absl::StatusOr<RegionRegistry::Registered> registered =
      Registration(c, std::string_view(m.text, m.length), m.truncated, m.fds);
  for (int fd : m.fds) close(fd);
  if (!registered.ok()) {
    ++refused_;
    if (!std::exchange(c.logged, true)) {
      LogAt(LogLevel::kWarning,
            "shared memory: registration from pid %d uid %u refused: %s\n",
            static_cast<int>(c.pid), static_cast<unsigned>(c.uid),
            registered.status().ToString().c_str());
    }
    return Send(c.fd, Reply(registered.status()));
  }
  c.tokens.push_back(registered->token);
  ++registered_;
  return Send(c.fd, absl::StrCat("OK ", registered->token, " ",
                                 registered->bytes, "\n"));
}

void ShmSocket::Loop() {
  std::vector<Connection> connections;
  std::vector<pollfd> polled;
  while (!stopping_.load()) {
    const absl::Time now = absl::Now();
    const absl::Time next_deadline = DropIdle(connections, now);
    // After the idle ones are dropped: the loop may now wait indefinitely.
    open_.store(connections.size());
    polled.clear();
    polled.push_back({.fd = wake_fd_, .events = POLLIN, .revents = 0});
    polled.push_back({.fd = listen_fd_, .events = POLLIN, .revents = 0});
    for (const Connection& c : connections) {
      polled.push_back({.fd = c.fd, .events = POLLIN, .revents = 0});
    }
    if (poll(polled.data(), polled.size(), PollTimeoutMs(next_deadline, now)) <
            0 &&
        errno != EINTR) {
      LogAt(LogLevel::kError, "shared memory: poll: %s\n", Errno().c_str());
      break;
    }
    if (polled[0].revents != 0) break;  // Stop()
    // Connections first, from the last so that dropping one keeps the
    // indices of those before it; polled[k + 2] is connections[k].
    for (size_t k = connections.size(); k-- > 0;) {
      const short events = polled[k + 2].revents;
      if (events == 0) continue;
      if ((events & POLLIN) == 0 || !Serve(connections[k])) {
        Drop(connections, k);
      }
    }
    if (polled[1].revents & POLLIN) Accept(connections);
  }
  while (!connections.empty()) Drop(connections, connections.size() - 1);
  open_.store(0);
}

}  // namespace sortd
