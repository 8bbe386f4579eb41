// Test support: runs the real sortd binary as a child process on a free
// loopback port and follows what it prints. Readiness and events are
// observed from its output lines, never by sleeping.
//
//   ServerProcess server({"--device=cpu"});
//   ASSERT_TRUE(server.Start());
//   auto client = sortd::Client::Create(server.address());
//   int exit_code = server.Terminate();  // SIGTERM, then wait
#ifndef SORTD_TESTS_SERVER_PROCESS_H_
#define SORTD_TESTS_SERVER_PROCESS_H_

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace sortd::testing {

// Resident set of a process in bytes (0 if gone).
inline size_t RssBytes(pid_t pid) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) {
      return std::strtoull(line.c_str() + 6, nullptr, 10) * 1024;
    }
  }
  return 0;
}

class ServerProcess {
 public:
  // Sanitized builds start and run several times slower: the server's
  // startup (every kernel built and checked on the OpenCL CPU device) gets
  // that much longer before a test gives up on it.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  static constexpr int kSlowdown = 4;
#else
  static constexpr int kSlowdown = 1;
#endif

  explicit ServerProcess(std::vector<std::string> extra_args,
                         std::vector<std::string> extra_env = {})
      : args_(std::move(extra_args)), env_(std::move(extra_env)) {}
  ~ServerProcess() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    for (std::thread& t : readers_) {
      if (t.joinable()) t.join();
    }
  }

  // Starts sortd and waits for its "serving on" line. False if it exited
  // or did not get ready within `timeout` (times kSlowdown).
  bool Start(std::chrono::seconds timeout = std::chrono::seconds(60)) {
    timeout *= kSlowdown;
    std::vector<std::string> argv = {SORTD_BINARY, "--listen=127.0.0.1:0"};
    bool metrics_given = false;
    for (const std::string& a : args_) {
      if (a.rfind("--metrics_listen", 0) == 0) metrics_given = true;
    }
    if (!metrics_given) argv.push_back("--metrics_listen=");
    argv.insert(argv.end(), args_.begin(), args_.end());
    std::vector<char*> cargv;
    for (std::string& a : argv) cargv.push_back(a.data());
    cargv.push_back(nullptr);

    int out[2], err[2];
    if (pipe(out) != 0 || pipe(err) != 0) return false;
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, out[1], STDOUT_FILENO);
    posix_spawn_file_actions_adddup2(&actions, err[1], STDERR_FILENO);
    posix_spawn_file_actions_addclose(&actions, out[0]);
    posix_spawn_file_actions_addclose(&actions, err[0]);
    std::vector<char*> envp;
    for (char** e = environ; *e != nullptr; ++e) envp.push_back(*e);
    for (std::string& e : env_) envp.push_back(e.data());
    envp.push_back(nullptr);
    int rc = posix_spawn(&pid_, cargv[0], &actions, nullptr, cargv.data(),
                         envp.data());
    posix_spawn_file_actions_destroy(&actions);
    close(out[1]);
    close(err[1]);
    if (rc != 0) return false;
    readers_.emplace_back([this, fd = out[0]] { Read(fd); });
    readers_.emplace_back([this, fd = err[0]] { Read(fd); });

    std::string line;
    if (!WaitForLine("sortd: serving on ", timeout, &line)) return false;
    // "sortd: serving on 127.0.0.1:PORT (metrics on HOST:PORT/metrics)"
    std::string rest = line.substr(line.find("serving on ") + 11);
    address_ = rest.substr(0, rest.find(' '));
    size_t m = rest.find("metrics on ");
    if (m != std::string::npos) {
      std::string metrics = rest.substr(m + 11);
      metrics_address_ = metrics.substr(0, metrics.find('/'));
    }
    return true;
  }

  const std::string& address() const { return address_; }
  const std::string& metrics_address() const { return metrics_address_; }
  pid_t pid() const { return pid_; }

  // Waits until a line containing `needle` has been printed (on stdout or
  // stderr); the line goes to `line`. False on timeout or when the process
  // closed its output first.
  bool WaitForLine(const std::string& needle, std::chrono::seconds timeout,
                   std::string* line = nullptr) {
    std::unique_lock<std::mutex> lock(mu_);
    bool found = cv_.wait_for(lock, timeout, [&] {
      for (const std::string& l : lines_) {
        if (l.find(needle) != std::string::npos) {
          if (line) *line = l;
          return true;
        }
      }
      return closed_ == 2;
    });
    if (!found) return false;
    for (const std::string& l : lines_) {
      if (l.find(needle) != std::string::npos) return true;
    }
    return false;
  }

  // The lines holding `needle`, once there are at least `count` of them;
  // fewer on timeout or when the process closed its output first.
  std::vector<std::string> WaitForLines(const std::string& needle, size_t count,
                                        std::chrono::seconds timeout) {
    std::vector<std::string> found;
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, timeout, [&] {
      found.clear();
      for (const std::string& l : lines_) {
        if (l.find(needle) != std::string::npos) found.push_back(l);
      }
      return found.size() >= count || closed_ == 2;
    });
    return found;
  }

  // Every line printed so far, stdout's and stderr's as they arrived.
  std::vector<std::string> Lines() {
    std::lock_guard<std::mutex> lock(mu_);
    return lines_;
  }

  std::string Output() {
    std::lock_guard<std::mutex> lock(mu_);
    std::string all;
    for (const std::string& l : lines_) all += l + "\n";
    return all;
  }

  // Sends `sig` and waits for the process; returns its exit code, or
  // 128 + signal if a signal killed it.
  int Terminate(int sig = SIGTERM) {
    kill(pid_, sig);
    int status = 0;
    waitpid(pid_, &status, 0);
    pid_ = -1;
    for (std::thread& t : readers_) t.join();
    readers_.clear();
    if (WIFEXITED(status)) return WEXITSTATUS(status);
    return 128 + WTERMSIG(status);
  }

 private:
  void Read(int fd) {
    FILE* f = fdopen(fd, "r");
    char buf[4096];
    while (fgets(buf, sizeof(buf), f) != nullptr) {
      std::string l(buf);
      if (!l.empty() && l.back() == '\n') l.pop_back();
      {
        std::lock_guard<std::mutex> lock(mu_);
        lines_.push_back(l);
      }
      cv_.notify_all();
    }
    fclose(f);
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++closed_;
    }
    cv_.notify_all();
  }

  std::vector<std::string> args_;
  std::vector<std::string> env_;
  pid_t pid_ = -1;
  std::string address_;
  std::string metrics_address_;
  std::vector<std::thread> readers_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::string> lines_;
  int closed_ = 0;
};

// Runs a command through the shell; returns its exit code and output.
struct CommandResult {
  int exit_code = -1;
  std::string out;  // stdout
  std::string err;  // stderr
};

inline CommandResult RunCommand(const std::string& command) {
  char err_path[] = "/tmp/sortd_test_stderr_XXXXXX";
  int fd = mkstemp(err_path);
  close(fd);
  CommandResult r;
  FILE* p = popen((command + " 2>" + err_path).c_str(), "r");
  if (p == nullptr) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) r.out.append(buf, n);
  int status = pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  if (FILE* e = fopen(err_path, "r")) {
    while ((n = fread(buf, 1, sizeof(buf), e)) > 0) r.err.append(buf, n);
    fclose(e);
  }
  unlink(err_path);
  return r;
}

}  // namespace sortd::testing

#endif  // SORTD_TESTS_SERVER_PROCESS_H_
