// sortctl's terminal and file handling: a progress line for long calls,
// and inputs and outputs that may be files or "-" (stdin, stdout).
//
//   Progress progress(/*quiet=*/json);
//   progress.Step("generating keys");
//   Response r = progress.Wait(future, "sorting 16M keys");
#ifndef SORTD_CLIENT_CLI_IO_H_
#define SORTD_CLIENT_CLI_IO_H_

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <future>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/clock.h"

namespace sortd::cli {

// A live status line on stderr while something takes a while, shown only
// when stderr is a terminal so that scripts and logs stay clean.
class Progress {
 public:
  // Quiet (machine output, say): nothing is drawn.
  explicit Progress(bool quiet) : enabled_(isatty(STDERR_FILENO) && !quiet) {}
  ~Progress() { Clear(); }

  // Waits for `future`, redrawing "<what> 1.2 s" every 100 ms after the
  // first second.
  template <typename T>
  T Wait(std::future<T>& future, const std::string& what) {
    const absl::Time start = absl::Now();
    while (future.wait_for(std::chrono::milliseconds(100)) !=
           std::future_status::ready) {
      const double elapsed = absl::ToDoubleSeconds(absl::Now() - start);
      if (enabled_ && elapsed >= 1.0) {
        std::fprintf(stderr, "\r\033[Ksortctl: %s %.1f s", what.c_str(),
                     elapsed);
        shown_ = true;
      }
    }
    Clear();
    return future.get();
  }

  void Step(const std::string& what) {
    if (!enabled_) return;
    std::fprintf(stderr, "\r\033[Ksortctl: %s", what.c_str());
    shown_ = true;
  }

  void Clear() {
    if (shown_) std::fprintf(stderr, "\r\033[K");
    shown_ = false;
  }

 private:
  bool enabled_;
  bool shown_ = false;
};

// The whole of `path`, or of stdin for "-".
absl::StatusOr<std::string> ReadInput(const std::string& path);
// Writes `text` to `path`, or to stdout for "-"; UNAVAILABLE when not all
// of it could be written (a full disk, a closed pipe).
absl::Status WriteOutput(const std::string& path, const std::string& text);

}  // namespace sortd::cli

#endif  // SORTD_CLIENT_CLI_IO_H_
