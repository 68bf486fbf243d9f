// trim-sim: a discrete-event simulator of trimmable gradient traffic on a leaf-spine fabric.
//
// Every link direction is one trim::sw::EgressPort (switch_sim/port.h), the same queue model the
// live daemon uses, so trimming and drops happen where the model says. Time is simulated ns;
// nothing here reads a clock except main() for wall_seconds.
//
// Split by concern: event_queue.* (timing wheel), topology.cc (ports and routes), endpoints.cc (per-flow
// window, ACK/NACK, RACK + RTO loss detection), workload.cc (ring allreduce, incast,
// permutation, background), report.cc (statistics, JSON, htsim .cm export), main.cc (flags).
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "switch_sim/port.h"
#include "switch_sim/sim/event_queue.h"
#include "switch_sim/sim/tcp.h"
#include "transport/recovery.h"

namespace trim::sim {

enum class Workload { kAllreduce, kIncast, kPermutation };
enum class Background { kNone, kConstant, kBursty };
enum class Routing { kEcmp, kSpray };
enum class RingOrder { kLinear, kRandom };
enum class Cc { kFixed, kAimd };
// own: our transport (selective ACKs, RACK, probes; trimming-aware); tcp: the TCP-like baseline
// of tcp.h (cumulative ACKs, in-order delivery, SACK fast recovery, RTO), with --mode drop.
enum class Transport { kOwn, kTcp };

// Wire overhead of one codec packet: IPv4+UDP (28) and our header (80, wire version 2), as
// codec/packet.h.
constexpr uint32_t kOverheadBytes = 28 + 80;
// ACKs/NACKs are 64-byte control packets; they are modelled out of band (see endpoints.cc).
constexpr uint32_t kAckBytes = 64;
// A flow's window is a span of packet sequence numbers at most this wide (slots are psn % it).
constexpr uint32_t kMaxWindow = 256;
// rht with 1-bit heads decodes a fully trimmed row at NMSE ~ pi/2 - 1 relative to its values.
constexpr double kTrimmedRowNmse = 1.5707963267948966 - 1.0;

struct Config {
  uint32_t hosts = 64;
  uint32_t hosts_per_leaf = 16;
  uint32_t oversub = 1;            // host bandwidth : uplink bandwidth at a leaf (1, 2, 4, 8 ...)
  double link_gbps = 100.0;
  uint64_t prop_ns = 500;          // per link
  uint32_t mtu_bytes = 9000;       // IP packet size (what the ports count)
  uint64_t buffer_bytes = 0;       // per switch port data queue; resolved from buffer_spec
  std::string buffer_spec = "1bdp";
  uint64_t nic_buffer_bytes = 0;   // host NIC data queue (0: unbounded = host backpressure)
  uint64_t header_buffer_bytes = 0;  // header queue per port (0: same as the data queue)
  uint32_t trim_bytes = 0;         // 0: cut at the packet's plane-0 end; else a fixed trim size
  sw::Mode mode = sw::Mode::kTrim;
  Routing routing = Routing::kEcmp;
  Workload workload = Workload::kAllreduce;
  uint64_t bytes = 16ull << 20;    // per host (allreduce), per sender (incast, permutation)
  uint32_t iters = 5;
  uint32_t incast_senders = 8;
  bool exact_class = false;        // incast/permutation payload: exact instead of trimmable
  // NDP/UEC-style (default): the switch cuts exact packets of our traffic class too, to a bare
  // header (their plane 0 is empty), and the receiver NACKs the header at once, as trim-switch
  // --trim-exact 1 and the plugin do; off: the switch drops exact packets.
  bool nack_exact = true;
  // --fabric 1: switches as trim-switch --fabric 1 models them (switch_sim/fabric.h): trimmable
  // by class, cut to a fixed size (trim_bytes = --trim-size less 18 bytes of framing), exact
  // packets dropped, the trimmed class served by DWRR with trimmed_share of the link; a cut
  // inside our header reaches the receiver as nothing it can use (a loss).
  bool fabric = false;
  double trimmed_share = 0.25;
  Background background = Background::kNone;
  double bg_load = 0.15;           // background offered load per host, fraction of link rate
  uint64_t bg_flow_bytes = 1ull << 20;
  // --bg-priority high: background is another tenant in every port's strict-priority class
  // (sw::EgressPort::enqueue_priority, as trim-switch --cross ...:prio=high), its own queue of
  // the data queue's size, served before the workload's header and data queues and never cut.
  bool bg_priority = false;
  uint32_t window_pkts = 16;
  Cc cc = Cc::kAimd;
  // Loss recovery as the plugin's send_proto.cc: minimum RTO (NCCL_TRIM_MIN_RTO_US, default
  // 10 ms; doubling backoff, reset by progress) and tail loss probes after
  // max(2 x srtt, rto_ns / 4), repeated at doubling intervals while the RTO is ahead.
  uint64_t rto_ns = 10'000'000;
  bool tlp = true;
  Transport transport = Transport::kOwn;
  bool tcp_rack = true;  // --transport tcp: RACK loss detection, as Linux (tcp.h)
  uint64_t slice_bytes = 512ull << 10;  // NCCL SIMPLE step size: 4 MiB buffer / 8 steps
  RingOrder ring = RingOrder::kLinear;
  uint64_t seed = 1;
  uint64_t max_sim_ns = 60ull * 1000 * 1000 * 1000;  // guard against a livelocked scenario
  std::string cm_path;
};

enum class Tier : uint8_t { kNic = 0, kLeafUp = 1, kSpineDown = 2, kLeafDown = 3 };
constexpr int kTiers = 4;
const char* tier_name(Tier t);

// The fabric: hosts → NIC port → leaf; leaf → uplink ports → spines → downlink ports → leaf →
// host-facing port. One EgressPort per link direction.
class Topology {
 public:
  void build(const Config& cfg);
  uint32_t leaves() const { return leaves_; }
  uint32_t spines() const { return spines_; }
  uint32_t leaf_of(uint32_t host) const { return leaf_of_host_[host]; }  // a table: no division per hop
  // Port a packet takes at hop `hop` (0 = the source NIC); UINT32_MAX once it reached dst.
  uint32_t port_at(uint32_t src, uint32_t dst, uint32_t spine, uint32_t hop) const;
  // The same for hops >= 1, from a path precomputed per flow (no leaf arithmetic per hop).
  struct Path {
    uint32_t up = UINT32_MAX;  // leaf uplink to spine 0 (UINT32_MAX: src and dst share a leaf)
    uint32_t down = 0;         // spine 0's downlink to dst's leaf
    uint32_t last = 0;         // dst's leaf port
  };
  Path path(uint32_t src, uint32_t dst) const;
  uint32_t port_after(const Path& p, uint32_t spine, uint32_t hop) const {
    if (p.up == UINT32_MAX) return hop == 1 ? p.last : UINT32_MAX;
    switch (hop) {
      case 1: return p.up + spine;
      case 2: return p.down + spine * leaves_;
      case 3: return p.last;
      default: return UINT32_MAX;
    }
  }
  uint32_t hops(uint32_t src, uint32_t dst) const { return leaf_of(src) == leaf_of(dst) ? 2 : 4; }
  std::vector<sw::EgressPort> ports;
  std::vector<Tier> tier;
  double uplink_gbps = 0;

 private:
  uint32_t hosts_ = 0, per_leaf_ = 1, leaves_ = 0, spines_ = 1;
  std::vector<uint32_t> leaf_of_host_;
};

struct Msg {
  uint32_t first_psn = 0;
  uint32_t packets = 0;
  uint32_t bytes = 0;     // payload bytes
  uint32_t received = 0;  // distinct packets the receiver has (whole or heads)
  bool trimmable = false;
  bool ready = false;     // its dependency (the left neighbour's step) is met
};

enum class SlotState : uint8_t { kFree, kOut, kAcked, kLost };
struct Slot {
  uint64_t xmit_ns = 0;
  uint32_t psn = 0;
  uint32_t msg = 0;
  uint16_t bytes = 0;  // payload bytes (kept here so a late resend needs no message)
  bool trimmable = false;
  SlotState state = SlotState::kFree;
  uint8_t retx = 0;
  bool resent = false;  // xmit_ns is not the first transmission's (retx counts, and may wrap)
  bool rto_resent = false;  // queued again by the flow's open timeout episode (Flow::rto_open)
};

enum class FlowKind : uint8_t { kRing, kIncast, kPerm, kBgConstant, kBgBursty };

struct Flow {
  uint32_t src = 0, dst = 0;
  FlowKind kind = FlowKind::kRing;
  uint32_t gen = 0;        // bumped when a finished background flow is recycled
  bool live = false;
  std::vector<Msg> msgs;   // this iteration's messages (ring) or the flow's messages
  uint32_t send_msg = 0;   // message whose packets go out next
  uint32_t next_psn = 0;   // next new sequence number
  uint32_t snd_una = 0;    // lowest sequence number not yet acknowledged
  uint32_t base_psn = 0;   // first psn of msgs[0]
  double cwnd = 0;
  uint32_t recover_psn = 0;  // AIMD: one decrease per window
  std::vector<Slot> slots;   // kMaxWindow, indexed psn % kMaxWindow
  std::vector<uint32_t> rtx;  // sequence numbers waiting to be resent
  uint64_t timer_at = UINT64_MAX;  // the flow's one pending timer event
  transport::Recovery rec;         // the plugin's RTT, RACK, probe and timeout rules
  // Timeouts not yet judged spurious or not (send_proto.cc's OpenTimeout): the window before the
  // first of them, and the psn below which they resent.
  bool rto_open = false;
  uint32_t rto_end_psn = 0;
  double cwnd_before_rto = 0;
  uint64_t pace_ns = 0, next_send_ns = 0, pace_at = UINT64_MAX;
  uint64_t ack_delay_ns = 0;
  uint32_t spray_next = 0;
  uint32_t spine_hash = 0;
  uint32_t ecmp_spine = 0;  // spine_hash % spines, worked out once (a division per packet sent)
  // receiver side
  std::vector<uint64_t> rcv_bits;  // one bit per psn received (dedup of resends)
  uint32_t msgs_done = 0;
};

// One packet in flight: a pool slot. One cache line: every hop reads it. The hop a packet is at
// travels with it instead (in the tag the port carries, then in its kArrive event), and the pool's
// copy of the packet is rewritten only when a port put it in its header queue (the one way a
// port changes a packet), so a departure need not touch the slot.
struct alignas(64) PktState {
  sw::Packet pkt;  // also the packet's flow id, message and psn
  uint64_t xmit_ns = 0;
  uint32_t gen = 0;
  uint32_t spine = 0;
  bool exact = false;  // the data's class (= !pkt.trimmable)
  bool nack = false;
  bool dup = false;  // the receiver already had it: the ACK says so, as a DSACK does
  bool resent = false;  // not the first transmission (the plugin's RESENT flag, which its ACK echoes)
  uint32_t cum_ack = 0;  // --transport tcp: the receiver's cumulative ACK, carried by the ACK
  uint32_t flow() const { return static_cast<uint32_t>(pkt.flow); }
};
static_assert(sizeof(PktState) == 64, "a pool slot is one cache line");

// A kArrive event's id: the pool slot, and above it the hop the packet has reached.
constexpr uint32_t kHopShift = 26;
constexpr uint32_t kMaxPoolSlots = 1u << kHopShift;

struct Counters {
  uint64_t injected = 0, delivered = 0, dropped = 0;  // data packet transmissions
  uint64_t injected_trimmable = 0, retx = 0, retx_trimmable = 0, retx_rto = 0, retx_rack = 0,
           retx_nack = 0, retx_nack_trimmable = 0, retx_tlp = 0, rto_events = 0,
           spurious_rto = 0;  // timeouts undone: the ACK of a packet one resent was its original's
  uint64_t duplicates = 0, stale = 0;
  uint64_t header_cuts = 0;                 // --fabric: cut inside our header, lost at the receiver (in dropped)
  uint64_t delivered_trimmed = 0;
  uint64_t rs_packets = 0, rs_trimmed = 0;  // first deliveries of reduce-scatter packets
  uint64_t rs_cut_heads = 0;                // of rs_trimmed: cut inside plane 0 (some heads lost)
  double rs_err_sum = 0;                    // sum over RS packets of the NMSE their rows carry
  uint64_t events = 0;
  uint64_t bg_flows = 0, bg_bytes = 0;
  double rs_err_weight = 0;                 // sum over trimmed RS packets of nmse x (s+1)/n
  uint64_t tcp_fast_recoveries = 0;         // --transport tcp (retx_rack: SACK marks, retx_rto: RTO marks)
};

class Simulator {
 public:
  explicit Simulator(const Config& cfg);
  Simulator(const Simulator&) = delete;  // the ports hold a pointer to it
  Simulator& operator=(const Simulator&) = delete;
  void run();
  const Config& cfg() const { return cfg_; }
  const Topology& topo() const { return topo_; }
  const Counters& counters() const { return ctr_; }
  const std::vector<uint64_t>& jct_ns() const { return jct_ns_; }
  uint64_t end_ns() const { return end_ns_; }
  uint64_t work_end_ns() const { return work_end_ns_; }
  uint32_t ring_next(uint32_t rank) const { return ring_[(rank + 1) % ring_.size()]; }
  const std::vector<uint32_t>& ring() const { return ring_; }
  uint32_t payload_bytes() const { return cfg_.mtu_bytes - kOverheadBytes; }
  uint32_t slices_per_step() const;
  uint64_t chunk_bytes() const;
  bool hung() const { return hung_; }
  std::string json(double wall_seconds) const;   // report.cc
  std::string summary() const;                   // report.cc
  bool write_cm(const std::string& path) const;  // report.cc

 private:
  // endpoints.cc
  uint32_t new_flow(uint32_t src, uint32_t dst, FlowKind kind);
  void add_msg(Flow& f, uint64_t bytes, bool trimmable, bool ready);
  void try_send(uint32_t fid);
  void send_packet(uint32_t fid, uint32_t psn, bool retx);
  void on_port(uint32_t port, uint64_t t);
  void on_arrive(uint32_t id, uint64_t t);  // id: slot | hop << kHopShift
  void deliver(uint32_t slot, uint64_t t);
  void on_ack(uint32_t slot, uint64_t t);
  void on_timer(uint32_t fid, uint64_t t);
  void mark_lost(Flow& f, Slot& s, uint64_t* ctr);
  // A new packet of the flow's current message, if one may leave now (false: none ready, or
  // pacing holds it; a paced flow's wake-up is then queued).
  bool new_packet_ready(uint32_t fid);
  uint32_t take_new_packet(Flow& f);  // fills its window slot; returns its psn
  void recycle_if_finished(uint32_t fid);  // a finished bursty background flow's id is reused
  // tcp_flow.cc: the same events for --transport tcp
  void tcp_new_flow(uint32_t fid);
  void tcp_try_send(uint32_t fid);
  void tcp_deliver(PktState& p, uint64_t t);
  void tcp_on_ack(const PktState& p, uint64_t t);
  void tcp_on_timer(uint32_t fid, uint64_t t);
  void rack_detect(Flow& f, uint64_t t);  // RACK's pass; arms its reorder timer
  void arm_timer(uint32_t fid, uint64_t at);
  void enqueue_at(uint32_t port, uint32_t slot, uint32_t hop, uint64_t t);
  // A packet a port finished sending: it arrives at the link's far end (every port's sink).
  static void on_departure(void* sim, const sw::Departure& d);
  // Schedules the port's next completion, unless that is still `pending_ns`, the time of its
  // kPort event already queued (UINT64_MAX: none).
  void schedule_port(uint32_t port, uint64_t pending_ns);
  uint32_t alloc_pkt();
  void free_pkt(uint32_t slot);
  bool flow_finished(const Flow& f) const;
  // workload.cc
  void start_iteration(uint64_t t);
  void on_msg_complete(uint32_t fid, uint32_t msg, uint64_t t);
  void on_bg_arrival(uint32_t host, uint64_t t);
  void start_background();
  double uniform();
  uint32_t random_other(uint32_t host);

  Config cfg_;
  Topology topo_;
  EventQueue q_;
  uint64_t now_ns_ = 0;
  // Per flow, beside flows_: its generation and path, which every hop reads (a packet of a
  // recycled flow is stale), in 16 bytes instead of the Flow's first cache line.
  struct FlowHop {
    uint32_t gen = 0;
    Topology::Path path;
  };
  std::vector<FlowHop> hops_;
  std::vector<PktState> pool_;
  std::vector<uint32_t> free_pkts_;
  std::vector<Flow> flows_;
  struct TcpFlow {  // --transport tcp: beside flows_, by flow id
    TcpSender snd;
    TcpReceiver rcv;
    uint32_t rcv_msg = 0;  // the next message to complete in order
  };
  std::vector<TcpFlow> tcp_;
  std::vector<uint32_t> free_flows_;
  std::vector<uint32_t> ring_;         // rank -> host
  std::vector<uint32_t> ring_flow_;    // rank -> flow id (rank -> rank+1)
  std::vector<uint32_t> rank_of_host_;
  std::vector<uint32_t> iter_flows_;   // incast / permutation flows of this iteration
  std::vector<uint32_t> bg_flow_of_host_;  // constant background
  std::vector<std::pair<uint32_t, uint32_t>> first_pairs_;  // iteration 0's (src, dst), for --cm
  uint64_t pending_ = 0;               // messages (or rank-slices) the iteration still waits for
  uint32_t iter_ = 0;
  uint64_t iter_start_ns_ = 0;
  bool work_done_ = false;
  bool hung_ = false;
  std::vector<uint64_t> jct_ns_;
  uint64_t end_ns_ = 0, work_end_ns_ = 0;
  std::mt19937_64 rng_;
  Counters ctr_;
};

// Parses "16M", "512K", "9000"; false on junk.
bool parse_bytes(const std::string& s, uint64_t* out);

}  // namespace trim::sim
