// Loss-recovery timing of one sending flow — RTT estimation and the retransmission timeout
// (RFC 6298, with exponential backoff reset by progress), RACK's time-based loss detection
// (RFC 8985) and tail loss probes — as one pure unit shared by the plugin's sender
// (send_proto.cc) and trim-sim's endpoints (switch_sim/sim/endpoints.cc), so the simulator
// runs exactly the plugin's rules. It owns no packets, sockets or clocks: callers pass the
// time and say what happened; it says what is lost and when to act.
#pragma once

#include <algorithm>
#include <cstdint>

namespace trim::transport {

struct RecoveryConfig {
  uint64_t min_rto_ns = 10'000'000;       // NCCL_TRIM_MIN_RTO_US
  uint64_t max_rto_ns = 1'000'000'000;    // backoff stops growing the timeout here
  uint32_t max_backoff = 64;
  uint64_t min_reorder_ns = 20'000;       // RACK's reordering window floor
  uint64_t timer_floor_ns = 20'000;       // the least wait of RACK's timed rule past a round trip
  bool tail_probes = true;

  // What the plugin runs (and trim-sim with it): the timed rule waits at least the tail
  // probe's floor, a quarter of the minimum RTO. Both are sized to the host's noise, not the
  // wire's: on a loaded 2-core host one ACK covers hundreds of packets and the engine can be
  // descheduled for milliseconds, so a 20 us floor there resent 0.1-0.4% of packets spuriously.
  static RecoveryConfig plugin(uint64_t min_rto_ns, bool tail_probes = true) {
    RecoveryConfig c;
    c.min_rto_ns = min_rto_ns;
    c.timer_floor_ns = min_rto_ns / 4;
    c.tail_probes = tail_probes;
    return c;
  }
};

// Whether a packet sent at (t1, seq1) left after one sent at (t2, seq2): later, or at the same
// time with a later sequence number (modulo 2^32).
inline bool sent_after(uint64_t t1, uint32_t seq1, uint64_t t2, uint32_t seq2) {
  return t1 > t2 || (t1 == t2 && static_cast<int32_t>(seq1 - seq2) > 0);
}

class Recovery {
 public:
  Recovery() = default;
  explicit Recovery(const RecoveryConfig& cfg) : cfg_(cfg) {}

  // ---- what happened
  // A packet left at now_ns (first: its first transmission). Arms the timeout if it is not
  // armed, and a first transmission re-arms the tail probe (outstanding: packets still
  // unacknowledged after this one went out, itself included).
  void on_send(uint64_t now_ns, bool first, bool outstanding);
  // A packet sent at sent_ns was acknowledged at now_ns. A first transmission gives an RTT
  // sample (Karn: a resend's ACK is ambiguous). RACK's state, the most recently sent packet
  // known delivered and its round trip, advances — by a resend only when its ACK came back at
  // least srtt/2 after it, so it cannot be the original's. A trimmed packet (its header
  // delivered cut) does neither: a trimming switch serves its header queue ahead of the data
  // queue, so its round trip is not the data's and it overtakes data sent before it; behind a
  // strict-priority tenant the data waits for milliseconds more than the headers, and counting
  // the headers declared most of that data lost while it was queued (issue 36, p75: 85 % of
  // the retransmissions arrived as duplicates).
  // `seq` (the packet's sequence number) orders packets sent at the same time (RFC 8985's
  // RACK.end_seq): the sender stamps a whole burst with one clock reading.
  void on_delivered(uint64_t sent_ns, uint64_t now_ns, bool retransmitted, bool trimmed = false, uint32_t seq = 0);
  // The receiver reported newly trimmed packets: a trimming switch sends trimmed packets
  // through its header queue, past the data queued ahead of them, so for a while reordering
  // by up to a round trip is normal, not loss.
  void on_trims_reported(uint64_t now_ns) { trim_seen_ns_ = now_ns; }
  // Cumulative progress: the backoff ends and the timeout restarts from now (disarmed when
  // nothing is outstanding).
  void on_progress(uint64_t now_ns, bool outstanding);
  // Re-arms the tail probe at max(2 srtt, min_rto/4) from now, when that is before the
  // timeout; disarms it when nothing is outstanding.
  void arm_probe(uint64_t now_ns, bool outstanding);
  // A timeout turned out spurious (Eifel, RFC 3522: the ACK that first acknowledged a packet it
  // resent echoes the original): the original's round trip, `rtt_ns`, is the delay the timeout
  // fell short of. The Eifel response (RFC 4015): the backoff ends, srtt and rttvar take at
  // least that sample and its half, and the timeout keeps a floor of 5/4 of it, so the next
  // such delay does not fire it again (srtt alone would not remember: every packet acknowledged
  // afterwards samples the unqueued round trip again).
  void on_spurious_timeout(uint64_t rtt_ns);
  // A timeout's resend filled the hole: a true loss, so the floor the spurious ones raised halves.
  void on_genuine_timeout() { rto_floor_ns_ /= 2; }
  uint64_t rto_floor_ns() const { return rto_floor_ns_; }
  // Nothing is outstanding any more (the flow failed): every timer off.
  void disarm() { rto_deadline_ns_ = probe_deadline_ns_ = rack_timer_ns_ = 0; }
  // RACK's reorder timer: after a detection pass the caller arms it with the earliest
  // rack_deadline_ns of the packets still out (UINT64_MAX: none), and runs the pass again
  // when on_timer says `rack`.
  void arm_rack(uint64_t deadline_ns) { rack_timer_ns_ = deadline_ns == UINT64_MAX ? 0 : deadline_ns; }

  // ---- what it says
  // RACK (RFC 8985 §6.2): a packet still unacknowledged, sent no later than the most recently
  // sent packet known delivered, is lost at once when it was sent more than a reordering
  // window before that packet (an order on send times, immune to the host's timing noise), and
  // otherwise once that packet's round trip plus max(window, timer floor) has passed since it
  // was sent: the timed rule, which alone catches a loss in a window sent in one burst (GSO,
  // 100 Gbit/s), where every send time is the same.
  // Of packets sent at the same time, one with a later `seq` counts as sent after (RFC 8985
  // §6.2, RACK_sent_after): in a burst stamped with one time, the packets behind the one
  // delivered may wait behind another tenant's traffic for longer than any reordering window
  // (a 3 ms strict-priority burst), and judging them by its round trip resent them spuriously.
  bool rack_lost(uint64_t sent_ns, uint64_t now_ns, uint32_t seq = 0) const {
    return now_ns >= rack_deadline_ns(sent_ns, now_ns, seq);
  }
  // When that packet will count as lost (UINT64_MAX: not while nothing sent after it is delivered).
  uint64_t rack_deadline_ns(uint64_t sent_ns, uint64_t now_ns, uint32_t seq = 0) const {
    return rack_pass(now_ns).deadline_ns(sent_ns, seq);
  }
  // The rule of one detection pass at now_ns, for a whole window of packets: the reordering
  // window is worked out once, not per packet.
  struct RackPass {
    bool valid = false;
    uint64_t xmit_ns = 0, rtt_ns = 0, window_ns = 0, wait_ns = 0;
    uint32_t xmit_seq = 0;
    uint64_t deadline_ns(uint64_t sent_ns, uint32_t seq = 0) const {
      if (!valid || sent_after(sent_ns, seq, xmit_ns, xmit_seq)) return UINT64_MAX;
      if (sent_ns + window_ns < xmit_ns) return 0;
      return sent_ns + rtt_ns + wait_ns;
    }
  };
  RackPass rack_pass(uint64_t now_ns) const {
    RackPass r;
    r.valid = rack_valid_;
    r.xmit_ns = rack_xmit_ns_;
    r.xmit_seq = rack_seq_;
    r.rtt_ns = rack_rtt_ns_;
    r.window_ns = reorder_window_ns(now_ns);
    r.wait_ns = std::max(r.window_ns, cfg_.timer_floor_ns);
    return r;
  }
  uint64_t reorder_window_ns(uint64_t now_ns) const;
  uint64_t rto_ns() const;
  uint64_t srtt_ns() const { return srtt_ns_; }
  uint64_t rttvar_ns() const { return rttvar_ns_; }
  uint32_t backoff() const { return backoff_; }
  uint64_t rto_deadline_ns() const { return rto_deadline_ns_; }
  uint64_t probe_deadline_ns() const { return probe_deadline_ns_; }
  // The earliest deadline armed (UINT64_MAX: none).
  uint64_t next_deadline_ns() const {
    uint64_t d = rto_deadline_ns_ == 0 ? UINT64_MAX : rto_deadline_ns_;
    if (probe_deadline_ns_ != 0) d = std::min(d, probe_deadline_ns_);
    if (rack_timer_ns_ != 0) d = std::min(d, rack_timer_ns_);
    return d;
  }

  // ---- timers
  struct Fired {
    bool rack = false;     // run RACK's detection pass again (and re-arm its timer)
    bool probe = false;    // resend the newest packet still out (no window cut)
    bool timeout = false;  // resend what is older than `rto_ns` (and at least the oldest)
    uint64_t rto_ns = 0;   // the timeout that fired, before its backoff doubled
  };
  // What is due at now_ns. A probe re-arms itself at twice its last interval (while that is
  // before the timeout); a timeout doubles the backoff and re-arms; with nothing outstanding
  // the timeout just disarms.
  Fired on_timer(uint64_t now_ns, bool outstanding);

 private:
  RecoveryConfig cfg_;
  uint64_t srtt_ns_ = 0, rttvar_ns_ = 0;
  uint32_t backoff_ = 1;
  uint64_t rto_deadline_ns_ = 0;    // 0: not armed
  uint64_t probe_deadline_ns_ = 0;  // 0: not armed
  uint64_t probe_armed_ns_ = 0;
  bool rack_valid_ = false;         // a packet is known delivered
  uint64_t rack_xmit_ns_ = 0;       // the most recently sent of them
  uint32_t rack_seq_ = 0;           // its sequence number
  uint64_t rack_rtt_ns_ = 0;        // its round trip
  uint64_t rack_timer_ns_ = 0;      // 0: not armed
  uint64_t trim_seen_ns_ = 0;
  uint64_t rto_floor_ns_ = 0;       // raised by spurious timeouts (on_spurious_timeout)
};

}  // namespace trim::transport
