#include "tools/harness/rank.h"

#include <execinfo.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>


namespace trim::harness {

namespace {

constexpr int64_t kConnectTimeoutNs = 60ll * 1000000000;
constexpr uint64_t kCommIdBase = 0x7472696d68000000ull;  // any value; equal on every rank like NCCL's

void set_env_double(const char* name, double v) {
  if (v < 0) return;
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.17g", v);
  setenv(name, buf, 1);
}

// The plugin reads NCCL_TRIM_* at init: set this rank's before it.
void setup_env(const Options& opt, int rank) {
  set_env_double("NCCL_TRIM_TEST_DROP", opt.drop);
  set_env_double("NCCL_TRIM_TEST_DUP", opt.dup);
  set_env_double("NCCL_TRIM_TEST_REORDER", opt.reorder);
  set_env_double("NCCL_TRIM_TEST_TRIM", opt.trim);
  // Rank-dependent so the ranks' injected faults are independent.
  setenv("NCCL_TRIM_TEST_SEED", std::to_string(opt.seed * 1000003ull + static_cast<uint64_t>(rank)).c_str(), 1);
  if (opt.trimmable) setenv("NCCL_TRIM_DTYPE", "fp32", 1);
  if (opt.mtu_bytes > 0) setenv("NCCL_TRIM_MTU", std::to_string(opt.mtu_bytes).c_str(), 1);
  if (opt.timeout_ms > 0) setenv("NCCL_TRIM_TIMEOUT_MS", std::to_string(opt.timeout_ms).c_str(), 1);
  setenv("NCCL_TRIM_IFNAME", "lo", 0);  // 0: keep the user's choice
}

// Connections of one rank: listen on device 0, exchange handles, then connect to rank+1 and
// accept from rank-1 in one non-blocking loop, as NCCL's proxy does.
class Connections {
 public:
  explicit Connections(NetPlugin* net) : net_(net) {}
  ~Connections() { (void)close_all(); }
  Connections(const Connections&) = delete;
  Connections& operator=(const Connections&) = delete;

  Status open(const Options& opt, int rank, RankChannel* chan, RankReport* report);
  Status close_all();
  void* send_comm() const { return send_; }
  void* recv_comm() const { return recv_; }

 private:
  NetPlugin* net_;
  void* listen_ = nullptr;
  void* send_ = nullptr;
  void* recv_ = nullptr;
};

Status Connections::open(const Options& opt, int rank, RankChannel* chan, RankReport* report) {
  int ndev = 0;
  ncclResult_t r = net_->devices(&ndev);
  if (r != ncclSuccess) return plugin_error("devices", r);
  if (ndev < 1) return Status(Code::kUnavailable, "devices reported " + std::to_string(ndev) + " devices");
  DeviceInfo info;
  r = net_->properties(0, &info);
  if (r != ncclSuccess) return plugin_error("getProperties", r);
  report->device = info.name;
  // NCCL refuses a device whose maxP2pBytes is outside (0, 1 TiB] (v9+).
  if (opt.api != Api::kV8 && (info.max_p2p_bytes == 0 || info.max_p2p_bytes > (size_t{1} << 40))) {
    return Status(Code::kInternal, "getProperties: maxP2pBytes " + std::to_string(info.max_p2p_bytes) +
                                       " outside (0, 1 TiB]");
  }
  if ((info.ptr_support & NCCL_PTR_HOST) == 0) return Status(Code::kInternal, "getProperties: no NCCL_PTR_HOST");
  if ((info.ptr_support & NCCL_PTR_CUDA) != 0) {
    return Status(Code::kInternal, "getProperties: NCCL_PTR_CUDA advertised, but the plugin takes host buffers only");
  }

  char handle[NCCL_NET_HANDLE_MAXSIZE] = {};
  r = net_->listen(0, handle, &listen_);
  if (r != ncclSuccess) return plugin_error("listen", r);
  if (listen_ == nullptr) return Status(Code::kInternal, "listen succeeded without a listen comm");
  Result<std::vector<std::string>> handles = chan->allgather(std::string(handle, sizeof(handle)));
  if (!handles) return handles.status();

  const int n = opt.ranks;
  const bool sends = opt.mode != Mode::kSendRecv || rank == 0;
  const bool recvs = opt.mode != Mode::kSendRecv || rank == 1;
  // One handle buffer per connection, passed to every connect retry: the plugin may keep its
  // in-progress state inside it.
  std::string peer = (*handles)[static_cast<size_t>((rank + 1) % n)];
  if (peer.size() != NCCL_NET_HANDLE_MAXSIZE) return Status(Code::kInternal, "bad handle from the bootstrap");
  char connect_handle[NCCL_NET_HANDLE_MAXSIZE];
  std::memcpy(connect_handle, peer.data(), sizeof(connect_handle));

  Backoff backoff;
  const int64_t give_up = mono_ns() + kConnectTimeoutNs;
  while ((sends && send_ == nullptr) || (recvs && recv_ == nullptr)) {
    bool moved = false;
    if (sends && send_ == nullptr) {
      r = net_->connect(0, connect_handle, &send_);
      if (r != ncclSuccess) return plugin_error("connect", r);
      moved = moved || send_ != nullptr;
    }
    if (recvs && recv_ == nullptr) {
      r = net_->accept(listen_, &recv_);
      if (r != ncclSuccess) return plugin_error("accept", r);
      moved = moved || recv_ != nullptr;
    }
    if (mono_ns() > give_up) {
      return Status(Code::kUnavailable, std::string("connection setup did not finish in 60 s (") +
                                            (send_ == nullptr && sends ? "connect" : "accept") + " pending)");
    }
    if (moved) backoff.progressed(); else backoff.idle();
  }
  // NCCL closes the listen comm once its connection is accepted.
  r = net_->close_listen(listen_);
  listen_ = nullptr;
  if (r != ncclSuccess) return plugin_error("closeListen", r);
  return chan->barrier();
}

Status Connections::close_all() {
  Status first;
  auto keep = [&first](const char* call, ncclResult_t r) {
    if (r != ncclSuccess && first.is_ok()) first = plugin_error(call, r);
  };
  if (send_ != nullptr) keep("closeSend", net_->close_send(send_));
  if (recv_ != nullptr) keep("closeRecv", net_->close_recv(recv_));
  if (listen_ != nullptr) keep("closeListen", net_->close_listen(listen_));
  send_ = recv_ = listen_ = nullptr;
  return first;
}

Status run_mode(RankCtx& c) {
  switch (c.opt.mode) {
    case Mode::kSendRecv: return run_sendrecv(c);
    case Mode::kAllReduce: return run_allreduce(c);
    case Mode::kMixed: return run_mixed(c);
  }
  return Status(Code::kInternal, "unknown mode");
}

// CPU seconds (user + system) of this process's threads the plugin named trim-engine or
// trim-codec, from /proc/self/task/<tid>/{comm,stat}; *engines counts the engines.
double plugin_threads_cpu_s(int64_t* engines) {
  double ticks = 0;
  *engines = 0;
  std::error_code ec;
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task", ec)) {
    std::ifstream comm(task.path() / "comm");
    std::string name;
    std::getline(comm, name);
    if (name != "trim-engine" && name != "trim-codec") continue;
    if (name == "trim-engine") ++*engines;
    std::ifstream stat(task.path() / "stat");
    std::string line;
    std::getline(stat, line);
    const size_t close = line.rfind(')');  // the name may hold spaces: fields follow its ')'
    if (close == std::string::npos) continue;
    std::istringstream fields(line.substr(close + 2));
    std::string f;
    uint64_t utime = 0, stime = 0;
    for (int i = 3; i <= 15 && fields >> f; ++i) {  // field 3 is the state; 14 utime, 15 stime
      if (i == 14) utime = std::stoull(f);
      if (i == 15) stime = std::stoull(f);
    }
    ticks += static_cast<double>(utime + stime);
  }
  return ticks / static_cast<double>(sysconf(_SC_CLK_TCK));
}

// Everything after the fork; the report carries any failure. The order of NCCL's comm setup
// and teardown: net init, profiler init, ..., profiler finalize, net finalize.
Status run_rank(const Options& opt, int rank, RankChannel* chan, RankReport* report, SharedBuffer* shared) {
  Result<NetPlugin*> opened = NetPlugin::open(opt.plugin_path, opt.api);
  if (!opened) return opened.status();
  std::unique_ptr<NetPlugin> net(opened.value());

  // NCCL always hands the net plugin its profiler callback (v10+), which does nothing while
  // no profiler is loaded.
  const uint64_t comm_id = kCommIdBase ^ opt.seed;
  ncclResult_t r = net->init(comm_id, nccl_profiler_callback, opt.traffic_class);
  if (r != ncclSuccess) return plugin_error("init", r);
  ProfilerHost prof;
  if (opt.profiler == ProfilerChoice::kAuto) (void)prof.load(net->library());
  prof.init(comm_id, opt.ranks, opt.ranks, rank);  // one rank per node
  report->profiler = prof.version();
  Status st;
  BufferArena buffers;  // outlives the comms: freed after they are closed
  {
    Connections conns(net.get());
    st = conns.open(opt, rank, chan, report);
    if (st.is_ok()) {
      RankCtx c{opt, rank, net.get(), &prof, chan, &buffers, conns.send_comm(), conns.recv_comm(), report, shared};
      st = run_mode(c);
    }
    Status closed = conns.close_all();
    if (st.is_ok()) st = closed;
  }
  prof.finalize();
  if (st.is_ok() && !prof.misuse().empty()) st = Status(Code::kInternal, prof.misuse());
  r = net->finalize();
  if (st.is_ok() && r != ncclSuccess) st = plugin_error("finalize", r);
  // Counters last: the plugin folds a connection's counters into its process-wide ones when
  // the connection closes.
  std::string json;
  if (net->stats_json(&json)) report->stats = parse_stats(json);
  report->stats.plugin_cpu_s = plugin_threads_cpu_s(&report->stats.engine_threads);
  return st;
}

// A crash in a rank is usually the plugin's: say where, then die of the same signal so the
// parent reports it. write and backtrace_symbols_fd do not allocate; snprintf of two ints is
// the one liberty taken in a handler that is about to die anyway.
int g_crash_rank = -1;

void on_crash(int sig) {
  char msg[64];
  int n = std::snprintf(msg, sizeof(msg), "[rank %d] caught signal %d; backtrace:\n", g_crash_rank, sig);
  if (n > 0) (void)!write(STDERR_FILENO, msg, static_cast<size_t>(n));
  void* frames[64];
  int depth = backtrace(frames, 64);
  backtrace_symbols_fd(frames, depth, STDERR_FILENO);
  signal(sig, SIG_DFL);
  raise(sig);
}

void install_crash_handler(int rank) {
  g_crash_rank = rank;
  void* warm[1];
  backtrace(warm, 1);  // loads libgcc now: the first call may allocate, which a handler must not
  for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT}) signal(sig, on_crash);
}

}  // namespace

Status plugin_error(const char* call, ncclResult_t r) {
  return Status(Code::kUnavailable, std::string(call) + " returned " + result_name(r));
}

HostBuffer::HostBuffer(size_t bytes) : bytes_(bytes) {
  // At least one page, so even a 0-byte run has a valid pointer to register.
  size_t alloc = ((bytes + 4095) / 4096 + 1) * 4096;
  void* p = std::aligned_alloc(4096, alloc);
  if (p == nullptr) {
    std::fprintf(stderr, "trim-harness: out of memory allocating %zu bytes\n", alloc);
    std::abort();
  }
  std::memset(p, 0, alloc);  // touch every page now, not inside a timed iteration
  data_ = static_cast<char*>(p);
}

HostBuffer::~HostBuffer() { std::free(data_); }

Status MemReg::reg(void* data, size_t bytes) {
  ncclResult_t r = net_->reg_mr(comm_, data, bytes, &mh_);
  if (r != ncclSuccess) return plugin_error("regMr", r);
  return Status::ok();
}

Status MemReg::release() {
  if (mh_ == nullptr) return Status::ok();
  ncclResult_t r = net_->dereg_mr(comm_, mh_);
  mh_ = nullptr;
  if (r != ncclSuccess) return plugin_error("deregMr", r);
  return Status::ok();
}

void Backoff::idle() {
  ++idle_passes_;
  if (idle_passes_ < 4) {
    sched_yield();
    return;
  }
  timespec ts{0, 20000};  // 20 us: far below one 1 MiB slice's time on the wire
  nanosleep(&ts, nullptr);
}

// --netns: this process (single-threaded right after the fork) moves to the rank's namespace;
// its channel to the parent is a socketpair, which crosses namespaces.
static Status enter_netns(const std::string& ns) {
  const std::string path = ns.find('/') == std::string::npos ? "/var/run/netns/" + ns : ns;
  const int nfd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (nfd < 0) return Status(Code::kSystem, "--netns: open " + path + ": " + std::strerror(errno));
  const int r = setns(nfd, CLONE_NEWNET);
  const int err = errno;
  ::close(nfd);
  if (r != 0) return Status(Code::kSystem, "--netns: setns " + path + ": " + std::strerror(err));
  return Status::ok();
}

int rank_main(const Options& opt, int rank, int fd, int64_t deadline_ns, SharedBuffer* shared) {
  set_log_context(rank, opt.verbose);
  install_crash_handler(rank);
  setup_env(opt, rank);
  // The parent kills every rank at the deadline; our own waits only need to outlast it.
  RankChannel chan(fd, deadline_ns + 5ll * 1000000000);
  RankReport report;
  report.rank = rank;
  Status st = opt.netns.empty() ? Status::ok() : enter_netns(opt.netns[static_cast<size_t>(rank)]);
  if (st.is_ok()) st = run_rank(opt, rank, &chan, &report, shared);
  if (!st.is_ok() && report.outcome == Outcome::kOk) {
    report.outcome = Outcome::kError;
    report.error = st.message();
  } else if (!st.is_ok()) {
    std::fprintf(stderr, "[rank %d] after the expected failure: %s\n", rank, st.message().c_str());
  }
  // Outcomes of fault scenarios (kPeerError, kHang) were set by the mode; cleanup errors after
  // a dead peer are expected and not reported over them.
  Status sent = chan.send_result(serialize(report));
  if (!sent.is_ok()) std::fprintf(stderr, "[rank %d] could not report: %s\n", rank, sent.message().c_str());
  return report.outcome == Outcome::kOk ? 0 : 1;
}

}  // namespace trim::harness
