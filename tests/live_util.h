// Helpers of the live tests (switch_live_test, tun_bottleneck_test): child processes owned by
// RAII guards (SIGKILLed with their process group, reaped), temp files, and a reader of the
// one-level JSON lines the tools print.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/test_paths.h"

namespace trim::live {

inline std::string bin_dir() { return trim::testing::bin_dir(); }

inline std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The top-level scalar keys of one JSON object line. The switch's stats end with a nested
// "ports" array, cut off first so that per-port keys cannot shadow the totals.
inline std::map<std::string, std::string> flat_json(std::string line) {
  const size_t ports = line.find(",\"ports\":");
  if (ports != std::string::npos) line = line.substr(0, ports) + "}";
  std::map<std::string, std::string> out;
  size_t i = line.find('{');
  if (i == std::string::npos) return out;
  ++i;
  while (i < line.size()) {
    const size_t k0 = line.find('"', i);
    if (k0 == std::string::npos) break;
    const size_t k1 = line.find('"', k0 + 1);
    const size_t colon = k1 == std::string::npos ? k1 : line.find(':', k1);
    if (colon == std::string::npos) break;
    std::string value;
    size_t v = colon + 1;
    if (line[v] == '"') {
      size_t e = v + 1;
      while (e < line.size() && line[e] != '"') e += line[e] == '\\' ? 2 : 1;
      value = line.substr(v + 1, e - v - 1);
      i = e + 1;
    } else {
      const size_t e = line.find_first_of(",}", v);
      value = line.substr(v, e - v);
      i = e;
    }
    out[line.substr(k0 + 1, k1 - k0 - 1)] = value;
    if (i < line.size() && line[i] == ',') ++i;
    if (i >= line.size() || line[i] == '}') break;
  }
  return out;
}

inline long long num(const std::map<std::string, std::string>& j, const char* key) {
  auto it = j.find(key);
  return it == j.end() ? -1 : std::strtoll(it->second.c_str(), nullptr, 10);
}
inline std::string str(const std::map<std::string, std::string>& j, const char* key) {
  auto it = j.find(key);
  return it == j.end() ? "<missing>" : it->second;
}

// A temporary file removed with the guard.
struct TempFile {
  TempFile() {
    char tmpl[] = "/tmp/trim-switch-live-XXXXXX";
    const int fd = mkstemp(tmpl);
    if (fd >= 0) close(fd);
    path = tmpl;
  }
  ~TempFile() { std::remove(path.c_str()); }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  std::string path;
};

// A child process (argv[0] a path) in a process group of its own, its stdout and stderr in
// temp files. The destructor SIGKILLs the group (the harness's ranks too) and reaps the child.
class Child {
 public:
  Child(const std::vector<std::string>& argv, const std::vector<std::string>& env = {}) {
    pid_ = fork();
    if (pid_ == 0) {
      setpgid(0, 0);  // a group of its own: the harness's ranks die with it
      const int out = ::open(out_.path.c_str(), O_WRONLY | O_TRUNC);
      const int err = ::open(err_.path.c_str(), O_WRONLY | O_TRUNC);
      if (out >= 0) dup2(out, 1);
      if (err >= 0) dup2(err, 2);
      for (const std::string& e : env) putenv(const_cast<char*>(e.c_str()));
      std::vector<char*> a;
      for (const std::string& s : argv) a.push_back(const_cast<char*>(s.c_str()));
      a.push_back(nullptr);
      execv(a[0], a.data());
      _exit(127);
    }
    if (pid_ > 0) setpgid(pid_, pid_);  // also here: no window in which a kill misses the group
  }
  ~Child() {
    if (pid_ > 0) kill(-pid_, SIGKILL);  // the whole group, also what it forked
    if (pid_ > 0 && !reaped_) waitpid(pid_, nullptr, 0);
  }
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;

  // Waits up to timeout_s; SIGKILLs it past that. The exit code, or -1 when killed.
  int wait(double timeout_s) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
    int status = 0;
    while (!reaped_) {
      const pid_t r = waitpid(pid_, &status, WNOHANG);
      if (r == pid_) {
        reaped_ = true;
        break;
      }
      if (std::chrono::steady_clock::now() > end) {
        kill(-pid_, SIGKILL);
        waitpid(pid_, &status, 0);
        reaped_ = true;
        return -1;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }
  void signal(int sig) const {
    if (!reaped_) kill(pid_, sig);
  }
  std::string out() const { return slurp(out_.path); }
  std::string err() const { return slurp(err_.path); }
  pid_t pid() const { return pid_; }

 private:
  TempFile out_, err_;
  pid_t pid_ = -1;
  bool reaped_ = false;
};

}  // namespace trim::live
