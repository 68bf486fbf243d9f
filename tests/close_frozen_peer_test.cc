// The frozen-peer flavour of close isolation, across two processes as in a real job: two ranks
// with four comm pairs between them (pairs 0 and 1 carry frozen -> closer, 2 and 3 closer ->
// frozen). The closer posts a receive on pair 0 (whose CTS the frozen rank may or may not have
// read); the frozen rank is SIGSTOPped (its engine and proxy both stop, as under a debugger or a
// preempted VM); the closer closes pair 0's receive comm; the frozen rank resumes and sends on
// pair 0 (that must fail cleanly, not hang or complete) and on the others, which must all
// deliver exact bytes in both directions. The ranks are this binary again, exec'd with
// CLOSE_RANK set (CloseFrozenPeerRank.Main runs them), so each has its own progress engine and
// its own NCCL_TRIM_TIMEOUT_MS; the test process only orchestrates (handles, signals, steps).
#include <gtest/gtest.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/close_util.h"
#include "tests/env_guard.h"

extern char** environ;

namespace trim::net {
namespace {

using namespace close_test;

constexpr const char* kRankEnv = "CLOSE_RANK";  // "closer:<fd>" or "frozen:<fd>"
constexpr int kPairs = 4;

// ---- The channel between the test process and a rank: length-prefixed blobs ----

bool write_full(int fd, const void* p, size_t n) {
  const char* c = static_cast<const char*>(p);
  while (n > 0) {
    const ssize_t w = ::write(fd, c, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    c += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

bool read_full(int fd, void* p, size_t n, const Clock::time_point& deadline) {
  char* c = static_cast<char*>(p);
  while (n > 0) {
    const auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return false;
    pollfd q{fd, POLLIN, 0};
    const int r = ::poll(&q, 1, static_cast<int>(std::min<long long>(left, 1000)));
    if (r < 0 && errno != EINTR) return false;
    if (r <= 0) continue;  // EINTR (a stopped rank is continued) or another second
    const ssize_t got = ::read(fd, c, n);
    if (got < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (got <= 0) return false;  // EOF: the other side is gone
    c += got;
    n -= static_cast<size_t>(got);
  }
  return true;
}

bool send_blob(int fd, const std::string& b) {
  const uint32_t n = static_cast<uint32_t>(b.size());
  return write_full(fd, &n, sizeof n) && write_full(fd, b.data(), b.size());
}

bool recv_blob(int fd, std::string* out, milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  uint32_t n = 0;
  if (!read_full(fd, &n, sizeof n, deadline) || n > (1u << 20)) return false;
  out->assign(n, '\0');
  return read_full(fd, out->data(), n, deadline);
}

// ---- A rank ----

class Rank {
 public:
  Rank(bool closer, int fd) : closer_(closer), fd_(fd), pairs_(kPairs) {}

  // Commands until "bye" (or the test process goes away); each is answered with "" when all
  // went well, else with what went wrong.
  void run() {
    std::string cmd;
    if (!send_blob(fd_, setup())) return;
    while (recv_blob(fd_, &cmd, milliseconds(120000))) {
      std::istringstream in(cmd);
      std::string name;
      int a = 0, b = 0;
      in >> name >> a >> b;
      const std::string reply = dispatch(name, a, static_cast<uint32_t>(b));
      if (!send_blob(fd_, reply) || name == "bye") return;
    }
  }

 private:
  bool receives(int pair) const { return closer_ ? pair < 2 : pair >= 2; }

  // init, a listen per pair this rank receives on, handles through the test process, then
  // connect and accept until all four comms exist.
  std::string setup() {
    Result<Context*> c = init(InitOptions());
    if (!c.is_ok()) return "init: " + c.status().to_string();
    ctx_ = c.value();
    std::string mine;
    std::vector<ListenComm*> listens(kPairs, nullptr);
    for (int i = 0; i < kPairs; ++i) {
      pairs_[i].name = "pair " + std::to_string(i);
      pairs_[i].send_ctx = ctx_;
      if (!receives(i)) continue;
      uint8_t h[kMaxHandleBytes] = {};
      Result<ListenComm*> l = listen(ctx_, 0, h, sizeof h);
      if (!l.is_ok()) return "listen: " + l.status().to_string();
      listens[i] = l.value();
      mine.append(reinterpret_cast<const char*>(h), sizeof h);
    }
    std::string theirs;
    if (!send_blob(fd_, mine) || !recv_blob(fd_, &theirs, milliseconds(30000)) || theirs.size() != mine.size()) {
      return "no handles from the peer";
    }
    std::vector<std::vector<uint8_t>> handles;
    for (size_t off = 0; off < theirs.size(); off += kMaxHandleBytes) {
      const auto* h = reinterpret_cast<const uint8_t*>(theirs.data()) + off;
      handles.emplace_back(h, h + kMaxHandleBytes);
    }
    const auto deadline = Clock::now() + std::chrono::seconds(20);
    for (bool missing = true; missing && Clock::now() < deadline;) {
      missing = false;
      size_t next_handle = 0;
      for (int i = 0; i < kPairs; ++i) {
        Pair& p = pairs_[i];
        if (receives(i) && p.recv == nullptr) {
          Result<RecvComm*> r = accept(listens[i]);
          if (!r.is_ok()) return "accept: " + r.status().to_string();
          p.recv = r.value();
        } else if (!receives(i) && p.send == nullptr) {
          Result<SendComm*> s = connect(ctx_, 0, handles[next_handle].data(), ConnectOptions());
          if (!s.is_ok()) return "connect: " + s.status().to_string();
          p.send = s.value();
        }
        if (!receives(i)) ++next_handle;
        missing |= p.recv == nullptr && p.send == nullptr;
      }
      if (missing) std::this_thread::yield();
    }
    for (ListenComm* l : listens) {
      if (l != nullptr && !close_listen(l).is_ok()) return "close_listen failed";
    }
    for (const Pair& p : pairs_) {
      if (p.send == nullptr && p.recv == nullptr) return p.name + ": not connected in 20 s";
    }
    return "";
  }

  std::string traffic(const std::vector<int>& which, int rounds, uint32_t seed) {
    std::vector<Transfer> ts = plan(pairs_, which, rounds, seed);
    std::string e = post_all(ts);
    return e.empty() ? drain_and_check(ts, milliseconds(10000)) : e;
  }

  std::string dispatch(const std::string& name, int a, uint32_t seed) {
    const std::vector<int> others = {1, 2, 3};
    if (name == "warm") return traffic({0, 1, 2, 3}, a, seed);
    if (name == "rounds") return traffic(others, a, seed);
    if (name == "arm") {  // closer: pair 0's receive, no send will match it; maybe the others too
      pair0_buf_.assign(1 << 20, 0);
      Result<Request*> r = post_recv(pairs_[0].recv, pair0_buf_.data(), pair0_buf_.size());
      if (!r.is_ok() || r.value() == nullptr) return "pair 0 irecv failed";
      mid_ = plan(pairs_, others, 4, seed);  // made now: posting later must not wait for it
      return a == 0 ? "" : post_all(mid_);
    }
    if (name == "close") {  // closer, while the peer is stopped
      const auto t0 = Clock::now();
      Status st = close_recv(pairs_[0].recv);
      pairs_[0].recv = nullptr;
      const auto ms = std::chrono::duration_cast<milliseconds>(Clock::now() - t0).count();
      if (!st.is_ok()) return "close_recv: " + st.to_string();
      return ms > 2000 ? "close_recv took " + std::to_string(ms) + " ms" : "";
    }
    if (name == "prepost") {  // frozen, before the freeze: its half of the others' messages
      mid_ = plan(pairs_, others, 4, seed);
      return post_all(mid_);
    }
    if (name == "resume") {  // frozen, continued: send into the closed comm, and on the others
      pair0_buf_ = random_bytes(100000, seed);
      Result<Request*> s = post_send(pairs_[0].send, pair0_buf_.data(), pair0_buf_.size());
      std::string err;
      if (a == 0) {
        mid_ = plan(pairs_, others, 4, seed);
        err += post_all(mid_);
      }
      if (s.is_ok() && s.value() == nullptr) err += "pair 0 isend: no free slot\n";
      if (s.is_ok() && s.value() != nullptr) {
        const Outcome o = await(s.value(), milliseconds(10000));
        if (o.end == End::kDone) err += "pair 0: a send into the closed receive comm completed\n";
        if (o.end == End::kPending) err += "pair 0: a send into the closed receive comm hangs\n";
      }
      return err + drain_and_check(mid_, milliseconds(10000));
    }
    if (name == "finish") {  // closer, as the peer resumes: its half of the same messages
      if (a == 0) {  // not posted during the freeze: post now, before the peer has run again
        std::string e = post_all(mid_);
        if (!e.empty()) return e;
      }
      return drain_and_check(mid_, milliseconds(10000));
    }
    if (name == "bye") {  // every close succeeds, the dead pair 0 included
      std::string err;
      for (Pair& p : pairs_) {
        if (p.send != nullptr && !close_send(p.send).is_ok()) err += p.name + ": close_send failed\n";
        if (p.recv != nullptr && !close_recv(p.recv).is_ok()) err += p.name + ": close_recv failed\n";
      }
      return finalize(ctx_).is_ok() ? err : err + "finalize failed";
    }
    return "unknown command " + name;
  }

  bool closer_;
  int fd_;
  Context* ctx_ = nullptr;
  std::vector<Pair> pairs_;
  std::vector<Transfer> mid_;
  std::vector<uint8_t> pair0_buf_;
};

TEST(CloseFrozenPeerRank, Main) {
  const char* e = std::getenv(kRankEnv);
  if (e == nullptr) GTEST_SKIP() << "a helper: runs only as a rank exec'd by CloseFrozenPeer.*";
  const std::string v = e;
  const bool closer = v.rfind("closer:", 0) == 0;
  Rank(closer, std::atoi(v.substr(v.find(':') + 1).c_str())).run();
}

// ---- The test process: two ranks, the signals and the steps ----

struct Child {
  pid_t pid = -1;
  int fd = -1;
  std::string log;  // the rank's stdout and stderr (kept when CLOSE_KEEP_LOGS is set)
};

Child spawn(const char* role, int timeout_ms) {
  Child c;
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) return c;
  char exe[4096] = {};
  const ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0) return c;
  c.log = std::string("/tmp/close-frozen-") + role + "-" + std::to_string(getpid()) + ".log";
  const int log = open(c.log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  // Everything the child needs is built before fork: only async-signal-safe calls after it.
  std::vector<std::string> env_text = {std::string(kRankEnv) + "=" + role + ":" + std::to_string(sv[1]),
                                       "NCCL_TRIM_TIMEOUT_MS=" + std::to_string(timeout_ms)};
  for (char** p = environ; *p != nullptr; ++p) {
    const std::string s = *p;
    if (s.rfind("NCCL_TRIM_TIMEOUT_MS=", 0) != 0 && s.rfind(std::string(kRankEnv) + "=", 0) != 0) env_text.push_back(s);
  }
  std::vector<char*> envp;
  for (std::string& s : env_text) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::string filter = "--gtest_filter=CloseFrozenPeerRank.Main";
  char* argv[] = {exe, filter.data(), nullptr};
  c.pid = fork();
  if (c.pid == 0) {
    fcntl(sv[1], F_SETFD, 0);  // the rank's end survives exec
    if (log >= 0) {
      dup2(log, 1);
      dup2(log, 2);
    }
    execve(exe, argv, envp.data());
    _exit(127);
  }
  if (log >= 0) close(log);
  close(sv[1]);
  c.fd = sv[0];
  return c;
}

std::string tail_of(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string s = ss.str();
  return s.size() > 4000 ? s.substr(s.size() - 4000) : s;
}

class CloseFrozenPeer : public ::testing::Test {
 protected:
  void TearDown() override {
    for (Child* c : {&closer_, &frozen_}) end(c);
  }

  static void end(Child* c) {
    if (c->pid > 0) {
      kill(c->pid, SIGKILL);
      waitpid(c->pid, nullptr, 0);
      c->pid = -1;
    }
    if (c->fd >= 0) close(c->fd);
    c->fd = -1;
    if (!c->log.empty() && std::getenv("CLOSE_KEEP_LOGS") == nullptr) unlink(c->log.c_str());
  }

  std::string logs() const {
    return "\n--- closer log (tail):\n" + tail_of(closer_.log) + "\n--- frozen log (tail):\n" + tail_of(frozen_.log);
  }

  // A rank's answer to its last command: "" when it went well.
  static std::string answer(Child& c, const char* what) {
    std::string reply;
    if (!recv_blob(c.fd, &reply, milliseconds(30000))) return std::string(what) + ": no answer (rank hung or died)";
    return reply.empty() ? "" : std::string(what) + ": " + reply + (reply.back() == '\n' ? "" : "\n");
  }
  static std::string ask(Child& c, const std::string& cmd) {
    return send_blob(c.fd, cmd) ? answer(c, cmd.c_str()) : cmd + ": the rank is gone";
  }
  // Both ranks run the same command at once (both sides of the traffic are needed).
  std::string both(const std::string& cmd) {
    if (!send_blob(closer_.fd, cmd) || !send_blob(frozen_.fd, cmd)) return cmd + ": a rank is gone";
    std::string e = answer(closer_, ("closer " + cmd).c_str());
    return e + answer(frozen_, ("frozen " + cmd).c_str());
  }

  struct Variant {
    int timeout_ms;     // NCCL_TRIM_TIMEOUT_MS of both ranks
    int freeze_ms;      // the frozen rank stays stopped about this long
    bool closer_early;  // the closer's half of the other pairs' messages is posted before the freeze
    bool frozen_early;  // and the frozen rank's half
  };

  // One run of the scenario; "" when everything held.
  std::string scenario(const Variant& v, int stop_after_ms, uint32_t seed) {
    closer_ = spawn("closer", v.timeout_ms);
    frozen_ = spawn("frozen", v.timeout_ms);
    if (closer_.pid <= 0 || frozen_.pid <= 0) return "could not start the ranks";
    std::string hc, hf;
    if (!recv_blob(closer_.fd, &hc, milliseconds(30000)) || !recv_blob(frozen_.fd, &hf, milliseconds(30000)) ||
        !send_blob(closer_.fd, hf) || !send_blob(frozen_.fd, hc)) {
      return "handle exchange failed";
    }
    std::string e = answer(closer_, "closer setup") + answer(frozen_, "frozen setup");
    if (e.empty()) e = both("warm 4 " + std::to_string(seed));
    // Who posts its half of the other pairs' messages before the freeze (1) or at its end (0).
    const std::string seed1 = " " + std::to_string(seed + 1);
    const std::string closer_args = (v.closer_early ? "1" : "0") + seed1;
    const std::string frozen_args = (v.frozen_early ? "1" : "0") + seed1;
    if (e.empty()) e = ask(closer_, "arm " + closer_args);
    if (e.empty() && v.frozen_early) e = ask(frozen_, "prepost 0" + seed1);
    if (!e.empty()) return e;
    // Stopped a few ms after the posts: pair 0's CTS and the others' data may or may not have
    // reached the frozen rank's engine (both orders are the scenario).
    std::this_thread::sleep_for(milliseconds(stop_after_ms));
    kill(frozen_.pid, SIGSTOP);
    int status = 0;
    if (waitpid(frozen_.pid, &status, WUNTRACED) != frozen_.pid || !WIFSTOPPED(status)) return "SIGSTOP did not stop";
    std::this_thread::sleep_for(milliseconds(30));
    e = ask(closer_, "close");
    std::this_thread::sleep_for(milliseconds(v.freeze_ms + stop_after_ms * 20));
    if (!e.empty()) return e;
    // The closer posts (or already has) its half of the other pairs' messages just before the
    // peer runs again, as a proxy posts its next steps; then the peer resumes.
    if (!send_blob(closer_.fd, "finish " + closer_args)) return "closer gone";
    std::this_thread::sleep_for(milliseconds(5));
    const bool sent = send_blob(frozen_.fd, "resume " + frozen_args);
    kill(frozen_.pid, SIGCONT);
    if (!sent) return "frozen rank gone";
    e = answer(closer_, "closer finish") + answer(frozen_, "frozen resume");
    // Then many more messages on the other pairs, both ways, starting at once.
    for (int k = 0; k < 3 && e.empty(); ++k) e = both("rounds 4 " + std::to_string(seed + 2 + k));
    if (e.empty()) e = both("bye");
    if (!e.empty()) return e;  // TearDown kills the ranks
    for (Child* c : {&closer_, &frozen_}) {
      if (waitpid(c->pid, &status, 0) == c->pid) c->pid = -1;
    }
    return "";
  }

  void repeat(int iterations, const Variant& v) {
    const auto budget = Clock::now() + std::chrono::seconds(60);
    int done = 0;
    for (; done < iterations && Clock::now() < budget; ++done) {
      const std::string e = scenario(v, done % 4 * 2, 100u * done);
      ASSERT_EQ(e, "") << "iteration " << done << logs();
      for (Child* c : {&closer_, &frozen_}) end(c);
    }
    EXPECT_GE(done, 3) << "too few iterations within the time budget to mean anything";
  }

  testing::EnvGuard ifname_{"NCCL_TRIM_IFNAME", "lo"};
  testing::EnvGuard dtype_{"NCCL_TRIM_DTYPE", "fp32"};
  testing::EnvGuard phase_{"NCCL_TRIM_PHASE", "all"};
  Child closer_, frozen_;
};

// The freeze is shorter than the timeout and the other pairs have operations in flight both
// ways throughout: nothing may fail but pair 0's send.
TEST_F(CloseFrozenPeer, ShortFreezeOthersMidTransfer) { repeat(10, {5000, 150, true, true}); }

// The freeze outlasts the timeout while nothing but pair 0 waits on the frozen rank, and the
// closer posts on the other pairs just before it runs again: an idle peer is never an error,
// and an operation is failed only after it has itself waited the timeout in silence. (Silence
// was once counted from the last packet heard, so those posts failed at once, or not, by
// whether the resumed peer's first keepalive beat them: a flaky "declared dead".)
TEST_F(CloseFrozenPeer, FreezeLongerThanTimeoutOthersIdle) { repeat(5, {1000, 1300, false, false}); }

// The same, but the frozen rank had posted its half (receives with their CTS sent, sends
// waiting for CTS) before it was stopped: its own operations waited through its own freeze,
// which is no silence of the peer's (the peer's keepalives wait in its socket). (An engine
// stopped inside a receive batch once stamped the keepalives it read on resuming with the
// batch's start, before the stop, and then declared the live peer dead.)
TEST_F(CloseFrozenPeer, FreezeLongerThanTimeoutFrozenRankWaiting) { repeat(5, {1000, 1300, false, true}); }

}  // namespace
}  // namespace trim::net
