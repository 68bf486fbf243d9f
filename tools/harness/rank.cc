#include "tools/harness/rank.h"

#include <dlfcn.h>
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

#include "cuda/trim_rht.h"

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

// --declare-rotated: what the nccl_trim comm hook does before it creates its group, through the
// same export (nccl_trim_hook_declare) of the same object: a second dlopen of the plugin's file
// is the library the communicator loads next. Held open until the communicator is closed, so
// the declaration cannot be unloaded in between.
class Declaration {
 public:
  ~Declaration() {
    if (dl_ != nullptr) dlclose(dl_);
  }
  Status declare(const Options& opt) {
    dl_ = dlopen(opt.plugin_path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (dl_ == nullptr) {
      const char* why = dlerror();
      return Status(Code::kUnavailable, "--declare-rotated: dlopen " + opt.plugin_path + ": " + (why ? why : "?"));
    }
    using DeclareFn = int (*)(int, int, char*, int);
    auto fn = reinterpret_cast<DeclareFn>(dlsym(dl_, "nccl_trim_hook_declare"));
    if (fn == nullptr) return Status(Code::kUnavailable, "--declare-rotated: " + opt.plugin_path + " has no nccl_trim_hook_declare");
    char error[512] = "";
    // The rows --prerotate rotates (and the hook by default).
    if (fn(opt.traffic_class, TRIM_RHT_MAX_ROW_LOG2, error, sizeof error) != 0) {
      return Status(Code::kBadConfig, std::string("--declare-rotated: ") + error);
    }
    return Status::ok();
  }

 private:
  void* dl_ = nullptr;
};

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
// and teardown (coll::Comm): net init, profiler init, listen, handles through the bootstrap,
// connect/accept, ..., close, profiler finalize, net finalize.
Status run_rank(const Options& opt, int rank, RankChannel* chan, RankReport* report, SharedBuffer* shared) {
  coll::CommConfig cfg;
  cfg.plugin_path = opt.plugin_path;
  cfg.rank = rank;
  cfg.nranks = opt.ranks;
  cfg.comm_id = kCommIdBase ^ opt.seed;
  cfg.traffic_class = opt.traffic_class;
  cfg.api = opt.api;
  cfg.profiler = opt.profiler == ProfilerChoice::kAuto;
  cfg.check_ops = false;  // NCCL's wire pattern, nothing added
  cfg.log_level = opt.verbose ? NCCL_LOG_TRACE : NCCL_LOG_WARN;
  cfg.name = "rank " + std::to_string(rank);
  Declaration declaration;  // outlives the communicator
  if (opt.declare_rotated) TRIM_RETURN_IF_ERROR(declaration.declare(opt));
  std::unique_ptr<coll::Comm> comm;
  coll::Outcome made = coll::Comm::create(cfg, &comm);
  if (!made.ok()) return made.status;
  report->profiler = comm->profiler()->version();
  report->device = comm->device_name();

  Status st;
  BufferArena buffers;  // outlives the comms: freed after they are closed
  Result<std::vector<std::string>> handles = chan->allgather(comm->handle());
  if (!handles) {
    st = handles.status();
  } else {
    const int n = opt.ranks;
    const bool sends = opt.mode != Mode::kSendRecv || rank == 0;
    const bool recvs = opt.mode != Mode::kSendRecv || rank == 1;
    coll::Outcome connected = comm->connect((*handles)[static_cast<size_t>((rank + 1) % n)], mono_ns() + kConnectTimeoutNs,
                                            sends, recvs);
    st = connected.ok() ? chan->barrier() : connected.status;
  }
  if (st.is_ok()) {
    const coll::Link& l = comm->link();
    RankCtx c{opt, rank, comm.get(), l.net, comm->profiler(), chan, &buffers, l.send_comm, l.recv_comm, report, shared};
    coll::LogScope scope(comm->log_context());  // the modes that drive the plugin directly log as this rank too
    st = run_mode(c);
  }
  Status closed = comm->close();
  if (st.is_ok()) st = closed;
  const std::string misuse = ProfilerHost::misuse();
  if (st.is_ok() && !misuse.empty()) st = Status(Code::kInternal, misuse);
  // Counters last: the plugin folds a connection's counters into its process-wide ones when
  // the connection closes.
  std::string json;
  if (comm->stats_json(&json)) report->stats = parse_stats(json);
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
