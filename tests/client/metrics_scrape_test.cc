// Reading sortd's metrics from a client (client/metrics_scrape.h): a
// sample's value out of a text exposition, and the HTTP GET that fetches
// it, against a server on loopback that answers as told (a 200, another
// status, nothing, too much) or is not there.
#include "client/metrics_scrape.h"

#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "tests/held_port.h"

namespace sortd::cli {
namespace {

using ::testing::HasSubstr;

constexpr char kExposition[] =
    "# HELP process_cpu_seconds_total CPU time.\n"
    "# TYPE process_cpu_seconds_total counter\n"
    "process_cpu_seconds_total 12.5\n"
    "process_cpu_seconds_total_other 99\n"
    "sortd_requests_total{method=\"Sort\",code=\"OK\"} 7\n"
    "sortd_requests_total{method=\"Sort\",code=\"UNAVAILABLE\"} 3 1700000000\n"
    "sortd_requests_total{method=\"Echo\"} not-a-number\n"
    "sortd_requests 1000\n";

TEST(SampleValue, TheUnlabelledSeriesOrTheSumOfTheLabelledOnes) {
  absl::StatusOr<double> cpu =
      SampleValue(kExposition, "process_cpu_seconds_total");
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  EXPECT_DOUBLE_EQ(*cpu, 12.5);  // not the longer name beside it
  // Labelled series are summed, a timestamp ignored, a value that is not a
  // number skipped; a name that only starts the series' name is not it.
  absl::StatusOr<double> requests =
      SampleValue(kExposition, "sortd_requests_total");
  ASSERT_TRUE(requests.ok()) << requests.status();
  EXPECT_DOUBLE_EQ(*requests, 10);
  absl::StatusOr<double> shorter = SampleValue(kExposition, "sortd_requests");
  ASSERT_TRUE(shorter.ok());
  EXPECT_DOUBLE_EQ(*shorter, 1000);
}

TEST(SampleValue, NoSampleIsNotFoundAndNamesIt) {
  for (const char* name : {"sortd_missing", "process_cpu", "# HELP"}) {
    absl::StatusOr<double> v = SampleValue(kExposition, name);
    EXPECT_EQ(v.status().code(), absl::StatusCode::kNotFound) << name;
    EXPECT_THAT(v.status().message(), HasSubstr(name));
  }
  EXPECT_EQ(SampleValue("", "x").status().code(), absl::StatusCode::kNotFound);
}

// A server on a free loopback port that accepts one connection, reads the
// request, and then sends `answer` (nothing when empty) and closes it; or,
// with `hang`, holds the connection open without answering until the
// client gives up.
class OneAnswerServer {
 public:
  explicit OneAnswerServer(std::string answer, bool hang = false)
      : answer_(std::move(answer)), hang_(hang) {
    listener_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    EXPECT_EQ(bind(listener_, reinterpret_cast<sockaddr*>(&addr), len), 0);
    EXPECT_EQ(listen(listener_, 1), 0);
    getsockname(listener_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this] { Serve(); });
  }
  ~OneAnswerServer() {
    shutdown(listener_, SHUT_RDWR);
    if (thread_.joinable()) thread_.join();
    close(listener_);
  }
  std::string address() const { return absl::StrCat("127.0.0.1:", port_); }
  // What the client sent: once the server has closed the connection.
  const std::string& request() {
    if (thread_.joinable()) thread_.join();
    return request_;
  }

 private:
  void Serve() {
    const int fd = accept(listener_, nullptr, nullptr);
    if (fd < 0) return;
    char buf[4096];
    while (request_.find("\r\n\r\n") == std::string::npos) {
      const ssize_t n = recv(fd, buf, sizeof(buf), 0);
      if (n <= 0) break;
      request_.append(buf, static_cast<size_t>(n));
    }
    if (hang_) {
      // Until the client closes its end.
      while (recv(fd, buf, sizeof(buf), 0) > 0) {
      }
    }
    for (size_t sent = 0; sent < answer_.size();) {
      const ssize_t n =
          send(fd, answer_.data() + sent, answer_.size() - sent, MSG_NOSIGNAL);
      if (n <= 0) break;
      sent += static_cast<size_t>(n);
    }
    close(fd);
  }

  const std::string answer_;
  const bool hang_;
  std::string request_;
  int listener_ = -1;
  int port_ = 0;
  std::thread thread_;
};

TEST(HttpGetBody, TheBodyOfA200) {
  std::string answer = "HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\n";
  absl::StrAppend(&answer, kExposition);
  OneAnswerServer server(answer);
  absl::StatusOr<std::string> body = HttpGetBody(server.address(), "/metrics");
  ASSERT_TRUE(body.ok()) << body.status();
  EXPECT_EQ(*body, kExposition);
  EXPECT_THAT(server.request(), HasSubstr("GET /metrics HTTP/1.0\r\n"));
  EXPECT_THAT(server.request(), HasSubstr("Host: 127.0.0.1\r\n"));
}

TEST(HttpGetBody, AnotherStatusIsAnErrorThatQuotesIt) {
  OneAnswerServer server("HTTP/1.1 404 Not Found\r\n\r\nno such page");
  absl::StatusOr<std::string> body = HttpGetBody(server.address(), "/metrics");
  EXPECT_EQ(body.status().code(), absl::StatusCode::kInternal);
  EXPECT_THAT(body.status().message(), HasSubstr("HTTP/1.1 404 Not Found"));
  // An answer that is not HTTP at all, or ends inside its head.
  OneAnswerServer garbage("SSH-2.0-OpenSSH\r\n");
  EXPECT_EQ(HttpGetBody(garbage.address(), "/").status().code(),
            absl::StatusCode::kInternal);
}

TEST(HttpGetBody, AnAnswerOverSixtyFourMiBIsRefused) {
  std::string answer = "HTTP/1.0 200 OK\r\n\r\n";
  answer.append((size_t{64} << 20) + 1, 'x');
  OneAnswerServer server(std::move(answer));
  absl::StatusOr<std::string> body = HttpGetBody(server.address(), "/metrics");
  EXPECT_EQ(body.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(body.status().message(), HasSubstr("64 MiB"));
}

TEST(HttpGetBody, AServerThatNeverAnswersTimesOut) {
  OneAnswerServer server("", /*hang=*/true);
  absl::StatusOr<std::string> body =
      HttpGetBody(server.address(), "/metrics", absl::Milliseconds(200));
  EXPECT_EQ(body.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(body.status().message(), HasSubstr("no whole answer within"));
}

TEST(HttpGetBody, BadOrUnreachableAddresses) {
  EXPECT_EQ(HttpGetBody("localhost", "/").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(HttpGetBody(":9464", "/").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(HttpGetBody("[::1]:", "/").status().code(),
            absl::StatusCode::kInvalidArgument);
  // A port nothing listens on.
  const testing::HeldPort dead_port;
  ASSERT_TRUE(dead_port.ok());
  const std::string closed = dead_port.target();
  absl::StatusOr<std::string> body = HttpGetBody(closed, "/metrics");
  EXPECT_EQ(body.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(body.status().message(), HasSubstr(closed));
}

}  // namespace
}  // namespace sortd::cli
