// trim-switch's engine: one UDP socket, one modelled egress port per destination, real time
// driving the model. Single-threaded: the loop receives a batch, feeds the ports, sends what
// has reached the far end of its link and sleeps (ppoll) until the next such instant.
// TUN router mode (Config::tun()): the same loop and ports, but packets are whole IPv4 packets
// read from one TUN device per rank and written to the destination rank's device.
#pragma once

#include <netinet/in.h>

#include <cstdint>
#include <deque>
#include <memory>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "switch_sim/daemon/config.h"
#include "switch_sim/daemon/cross.h"
#include "switch_sim/ipv4.h"
#include "switch_sim/port.h"
#include "common/socket.h"

namespace trim::sw::daemon {

// One destination: its modelled port, the packets on its link, and what reached the receiver.
struct Egress {
  Egress(const sockaddr_in& to, const PortConfig& cfg) : dst(to), port(cfg) {}
  sockaddr_in dst;
  std::string name;               // host:port
  EgressPort port;
  std::deque<Departure> on_link;  // serialised, not yet at the far end (propagation delay)
  uint64_t forwarded_packets = 0, forwarded_bytes = 0, forwarded_trimmed = 0;
  uint64_t cross_packets = 0;     // synthetic packets enqueued here
  uint64_t send_errors = 0;       // sendmmsg failed for good (not EAGAIN)
  int tun_fd = -1;                // TUN mode: the destination rank's device (owned by Switch)
};

// TUN mode: per protocol class (switch_sim/ipv4.h), what happened to the real packets.
struct ClassCounters {
  uint64_t received = 0;   // valid IPv4 packets of the class read from the TUNs
  uint64_t forwarded = 0;  // written to the destination's TUN (trimmed ones included)
  uint64_t trimmed = 0;    // ... of which cut (trims and --trim-exact header cuts)
  uint64_t dropped = 0;    // dropped by the model (full queue, or full header queue)
  uint64_t lost = 0;       // --loss-p
};

// Fabric mode: per DSCP, what happened to the real packets that carried it on arrival.
struct DscpCounters {
  uint64_t received = 0;
  uint64_t trimmed = 0;   // cut and remarked
  uint64_t remarked = 0;  // queued in the trimmed class whole (no longer than the trim size, or trimmed upstream)
  uint64_t dropped = 0;   // by the model
};

// Counters that belong to no port.
struct GlobalCounters {
  uint64_t datagrams = 0;          // everything received
  uint64_t bad = 0;                // not a valid data packet: garbage, truncated, control
  uint64_t bad_ctrl = 0;           // ... of which control packets (they should go direct)
  uint64_t cross_skipped = 0;      // cross instants skipped after a stall
  uint64_t pool_exhausted = 0;     // real packets dropped because no payload buffer was free
  uint64_t loop_wakeups = 0;
  uint64_t lost = 0;               // --loss-p, all modes
  uint64_t no_route = 0;           // TUN mode: a destination address no rank has
  ClassCounters cls[static_cast<int>(IpClass::kCount)];
  DscpCounters dscp[64];
};

class Switch {
 public:
  explicit Switch(Config cfg);
  // Binds the socket (and reads the replay transcript); the bound port is port().
  Status open();
  uint16_t port() const { return bound_port_; }
  bool tun_mode() const { return cfg_.tun(); }
  // Runs until SIGINT/SIGTERM (the caller has blocked them; they arrive on a signalfd) or the
  // configured duration. Prints stats lines on SIGUSR1, every interval and at the end.
  Status run();
  // Writes --transcript-out (called by run() on exit).
  Status write_transcript() const;

  // {"event":EVENT,...}: totals and per-port counters and queue occupancy.
  std::string stats_json(const char* event, uint64_t now_ns) const;

 private:
  Egress& egress_for(uint32_t ip4_be, uint16_t port_host);
  void generate_cross(uint64_t now_ns);
  void receive(int max_batches);
  void on_datagram(uint8_t* data, uint32_t len, uint64_t now_ns);
  void on_fabric_datagram(uint8_t* data, uint32_t len, uint8_t tos, uint64_t now_ns);
  Status open_tuns();
  void receive_tun(int max_batches);
  void on_ip_packet(uint8_t* data, uint32_t len, uint64_t now_ns);
  bool send_due_tun(uint64_t now_ns);  // false: a TUN would block, wait for POLLOUT
  bool lose();                         // --loss-p: this real packet is lost on arrival
  void advance_all(uint64_t now_ns);
  bool send_due(uint64_t now_ns);  // false: the socket is full, wait for POLLOUT
  uint64_t next_wake_ns() const;
  uint64_t clock_ns() const;
  uint32_t flow_id(uint64_t cookie);

  // Payload buffers of queued real packets, by tag - 1 (tag 0 is a cross packet).
  uint64_t alloc_slot(const uint8_t* data, uint32_t len);
  void free_slot(uint64_t tag);

  Config cfg_;
  sock::Fd sock_;
  sock::Fd sigfd_;
  uint16_t bound_port_ = 0;
  uint64_t t0_ns_ = 0;
  std::vector<std::unique_ptr<Egress>> ports_;     // in the order first seen
  std::unordered_map<uint64_t, size_t> port_index_;  // (ip4 << 16 | port) -> ports_ index
  std::vector<CrossSource> cross_;
  std::vector<size_t> cross_fixed_port_;           // per source: ports_ index, or SIZE_MAX for all
  std::unordered_map<uint64_t, uint32_t> flows_;   // cookie -> ordinal (transcript flow ids)
  std::vector<TranscriptEntry> replay_;
  // Replay: how many more times each listed packet is to be trimmed. The model's replay set
  // would trim every retransmission of a listed psn again (a NACKed one forever); the transcript
  // lists each trim once, so each listing is spent by one trim.
  std::unordered_map<uint64_t, uint32_t> replay_left_;
  std::vector<std::vector<uint8_t>> slots_;
  std::vector<uint32_t> slot_len_;
  std::vector<uint8_t> slot_class_;  // TUN mode: the IpClass of each slot's packet
  std::vector<uint8_t> slot_tos_;    // the TOS byte each slot's packet arrived with
  std::vector<uint32_t> free_slots_;
  std::vector<std::vector<uint8_t>> rx_bufs_;
  GlobalCounters g_;
  bool want_pollout_ = false;
  std::vector<sock::Fd> tuns_;  // TUN mode: rank K's device; ports_[K] sends to it
  std::mt19937_64 loss_rng_;
  std::uniform_real_distribution<double> uniform_{0.0, 1.0};
};

}  // namespace trim::sw::daemon
