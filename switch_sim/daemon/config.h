// trim-switch's command line and config file: what the daemon models and where it listens.
// Every knob is a flag; `--config FILE` reads the same names as `key = value` lines.
#pragma once

#include <netinet/in.h>

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "switch_sim/fabric.h"
#include "switch_sim/port.h"

namespace trim::sw::daemon {

// One built-in background traffic source (--cross SPEC). Its packets only occupy the egress
// queue and link of the ports they target; they are discarded where a real one would be sent.
struct CrossSpec {
  enum class Kind { kConst, kOnOff, kIncast };
  Kind kind = Kind::kConst;
  double rate_gbps = 0;       // per sender and per target port
  uint32_t on_ms = 0, off_ms = 0;  // kOnOff
  uint32_t senders = 1;       // kIncast: K senders emit in the same instant each period
  bool all_ports = false;     // DST = all: every egress port the daemon has seen (now or later)
  sockaddr_in dst{};          // otherwise this one (its port exists from the start)
  bool trimmable = false;     // whether the model may trim them (plane0 like a real packet)
  uint32_t packet_bytes = 4096;  // IP packet size; 4096, the MTU the demo and live scenarios pin
  // :prio=high: another tenant in the port's strict-priority class (EgressPort::enqueue_priority),
  // served before all training traffic; shared (default): FIFO in the training data queue.
  bool priority = false;
  std::string text;           // the spec as given, for the stats
};

struct Config {
  sockaddr_in listen{};        // --listen host:port (port 0: the kernel picks; printed first)
  std::string listen_text = "127.0.0.1:0";
  // The model of every egress port. Our exact-class packets are cut to a bare header at a full
  // queue (NDP's and UEC's rule; the receiver NACKs them at once) unless --trim-exact 0.
  PortConfig port = [] {
    PortConfig p;
    p.trim_exact_to_header = true;
    return p;
  }();
  // --fabric 1: behave as a trimming switch that exists (switch_sim/fabric.h): class by DSCP,
  // a fixed trim size, a remark, a trimmed class with a DWRR share; never read our header
  // (in UDP mode only its destination, which stands in for IP routing there).
  FabricConfig fabric = [] {
    FabricConfig f;
    f.trimmable.set(18);  // NCCL_TRIM_DSCP_TRIMMABLE's default
    return f;
  }();
  bool trim_bytes_set = false;  // --trim-bytes given (native mode only)
  std::string transcript_out;  // --transcript-out: trims as `flow msg psn` lines, written on exit
  std::string replay;          // --replay: a transcript for --mode replay
  std::vector<CrossSpec> cross;
  // Random loss of every real packet on arrival, before the queue (a lossy link; --loss-p).
  double loss_p = 0;
  // TUN router mode (--tun-netns): one TUN device per rank, created inside that rank's network
  // namespace and addressed tun_base + K (/24); IP packets are routed by destination address.
  std::vector<std::string> tun_netns;  // names under /var/run/netns, or paths
  std::string tun_name = "trimbn";
  uint32_t tun_base_be = 0;            // 198.18.0.1 unless --tun-base
  std::string tun_base_text = "198.18.0.1";
  uint32_t tun_mtu = 9000;
  uint32_t tun_txqueuelen = 10000;     // the kernel's queue in front of the TUN: far above the model's
  bool tun() const { return !tun_netns.empty(); }
  uint32_t stats_interval_ms = 0;  // 0: no periodic stats lines
  double duration_s = 0;           // 0: run until SIGINT/SIGTERM
};

// Parses argv (flags may come from `--config FILE` too). Errors name the flag and what it
// accepts; *help_printed is set (and the usage printed) for --help.
Result<Config> parse_config(int argc, char** argv, bool* help_printed);
const char* usage();

// "host:port" with port 0..65535 (the listen address) or 1..65535 (destinations).
Result<sockaddr_in> parse_addr(const std::string& flag, const std::string& text, bool allow_port0);
Result<CrossSpec> parse_cross(const std::string& text);

}  // namespace trim::sw::daemon
