#include "server/connections.h"

#include <chrono>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"

namespace sortd {
namespace {

constexpr absl::string_view kEstablished = "01";  // TCP_ESTABLISHED

// Adds the rows of one /proc/net/tcp* table whose local port is `port`.
// Rows read
//   sl local_address rem_address st tx_queue:rx_queue ...
//   0: 0100007F:A2C9 0100007F:D3E4 01 00000000:00000000 ...
// with the port after the colon and the queues in hexadecimal.
absl::Status AddFromTable(const char* path, int port, PortConnections& out) {
  std::ifstream table(path);
  if (!table) return absl::NotFoundError(std::string("cannot read ") + path);
  std::string line;
  std::getline(table, line);  // the header
  while (std::getline(table, line)) {
    std::vector<absl::string_view> fields =
        absl::StrSplit(line, ' ', absl::SkipEmpty());
    if (fields.size() < 5 || fields[3] != kEstablished) continue;
    const size_t colon = fields[1].rfind(':');
    int local_port = 0;
    if (colon == absl::string_view::npos ||
        !absl::SimpleHexAtoi(fields[1].substr(colon + 1), &local_port) ||
        local_port != port) {
      continue;
    }
    ++out.established;
    const size_t queues = fields[4].find(':');
    uint64_t tx_queue = 0;
    if (queues != absl::string_view::npos &&
        absl::SimpleHexAtoi(fields[4].substr(0, queues), &tx_queue) &&
        tx_queue > 0) {
      ++out.sending;
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<PortConnections> ConnectionsToPort(int port) {
  PortConnections total;
  bool any_table = false;
  for (const char* path : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    // A host without IPv6 has no tcp6 table.
    if (AddFromTable(path, port, total).ok()) any_table = true;
  }
  if (!any_table) return absl::NotFoundError("no /proc/net/tcp table");
  return total;
}

int WaitForAnswersAcknowledged(int port, absl::Time deadline) {
  for (;;) {
    absl::StatusOr<PortConnections> now = ConnectionsToPort(port);
    if (!now.ok() || now->sending == 0) return 0;
    if (absl::Now() >= deadline) return now->sending;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

}  // namespace sortd
