#include "tools/harness/options.h"
#include "common/params.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <algorithm>
#include <cstring>
#include <string>

namespace trim::harness {

namespace {

constexpr size_t kMaxBytes = size_t{16} << 30;  // per rank; more would not fit the machines
constexpr int kMaxRanks = 64;
constexpr int kMaxIters = 10000;  // keeps each rank's report of iteration times small

Status bad(const std::string& what) { return Status(Code::kInvalidArgument, what); }

Result<double> parse_double(const std::string& flag, const std::string& text, double lo, double hi) {
  char* end = nullptr;
  errno = 0;
  double v = std::strtod(text.c_str(), &end);
  if (text.empty() || errno != 0 || end == nullptr || *end != '\0' || !(v >= lo && v <= hi)) {
    return bad(flag + " " + text + ": expected a number in [" + std::to_string(lo) + ", " +
               std::to_string(hi) + "]");
  }
  return v;
}

Result<long long> parse_int(const std::string& flag, const std::string& text, long long lo, long long hi) {
  char* end = nullptr;
  errno = 0;
  long long v = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || errno != 0 || end == nullptr || *end != '\0' || v < lo || v > hi) {
    return bad(flag + " " + text + ": expected an integer in [" + std::to_string(lo) + ", " +
               std::to_string(hi) + "]");
  }
  return v;
}

Status check_combination(const Options& o) {
  if (o.mode == Mode::kSendRecv && o.ranks != 2) return bad("--mode sendrecv needs --ranks 2");
  if (o.fault != Fault::kNone && o.mode != Mode::kSendRecv) {
    return bad("--kill-peer, --freeze-peer, --close-in-flight and --abort-in-flight need --mode sendrecv");
  }
  if (!o.netns.empty() && o.netns.size() != static_cast<size_t>(o.ranks)) {
    return bad("--netns names " + std::to_string(o.netns.size()) + " namespaces for " + std::to_string(o.ranks) + " ranks");
  }
  if (o.traffic_class >= 0 && o.api != Api::kV11 && o.api != Api::kV12) {
    return bad("--traffic-class needs --api v11 or v12 (per-communicator init)");
  }
  if (o.prerotate && o.mode != Mode::kAllReduce) return bad("--prerotate applies to --mode allreduce");
  if (o.declare_rotated && o.traffic_class < 0) return bad("--declare-rotated needs --traffic-class");
  if (o.mode != Mode::kSendRecv && o.op != SendRecvOp::kP2p) {
    return bad("--op applies to --mode sendrecv only (allreduce and mixed announce their own ops)");
  }
  return Status::ok();
}

}  // namespace

const char* mode_name(Mode mode) {
  switch (mode) {
    case Mode::kSendRecv: return "sendrecv";
    case Mode::kAllReduce: return "allreduce";
    case Mode::kMixed: return "mixed";
  }
  return "?";
}

const char* op_name(SendRecvOp op) { return op == SendRecvOp::kP2p ? "p2p" : "allreduce"; }

const char* run_op_name(const Options& opt) {
  return opt.mode == Mode::kSendRecv ? op_name(opt.op) : mode_name(opt.mode);
}

Result<size_t> parse_bytes(const std::string& text) {
  size_t i = 0;
  while (i < text.size() && text[i] >= '0' && text[i] <= '9') ++i;
  if (i == 0 || i > 12) return bad("size '" + text + "': expected digits with an optional K, M or G");
  unsigned long long v = std::strtoull(text.substr(0, i).c_str(), nullptr, 10);
  std::string suffix = text.substr(i);
  unsigned shift = 0;
  if (!suffix.empty()) {
    char c = static_cast<char>(suffix[0] | 0x20);  // lower case
    shift = c == 'k' ? 10 : c == 'm' ? 20 : c == 'g' ? 30 : 99;
    std::string rest = suffix.substr(1);
    if (shift == 99 || !(rest.empty() || rest == "iB" || rest == "B" || rest == "ib" || rest == "b")) {
      return bad("size '" + text + "': unknown suffix '" + suffix + "' (use K, M or G)");
    }
  }
  if (v > (kMaxBytes >> shift)) return bad("size '" + text + "' exceeds 16 GiB");
  return static_cast<size_t>(v << shift);
}

int effective_timeout_ms(const Options& opt) {
  if (opt.timeout_ms > 0) return opt.timeout_ms;
  // Through the params list, as the plugin reads it (a bad value: the plugin's default; the
  // ranks' plugin then refuses to start with the error that names it).
  Result<Params> p = process_params();
  return static_cast<int>(p ? p->timeout_ms : default_params().timeout_ms);
}

std::string usage_text() {
  return R"(trim-harness: drives the NCCL net plugin exactly as NCCL's proxy would, one process per
rank on loopback, plays NCCL's side of the profiler plugin API too, and checks what arrives.

  --plugin PATH        plugin .so (default: ../lib/libnccl-net-trim.so next to this binary)
  --api v8|v9|v10|v11|v12
                       table to use: ncclNetPlugin_vN (default v12, which NCCL 2.30+ loads
                       first). v10+ get NCCL's profiler callback and a per-step profiler handle
                       with every isend/irecv; v11+ have setNetAttr. v8/v9 traffic is never
                       trimmable (unless NCCL_TRIM_FORCE=1).
  --profiler auto|none auto (default): like NCCL with NCCL_PROFILER_PLUGIN unset, load
                       ncclProfiler_v6 (else _v5) from the plugin's own library, init it per
                       rank, and emit NCCL's event chain (GroupApi/CollApi, Group, Coll or P2p,
                       ProxyOp, ProxyStep) for the event types its activation mask enables; the
                       callback NCCL passes to net init turns the plugin's step handle into a
                       NetPlugin event. Every other operation stops its Coll event before its
                       ProxyOps start, as NCCL's proxy thread may. none: NCCL_PROFILER_PLUGIN=none
                       (no events; the callback is still passed and does nothing).
  --mode sendrecv|allreduce|mixed
                       sendrecv: rank 0 sends --bytes to rank 1 per iteration (needs --ranks 2).
                       allreduce: NCCL's ring AllReduce (RING, SIMPLE) on fp32 data: per loop
                       2(N-1) ring steps (reduce-scatter, then allgather), each 2 transfers of
                       one slice (<= 1 MiB; empty slices are sent too), numbered as NCCL's proxy
                       numbers them.
                       mixed: per iteration, on the same connections: that fp32 AllReduce, an
                       int32 AllReduce, a Broadcast from rank 0 along the ring and an fp32
                       AllReduce announced as LL (1 transfer per ring step). Only the first may
                       be trimmed; the other three must arrive bit exact (exact_ok).
  --op p2p|allreduce   sendrecv only: what the operation is announced as (default p2p: Send/Recv,
                       exact; allreduce: ring AllReduce SIMPLE fp32 over one hop, trimmable; its
                       transfers fit the reduce-scatter phase rule only by accident, so use
                       NCCL_TRIM_PHASE=all to trim all of it)
  --ranks N            ranks (processes), default 2
  --bytes SIZE         bytes per rank and collective; K, M, G are binary multiples (16M = 16 MiB).
                       0 and odd sizes work. AllReduce: the floor(SIZE/4) values are summed; the
                       1-3 trailing bytes of a size that is not a multiple of 4 are raw: they
                       ride only in the allgather half and every rank ends with the bytes of the
                       rank that owns the last segment (verified exactly).
  --iters N            timed iterations (default 5)       --warmup N   untimed (default 1)
  --json               one JSON object on stdout          --verbose    plugin INFO lines too
  --csv PATH           per timed iteration one line `iter,ms,rank0_ms,...`: ms is the slowest
                       rank's time (what p50/p99 are taken over)
  --nmse-max X         largest NMSE accepted when trimming happened (default 1.0)
  --deadline-s S       kill every rank after S seconds and report "deadline" (default 120)
  --seed N             base seed of the data and of NCCL_TRIM_TEST_SEED (default 1)
Plugin environment, set in every rank before init (other NCCL_TRIM_* are inherited, e.g.
NCCL_TRIM_PHASE=all to trim the allgather half too):
  --drop P --dup P --reorder P --trim P
                       NCCL_TRIM_TEST_DROP/DUP/REORDER/TRIM (probabilities at each receiving
                       engine, on all traffic); NCCL_TRIM_TEST_SEED = seed*1000003 + rank
  --trimmable          NCCL_TRIM_DTYPE=fp32: the fallback datatype when no profiler answers
                       (with the default phase rule nothing is trimmable then: the ring phase
                       of a send is unknown)
  --mtu BYTES          NCCL_TRIM_MTU        --timeout-ms MS   NCCL_TRIM_TIMEOUT_MS
  --traffic-class N    v11/v12 init's per-communicator traffic class (what a ProcessGroupNCCL's
                       config.traffic_class sets; NCCL_TRIM_HOOK_TRAFFIC_CLASS marks the comm hook's)
  --prerotate          allreduce: rotate each rank's input with libtrim-rht's host twin before
                       the allreduce and undo it after, as the nccl_trim comm hook does (the
                       result then differs from the reference by rounding: verify is ok, not exact)
  --declare-rotated    before init, declare --traffic-class rotated in rows of 2^15, through the
                       plugin's nccl_trim_hook_declare, as the comm hook does before it creates
                       its group; only then do that class's connections send as scheme rotated
                       (without it they rotate per hop: the plugin trusts no class by default)
  NCCL_TRIM_IFNAME=lo unless already set.
  --netns NS0,NS1,...  rank K enters network namespace NSK (a name under /var/run/netns, or a
                       path) before it loads the plugin; set NCCL_TRIM_IFNAME to the interface
                       there (scripts/netns_bottleneck.sh runs the ranks through trim-switch's
                       TUN router this way). Needs root.
Fault scenarios (sendrecv):
  --kill-peer          the receiver SIGKILLs itself halfway through the first iteration; the
                       sender must get an error from isend/test. Exit 3 when it did within
                       3x the timeout (the expected outcome), 1 when it hung.
  --freeze-peer        the same with SIGSTOP (the parent SIGKILLs the frozen rank at the end)
  --close-in-flight    post up to 8 sends/receives, let one complete, then deregMr and close
                       without waiting for the rest (buffers are freed after the close)
  --abort-in-flight    the same in the order of NCCL's proxy teardown on abort: deregMr, free
                       the buffers, then close (the plugin must not touch them after deregMr)
Verify (of the fp32 data: sendrecv's copy, the allreduce, mixed's trimmable AllReduce): exact
(every rank bit-identical to a reference summed in the ring's order; encoded traffic that
arrived untrimmed decodes to the original bits), ok (not exact, but explained: the plugin
reports trimmed packets accepted; raw tail bytes exact and the mean NMSE <= --nmse-max), fail;
skipped for the fault scenarios, which check no data. mixed also fails unless exact_ok.
JSON extras: replicas_identical (allreduce, mixed: every rank's final fp32 buffers hash alike)
and replica_nmse (the largest NMSE of any rank's result against rank 0's, 0 when identical);
exact_ok (mixed: the int32 sums, the broadcast payload and the LL sums arrived bit exact);
profiler (the table loaded: v6, v5 or none); in_flight_at_close (--close/--abort-in-flight:
requests the ranks left in flight at deregMr); from the plugin's counters: codec_cancelled
(codec tasks that found their message abandoned), codec_waited_tasks (tasks close and deregMr
found in flight and waited for; NCCL_TRIM_TEST_CODEC_STALL_MS makes them slow),
hook_undeclared_conns (connections of the hook's class sent as rht: no --declare-rotated).
Exit status: 0 when verify != fail and no error, 3 as above, 2 for a bad command line, 1
otherwise.
)";
}

Result<Options> parse_options(int argc, char** argv, bool* help_printed) {
  Options o;
  *help_printed = false;
  for (int i = 1; i < argc; ++i) {
    std::string flag = argv[i];
    // Flags without a value first.
    if (flag == "--help" || flag == "-h") {
      *help_printed = true;
      return o;
    }
    if (flag == "--json") { o.json = true; continue; }
    if (flag == "--verbose") { o.verbose = true; continue; }
    if (flag == "--trimmable") { o.trimmable = true; continue; }
    if (flag == "--prerotate") { o.prerotate = true; continue; }
    if (flag == "--declare-rotated") { o.declare_rotated = true; continue; }
    if (flag == "--kill-peer") { o.fault = Fault::kKillPeer; continue; }
    if (flag == "--freeze-peer") { o.fault = Fault::kFreezePeer; continue; }
    if (flag == "--close-in-flight") { o.fault = Fault::kCloseInFlight; continue; }
    if (flag == "--abort-in-flight") { o.fault = Fault::kAbortInFlight; continue; }
    if (i + 1 >= argc) return bad("unknown flag or missing value: " + flag + " (see --help)");
    std::string v = argv[++i];
    if (flag == "--plugin") {
      o.plugin_path = v;
    } else if (flag == "--csv") {
      o.csv_path = v;
    } else if (flag == "--api") {
      if (v == "v8") o.api = Api::kV8;
      else if (v == "v9") o.api = Api::kV9;
      else if (v == "v10") o.api = Api::kV10;
      else if (v == "v11") o.api = Api::kV11;
      else if (v == "v12") o.api = Api::kV12;
      else return bad("--api " + v + ": expected v8, v9, v10, v11 or v12");
    } else if (flag == "--mode") {
      if (v == "sendrecv") o.mode = Mode::kSendRecv;
      else if (v == "allreduce") o.mode = Mode::kAllReduce;
      else if (v == "mixed") o.mode = Mode::kMixed;
      else return bad("--mode " + v + ": expected sendrecv, allreduce or mixed");
    } else if (flag == "--op") {
      if (v == "p2p") o.op = SendRecvOp::kP2p;
      else if (v == "allreduce") o.op = SendRecvOp::kAllReduce;
      else return bad("--op " + v + ": expected p2p or allreduce");
    } else if (flag == "--profiler") {
      if (v == "auto") o.profiler = ProfilerChoice::kAuto;
      else if (v == "none") o.profiler = ProfilerChoice::kNone;
      else return bad("--profiler " + v + ": expected auto or none");
    } else if (flag == "--ranks") {
      Result<long long> n = parse_int(flag, v, 2, kMaxRanks);
      if (!n) return n.status();
      o.ranks = static_cast<int>(*n);
    } else if (flag == "--bytes") {
      Result<size_t> b = parse_bytes(v);
      if (!b) return b.status();
      o.bytes = *b;
    } else if (flag == "--iters") {
      Result<long long> n = parse_int(flag, v, 1, kMaxIters);
      if (!n) return n.status();
      o.iters = static_cast<int>(*n);
    } else if (flag == "--warmup") {
      Result<long long> n = parse_int(flag, v, 0, kMaxIters);
      if (!n) return n.status();
      o.warmup = static_cast<int>(*n);
    } else if (flag == "--nmse-max") {
      Result<double> x = parse_double(flag, v, 0.0, 1e6);
      if (!x) return x.status();
      o.nmse_max = *x;
    } else if (flag == "--deadline-s") {
      Result<long long> n = parse_int(flag, v, 1, 86400);
      if (!n) return n.status();
      o.deadline_s = static_cast<int>(*n);
    } else if (flag == "--seed") {
      Result<long long> n = parse_int(flag, v, 0, (1LL << 62));
      if (!n) return n.status();
      o.seed = static_cast<uint64_t>(*n);
    } else if (flag == "--drop" || flag == "--dup" || flag == "--reorder" || flag == "--trim") {
      Result<double> p = parse_double(flag, v, 0.0, 1.0);
      if (!p) return p.status();
      double* dst = flag == "--drop" ? &o.drop : flag == "--dup" ? &o.dup : flag == "--reorder" ? &o.reorder : &o.trim;
      *dst = *p;
    } else if (flag == "--mtu") {
      Result<long long> n = parse_int(flag, v, 1, 1 << 20);  // the plugin validates the real range
      if (!n) return n.status();
      o.mtu_bytes = static_cast<int>(*n);
    } else if (flag == "--netns") {
      o.netns.clear();
      size_t at = 0;
      while (at <= v.size()) {
        const size_t comma = std::min(v.find(',', at), v.size());
        const std::string name = v.substr(at, comma - at);
        if (name.empty()) return bad("--netns " + v + ": expected NS0,NS1,... (one namespace per rank)");
        o.netns.push_back(name);
        at = comma + 1;
      }
    } else if (flag == "--timeout-ms") {
      Result<long long> n = parse_int(flag, v, 1, 86400000);
      if (!n) return n.status();
      o.timeout_ms = static_cast<int>(*n);
    } else if (flag == "--traffic-class") {
      Result<long long> n = parse_int(flag, v, 0, 2147483647);
      if (!n) return n.status();
      o.traffic_class = static_cast<int>(*n);
    } else {
      return bad("unknown flag: " + flag + " (see --help)");
    }
  }
  Status st = check_combination(o);
  if (!st.is_ok()) return st;
  return o;
}

}  // namespace trim::harness
