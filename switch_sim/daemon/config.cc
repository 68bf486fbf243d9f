#include "switch_sim/daemon/config.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <netdb.h>

#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <sstream>

namespace trim::sw::daemon {

namespace {

Status bad(const std::string& msg) { return Status(Code::kBadConfig, msg); }

std::string trim_ws(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos) return "";
  const size_t e = s.find_last_not_of(" \t\r");
  return s.substr(b, e - b + 1);
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string cur;
  std::istringstream in(s);
  while (std::getline(in, cur, sep)) out.push_back(cur);
  if (!s.empty() && s.back() == sep) out.push_back("");
  return out;
}

Result<double> parse_num(const std::string& flag, const std::string& v, double lo, double hi, const char* what) {
  char* end = nullptr;
  errno = 0;
  const double x = std::strtod(v.c_str(), &end);
  if (v.empty() || *end != '\0' || errno != 0 || !(x >= lo && x <= hi)) {
    return bad(fmt::format("{} '{}': expected {}", flag, v, what));
  }
  return x;
}

Result<uint64_t> parse_uint(const std::string& flag, const std::string& v, uint64_t lo, uint64_t hi) {
  char* end = nullptr;
  errno = 0;
  const unsigned long long x = std::strtoull(v.c_str(), &end, 10);
  if (v.empty() || v[0] == '-' || *end != '\0' || errno != 0 || x < lo || x > hi) {
    return bad(fmt::format("{} '{}': expected an integer in {}..{}", flag, v, lo, hi));
  }
  return static_cast<uint64_t>(x);
}

// The fabric mode's flags (switch_sim/fabric.h).
Status apply_fabric(FabricConfig* f, const std::string& name, const std::string& v) {
  const std::string flag = "--" + name;
  if (name == "fabric") {
    if (v == "1" || v == "true") f->on = true;
    else if (v == "0" || v == "false") f->on = false;
    else return bad(fmt::format("{} '{}': expected 0 or 1", flag, v));
  } else if (name == "trim-dscp") {
    f->trimmable.reset();
    for (const std::string& d : split(v, ',')) {
      Result<uint64_t> x = parse_uint(flag, trim_ws(d), 0, 63);
      if (!x) return bad(fmt::format("{} '{}': expected DSCP values 0..63, comma-separated", flag, v));
      f->trimmable.set(*x);
    }
  } else if (name == "trimmed-dscp") {
    Result<uint64_t> x = parse_uint(flag, v, 0, 63);
    if (!x) return x.status();
    f->trimmed_dscp = static_cast<uint8_t>(*x);
  } else if (name == "trim-size") {
    Result<uint64_t> x = parse_uint(flag, v, 64, 9216);
    if (!x) return x.status();
    f->trim_size = static_cast<uint32_t>(*x);
  } else if (name == "trim-l2-bytes") {
    Result<uint64_t> x = parse_uint(flag, v, 0, 64);
    if (!x) return x.status();
    f->l2_bytes = static_cast<uint32_t>(*x);
  } else if (name == "trimmed-share") {
    Result<double> x = parse_num(flag, v, 0.01, 0.99, "a share of the link, 0.01..0.99");
    if (!x) return x.status();
    f->trimmed_share = *x;
  } else if (name == "rewrite-ip-length") {
    if (v == "rewrite") f->fix_ip = true;
    else if (v == "keep") f->fix_ip = false;
    else return bad(fmt::format("{} '{}': expected rewrite or keep", flag, v));
  } else if (name == "rewrite-udp-length") {
    if (v == "rewrite") f->udp_len = FabricConfig::UdpLen::kRewrite;
    else if (v == "keep") f->udp_len = FabricConfig::UdpLen::kKeep;
    else return bad(fmt::format("{} '{}': expected rewrite or keep", flag, v));
  } else if (name == "rewrite-udp-checksum") {
    if (v == "zero") f->udp_csum = FabricConfig::UdpCsum::kZero;
    else if (v == "keep") f->udp_csum = FabricConfig::UdpCsum::kKeep;
    else if (v == "recompute") f->udp_csum = FabricConfig::UdpCsum::kRecompute;
    else return bad(fmt::format("{} '{}': expected zero, keep or recompute", flag, v));
  } else {
    return bad(fmt::format("unknown flag: {} (see --help)", flag));
  }
  return Status::ok();
}

// Applies one `name value` pair (name without the leading dashes). Recursion depth of config
// files is bounded by `depth` so that a file including itself fails instead of looping.
Status apply(Config* c, const std::string& name, const std::string& v, int depth);

Status read_config_file(Config* c, const std::string& path, int depth) {
  if (depth > 4) return bad(fmt::format("--config {}: nested more than 4 deep", path));
  std::ifstream in(path);
  if (!in) return bad(fmt::format("--config {}: cannot open", path));
  std::string line;
  int lineno = 0;
  while (std::getline(in, line)) {
    ++lineno;
    const size_t hash = line.find('#');
    if (hash != std::string::npos) line.resize(hash);
    line = trim_ws(line);
    if (line.empty()) continue;
    const size_t eq = line.find('=');
    if (eq == std::string::npos) return bad(fmt::format("--config {}:{}: expected `key = value`", path, lineno));
    Status st = apply(c, trim_ws(line.substr(0, eq)), trim_ws(line.substr(eq + 1)), depth + 1);
    if (!st.is_ok()) return bad(fmt::format("--config {}:{}: {}", path, lineno, st.message()));
  }
  return Status::ok();
}

Status apply(Config* c, const std::string& name, const std::string& v, int depth) {
  const std::string flag = "--" + name;
  PortConfig& p = c->port;
  if (name == "listen") {
    Result<sockaddr_in> a = parse_addr(flag, v, true);
    if (!a) return a.status();
    c->listen = *a;
    c->listen_text = v;
  } else if (name == "config") {
    return read_config_file(c, v, depth);
  } else if (name == "rate-gbps") {
    Result<double> x = parse_num(flag, v, 1e-3, 1e4, "a rate in Gbit/s, 0.001..10000");
    if (!x) return x.status();
    p.rate_gbps = *x;
  } else if (name == "prop-delay-us") {
    Result<double> x = parse_num(flag, v, 0, 1e6, "microseconds, 0..1000000");
    if (!x) return x.status();
    p.prop_delay_ns = static_cast<uint64_t>(*x * 1000.0);
  } else if (name == "buffer-bytes") {
    Result<uint64_t> x = parse_uint(flag, v, 0, uint64_t{1} << 34);
    if (!x) return x.status();
    p.data_queue_bytes = *x;
  } else if (name == "buffer-packets") {
    Result<uint64_t> x = parse_uint(flag, v, 0, 1u << 24);
    if (!x) return x.status();
    p.data_queue_packets = static_cast<uint32_t>(*x);
  } else if (name == "header-buffer-bytes") {
    Result<uint64_t> x = parse_uint(flag, v, 0, uint64_t{1} << 34);
    if (!x) return x.status();
    p.header_queue_bytes = *x;
  } else if (name == "prio-buffer-bytes") {
    Result<uint64_t> x = parse_uint(flag, v, 0, uint64_t{1} << 34);
    if (!x) return x.status();
    p.prio_queue_bytes = *x;
  } else if (name == "trim-bytes") {
    Result<uint64_t> x = parse_uint(flag, v, 0, 65535);
    if (!x) return x.status();
    p.trim_bytes = static_cast<uint32_t>(*x);
    c->trim_bytes_set = true;
  } else if (name.rfind("fabric", 0) == 0 || name == "trim-dscp" || name == "trimmed-dscp" || name == "trim-size" ||
             name == "trim-l2-bytes" || name == "trimmed-share" || name.rfind("rewrite-", 0) == 0) {
    return apply_fabric(&c->fabric, name, v);
  } else if (name == "priority") {
    if (v == "strict") p.priority = Priority::kStrict;
    else if (v == "wrr") p.priority = Priority::kWrr;
    else return bad(fmt::format("{} '{}': expected strict or wrr", flag, v));
  } else if (name == "mode") {
    if (!parse_mode(v, &p.mode)) return bad(fmt::format("{} '{}': expected trim, drop, random or replay", flag, v));
  } else if (name == "random-p") {
    Result<double> x = parse_num(flag, v, 0, 1, "a probability, 0..1");
    if (!x) return x.status();
    p.random_p = *x;
  } else if (name == "ndp-coin" || name == "trim-exact") {
    bool& b = name == "ndp-coin" ? p.ndp_coin : p.trim_exact_to_header;
    if (v == "1" || v == "true") b = true;
    else if (v == "0" || v == "false") b = false;
    else return bad(fmt::format("{} '{}': expected 0 or 1", flag, v));
  } else if (name == "seed") {
    Result<uint64_t> x = parse_uint(flag, v, 0, UINT64_MAX);
    if (!x) return x.status();
    p.seed = *x;
  } else if (name == "transcript-out") {
    c->transcript_out = v;
  } else if (name == "replay") {
    c->replay = v;
  } else if (name == "cross") {
    Result<CrossSpec> s = parse_cross(v);
    if (!s) return s.status();
    c->cross.push_back(*s);
  } else if (name == "loss-p") {
    Result<double> x = parse_num(flag, v, 0, 1, "a probability, 0..1");
    if (!x) return x.status();
    c->loss_p = *x;
  } else if (name == "tun-netns") {
    c->tun_netns.clear();
    for (const std::string& n : split(v, ',')) {
      if (trim_ws(n).empty()) return bad(fmt::format("{} '{}': expected NS0,NS1,... (namespace names or paths)", flag, v));
      c->tun_netns.push_back(trim_ws(n));
    }
  } else if (name == "tun-name") {
    // IFNAMSIZ is 16 with the NUL; the name is the same in every namespace.
    if (v.empty() || v.size() > 15 || v.find_first_of("/ :%") != std::string::npos) {
      return bad(fmt::format("{} '{}': expected an interface name of 1..15 characters", flag, v));
    }
    c->tun_name = v;
  } else if (name == "tun-base") {
    in_addr a{};
    if (inet_pton(AF_INET, v.c_str(), &a) != 1) return bad(fmt::format("{} '{}': expected an IPv4 address", flag, v));
    c->tun_base_be = a.s_addr;
    c->tun_base_text = v;
  } else if (name == "tun-mtu") {
    Result<uint64_t> x = parse_uint(flag, v, 576, 65535);
    if (!x) return x.status();
    c->tun_mtu = static_cast<uint32_t>(*x);
  } else if (name == "tun-txqueuelen") {
    Result<uint64_t> x = parse_uint(flag, v, 1, 1u << 20);
    if (!x) return x.status();
    c->tun_txqueuelen = static_cast<uint32_t>(*x);
  } else if (name == "stats-interval-ms") {
    Result<uint64_t> x = parse_uint(flag, v, 0, 3600000);
    if (!x) return x.status();
    c->stats_interval_ms = static_cast<uint32_t>(*x);
  } else if (name == "duration-s") {
    Result<double> x = parse_num(flag, v, 0, 1e7, "seconds, 0 (run until a signal) ..10000000");
    if (!x) return x.status();
    c->duration_s = *x;
  } else {
    return bad(fmt::format("unknown flag: {} (see --help)", flag));
  }
  return Status::ok();
}

}  // namespace

Result<sockaddr_in> parse_addr(const std::string& flag, const std::string& text, bool allow_port0) {
  const size_t colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 >= text.size()) {
    return bad(fmt::format("{} '{}': expected host:port", flag, text));
  }
  const std::string host = text.substr(0, colon);
  Result<uint64_t> port = parse_uint(flag + " port", text.substr(colon + 1), allow_port0 ? 0 : 1, 65535);
  if (!port) return port.status();
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(*port));
  if (inet_pton(AF_INET, host.c_str(), &a.sin_addr) == 1) return a;
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* res = nullptr;
  if (getaddrinfo(host.c_str(), nullptr, &hints, &res) != 0 || res == nullptr) {
    return bad(fmt::format("{} '{}': cannot resolve '{}' (IPv4 only)", flag, text, host));
  }
  a.sin_addr = reinterpret_cast<sockaddr_in*>(res->ai_addr)->sin_addr;
  freeaddrinfo(res);
  return a;
}

// const:RATE:DST | onoff:RATE:ON_MS:OFF_MS:DST | incast:K:RATE:DST, then options
// (:trimmable=0|1, :size=BYTES). DST is `all` or host:port, so it takes two fields.
Result<CrossSpec> parse_cross(const std::string& text) {
  const std::string flag = "--cross";
  const std::string expect =
      "expected const:RATE_GBPS:DST, onoff:RATE_GBPS:ON_MS:OFF_MS:DST or incast:K:RATE_GBPS:DST "
      "(DST = all or host:port), optionally followed by :trimmable=0|1, :size=BYTES and :prio=high|shared";
  std::vector<std::string> f = split(text, ':');
  CrossSpec s;
  s.text = text;
  size_t i = 1;
  if (f.empty()) return bad(fmt::format("{} '{}': {}", flag, text, expect));
  auto rate = [&](size_t at) -> Status {
    if (at >= f.size()) return bad(fmt::format("{} '{}': {}", flag, text, expect));
    Result<double> r = parse_num(flag + " rate", f[at], 1e-6, 1e4, "Gbit/s, 0.000001..10000");
    if (!r) return r.status();
    s.rate_gbps = *r;
    return Status::ok();
  };
  if (f[0] == "const") {
    s.kind = CrossSpec::Kind::kConst;
    TRIM_RETURN_IF_ERROR(rate(1));
    i = 2;
  } else if (f[0] == "onoff") {
    s.kind = CrossSpec::Kind::kOnOff;
    TRIM_RETURN_IF_ERROR(rate(1));
    if (f.size() < 4) return bad(fmt::format("{} '{}': {}", flag, text, expect));
    Result<uint64_t> on = parse_uint(flag + " ON_MS", f[2], 1, 3600000);
    if (!on) return on.status();
    Result<uint64_t> off = parse_uint(flag + " OFF_MS", f[3], 0, 3600000);
    if (!off) return off.status();
    s.on_ms = static_cast<uint32_t>(*on);
    s.off_ms = static_cast<uint32_t>(*off);
    i = 4;
  } else if (f[0] == "incast") {
    s.kind = CrossSpec::Kind::kIncast;
    if (f.size() < 2) return bad(fmt::format("{} '{}': {}", flag, text, expect));
    Result<uint64_t> k = parse_uint(flag + " K", f[1], 1, 1024);
    if (!k) return k.status();
    s.senders = static_cast<uint32_t>(*k);
    TRIM_RETURN_IF_ERROR(rate(2));
    i = 3;
  } else {
    return bad(fmt::format("{} '{}': {}", flag, text, expect));
  }
  if (i >= f.size()) return bad(fmt::format("{} '{}': {}", flag, text, expect));
  if (f[i] == "all") {
    s.all_ports = true;
    i += 1;
  } else {
    if (i + 1 >= f.size()) return bad(fmt::format("{} '{}': {}", flag, text, expect));
    Result<sockaddr_in> a = parse_addr(flag + " DST", f[i] + ":" + f[i + 1], false);
    if (!a) return a.status();
    s.dst = *a;
    i += 2;
  }
  for (; i < f.size(); ++i) {
    if (f[i] == "prio=high") {
      s.priority = true;
    } else if (f[i] == "prio=shared") {
      s.priority = false;
    } else if (f[i] == "trimmable=1") {
      s.trimmable = true;
    } else if (f[i] == "trimmable=0") {
      s.trimmable = false;
    } else if (f[i].rfind("size=", 0) == 0) {
      // At least a header's worth, at most a jumbo frame: what a real port carries.
      Result<uint64_t> b = parse_uint(flag + " size", f[i].substr(5), 128, 9216);
      if (!b) return b.status();
      s.packet_bytes = static_cast<uint32_t>(*b);
    } else {
      return bad(fmt::format("{} '{}': unknown option '{}': {}", flag, text, f[i], expect));
    }
  }
  // The priority class is never trimmed: a trimmable one would claim what the model ignores.
  if (s.priority && s.trimmable) return bad(fmt::format("{} '{}': prio=high traffic is never trimmed: drop trimmable=1", flag, text));
  return s;
}

const char* usage() {
  return R"(trim-switch: a userspace UDP switch that forwards nccl-trim data packets through one
modelled egress port per destination (switch_sim/port.h) and trims them under congestion.
Point the plugin at it with NCCL_TRIM_SWITCH=host:port. Control packets (ACK, PING) never come
here; anything that is not a valid data packet is counted as `bad` and dropped.

  --listen HOST:PORT       where to receive (default 127.0.0.1:0; the first stdout line is
                           {"event":"listening","port":N})
  --config FILE            `key = value` lines with the flag names below (# comments)
  --rate-gbps G            egress link rate per port (default 10)
  --prop-delay-us US       link propagation delay (default 1)
  --buffer-bytes B         data queue cap in bytes, 0 = none (default 262144)
  --buffer-packets N       data queue cap in packets, 0 = none (default 0)
  --header-buffer-bytes B  header (trimmed) queue cap (default 65536; 0 holds nothing:
                           every trim becomes a drop)
  --prio-buffer-bytes B    cap of the queue of --cross ...:prio=high traffic, 0 = none
                           (default 262144); beyond it such packets are dropped
  --trim-bytes B           0 = cut at the end of plane 0 (the header's trim point, default);
                           else a fixed size counted from the IP header, as switches do
                           (never below our 80-byte header: the forwarded packet keeps it)
  --priority strict|wrr    header queue strictly first, or weighted round robin 4:1
  --mode trim|drop|random|replay
                           trim: full data queue trims trimmable packets (default);
                           drop: tail drop; random: trim each trimmable packet with
                           --random-p; replay: trim exactly the packets of --replay FILE
  --random-p P             0..1 (mode random)
  --ndp-coin 0|1           on overflow trim the arrival or the queue's tail, 50/50 (NDP)
  --trim-exact 0|1         mode trim: cut a full queue's exact-class packets to their header
                           instead of dropping them; the receiver NACKs at once (NDP's and
                           UEC's rule; default 1); 0: drop them
  --seed N                 random mode, NDP coin and cross-traffic phases (default 1)
  --transcript-out FILE    on exit, the trimmed real packets as `flow msg psn` lines; flow =
                           the order in which the daemon first saw the connection
  --replay FILE            a transcript for --mode replay
  --cross SPEC             background traffic, repeatable:
                             const:RATE_GBPS:DST          constant rate
                             onoff:RATE_GBPS:ON_MS:OFF_MS:DST  bursts
                             incast:K:RATE_GBPS:DST       K senders in step, RATE each
                           DST = all (every egress port seen, now or later) or host:port;
                           options :trimmable=0|1 (default 0) :size=BYTES (128..9216,
                           default 4096) :prio=high|shared (default shared: FIFO in the
                           data queue with training; high: another tenant's strict-priority
                           class, its own queue served before training's header and data
                           queues, never trimmed, dropped beyond --prio-buffer-bytes, so
                           training gets what it leaves and is trimmed/dropped as its data
                           queue fills). Cross packets use queue and link, then vanish.
  --loss-p P               lose each real packet with probability P on arrival, before the
                           queue, whatever its protocol (a lossy link; seeded by --seed)
Fabric mode (--fabric 1): a trimming switch as Spectrum-4/Cumulus, SONiC and Arista ship it;
our header is never read (in UDP mode, only the destination it carries: that stands in for IP
routing). Needs neither --trim-bytes nor --trim-exact (refused / ignored):
  --fabric 0|1             0: native mode (default): our header's class and trim point
  --trim-dscp D[,D...]     the DSCPs whose traffic class may be trimmed (default 18)
  --trimmed-dscp D         the remark of a trimmed packet (default 11, Cumulus's); a packet
                           arriving with it is queued in the trimmed class
  --trim-size BYTES        a trim keeps this many frame bytes, 64..9216 (default 256)
  --trim-l2-bytes N        frame bytes beyond the IP packet the size counts (default 18:
                           Ethernet header and FCS; the IP packet keeps SIZE - N)
  --trimmed-share S        the trimmed class's DWRR share of the link, 0.01..0.99 (default 0.25)
  --rewrite-ip-length rewrite|keep     after a cut: fix the IPv4 total length (and checksum),
                           or leave it (a receiving kernel then drops the packet) (rewrite)
  --rewrite-udp-length rewrite|keep    the UDP length likewise (rewrite)
  --rewrite-udp-checksum zero|keep|recompute   (zero)
  Stats add dscp_D_{received,trimmed,remarked,dropped} per DSCP D seen (remarked: queued in
  the trimmed class whole, no longer than the trim size) and the configuration.
TUN router mode (instead of --listen): an IPv4 router between network namespaces, so every
protocol (NCCL's TCP, our UDP) crosses the same modelled ports:
  --tun-netns NS0,NS1,...  one TUN device per rank, created inside that namespace (a name
                           under /var/run/netns, or a path), addressed TUN_BASE + K/24, up;
                           the packets to rank K's address leave through egress port K
  --tun-name NAME          the device's name in every namespace (default trimbn)
  --tun-base A.B.C.D       rank 0's address (default 198.18.0.1); all ranks in one /24
  --tun-mtu BYTES          device MTU (default 9000)
  --tun-txqueuelen N       the kernel's queue in front of each TUN (default 10000 packets: far
                           above the model's buffer, so the model decides the losses)
  Our UDP data packets are trimmed (or cut to headers, --trim-exact) as in UDP mode, their IPv4
  and UDP lengths fixed and the UDP checksum set to 0; TCP, other UDP and our ACKs are
  tail-dropped. Stats add per class CLASS_{received,forwarded,trimmed,dropped,lost} for CLASS =
  trim (our data), trimctl (our ACK/PING), udp, tcp, other (trimmed: forwarded cut, trims and
  header cuts alike; dropped: by the model; lost: --loss-p); no_route (a destination no rank
  has); bad counts packets that are no valid IPv4 (IPv6 included). The first stdout line is
  {"event":"listening","tun":N,...}.
  --stats-interval-ms MS   periodic {"event":"interval",...} lines (default 0: none)
  --duration-s S           exit after S seconds (default 0: run until SIGINT/SIGTERM)
Stats: a JSON line on exit ("event":"final") and on SIGUSR1 ("stats"). Totals over all ports:
received/sent/trimmed/dropped/dropped_header/bytes/max_queue are the model's (cross packets
included; bytes = IP bytes put on the links; max_queue = the largest data queue in bytes);
bad = datagrams that were no valid data packet (bad_ctrl: control packets among them);
forwarded/forwarded_trimmed/forwarded_bytes = real packets sent on to receivers (UDP payload
bytes); cross = synthetic packets enqueued; cross_skipped = cross instants skipped after a stall
of the daemon over 10 ms. "ports" repeats them per destination with its current queue_bytes,
queue_packets and header_queue_bytes and the model's own counters; prio_sent, prio_dropped,
prio_max_queue (bytes) and prio_queue_bytes are the priority class's (also in the totals; the
top level adds prio_sent, prio_dropped, prio_max_queue). Exit status 2 for a bad command line
or config file, 1 for a runtime failure (bind, ...), 0 otherwise.
)";
}

Result<Config> parse_config(int argc, char** argv, bool* help_printed) {
  Config c;
  *help_printed = false;
  c.listen.sin_family = AF_INET;
  c.listen.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--help" || flag == "-h") {
      *help_printed = true;
      return c;
    }
    if (flag.rfind("--", 0) != 0) return bad(fmt::format("unexpected argument '{}' (see --help)", flag));
    if (i + 1 >= argc) return bad(fmt::format("{}: missing value (see --help)", flag));
    Status st = apply(&c, flag.substr(2), argv[++i], 0);
    if (!st.is_ok()) return st;
  }
  if (c.tun()) {
    if (c.tun_base_be == 0) inet_pton(AF_INET, c.tun_base_text.c_str(), &c.tun_base_be);
    const uint32_t last = ntohl(c.tun_base_be) & 0xff;
    if (c.tun_netns.size() > 64 || last == 0 || last + c.tun_netns.size() - 1 > 254) {
      return bad(fmt::format("--tun-netns: {} ranks from {} leave its /24 (at most 64, last octet <= 254)",
                             c.tun_netns.size(), c.tun_base_text));
    }
  }
  if (c.fabric.on) {
    // What such a switch does: no trim point but its size, a trimmed class with its share, and
    // a drop (never a header cut) for every class it may not trim.
    if (c.trim_bytes_set) return bad("--trim-bytes is the native mode's: with --fabric 1 use --trim-size");
    if (c.port.mode == Mode::kReplay) return bad("--mode replay needs our header's ids: not with --fabric 1");
    if (c.fabric.trimmable.test(c.fabric.trimmed_dscp)) {
      return bad(fmt::format("--trimmed-dscp {} is also in --trim-dscp: a trimmed packet would be trimmable again",
                             c.fabric.trimmed_dscp));
    }
    if (c.fabric.ip_keep_bytes() < 28) {
      return bad(fmt::format("--trim-size {} with --trim-l2-bytes {} leaves no IP and UDP header",
                             c.fabric.trim_size, c.fabric.l2_bytes));
    }
    c.port.trim_bytes = c.fabric.ip_keep_bytes();
    c.port.trim_exact_to_header = false;
    c.port.priority = Priority::kDwrr;
    c.port.dwrr_header_share = c.fabric.trimmed_share;
  }
  if (c.port.mode == Mode::kReplay && c.replay.empty()) return bad("--mode replay needs --replay FILE");
  if (c.port.mode != Mode::kReplay && !c.replay.empty()) return bad("--replay FILE needs --mode replay");
  return c;
}

}  // namespace trim::sw::daemon
