// A minimal HTTP/1.0 GET on loopback, for tests of the metrics endpoint.
#ifndef SORTD_TESTS_HTTP_GET_H_
#define SORTD_TESTS_HTTP_GET_H_

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

namespace sortd {

// The whole response (status line, headers, body); empty when the
// connection fails.
inline std::string HttpGet(const std::string& host_port,
                           const std::string& path) {
  const size_t colon = host_port.rfind(':');
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(std::stoi(host_port.substr(colon + 1)));
  inet_pton(AF_INET, host_port.substr(0, colon).c_str(), &addr.sin_addr);
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return "";
  }
  const std::string req = "GET " + path + " HTTP/1.0\r\nHost: x\r\n\r\n";
  (void)!write(fd, req.data(), req.size());
  std::string body;
  char buf[8192];
  ssize_t n;
  while ((n = read(fd, buf, sizeof(buf))) > 0) body.append(buf, n);
  close(fd);
  return body;
}

// The value of an unlabelled sample `name` in a Prometheus text exposition,
// or -1 when it is not there.
inline double MetricValue(const std::string& exposition,
                          const std::string& name) {
  const std::string needle = "\n" + name + " ";
  const size_t at = exposition.find(needle);
  if (at == std::string::npos) return -1;
  return std::strtod(exposition.c_str() + at + needle.size(), nullptr);
}

}  // namespace sortd

#endif  // SORTD_TESTS_HTTP_GET_H_
