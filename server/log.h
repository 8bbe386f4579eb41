// sortd's log lines on stderr: each starts with the time (UTC, ISO 8601,
// milliseconds) and "sortd: ", so that lines of one request (which share
// its request=N) can be put in order and timed from any log collector.
//
//   LogLine("start %s request=%llu from %s\n", method, id, peer);
//   // 2026-11-23T21:12:39.123Z sortd: start Sort request=17 from ipv4:...
#ifndef SORTD_SERVER_LOG_H_
#define SORTD_SERVER_LOG_H_

namespace sortd {

// printf-style; `format` ends with its own newline.
void LogLine(const char* format, ...) __attribute__((format(printf, 1, 2)));

}  // namespace sortd

#endif  // SORTD_SERVER_LOG_H_
