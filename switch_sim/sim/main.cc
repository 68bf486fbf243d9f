// trim-sim: command line. Flags, validation (a bad flag names itself and what it accepts, exit
// 2), the run, and the report. The only wall-clock reading is for wall_seconds.
#include <fmt/format.h>

#include <malloc.h>
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "switch_sim/sim/sim.h"

namespace {

// The simulator's state (flows and their windows, ports, packets, the event wheel) is tens of MB
// touched at random, one cache line here and one there: with 4 KB pages most touches also miss
// the TLB (~5% of a 256-host run). glibc grows its heap with brk, so each growth is padded to
// 1 GiB of address space (memory is committed only as it is touched) and that range is given to
// transparent huge pages; large vectors come from the heap too. Where THP is off or madvise is
// refused this changes nothing. (What GLIBC_TUNABLES=glibc.malloc.hugetlb=1 does, in code.)
void prefer_huge_pages() {
  constexpr size_t kPad = size_t{1} << 30, kHuge = size_t{2} << 20;
  mallopt(M_TOP_PAD, static_cast<int>(kPad));
  mallopt(M_MMAP_THRESHOLD, static_cast<int>(kPad));
  void* probe = std::malloc(kHuge);  // more than the heap has left: it grows by the pad now
  const uintptr_t lo = (reinterpret_cast<uintptr_t>(probe) + kHuge - 1) & ~(kHuge - 1);
  const uintptr_t hi = reinterpret_cast<uintptr_t>(sbrk(0)) & ~(kHuge - 1);
  if (hi > lo) madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_HUGEPAGE);
  std::free(probe);
}

using trim::sim::Config;

const char kHelp[] = R"(trim-sim: discrete-event simulation of trimmable gradient traffic on a leaf-spine fabric.

Usage: trim-sim [flags]
  --hosts N              hosts (>= 2; default 64)
  --hosts-per-leaf K     hosts per leaf switch (default 16)
  --oversub X            leaf oversubscription X:1, integer >= 1 (default 1): the leaf has
                         max(1, K/X) uplinks, one per spine, of total bandwidth K*rate/X
  --link-gbps R          host link rate (default 100)
  --prop-ns T            propagation delay per link (default 500)
  --mtu B                packet size in bytes, 256..9216 (default 9000)
  --buffer SPEC          switch port data queue: bytes (e.g. 256K), Npkt (packets of --mtu) or
                         Nbdp (N x bandwidth-delay product of the 4-hop path; default 1bdp)
  --header-buffer B      header queue per port in bytes (default: same as --buffer)
  --nic-buffer B         host NIC queue cap in bytes (default 0 = unbounded: a host backpressures)
  --trim-bytes B         0 or plane0: cut at the packet's plane-0 end (1-bit heads, ~1/25 of a
                         9000-byte fp32 packet); else a fixed switch trim size >= 64 (default 0);
                         a cut inside plane 0 delivers the heads that survived (never resent)
  --mode trim|drop       trimming switches or tail-drop switches (default trim)
  --routing ecmp|spray   per-flow hash or per-packet round robin over spines (default ecmp)
  --workload allreduce|incast|permutation   (default allreduce)
  --bytes B              per host (allreduce buffer) or per sender (default 16M)
  --iters N              iterations (default 5); JCT p50/p99 are over iterations (nearest rank)
  --incast-senders K     incast senders into host 0 (default 8)
  --exact                incast/permutation payload is exact (default: trimmable)
  --fabric 0|1           1: switches as trim-switch --fabric 1 (docs/DEPLOYMENT.md): trim the
                         trimmable class to --trim-size, drop exact packets (no header cuts),
                         serve the trimmed class by DWRR with --trimmed-share of the link; a cut
                         inside our 80-byte header is a loss at the receiver (header_cuts)
  --trim-size B          --fabric 1: frame bytes a trim keeps, 64..9216 (default 256; the IP
                         packet keeps B - 18)
  --trimmed-share S      --fabric 1: the trimmed class's DWRR share, 0.01..0.99 (default 0.25)
  --trim-exact 0|1       1 (default, NDP/UEC, as trim-switch --trim-exact 1): in trim mode exact
                         packets (allgather, background) are cut to a bare header instead of
                         dropped and the receiver NACKs it at once; 0: they are dropped
                         (--nack-exact is the same as --trim-exact 1)
  --background none|constant|bursty   exact background traffic (default none):
                         constant: one paced flow per host to a random peer at --bg-load of
                         the link; bursty: per host, flows of --bg-flow bytes to random hosts
                         at Poisson times giving --bg-load offered load, each at line rate
  --bg-load F            background load per host, fraction of link rate (default 0.15)
  --bg-flow B            bursty flow size (default 1M)
  --bg-priority high|shared   shared (default): background queues FIFO with the workload's
                         data; high: another tenant in every port's strict-priority class
                         (trim-switch --cross ...:prio=high), served before the workload's
                         header and data queues, never cut, dropped beyond a queue of the
                         data queue's size: the workload gets what it leaves
  --window W             packets per flow window, 1..256 (default 16)
  --cc fixed|aimd        fixed window, or AIMD (+1/cwnd per ACK, halve on loss or trimmed ACK;
                         default aimd, starting at --window)
  --rto-us T             minimum retransmission timeout, as NCCL_TRIM_MIN_RTO_US (default 10000)
  --tlp 0|1              tail loss probes after max(2 srtt, RTO/4), as the plugin (default 1)
  --transport own|tcp    own (default): the transport below; tcp (with --mode drop): a TCP-like
                         baseline for every flow (switch_sim/sim/tcp.h): cumulative ACKs and
                         in-order delivery, slow start from 10 segments then +1 a window, fast
                         recovery once 3 segments are SACKed above a hole (cwnd and ssthresh
                         halve; holes with 3 SACKed above, and NewReno's partial ACKs, are
                         resent), RTO = max(--rto-us, srtt + 4 rttvar) doubling to cwnd 1; no
                         tail loss probe; --window, --cc and --tlp do not apply
  --tcp-rack 0|1         --transport tcp: RACK loss detection as Linux's default (1, default:
                         a hole is lost once a later-sent segment was delivered and its RTT plus
                         min_rtt/4 passed; finds lost resends too) or Reno + SACK only (0)
  --slice B              ring step slice (NCCL SIMPLE step; default 512K)
  --ring linear|random   ring order: host order (topology-aware, as NCCL) or shuffled
  --seed S               (default 1)
  --max-sim-ms T         stop a run that has not finished by this simulated time (default 60000)
  --cm FILE              also write the workload as an htsim connection matrix (.cm)
  --json                 print one JSON object as the last line

Transport: per-packet selective ACKs, delivered after the reverse path's unloaded latency (not
queued). Trimmed trimmable packets are deliveries (heads), never resent; trimmed exact packets are
NACKed and resent. Loss recovery is the plugin's own unit (transport/recovery.h), as its sender
drives it: RACK (a packet sent no later than the latest send known delivered is lost once that
packet's RTT plus max(srtt/4, RTO/4) -- at least srtt while trims are reported -- has passed since
it was sent; a reorder timer re-checks), a tail loss probe max(2 srtt, RTO/4)
after the last new send or ACK (again at doubling intervals), and the timeout max(--rto-us,
srtt + 4 rttvar), doubling (<= 64x, 1 s) until cumulative progress, resending what has been out
that long; a timeout whose first resent packet is acknowledged by its original is spurious
(the plugin's Eifel detection): its window cut is undone and the RTO keeps a floor of 5/4 of
that round trip (spurious_rto in --json).
Ring allreduce: n chunks per buffer, 2(n-1) steps; a rank sends slice j of step s+1 once it has
received slice j of step s; steps < n-1 (reduce-scatter) are trimmable, the rest exact.
NMSE: nmse = mean over reduce-scatter packets of e, e = 0 untrimmed, pi/2-1 = 0.5708 trimmed (rht
1-bit heads decode a row at NMSE pi/2-1 relative to the partial sum the packet carried), and
0.5708 (1-u) + u when a fixed trim size cut a fraction u of the heads (assumes whole rows per
packet and independent errors). nmse_final_indep = the error left in the reduced
result if ranks' gradients are independent with equal energy: mean over chunk
positions of sum over trimmed steps s of e (s+1)/n.
)";

[[noreturn]] void bad(const std::string& flag, const std::string& value, const std::string& allowed) {
  std::fprintf(stderr, "trim-sim: %s: '%s' is not valid; allowed: %s (see --help)\n", flag.c_str(), value.c_str(),
               allowed.c_str());
  std::exit(2);
}

uint64_t to_u64(const std::string& flag, const std::string& v, uint64_t lo, uint64_t hi) {
  char* end = nullptr;
  errno = 0;
  unsigned long long x = std::strtoull(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0' || errno != 0 || v[0] == '-' || x < lo || x > hi) {
    bad(flag, v, fmt::format("an integer in [{}, {}]", lo, hi));
  }
  return x;
}

double to_double(const std::string& flag, const std::string& v, double lo, double hi) {
  char* end = nullptr;
  double x = std::strtod(v.c_str(), &end);
  if (v.empty() || *end != '\0' || !(x >= lo && x <= hi)) bad(flag, v, fmt::format("a number in [{}, {}]", lo, hi));
  return x;
}

uint64_t to_bytes(const std::string& flag, const std::string& v) {
  uint64_t b = 0;
  if (!trim::sim::parse_bytes(v, &b)) bad(flag, v, "a byte count such as 9000, 512K, 16M, 1G");
  return b;
}

}  // namespace

int main(int argc, char** argv) {
  Config cfg;
  uint32_t fabric_size = 0;  // --trim-size (fabric mode; 256 when unset)
  bool json = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      std::fputs(kHelp, stdout);
      return 0;
    }
    if (a == "--json") {
      json = true;
      continue;
    }
    if (a == "--nack-exact") {  // the name earlier results used; the default now
      cfg.nack_exact = true;
      continue;
    }
    if (a == "--exact") {
      cfg.exact_class = true;
      continue;
    }
    if (a.rfind("--", 0) != 0) bad("argument", a, "flags starting with --");
    if (i + 1 >= argc) bad(a, "", "a value after the flag");
    const std::string v = argv[++i];
    if (a == "--hosts") cfg.hosts = static_cast<uint32_t>(to_u64(a, v, 2, 1u << 20));
    else if (a == "--hosts-per-leaf") cfg.hosts_per_leaf = static_cast<uint32_t>(to_u64(a, v, 1, 4096));
    else if (a == "--oversub") cfg.oversub = static_cast<uint32_t>(to_u64(a, v, 1, 1024));
    else if (a == "--link-gbps") cfg.link_gbps = to_double(a, v, 0.001, 100000);
    else if (a == "--prop-ns") cfg.prop_ns = to_u64(a, v, 0, 1000000000);
    else if (a == "--mtu") cfg.mtu_bytes = static_cast<uint32_t>(to_u64(a, v, 256, 9216));
    else if (a == "--buffer") cfg.buffer_spec = v;
    else if (a == "--header-buffer") cfg.header_buffer_bytes = to_bytes(a, v);
    else if (a == "--nic-buffer") cfg.nic_buffer_bytes = to_bytes(a, v);
    else if (a == "--trim-bytes") cfg.trim_bytes = v == "plane0" ? 0 : static_cast<uint32_t>(to_u64(a, v, 0, 9216));
    else if (a == "--mode") {
      if (v == "trim") cfg.mode = trim::sw::Mode::kTrim;
      else if (v == "drop") cfg.mode = trim::sw::Mode::kDrop;
      else bad(a, v, "trim, drop");
    } else if (a == "--routing") {
      if (v == "ecmp") cfg.routing = trim::sim::Routing::kEcmp;
      else if (v == "spray") cfg.routing = trim::sim::Routing::kSpray;
      else bad(a, v, "ecmp, spray");
    } else if (a == "--workload") {
      if (v == "allreduce") cfg.workload = trim::sim::Workload::kAllreduce;
      else if (v == "incast") cfg.workload = trim::sim::Workload::kIncast;
      else if (v == "permutation") cfg.workload = trim::sim::Workload::kPermutation;
      else bad(a, v, "allreduce, incast, permutation");
    } else if (a == "--bytes") cfg.bytes = to_bytes(a, v);
    else if (a == "--iters") cfg.iters = static_cast<uint32_t>(to_u64(a, v, 1, 100000));
    else if (a == "--incast-senders") cfg.incast_senders = static_cast<uint32_t>(to_u64(a, v, 1, 1u << 20));
    else if (a == "--background") {
      if (v == "none") cfg.background = trim::sim::Background::kNone;
      else if (v == "constant") cfg.background = trim::sim::Background::kConstant;
      else if (v == "bursty") cfg.background = trim::sim::Background::kBursty;
      else bad(a, v, "none, constant, bursty");
    } else if (a == "--bg-priority") {
      if (v == "high") cfg.bg_priority = true;
      else if (v == "shared") cfg.bg_priority = false;
      else bad(a, v, "high, shared");
    } else if (a == "--bg-load") cfg.bg_load = to_double(a, v, 0.0, 1.0);
    else if (a == "--bg-flow") cfg.bg_flow_bytes = to_bytes(a, v);
    else if (a == "--window") cfg.window_pkts = static_cast<uint32_t>(to_u64(a, v, 1, trim::sim::kMaxWindow));
    else if (a == "--cc") {
      if (v == "fixed") cfg.cc = trim::sim::Cc::kFixed;
      else if (v == "aimd") cfg.cc = trim::sim::Cc::kAimd;
      else bad(a, v, "fixed, aimd");
    } else if (a == "--rto-us") cfg.rto_ns = to_u64(a, v, 1, 10000000) * 1000;
    else if (a == "--tlp") cfg.tlp = to_u64(a, v, 0, 1) == 1;
    else if (a == "--tcp-rack") cfg.tcp_rack = to_u64(a, v, 0, 1) == 1;
    else if (a == "--transport") {
      if (v == "own") cfg.transport = trim::sim::Transport::kOwn;
      else if (v == "tcp") cfg.transport = trim::sim::Transport::kTcp;
      else bad(a, v, "own, tcp");
    }
    else if (a == "--trim-exact") cfg.nack_exact = to_u64(a, v, 0, 1) == 1;
    else if (a == "--fabric") cfg.fabric = to_u64(a, v, 0, 1) == 1;
    else if (a == "--trim-size") fabric_size = static_cast<uint32_t>(to_u64(a, v, 64, 9216));
    else if (a == "--trimmed-share") cfg.trimmed_share = to_double(a, v, 0.01, 0.99);
    else if (a == "--slice") cfg.slice_bytes = to_bytes(a, v);
    else if (a == "--ring") {
      if (v == "linear") cfg.ring = trim::sim::RingOrder::kLinear;
      else if (v == "random") cfg.ring = trim::sim::RingOrder::kRandom;
      else bad(a, v, "linear, random");
    } else if (a == "--seed") cfg.seed = to_u64(a, v, 0, UINT64_MAX);
    else if (a == "--max-sim-ms") cfg.max_sim_ns = to_u64(a, v, 1, 1000000000) * 1000000ull;
    else if (a == "--cm") cfg.cm_path = v;
    else bad(a, v, "a flag listed by --help");
  }
  // Cross-flag checks. The fabric mode trims to a frame size: its IP bytes (less 18 of framing).
  if (cfg.fabric) {
    if (cfg.trim_bytes != 0) bad("--trim-bytes", std::to_string(cfg.trim_bytes), "unset with --fabric 1 (use --trim-size)");
    cfg.trim_bytes = (fabric_size != 0 ? fabric_size : 256) - 18;
  } else if (fabric_size != 0) {
    bad("--trim-size", std::to_string(fabric_size), "--fabric 1 as well");
  }
  if (!cfg.fabric && cfg.trim_bytes != 0 && cfg.trim_bytes < 64) bad("--trim-bytes", std::to_string(cfg.trim_bytes), "0, plane0 or >= 64");
  if (cfg.trim_bytes >= cfg.mtu_bytes) bad("--trim-bytes", std::to_string(cfg.trim_bytes), "less than --mtu");
  if (cfg.transport == trim::sim::Transport::kTcp) {
    // TCP has no use for a trimmed packet: its baseline runs on tail-drop switches.
    if (cfg.mode != trim::sw::Mode::kDrop || cfg.fabric) bad("--transport", "tcp", "with --mode drop and --fabric 0");
    cfg.tlp = false;
  }
  if (cfg.slice_bytes == 0) bad("--slice", "0", "a positive byte count");
  if (cfg.bg_flow_bytes == 0) bad("--bg-flow", "0", "a positive byte count");
  if (cfg.bytes == 0 || cfg.bytes > (1ull << 32)) bad("--bytes", std::to_string(cfg.bytes), "1 .. 4G");
  if (cfg.workload == trim::sim::Workload::kIncast && cfg.incast_senders >= cfg.hosts) {
    bad("--incast-senders", std::to_string(cfg.incast_senders), "fewer than --hosts");
  }
  if (cfg.background != trim::sim::Background::kNone && cfg.bg_load <= 0) bad("--bg-load", "0", "a load in (0, 1]");
  {
    // Bandwidth-delay product of the longest path: data over 4 hops plus the ACK's way back.
    const double ser_ns = cfg.mtu_bytes * 8.0 / cfg.link_gbps, ack_ns = trim::sim::kAckBytes * 8.0 / cfg.link_gbps;
    const double rtt_ns = 4 * (cfg.prop_ns + ser_ns) + 4 * (cfg.prop_ns + ack_ns);
    const uint64_t bdp = static_cast<uint64_t>(std::ceil(rtt_ns * cfg.link_gbps / 8.0));
    const std::string& s = cfg.buffer_spec;
    auto num = [&](size_t n) { return to_double("--buffer", s.substr(0, s.size() - n), 0.001, 1e6); };
    if (s.size() > 3 && s.compare(s.size() - 3, 3, "bdp") == 0) cfg.buffer_bytes = static_cast<uint64_t>(num(3) * bdp);
    else if (s.size() > 3 && s.compare(s.size() - 3, 3, "pkt") == 0) cfg.buffer_bytes = static_cast<uint64_t>(num(3) * cfg.mtu_bytes);
    else if (!trim::sim::parse_bytes(s, &cfg.buffer_bytes) || cfg.buffer_bytes == 0) bad("--buffer", s, "bytes (256K), Npkt or Nbdp");
    if (cfg.buffer_bytes < cfg.mtu_bytes) bad("--buffer", s, "at least one --mtu packet");
  }

  prefer_huge_pages();
  const auto t0 = std::chrono::steady_clock::now();
  trim::sim::Simulator sim(cfg);
  sim.run();
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!cfg.cm_path.empty() && !sim.write_cm(cfg.cm_path)) {
    std::fprintf(stderr, "trim-sim: --cm: cannot write '%s'\n", cfg.cm_path.c_str());
    return 1;
  }
  std::fputs(sim.summary().c_str(), stdout);
  std::printf("  wall %.3f s\n", wall);
  if (json) std::printf("%s\n", sim.json(wall).c_str());
  std::fflush(stdout);
  return sim.hung() ? 3 : 0;
}
