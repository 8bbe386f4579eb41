#include "client/metrics_scrape.h"

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"

namespace sortd::cli {
namespace {

constexpr size_t kMaxBody = size_t{64} << 20;

// Closes a descriptor when it goes out of scope.
struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) close(fd);
  }
};

// Waits for `events` on `fd` until `deadline`; false on timeout or error.
bool WaitFor(int fd, short events, absl::Time deadline) {
  for (;;) {
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) return false;
    pollfd p{.fd = fd, .events = events, .revents = 0};
    const int r =
        poll(&p, 1, static_cast<int>(absl::ToInt64Milliseconds(left)) + 1);
    if (r > 0) return true;
    if (r == 0) return false;
    if (errno != EINTR) return false;
  }
}

// The host (without an IPv6 address's brackets) and port of "host:port".
struct HostPort {
  std::string host, port;
};

absl::StatusOr<HostPort> SplitHostPort(absl::string_view host_port) {
  absl::string_view host = host_port, port;
  if (const size_t colon = host_port.rfind(':');
      colon != absl::string_view::npos) {
    host = host_port.substr(0, colon);
    port = host_port.substr(colon + 1);
  }
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  if (host.empty() || port.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("metrics address '", host_port, "': expected host:port"));
  }
  return HostPort{std::string(host), std::string(port)};
}

// A non-blocking socket connected to the first of `to`'s addresses that
// accepts before `deadline`; the caller closes it. `host_port` names the
// address in errors.
absl::StatusOr<int> Connect(const HostPort& to, absl::string_view host_port,
                            absl::Time deadline) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (int e = getaddrinfo(to.host.c_str(), to.port.c_str(), &hints, &found);
      e != 0) {
    return absl::UnavailableError(
        absl::StrCat("metrics address '", host_port, "': ", gai_strerror(e)));
  }
  int sock = -1;
  std::string why = "no address";
  for (addrinfo* a = found; a != nullptr && sock < 0; a = a->ai_next) {
    const int fd =
        socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
               a->ai_protocol);
    if (fd < 0) continue;
    if (connect(fd, a->ai_addr, a->ai_addrlen) == 0 ||
        (errno == EINPROGRESS && WaitFor(fd, POLLOUT, deadline))) {
      int err = 0;
      socklen_t len = sizeof(err);
      getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
      if (err == 0) {
        sock = fd;
        break;
      }
      why = std::strerror(err);
    } else {
      why = errno == EINPROGRESS ? "timed out" : std::strerror(errno);
    }
    close(fd);
  }
  freeaddrinfo(found);
  if (sock < 0) {
    return absl::UnavailableError(
        absl::StrCat("metrics at ", host_port, ": ", why));
  }
  return sock;
}

// Sends all of `request` on `fd` before `deadline`.
absl::Status SendAll(int fd, const std::string& request,
                     absl::string_view host_port, absl::Time deadline) {
  for (size_t sent = 0; sent < request.size();) {
    const ssize_t n =
        send(fd, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
    if (n > 0) {
      sent += static_cast<size_t>(n);
    } else if (n < 0 && errno == EAGAIN && WaitFor(fd, POLLOUT, deadline)) {
      continue;
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else {
      return absl::UnavailableError(
          absl::StrCat("metrics at ", host_port, ": the request was not sent"));
    }
  }
  return absl::OkStatus();
}

// Everything `fd` delivers until the server closes it (HTTP/1.0), at most
// kMaxBody bytes, before `deadline` (`timeout` after the start).
absl::StatusOr<std::string> ReceiveAll(int fd, absl::string_view host_port,
                                       absl::Time deadline,
                                       absl::Duration timeout) {
  std::string response;
  char buf[16384];
  for (;;) {
    const ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n > 0) {
      response.append(buf, static_cast<size_t>(n));
      if (response.size() > kMaxBody) {
        return absl::ResourceExhaustedError(absl::StrCat(
            "metrics at ", host_port, ": the answer passes 64 MiB"));
      }
    } else if (n == 0) {
      break;
    } else if (errno == EINTR ||
               (errno == EAGAIN && WaitFor(fd, POLLIN, deadline))) {
      continue;
    } else {
      return absl::UnavailableError(
          absl::StrCat("metrics at ", host_port, ": no whole answer within ",
                       absl::FormatDuration(timeout)));
    }
  }
  return response;
}

// The body of an HTTP response, which must be a 200.
absl::StatusOr<std::string> BodyOf200(const std::string& response,
                                      absl::string_view host_port,
                                      absl::string_view path) {
  const size_t head_end = response.find("\r\n\r\n");
  const absl::string_view status_line =
      absl::string_view(response).substr(0, response.find("\r\n"));
  if (head_end == std::string::npos ||
      !(absl::StartsWith(status_line, "HTTP/1.0 200") ||
        absl::StartsWith(status_line, "HTTP/1.1 200"))) {
    return absl::InternalError(
        absl::StrCat("metrics at ", host_port, path, ": answered '",
                     status_line.substr(0, 80), "', not 200"));
  }
  return response.substr(head_end + 4);
}

}  // namespace

absl::StatusOr<std::string> HttpGetBody(absl::string_view host_port,
                                        absl::string_view path,
                                        absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  absl::StatusOr<HostPort> to = SplitHostPort(host_port);
  if (!to.ok()) return to.status();
  absl::StatusOr<int> fd = Connect(*to, host_port, deadline);
  if (!fd.ok()) return fd.status();
  const Fd sock{*fd};
  const std::string request =
      absl::StrCat("GET ", path, " HTTP/1.0\r\nHost: ", to->host, "\r\n\r\n");
  if (absl::Status s = SendAll(sock.fd, request, host_port, deadline);
      !s.ok()) {
    return s;
  }
  absl::StatusOr<std::string> response =
      ReceiveAll(sock.fd, host_port, deadline, timeout);
  if (!response.ok()) return response.status();
  return BodyOf200(*response, host_port, path);
}

absl::StatusOr<double> SampleValue(absl::string_view exposition,
                                   absl::string_view name) {
  double sum = 0;
  bool found = false;
  for (absl::string_view line : absl::StrSplit(exposition, '\n')) {
    if (!absl::ConsumePrefix(&line, name)) continue;
    if (line.empty() || (line.front() != ' ' && line.front() != '{')) continue;
    if (line.front() == '{') {
      const size_t close = line.find('}');
      if (close == absl::string_view::npos) continue;
      line.remove_prefix(close + 1);
    }
    line = absl::StripLeadingAsciiWhitespace(line);
    // "value" or "value timestamp".
    const absl::string_view value = line.substr(0, line.find(' '));
    double v = 0;
    if (!absl::SimpleAtod(value, &v)) continue;
    sum += v;
    found = true;
  }
  if (!found) {
    return absl::NotFoundError(
        absl::StrCat("no sample named ", name, " in the exposition"));
  }
  return sum;
}

absl::StatusOr<double> ScrapeSample(absl::string_view host_port,
                                    absl::string_view name) {
  absl::StatusOr<std::string> body = HttpGetBody(host_port, "/metrics");
  if (!body.ok()) return body.status();
  absl::StatusOr<double> v = SampleValue(*body, name);
  if (!v.ok()) {
    return absl::Status(
        v.status().code(),
        absl::StrCat("metrics at ", host_port, ": ", v.status().message()));
  }
  return v;
}

}  // namespace sortd::cli
