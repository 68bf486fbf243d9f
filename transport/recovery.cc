#include "transport/recovery.h"

#include <algorithm>

namespace trim::transport {

void Recovery::on_send(uint64_t now_ns, bool first, bool outstanding) {
  if (rto_deadline_ns_ == 0) rto_deadline_ns_ = now_ns + rto_ns();
  if (first) arm_probe(now_ns, outstanding);
}

void Recovery::on_delivered(uint64_t sent_ns, uint64_t now_ns, bool retransmitted, bool trimmed, uint32_t seq) {
  if (trimmed) return;
  if (!retransmitted && now_ns >= sent_ns) {
    const uint64_t rtt = now_ns - sent_ns;
    if (srtt_ns_ == 0) {
      srtt_ns_ = rtt;
      rttvar_ns_ = rtt / 2;
    } else {
      const uint64_t err = rtt > srtt_ns_ ? rtt - srtt_ns_ : srtt_ns_ - rtt;
      rttvar_ns_ = (3 * rttvar_ns_ + err) / 4;
      srtt_ns_ = (7 * srtt_ns_ + rtt) / 8;
    }
  }
  if ((!retransmitted || now_ns - sent_ns >= srtt_ns_ / 2) &&
      (!rack_valid_ || !sent_after(rack_xmit_ns_, rack_seq_, sent_ns, seq))) {
    rack_valid_ = true;
    rack_xmit_ns_ = sent_ns;
    rack_seq_ = seq;
    rack_rtt_ns_ = now_ns >= sent_ns ? now_ns - sent_ns : 0;
  }
}

void Recovery::on_progress(uint64_t now_ns, bool outstanding) {
  backoff_ = 1;
  rto_deadline_ns_ = outstanding ? now_ns + rto_ns() : 0;
}

void Recovery::arm_probe(uint64_t now_ns, bool outstanding) {
  if (!outstanding || !cfg_.tail_probes) {
    probe_deadline_ns_ = 0;
    return;
  }
  // Floor: a quarter of the minimum RTO, which is sized to the host's scheduling noise (an
  // ACK late by that much is not lost; each early probe is a duplicate plus a wakeup).
  const uint64_t pto = std::max<uint64_t>(2 * srtt_ns_, cfg_.min_rto_ns / 4);
  probe_deadline_ns_ = now_ns + pto < rto_deadline_ns_ ? now_ns + pto : 0;
  probe_armed_ns_ = now_ns;
}

uint64_t Recovery::reorder_window_ns(uint64_t now_ns) const {
  uint64_t w = std::max<uint64_t>(srtt_ns_ / 4, cfg_.min_reorder_ns);
  if (trim_seen_ns_ != 0 && now_ns - trim_seen_ns_ < 8 * std::max<uint64_t>(srtt_ns_, cfg_.min_reorder_ns)) {
    w = std::max(w, srtt_ns_);
  }
  return w;
}

void Recovery::on_spurious_timeout(uint64_t rtt_ns) {
  backoff_ = 1;
  srtt_ns_ = std::max(srtt_ns_, rtt_ns);
  rttvar_ns_ = std::max(rttvar_ns_, rtt_ns / 2);
  rto_floor_ns_ = std::min(std::max(rto_floor_ns_, rtt_ns + rtt_ns / 4), cfg_.max_rto_ns);
}

uint64_t Recovery::rto_ns() const {
  const uint64_t base = std::max({cfg_.min_rto_ns, srtt_ns_ + 4 * rttvar_ns_, rto_floor_ns_});
  return std::min<uint64_t>(base * backoff_, cfg_.max_rto_ns);
}

Recovery::Fired Recovery::on_timer(uint64_t now_ns, bool outstanding) {
  Fired f;
  if (rack_timer_ns_ != 0 && now_ns >= rack_timer_ns_) {
    rack_timer_ns_ = 0;
    f.rack = outstanding;
  }
  if (probe_deadline_ns_ != 0 && now_ns >= probe_deadline_ns_) {
    // A lost probe (or its lost ACK) earns another, twice as late, while the timeout is ahead.
    const uint64_t next = now_ns + 2 * (now_ns - probe_armed_ns_);
    probe_deadline_ns_ = next < rto_deadline_ns_ ? next : 0;
    probe_armed_ns_ = now_ns;
    f.probe = outstanding;
  }
  if (rto_deadline_ns_ == 0 || now_ns < rto_deadline_ns_) return f;
  if (!outstanding) {
    rto_deadline_ns_ = 0;
    return f;
  }
  f.timeout = true;
  f.rto_ns = rto_ns();
  backoff_ = std::min(backoff_ * 2, cfg_.max_backoff);
  rto_deadline_ns_ = now_ns + rto_ns();
  return f;
}

}  // namespace trim::transport
