// The TCP-like baseline's sender and receiver (what is modelled: tcp.h).
#include "switch_sim/sim/tcp.h"

#include <algorithm>
#include <stdexcept>

namespace trim::sim {

void TcpSender::reset(const TcpConfig& cfg) {
  if (cfg.max_window == 0 || cfg.dupthresh == 0 || cfg.initial_cwnd == 0) throw std::invalid_argument("TcpConfig: zero window");
  std::vector<Seg> board = std::move(board_);
  *this = TcpSender();
  cfg_ = cfg;
  board_ = std::move(board);
  board_.assign(cfg.max_window, Seg{});
  cwnd_ = std::min<double>(cfg.initial_cwnd, cfg.max_window);
  if (cfg.handshake_rtt_ns != 0) rtt_sample(cfg.handshake_rtt_ns);
}

uint64_t TcpSender::rto_ns() const {
  const uint64_t base = have_rtt_ ? std::max(cfg_.min_rto_ns, srtt_ns_ + 4 * rttvar_ns_) : std::max(cfg_.min_rto_ns, cfg_.initial_rto_ns);
  return std::min(cfg_.max_rto_ns, base * backoff_);
}

void TcpSender::rtt_sample(uint64_t rtt_ns) {
  // RFC 6298 2.2-2.3, in ns.
  if (!have_rtt_) {
    srtt_ns_ = rtt_ns;
    rttvar_ns_ = rtt_ns / 2;
    have_rtt_ = true;
    return;
  }
  const uint64_t err = srtt_ns_ > rtt_ns ? srtt_ns_ - rtt_ns : rtt_ns - srtt_ns_;
  rttvar_ns_ = (3 * rttvar_ns_ + err) / 4;
  srtt_ns_ = (7 * srtt_ns_ + rtt_ns) / 8;
}

TcpSender::Next TcpSender::next(bool new_data) {
  Next n;
  // The first resend of a recovery goes at once, whatever the window (RFC 6675 4.3; Linux's PRR
  // lets it out too): cutting cwnd below what is in flight must not hold the repair back.
  if (in_flight() >= static_cast<uint32_t>(cwnd_) && !fast_rexmit_) return n;
  if (lost_out_ > retrans_out_) {
    // The lowest segment marked lost and not resent; the hint skips what was looked at before.
    for (uint32_t s = std::max(retx_hint_, snd_una_); s != snd_nxt_; ++s) {
      const Seg& g = seg(s);
      if (g.lost && !g.retrans && !g.sacked) {
        retx_hint_ = s;
        n.send = n.retx = true;
        n.seq = s;
        return n;
      }
    }
  }
  if (new_data && snd_nxt_ - snd_una_ < cfg_.max_window && in_flight() < static_cast<uint32_t>(cwnd_)) {
    n.send = true;
    n.seq = snd_nxt_;
  }
  return n;
}

void TcpSender::on_sent(uint32_t seq, bool retx, uint64_t now_ns) {
  if (retx) {
    Seg& g = seg(seq);
    if (seq - snd_una_ >= snd_nxt_ - snd_una_ || !g.lost || g.retrans || g.sacked) throw std::logic_error("TcpSender: resend of a segment not marked lost");
    g.retrans = g.resent = true;
    g.xmit_ns = now_ns;
    ++retrans_out_;
    fast_rexmit_ = false;
  } else {
    if (seq != snd_nxt_ || snd_nxt_ - snd_una_ >= cfg_.max_window) throw std::logic_error("TcpSender: new segment out of order or past the window");
    seg(seq) = Seg{now_ns};
    ++snd_nxt_;
  }
  if (rto_deadline_ns_ == 0) rto_deadline_ns_ = now_ns + rto_ns();
}

void TcpSender::mark_lost(uint32_t seq) {
  Seg& g = seg(seq);
  if (g.lost || g.sacked) return;
  g.lost = true;
  ++lost_out_;
  retx_hint_ = std::min(retx_hint_, seq);
}

void TcpSender::mark_holes_lost() {
  // From the top down, counting SACKed segments: a hole with dupthresh of them above it is lost.
  uint32_t above = 0;
  for (uint32_t s = snd_nxt_; s != snd_una_;) {
    --s;
    const Seg& g = seg(s);
    if (g.sacked) {
      ++above;
    } else if (above >= cfg_.dupthresh && !g.lost) {
      mark_lost(s);
      ++sack_marks_;
    }
  }
}

void TcpSender::grow(uint32_t acked) {
  const double cap = cfg_.max_window;
  if (cwnd_ < ssthresh_) {
    cwnd_ = std::min({cwnd_ + acked, std::max(ssthresh_, cwnd_), cap});  // slow start, up to ssthresh
  } else {
    cwnd_ = std::min(cap, cwnd_ + static_cast<double>(acked) / cwnd_);  // congestion avoidance
  }
}

void TcpSender::on_ack(uint32_t cum_ack, uint32_t seq, bool dup, uint64_t now_ns) {
  if (cum_ack - snd_una_ > snd_nxt_ - snd_una_) return;  // older than what is known, or garbage
  uint32_t acked = 0;
  const bool in_window = seq - snd_una_ < snd_nxt_ - snd_una_;
  if (!dup && in_window) {
    Seg& g = seg(seq);
    const uint64_t rtt = now_ns - g.xmit_ns;
    if (!g.resent) rtt_sample(rtt);  // Karn: a resend's ACK is ambiguous
    if (!g.resent) min_rtt_ns_ = std::min(min_rtt_ns_, rtt);
    // RACK's delivered segment: a resend counts only when its ACK cannot be the original's.
    if (!g.resent || rtt >= min_rtt_ns_) {
      if (!rack_valid_ || g.xmit_ns > rack_xmit_ns_ || (g.xmit_ns == rack_xmit_ns_ && seq - rack_seq_ < (1u << 31))) {
        rack_xmit_ns_ = g.xmit_ns;
        rack_seq_ = seq;
      }
      rack_rtt_ns_ = rtt;
      rack_valid_ = true;
    }
    if (seq - snd_una_ >= cum_ack - snd_una_ && !g.sacked) {  // above the cumulative ACK: SACKed
      g.sacked = true;
      ++sacked_out_;
      if (g.lost) --lost_out_;
      if (g.retrans) --retrans_out_;
      g.lost = g.retrans = false;
      ++acked;
    }
  }
  const bool progress = cum_ack != snd_una_;
  for (; snd_una_ != cum_ack; ++snd_una_) {
    Seg& g = seg(snd_una_);
    if (g.sacked) {
      --sacked_out_;
    } else {
      if (g.lost) --lost_out_;
      if (g.retrans) --retrans_out_;
      ++acked;
    }
    g = Seg{};
  }
  if (state_ != State::kOpen && snd_una_ - recover_ < (1u << 31)) {  // snd_una >= recover
    if (state_ == State::kRecovery) cwnd_ = ssthresh_;
    state_ = State::kOpen;
  }
  if (cfg_.rack) rack_detect(now_ns);
  maybe_enter_recovery();
  if (state_ != State::kOpen && sacked_out_ > 0) mark_holes_lost();
  if (state_ == State::kRecovery) {
    // NewReno's partial ACK: the next hole is lost too, whatever SACK says about it.
    if (progress && snd_una_ != snd_nxt_ && !seg(snd_una_).lost && !seg(snd_una_).sacked) {
      mark_lost(snd_una_);
      ++sack_marks_;
    }
  } else {
    grow(acked);  // open, or slow start after a timeout
  }
  if (progress) {
    backoff_ = 1;
    rto_deadline_ns_ = snd_una_ != snd_nxt_ ? now_ns + rto_ns() : 0;
  }
}

void TcpSender::maybe_enter_recovery() {
  // Linux's tcp_time_to_recover: a segment marked lost (RACK), or dupthresh SACKed.
  if (state_ != State::kOpen || (sacked_out_ < cfg_.dupthresh && lost_out_ == 0)) return;
  ssthresh_ = std::max(cwnd_ / 2, 2.0);
  cwnd_ = ssthresh_;
  recover_ = snd_nxt_;
  state_ = State::kRecovery;
  fast_rexmit_ = true;
  ++fast_recoveries_;
}

void TcpSender::rack_detect(uint64_t now_ns) {
  rack_timer_ns_ = 0;
  if (!rack_valid_) return;
  const uint64_t reo_wnd = min_rtt_ns_ == UINT64_MAX ? 0 : min_rtt_ns_ / 4;
  uint64_t next = 0;
  for (uint32_t s = snd_una_; s != snd_nxt_; ++s) {
    Seg& g = seg(s);
    // New segments leave in seq order, resends later: past the delivered one, nothing sent
    // once was sent before it.
    const bool before = g.xmit_ns < rack_xmit_ns_ || (g.xmit_ns == rack_xmit_ns_ && rack_seq_ - s - 1 < (1u << 31));
    if (!before) {
      if (!g.resent) break;
      continue;
    }
    if (g.sacked || (g.lost && !g.retrans)) continue;
    const uint64_t deadline = g.xmit_ns + rack_rtt_ns_ + reo_wnd;
    if (now_ns >= deadline) {
      if (g.retrans) {  // a lost resend: resent again
        g.retrans = false;
        --retrans_out_;
        retx_hint_ = std::min(retx_hint_, s);
      } else {
        mark_lost(s);
      }
      ++sack_marks_;
    } else if (next == 0 || deadline < next) {
      next = deadline;
    }
  }
  rack_timer_ns_ = next;
}

bool TcpSender::on_timer(uint64_t now_ns) {
  if (rack_timer_ns_ != 0 && now_ns >= rack_timer_ns_) {
    rack_detect(now_ns);
    maybe_enter_recovery();
  }
  if (rto_deadline_ns_ == 0 || now_ns < rto_deadline_ns_) return false;
  if (snd_una_ == snd_nxt_) {
    rto_deadline_ns_ = 0;
    return false;
  }
  ++timeouts_;
  if (state_ == State::kOpen) ssthresh_ = std::max(cwnd_ / 2, 2.0);  // once per episode
  cwnd_ = 1;
  state_ = State::kLoss;
  recover_ = snd_nxt_;
  // Everything not SACKed is lost, resends in flight included (they are forgotten, as Linux's
  // tcp_enter_loss clears retrans_out).
  retrans_out_ = 0;
  for (uint32_t s = snd_una_; s != snd_nxt_; ++s) {
    Seg& g = seg(s);
    g.retrans = false;
    if (!g.sacked && !g.lost) {
      g.lost = true;
      ++lost_out_;
      ++rto_marks_;
    }
  }
  retx_hint_ = snd_una_;
  rack_timer_ns_ = 0;
  backoff_ = std::min<uint32_t>(backoff_ * 2, 1u << 16);
  rto_deadline_ns_ = now_ns + rto_ns();
  return true;
}

void TcpReceiver::reset(uint32_t max_window) {
  if (max_window == 0 || max_window % 64 != 0) throw std::invalid_argument("TcpReceiver: window must be a multiple of 64");
  window_ = max_window;
  rcv_nxt_ = 0;
  have_.assign(max_window / 64, 0);
}

bool TcpReceiver::on_segment(uint32_t seq) {
  if (seq - rcv_nxt_ >= window_) {
    if (seq - rcv_nxt_ < (1u << 31)) throw std::logic_error("TcpReceiver: segment beyond the receive window");
    return false;  // below rcv_nxt: a duplicate
  }
  if (test(seq)) return false;
  const uint32_t i = seq % window_;
  have_[i / 64] |= 1ull << (i % 64);
  while (test(rcv_nxt_)) {
    const uint32_t j = rcv_nxt_ % window_;
    have_[j / 64] &= ~(1ull << (j % 64));
    ++rcv_nxt_;
  }
  return true;
}

}  // namespace trim::sim
