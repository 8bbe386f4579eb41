#include "server/log.h"

#include <atomic>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"

namespace sortd {
namespace {

std::atomic<int> g_min_level{static_cast<int>(LogLevel::kInfo)};
std::atomic<int> g_format{static_cast<int>(LogFormat::kText)};

const char* LevelName(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug:
      return "debug";
    case LogLevel::kInfo:
      return "info";
    case LogLevel::kWarning:
      return "warning";
    case LogLevel::kError:
      return "error";
  }
  return "info";
}

// `s` as the inside of a JSON string.
void AppendJsonEscaped(absl::string_view s, std::string* out) {
  for (const char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out->push_back('\\');
      out->push_back(c);
    } else if (c == '\n') {
      out->append("\\n");
    } else if (u < 0x20) {
      absl::StrAppendFormat(out, "\\u%04x", u);
    } else {
      out->push_back(c);
    }
  }
}

// The id of "request=N" in `message`, if it names one.
bool RequestId(absl::string_view message, uint64_t* id) {
  const size_t at = message.find("request=");
  if (at == absl::string_view::npos) return false;
  absl::string_view digits = message.substr(at + 8);
  size_t n = 0;
  while (n < digits.size() && absl::ascii_isdigit(digits[n])) ++n;
  return n > 0 && absl::SimpleAtoi(digits.substr(0, n), id);
}

std::string Format(const char* format, va_list args) {
  va_list again;
  va_copy(again, args);
  char buffer[1024];
  const int n = std::vsnprintf(buffer, sizeof(buffer), format, args);
  std::string message;
  if (n >= 0 && static_cast<size_t>(n) < sizeof(buffer)) {
    message.assign(buffer, n);
  } else if (n >= 0) {
    message.resize(static_cast<size_t>(n) + 1);
    std::vsnprintf(message.data(), message.size(), format, again);
    message.pop_back();
  }
  va_end(again);
  return message;
}

void Write(LogLevel level, const char* format, va_list args) {
  if (static_cast<int>(level) < g_min_level.load(std::memory_order_relaxed)) {
    return;
  }
  const std::string line = FormatLogLine(
      level, static_cast<LogFormat>(g_format.load(std::memory_order_relaxed)),
      absl::Now(), Format(format, args));
  std::fwrite(line.data(), 1, line.size(), stderr);
}

}  // namespace

absl::StatusOr<LogLevel> ParseLogLevel(absl::string_view name) {
  for (LogLevel level : {LogLevel::kDebug, LogLevel::kInfo, LogLevel::kWarning,
                         LogLevel::kError}) {
    if (name == LevelName(level)) return level;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "--log_level: debug, info, warning or error, not '", name, "'"));
}

absl::StatusOr<LogFormat> ParseLogFormat(absl::string_view name) {
  if (name == "text") return LogFormat::kText;
  if (name == "json") return LogFormat::kJson;
  return absl::InvalidArgumentError(
      absl::StrCat("--log_format: text or json, not '", name, "'"));
}

void SetLogOptions(LogLevel level, LogFormat format) {
  g_min_level.store(static_cast<int>(level), std::memory_order_relaxed);
  g_format.store(static_cast<int>(format), std::memory_order_relaxed);
}

std::string FormatLogLine(LogLevel level, LogFormat format, absl::Time time,
                          absl::string_view message) {
  if (!message.empty() && message.back() == '\n') message.remove_suffix(1);
  const std::string when =
      absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", time, absl::UTCTimeZone());
  std::string line;
  if (format == LogFormat::kText) {
    line = absl::StrCat(when, " sortd: ");
    if (level != LogLevel::kInfo) {
      line += absl::AsciiStrToUpper(LevelName(level));
      line += ": ";
    }
    // One event, one line: a newline or other control character inside the
    // message (a client's text quoted in an error) is written escaped, so
    // that no client can forge a line of its own.
    for (const char c : message) {
      const auto u = static_cast<unsigned char>(c);
      if (u < 0x20 || u == 0x7f) {
        absl::StrAppendFormat(&line, "\\x%02x", u);
      } else {
        line.push_back(c);
      }
    }
    line += "\n";
    return line;
  }
  absl::StrAppend(&line, "{\"time\":\"", when, "\",\"level\":\"",
                  LevelName(level), "\"");
  if (uint64_t id = 0; RequestId(message, &id)) {
    absl::StrAppend(&line, ",\"request\":", id);
  }
  line += ",\"msg\":\"";
  AppendJsonEscaped(message, &line);
  line += "\"}\n";
  return line;
}

void LogLine(const char* format, ...) {
  va_list args;
  va_start(args, format);
  Write(LogLevel::kInfo, format, args);
  va_end(args);
}

void LogAt(LogLevel level, const char* format, ...) {
  va_list args;
  va_start(args, format);
  Write(level, format, args);
  va_end(args);
}

}  // namespace sortd
