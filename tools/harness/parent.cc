// The parent process: forks one process per rank, relays their bootstrap traffic, enforces the
// global deadline, and turns their reports into the run's result.
#include "tools/harness/parent.h"

#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "tools/harness/bootstrap.h"
#include "tools/harness/rank.h"
#include "tools/harness/replica.h"
#include "tools/harness/report.h"

namespace trim::harness {

namespace {

struct Child {
  pid_t pid = -1;
  int fd = -1;  // parent's end of the channel
  bool open = false;
  bool waiting_gather = false;
  std::string gather_part;
  FrameReader reader;
};

std::string default_plugin_path() {
  char exe[PATH_MAX] = {};
  ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (n <= 0) return "libnccl-net-trim.so";
  std::string path(exe, static_cast<size_t>(n));
  size_t slash = path.rfind('/');
  return path.substr(0, slash == std::string::npos ? 0 : slash) + "/../lib/libnccl-net-trim.so";
}

class Parent {
 public:
  explicit Parent(const Options& opt) : opt_(opt), children_(static_cast<size_t>(opt.ranks)),
                                        fates_(static_cast<size_t>(opt.ranks)) {}

  int run();

 private:
  Status spawn(int64_t deadline_ns);
  void serve(int64_t deadline_ns);
  void on_frame(size_t k, const Frame& f);
  void on_closed(size_t k);
  void maybe_finish_gather();
  void send_to(size_t k, MsgType type, const std::string& payload);
  void reap();
  bool everyone_done() const;

  const Options& opt_;
  std::unique_ptr<SharedBuffer> shared_;  // mapped before the fork: every rank sees rank 0's writes
  std::vector<Child> children_;
  std::vector<RankFate> fates_;
  std::vector<RankReport> reports_;
  std::string error_;
};

Status Parent::spawn(int64_t deadline_ns) {
  const size_t n = children_.size();
  if (opt_.mode != Mode::kSendRecv) shared_ = std::make_unique<SharedBuffer>(opt_.bytes);
  std::vector<int> child_ends(n, -1);
  for (size_t k = 0; k < n; ++k) {
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) {
      return Status(Code::kSystem, std::string("socketpair: ") + std::strerror(errno));
    }
    children_[k].fd = sv[0];
    child_ends[k] = sv[1];
  }
  std::fflush(stdout);  // a child must not inherit and re-flush our buffered output
  std::fflush(stderr);
  for (size_t k = 0; k < n; ++k) {
    pid_t pid = fork();
    if (pid < 0) return Status(Code::kSystem, std::string("fork: ") + std::strerror(errno));
    if (pid == 0) {
      // Keep only this rank's end: the parent sees EOF exactly when this rank is gone.
      for (size_t j = 0; j < n; ++j) {
        close(children_[j].fd);
        if (j != k) close(child_ends[j]);
      }
      int code = rank_main(opt_, static_cast<int>(k), child_ends[k], deadline_ns, shared_.get());
      std::fflush(stderr);
      _exit(code);  // no atexit handlers or stdio flushes inherited from the parent
    }
    children_[k].pid = pid;
    children_[k].open = true;
  }
  for (size_t k = 0; k < n; ++k) {
    close(child_ends[k]);
    fcntl(children_[k].fd, F_SETFL, fcntl(children_[k].fd, F_GETFL) | O_NONBLOCK);
  }
  return Status::ok();
}

void Parent::send_to(size_t k, MsgType type, const std::string& payload) {
  if (!children_[k].open) return;
  // A rank that died mid-write only costs us EPIPE (SIGPIPE is ignored).
  (void)write_frame(children_[k].fd, type, payload);
}

void Parent::maybe_finish_gather() {
  bool any_waiting = false;
  for (const Child& c : children_) any_waiting = any_waiting || c.waiting_gather;
  if (!any_waiting) return;
  // A gather completes with every rank's part; a rank that is gone never sends its part.
  std::vector<std::string> parts;
  for (size_t k = 0; k < children_.size(); ++k) {
    if (!children_[k].waiting_gather) {
      if (children_[k].open) return;  // still coming
      for (size_t j = 0; j < children_.size(); ++j) {
        if (!children_[j].waiting_gather) continue;
        children_[j].waiting_gather = false;
        send_to(j, MsgType::kAbort, "rank " + std::to_string(k) + " is gone");
      }
      return;
    }
    parts.push_back(children_[k].gather_part);
  }
  std::string packed = pack_parts(parts);
  for (size_t k = 0; k < children_.size(); ++k) {
    children_[k].waiting_gather = false;
    send_to(k, MsgType::kGatherReply, packed);
  }
}

void Parent::on_frame(size_t k, const Frame& f) {
  switch (f.type) {
    case MsgType::kGather:
      children_[k].waiting_gather = true;
      children_[k].gather_part = f.payload;
      maybe_finish_gather();
      break;
    case MsgType::kResult: {
      Result<RankReport> r = deserialize(f.payload);
      if (r) {
        reports_.push_back(std::move(r).value());
        fates_[k].reported = true;
      } else if (error_.empty()) {
        error_ = "rank " + std::to_string(k) + ": " + r.status().message();
      }
      break;
    }
    case MsgType::kEvent: {
      // A rank announces it is about to die or freeze on purpose: tell the others.
      int64_t at = 0;
      if (f.payload.size() == sizeof(at)) std::memcpy(&at, f.payload.data(), sizeof(at));
      fates_[k].expected_gone = true;
      fates_[k].event_at_ns = at;
      for (size_t j = 0; j < children_.size(); ++j) {
        if (j != k) send_to(j, MsgType::kPeerEvent, f.payload);
      }
      break;
    }
    default:
      if (error_.empty()) error_ = "rank " + std::to_string(k) + " sent an unknown frame";
  }
}

void Parent::on_closed(size_t k) {
  children_[k].open = false;
  close(children_[k].fd);
  children_[k].fd = -1;
  maybe_finish_gather();
}

bool Parent::everyone_done() const {
  for (size_t k = 0; k < children_.size(); ++k) {
    // A frozen rank never closes its channel; it is done once it has announced the freeze.
    bool frozen = fates_[k].expected_gone && opt_.fault == Fault::kFreezePeer;
    if (children_[k].open && !frozen) return false;
  }
  return true;
}

void Parent::serve(int64_t deadline_ns) {
  std::vector<char> buf(1 << 16);
  while (!everyone_done()) {
    int64_t left_ms = (deadline_ns - mono_ns()) / 1000000;
    if (left_ms <= 0) {
      error_ = "deadline";
      return;
    }
    std::vector<pollfd> pfds;
    std::vector<size_t> who;
    for (size_t k = 0; k < children_.size(); ++k) {
      if (!children_[k].open) continue;
      pfds.push_back(pollfd{children_[k].fd, POLLIN, 0});
      who.push_back(k);
    }
    int r = poll(pfds.data(), pfds.size(), static_cast<int>(left_ms > 200 ? 200 : left_ms));
    if (r < 0 && errno != EINTR) {
      error_ = std::string("poll: ") + std::strerror(errno);
      return;
    }
    for (size_t p = 0; r > 0 && p < pfds.size(); ++p) {
      if (pfds[p].revents == 0) continue;
      size_t k = who[p];
      ssize_t got = read(children_[k].fd, buf.data(), buf.size());
      if (got > 0) {
        children_[k].reader.append(buf.data(), static_cast<size_t>(got));
        Frame f;
        while (children_[k].reader.next(&f)) on_frame(k, f);
      } else if (got == 0 || (errno != EAGAIN && errno != EINTR)) {
        on_closed(k);
      }
    }
  }
}

void Parent::reap() {
  for (size_t k = 0; k < children_.size(); ++k) {
    Child& c = children_[k];
    if (c.pid <= 0) continue;
    // Still running means deadline or a frozen rank: neither gets a second chance.
    int status = 0;
    pid_t r = waitpid(c.pid, &status, WNOHANG);
    if (r == 0) {
      kill(c.pid, SIGKILL);
      r = waitpid(c.pid, &status, 0);
    }
    fates_[k].exited = r == c.pid;
    fates_[k].exit_status = status;
    c.pid = -1;
    if (c.fd >= 0) close(c.fd);
    c.fd = -1;
  }
}

int Parent::run() {
  const int64_t deadline_ns = mono_ns() + static_cast<int64_t>(opt_.deadline_s) * 1000000000;
  Status st = spawn(deadline_ns);
  if (!st.is_ok()) error_ = st.message();
  if (error_.empty()) serve(deadline_ns);
  reap();
  std::string device;
  for (const RankReport& r : reports_) device = (r.rank == 0 || device.empty()) ? r.device : device;
  RunSummary s = summarize(opt_, reports_, fates_, error_);
  std::string text = opt_.json ? to_json(opt_, s, device) + "\n" : to_text(opt_, s, device);
  std::fputs(text.c_str(), stdout);
  std::fflush(stdout);
  if (!opt_.csv_path.empty()) {
    FILE* f = std::fopen(opt_.csv_path.c_str(), "w");
    if (f == nullptr) {
      std::fprintf(stderr, "trim-harness: --csv %s: %s\n", opt_.csv_path.c_str(), std::strerror(errno));
      return 1;
    }
    const std::string csv = to_csv(reports_);
    const bool ok = std::fwrite(csv.data(), 1, csv.size(), f) == csv.size();
    if (std::fclose(f) != 0 || !ok) {
      std::fprintf(stderr, "trim-harness: --csv %s: write failed\n", opt_.csv_path.c_str());
      return 1;
    }
  }
  return s.exit_status;
}

}  // namespace

int run_harness(Options opt) {
  if (opt.plugin_path.empty()) opt.plugin_path = default_plugin_path();
  signal(SIGPIPE, SIG_IGN);  // writes to a dead rank's channel must fail, not kill us
  Parent parent(opt);
  return parent.run();
}

}  // namespace trim::harness
