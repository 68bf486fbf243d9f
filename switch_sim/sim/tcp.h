// trim-sim's TCP-like baseline (--transport tcp): one flow's sender and receiver as pure units,
// with no packets, ports or clocks (callers pass the time and say what happened), so the gtests
// drive them step by step and the simulator (tcp_flow.cc) drives them from its events.
//
// What is modelled, after Linux with SACK on (its default) and Reno's window rules:
// - A byte stream of MSS-sized segments numbered from 0; the receiver ACKs every segment with
//   its cumulative ACK (the next segment it needs) and the segment that arrived (one SACK
//   block; a duplicate arrival carries none, as a DSACK does not mark anything new). Data is
//   delivered to the application in order only.
// - Slow start from an initial window of 10 segments (Linux's IW10), then congestion avoidance
//   (+1 segment per window), growing by the segments newly ACKed or SACKed.
// - Loss detection: once `dupthresh` (3) segments are SACKed above the cumulative ACK (Linux's
//   tcp_time_to_recover with reordering 3), fast recovery: ssthresh = max(cwnd / 2, 2) and cwnd =
//   ssthresh at once (Reno's halving; Linux's CUBIC would keep 0.7, its PRR spreads the cut over
//   the round trip), every hole with `dupthresh` SACKed segments above it is marked lost
//   (RFC 6675's IsLost), and a partial ACK marks the new first hole lost (NewReno, RFC 6582).
//   Recovery ends when the cumulative ACK reaches what was sent when it began. The first hole
//   is resent at once; after that sending is limited by Linux's pipe, in_flight = outstanding -
//   sacked - lost + retransmitted < cwnd, lost segments first. A retransmission lost again is
//   found only by the timeout.
// - Timeout: RTO = max(min_rto, srtt + 4 rttvar) (RFC 6298; Linux's srtt + max(4 rttvar,
//   min_rto) differs by srtt, microseconds here), doubled per expiry up to max_rto, reset by
//   cumulative progress, restarted by every ACK that advances. On expiry: ssthresh halves (once
//   per episode), cwnd = 1, every segment not SACKed is marked lost and resent in slow start
//   (Linux's tcp_enter_loss, SACK kept).
// - RACK (rack = true, Linux's default since 4.18, RFC 8985): a segment not SACKed, sent before
//   the most recently sent segment known delivered, is lost once that one's round trip plus a
//   reordering window of min_rtt / 4 has passed since it was sent (a timer catches the rest);
//   this also finds a lost retransmission, and a hole with fewer than 3 segments SACKed above it.
//   A segment it marks starts fast recovery as the 3 SACKs do. rack = false: Reno + SACK only,
//   where such losses wait for the RTO.
// - No tail loss probe: a loss with nothing delivered after it waits for the RTO. (Linux's TLP
//   fires at about 2 srtt + 2 ms, never after the RTO, so with a 1 ms minimum RTO it would not
//   repair a tail sooner; with 200 ms it would, so that baseline is pessimistic.) No delayed ACKs.
#pragma once

#include <cstdint>
#include <vector>

namespace trim::sim {

struct TcpConfig {
  uint64_t min_rto_ns = 200'000'000;     // Linux's TCP_RTO_MIN (tuned datacenters: 1 ms)
  uint64_t max_rto_ns = 60'000'000'000;  // backoff stops here (Linux: 120 s; trim-sim stops at 60 s)
  uint64_t initial_rto_ns = 1'000'000'000;  // before any RTT sample (Linux's TCP_TIMEOUT_INIT)
  uint64_t handshake_rtt_ns = 0;  // an RTT sample taken at connection setup (0: none)
  uint32_t dupthresh = 3;
  uint32_t initial_cwnd = 10;
  uint32_t max_window = 256;  // the receive window, in segments: the span [snd_una, snd_nxt)
  bool rack = true;
};

class TcpSender {
 public:
  enum class State : uint8_t { kOpen, kRecovery, kLoss };
  TcpSender() = default;
  explicit TcpSender(const TcpConfig& cfg) { reset(cfg); }
  // A new connection (keeps the scoreboard's memory).
  void reset(const TcpConfig& cfg);

  // What goes out next: the lowest segment marked lost and not yet resent, else a new segment
  // when `new_data` says one is ready; nothing while in_flight >= cwnd or the window is full.
  struct Next {
    bool send = false;
    bool retx = false;
    uint32_t seq = 0;
  };
  Next next(bool new_data);
  // Segment `seq` left at now_ns (a new one must be snd_nxt). Arms the timeout if unarmed.
  void on_sent(uint32_t seq, bool retx, uint64_t now_ns);
  // An ACK at now_ns: the receiver's cumulative ACK, and the segment whose arrival made it
  // (dup: the receiver already had it, so it SACKs nothing new).
  void on_ack(uint32_t cum_ack, uint32_t seq, bool dup, uint64_t now_ns);
  // The timer at now_ns: true when the retransmission timeout expired (and was handled).
  bool on_timer(uint64_t now_ns);

  uint64_t rto_deadline_ns() const { return rto_deadline_ns_; }  // 0: not armed
  // When on_timer is due next, the RTO or RACK's reorder timer (0: neither armed).
  uint64_t next_deadline_ns() const {
    if (rack_timer_ns_ == 0 || (rto_deadline_ns_ != 0 && rto_deadline_ns_ < rack_timer_ns_)) return rto_deadline_ns_;
    return rack_timer_ns_;
  }
  uint64_t rto_ns() const;
  double cwnd() const { return cwnd_; }
  double ssthresh() const { return ssthresh_; }
  State state() const { return state_; }
  uint32_t snd_una() const { return snd_una_; }
  uint32_t snd_nxt() const { return snd_nxt_; }
  uint32_t in_flight() const { return (snd_nxt_ - snd_una_) - sacked_out_ - lost_out_ + retrans_out_; }
  uint32_t sacked_out() const { return sacked_out_; }
  uint64_t srtt_ns() const { return srtt_ns_; }
  uint32_t backoff() const { return backoff_; }
  // Segments marked lost by SACK (fast recovery) and by the timeout; recoveries and timeouts.
  uint64_t sack_marks() const { return sack_marks_; }
  uint64_t rto_marks() const { return rto_marks_; }
  uint64_t fast_recoveries() const { return fast_recoveries_; }
  uint64_t timeouts() const { return timeouts_; }

 private:
  struct Seg {
    uint64_t xmit_ns = 0;
    bool sacked = false, lost = false, retrans = false;  // retrans: a resend is in flight
    bool resent = false;                                 // ever resent (Karn: no RTT sample)
  };
  Seg& seg(uint32_t seq) { return board_[seq % cfg_.max_window]; }
  void mark_lost(uint32_t seq);
  void mark_holes_lost();  // RFC 6675's IsLost over the scoreboard
  void rtt_sample(uint64_t rtt_ns);
  void grow(uint32_t acked);
  void rack_detect(uint64_t now_ns);  // marks what RACK finds lost; arms its timer for the rest
  void maybe_enter_recovery();

  TcpConfig cfg_;
  std::vector<Seg> board_;  // max_window, indexed seq % max_window, valid in [snd_una, snd_nxt)
  uint32_t snd_una_ = 0, snd_nxt_ = 0;
  uint32_t sacked_out_ = 0, lost_out_ = 0, retrans_out_ = 0;
  uint32_t retx_hint_ = 0;  // no segment below this needs a resend
  uint32_t recover_ = 0;    // recovery (or loss) ends when snd_una reaches it
  bool fast_rexmit_ = false;  // recovery began: its first resend may leave past the window
  double cwnd_ = 10, ssthresh_ = 1e9;
  State state_ = State::kOpen;
  uint64_t srtt_ns_ = 0, rttvar_ns_ = 0;
  bool have_rtt_ = false;
  uint32_t backoff_ = 1;
  uint64_t rto_deadline_ns_ = 0;
  // RACK: the most recently sent segment known delivered (send time, seq), its round trip.
  bool rack_valid_ = false;
  uint64_t rack_xmit_ns_ = 0, rack_rtt_ns_ = 0, min_rtt_ns_ = UINT64_MAX, rack_timer_ns_ = 0;
  uint32_t rack_seq_ = 0;
  uint64_t sack_marks_ = 0, rto_marks_ = 0, fast_recoveries_ = 0, timeouts_ = 0;
};

// The receiving end: the cumulative ACK and in-order delivery over a window of segments.
class TcpReceiver {
 public:
  explicit TcpReceiver(uint32_t max_window = 256) { reset(max_window); }
  void reset(uint32_t max_window);
  // Segment `seq` arrived: false when it is a duplicate. Segments [rcv_nxt before, rcv_nxt
  // after) are then deliverable in order. `seq` must lie below rcv_nxt + max_window.
  bool on_segment(uint32_t seq);
  uint32_t rcv_nxt() const { return rcv_nxt_; }

 private:
  uint32_t window_ = 256;
  uint32_t rcv_nxt_ = 0;
  std::vector<uint64_t> have_;  // one bit per segment of [rcv_nxt, rcv_nxt + window), seq % window
  bool test(uint32_t seq) const { return have_[(seq % window_) / 64] >> (seq % window_ % 64) & 1; }
};

}  // namespace trim::sim
