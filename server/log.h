// sortd's log lines on stderr, one write each, so that lines of concurrent
// requests never mix. Two formats (--log_format):
//
//   text: the time (UTC, ISO 8601, milliseconds), "sortd: ", the level
//         when it is not info, the message:
//     2026-11-23T21:12:39.123Z sortd: start Sort request=17 from ipv4:...
//     2026-11-23T21:12:40.001Z sortd: WARNING: a sort batch of 3 ...
//   json: one object a line, for log collectors: time, level, message, and
//         the request's id as a number where the message names one
//         (request=N), so that one request's lines can be gathered:
//     {"time":"2026-11-23T21:12:39.123Z","level":"info","request":17,
//      "msg":"start Sort request=17 from ipv4:..."}
//
// Lines below --log_level are not written.
#ifndef SORTD_SERVER_LOG_H_
#define SORTD_SERVER_LOG_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace sortd {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3 };
enum class LogFormat { kText, kJson };

// "debug", "info", "warning", "error"; INVALID_ARGUMENT otherwise.
absl::StatusOr<LogLevel> ParseLogLevel(absl::string_view name);
// "text" or "json"; INVALID_ARGUMENT otherwise.
absl::StatusOr<LogFormat> ParseLogFormat(absl::string_view name);

// From here on, lines below `level` are dropped and the rest written in
// `format`. Safe to call while other threads log.
void SetLogOptions(LogLevel level, LogFormat format);

// printf-style; `format` ends with its own newline. LogLine logs at info.
void LogLine(const char* format, ...) __attribute__((format(printf, 1, 2)));
void LogAt(LogLevel level, const char* format, ...)
    __attribute__((format(printf, 2, 3)));

// The line LogAt writes for `message` (its trailing newline included).
std::string FormatLogLine(LogLevel level, LogFormat format, absl::Time time,
                          absl::string_view message);

}  // namespace sortd

#endif  // SORTD_SERVER_LOG_H_
