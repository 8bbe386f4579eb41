#include "server/log.h"

#include <cstdarg>
#include <cstdio>
#include <string>

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace sortd {

void LogLine(const char* format, ...) {
  // One write per line, so that lines of concurrent requests never mix.
  std::string line = absl::FormatTime(
      "%Y-%m-%dT%H:%M:%E3SZ sortd: ", absl::Now(), absl::UTCTimeZone());
  va_list args;
  va_start(args, format);
  char buffer[1024];
  const int n = std::vsnprintf(buffer, sizeof(buffer), format, args);
  va_end(args);
  if (n < 0) return;
  if (static_cast<size_t>(n) < sizeof(buffer)) {
    line.append(buffer, n);
  } else {
    std::string big(static_cast<size_t>(n) + 1, '\0');
    va_start(args, format);
    std::vsnprintf(big.data(), big.size(), format, args);
    va_end(args);
    big.pop_back();
    line += big;
  }
  std::fwrite(line.data(), 1, line.size(), stderr);
}

}  // namespace sortd
