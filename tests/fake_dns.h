// Test support: a DNS server on a loopback UDP port that answers A queries
// for one name with the IPv4 addresses the test sets (and may change while
// clients run), and every other query with no records. gRPC clients reach
// it through the target's authority:
//
//   FakeDns dns("sortd.test");
//   dns.SetAddresses({"127.0.0.2", "127.0.0.3"});
//   Client::Create(absl::StrCat("dns://127.0.0.1:", dns.port(),
//                               "/sortd.test:", port));
#ifndef SORTD_TESTS_FAKE_DNS_H_
#define SORTD_TESTS_FAKE_DNS_H_

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace sortd::testing {

class FakeDns {
 public:
  explicit FakeDns(std::string name) : name_(std::move(name)) {
    fd_ = socket(AF_INET, SOCK_DGRAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    if (fd_ < 0 || bind(fd_, reinterpret_cast<sockaddr*>(&addr), len) != 0 ||
        getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      return;
    }
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this] { Serve(); });
  }
  ~FakeDns() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
    if (fd_ >= 0) close(fd_);
  }

  int port() const { return port_; }  // 0: the socket could not be bound

  void SetAddresses(std::vector<std::string> ipv4) {
    std::lock_guard<std::mutex> lock(mu_);
    addresses_ = std::move(ipv4);
  }

  // A queries answered so far for the name.
  int queries() const { return queries_; }

 private:
  void Serve() {
    uint8_t query[512];
    while (!stop_) {
      pollfd p{fd_, POLLIN, 0};
      if (poll(&p, 1, 50) <= 0) continue;
      sockaddr_in from{};
      socklen_t from_len = sizeof(from);
      const ssize_t n = recvfrom(fd_, query, sizeof(query), 0,
                                 reinterpret_cast<sockaddr*>(&from), &from_len);
      if (n < 12) continue;
      const std::vector<uint8_t> answer = Answer(query, static_cast<size_t>(n));
      if (answer.empty()) continue;
      sendto(fd_, answer.data(), answer.size(), 0,
             reinterpret_cast<sockaddr*>(&from), from_len);
    }
  }

  // The question's name ("a.b.") and where its type starts; 0 if malformed.
  static size_t ReadName(const uint8_t* q, size_t n, std::string* name) {
    size_t at = 12;
    while (at < n && q[at] != 0) {
      const size_t label = q[at];
      if (label > 63 || at + 1 + label >= n) return 0;
      name->append(reinterpret_cast<const char*>(q + at + 1), label);
      name->push_back('.');
      at += 1 + label;
    }
    return at + 5 <= n ? at + 1 : 0;
  }

  std::vector<uint8_t> Answer(const uint8_t* q, size_t n) {
    std::string name;
    const size_t type_at = ReadName(q, n, &name);
    if (type_at == 0) return {};
    const int type = q[type_at] << 8 | q[type_at + 1];
    std::vector<std::string> addresses;
    if (type == 1 && (name == name_ + "." || name == name_)) {
      ++queries_;
      std::lock_guard<std::mutex> lock(mu_);
      addresses = addresses_;
    }
    // Header: the query's id, a response (recursion desired and
    // available, no error), one question, the answers.
    std::vector<uint8_t> out(q, q + type_at + 4);
    out[2] = 0x81;
    out[3] = 0x80;
    out[4] = 0, out[5] = 1;
    out[6] = 0, out[7] = static_cast<uint8_t>(addresses.size());
    for (int i = 8; i < 12; ++i) out[i] = 0;
    for (const std::string& a : addresses) {
      in_addr ip{};
      inet_pton(AF_INET, a.c_str(), &ip);
      const uint8_t* b = reinterpret_cast<const uint8_t*>(&ip.s_addr);
      // The question's name by pointer, A, IN, TTL 0, four bytes.
      const uint8_t record[] = {0xc0, 0x0c, 0, 1, 0,    1,    0,    0,
                                0,    0,    0, 4, b[0], b[1], b[2], b[3]};
      out.insert(out.end(), record, record + sizeof(record));
    }
    return out;
  }

  const std::string name_;
  int fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int> queries_{0};
  std::mutex mu_;
  std::vector<std::string> addresses_;  // guarded by mu_
  std::thread thread_;
};

}  // namespace sortd::testing

#endif  // SORTD_TESTS_FAKE_DNS_H_
