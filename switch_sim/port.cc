#include "switch_sim/port.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace trim::sw {

const char* mode_name(Mode m) {
  switch (m) {
    case Mode::kTrim: return "trim";
    case Mode::kDrop: return "drop";
    case Mode::kRandom: return "random";
    case Mode::kReplay: return "replay";
  }
  return "unknown";
}

bool parse_mode(const std::string& s, Mode* out) {
  for (Mode m : {Mode::kTrim, Mode::kDrop, Mode::kRandom, Mode::kReplay}) {
    if (s == mode_name(m)) {
      *out = m;
      return true;
    }
  }
  return false;
}

std::string PortCounters::to_json(bool with_prio) const {
  std::string s = fmt::format(
      "{{\"received_packets\":{},\"received_bytes\":{},\"sent_packets\":{},\"sent_bytes\":{},"
      "\"trimmed_packets\":{},\"trimmed_bytes_removed\":{},\"dropped_packets\":{},\"dropped_bytes\":{},"
      "\"dropped_header_packets\":{},\"exact_cut_packets\":{},\"max_data_queue_bytes\":{},"
      "\"max_header_queue_bytes\":{}}}",
      received_packets, received_bytes, sent_packets, sent_bytes, trimmed_packets, trimmed_bytes_removed,
      dropped_packets, dropped_bytes, dropped_header_packets, exact_cut_packets, max_data_queue_bytes,
      max_header_queue_bytes);
  if (with_prio) {
    s.pop_back();  // the closing brace
    s += fmt::format(",\"prio_sent_packets\":{},\"prio_sent_bytes\":{},\"prio_dropped_packets\":{},"
                     "\"prio_dropped_bytes\":{},\"max_prio_queue_bytes\":{}}}",
                     prio_sent_packets, prio_sent_bytes, prio_dropped_packets, prio_dropped_bytes,
                     max_prio_queue_bytes);
  }
  return s;
}

void PortCounters::add(const PortCounters& o) {
  using C = PortCounters;
  // Every field but the two maxima.
  static constexpr uint64_t C::*kCounts[] = {&C::received_packets, &C::received_bytes, &C::sent_packets,
                                             &C::sent_bytes, &C::trimmed_packets, &C::trimmed_bytes_removed,
                                             &C::dropped_packets, &C::dropped_bytes, &C::dropped_header_packets,
                                             &C::exact_cut_packets, &C::prio_sent_packets,
                                             &C::prio_sent_bytes, &C::prio_dropped_packets,
                                             &C::prio_dropped_bytes};
  for (uint64_t C::*f : kCounts) this->*f += o.*f;
  max_prio_queue_bytes = std::max(max_prio_queue_bytes, o.max_prio_queue_bytes);
  max_data_queue_bytes = std::max(max_data_queue_bytes, o.max_data_queue_bytes);
  max_header_queue_bytes = std::max(max_header_queue_bytes, o.max_header_queue_bytes);
}

EgressPort::EgressPort(const PortConfig& cfg)
    : prop_delay_ns_(cfg.prop_delay_ns),
      data_cap_bytes_(cfg.data_queue_bytes),
      data_cap_packets_(cfg.data_queue_packets),
      wrr_header_left_(cfg.wrr_header_weight),
      wrr_data_left_(cfg.wrr_data_weight),
      mode_(cfg.mode),
      priority_(cfg.priority),
      cfg_(cfg),
      rng_(cfg.seed) {}

void EgressPort::PacketRing::grow() {
  // Unrolled in order from head_, so the ring restarts at 0 with twice the room.
  std::vector<Packet> bigger(slots_.empty() ? 16 : 2 * slots_.size());
  for (size_t i = 0; i < size_; ++i) bigger[i] = slots_[(head_ + i) & (slots_.size() - 1)];
  slots_.swap(bigger);
  head_ = 0;
}

uint64_t EgressPort::serialise_ns(uint32_t bytes) {
  // Inlined into its two callers (out of line it was a call per packet started); a size not in
  // the memo is worked out out of line.
  const bool first = bytes == ser_bytes_[0];
  if (__builtin_expect(first | (bytes == ser_bytes_[1]), 1)) return first ? ser_ns_[0] : ser_ns_[1];
  return serialise_new_ns(bytes);
}

uint64_t EgressPort::serialise_new_ns(uint32_t bytes) {
  // Rounded up: a packet is never on the wire for less than its bits take.
  const uint64_t ns = static_cast<uint64_t>(std::ceil(static_cast<double>(bytes) * 8.0 / cfg_.rate_gbps));
  ser_bytes_[1] = ser_bytes_[0];
  ser_ns_[1] = ser_ns_[0];
  ser_bytes_[0] = bytes;
  ser_ns_[0] = ns;
  return ns;
}

// Deficit round robin over the two queues: a queue's turn adds its quantum to its credit and
// serves packets while the credit covers the next one; a queue that empties loses its credit.
// Quanta are the shares of one 64 KiB round, so any packet fits within a few rounds.
bool EgressPort::dwrr_pick_header() {
  constexpr double kRoundBytes = 65536;
  for (;;) {
    PacketRing& q = dwrr_header_turn_ ? header_ : data_;
    int64_t& credit = dwrr_credit_[dwrr_header_turn_ ? 1 : 0];
    if (!q.empty() && credit >= static_cast<int64_t>(q.front().bytes)) {
      credit -= q.front().bytes;
      return dwrr_header_turn_;
    }
    if (q.empty()) credit = 0;
    dwrr_header_turn_ = !dwrr_header_turn_;
    const double share = dwrr_header_turn_ ? cfg_.dwrr_header_share : 1.0 - cfg_.dwrr_header_share;
    dwrr_credit_[dwrr_header_turn_ ? 1 : 0] += static_cast<int64_t>(std::max(1.0, share * kRoundBytes));
  }
}

void EgressPort::start_next() {
  if (__builtin_expect(prio_waiting_, 0)) return start_prio();
  const bool have_header = !header_.empty(), have_data = !data_.empty();
  if (!have_header && !have_data) return;
  bool from_header = have_header;
  if (priority_ == Priority::kDwrr) {
    if (have_header && have_data) {
      from_header = dwrr_pick_header();
    } else {
      dwrr_credit_[have_header ? 0 : 1] = 0;  // the idle queue keeps no credit (work-conserving)
    }
  } else if (priority_ == Priority::kWrr && have_header && have_data) {
    // Serve up to the header weight, then up to the data weight, then start a new round.
    if (wrr_header_left_ == 0 && wrr_data_left_ == 0) {
      wrr_header_left_ = cfg_.wrr_header_weight;
      wrr_data_left_ = cfg_.wrr_data_weight;
    }
    from_header = wrr_header_left_ > 0;
  }
  PacketRing& q = from_header ? header_ : data_;
  on_wire_ = q.front();
  q.pop_front();
  if (from_header) {
    header_bytes_ -= on_wire_.bytes;
    if (wrr_header_left_ > 0) --wrr_header_left_;
  } else {
    data_bytes_ -= on_wire_.bytes;
    if (wrr_data_left_ > 0) --wrr_data_left_;
  }
  busy_ = true;
  wire_done_ns_ = now_ns_ + serialise_ns(on_wire_.bytes);
}

// start_next() for a data packet that arrives at an idle port with both queues empty: what it
// would do after the packet went through the data queue, without the queue's write and read.
void EgressPort::start_idle(const Packet& p) {
  if (priority_ == Priority::kDwrr) dwrr_credit_[1] = 0;  // the idle header queue keeps no credit
  if (wrr_data_left_ > 0) --wrr_data_left_;
  on_wire_ = p;
  busy_ = true;
  wire_done_ns_ = now_ns_ + serialise_ns(p.bytes);
}

// The priority class goes first whatever the training classes' scheduler; their WRR/DWRR state
// is left as it was, so they share the link time it leaves as they would share the whole link.
void EgressPort::start_prio() {
  on_wire_ = prio_.front();
  prio_.pop_front();
  prio_bytes_ -= on_wire_.bytes;
  prio_waiting_ = !prio_.empty();
  busy_ = true;
  wire_done_ns_ = now_ns_ + serialise_ns(on_wire_.bytes);
}

void EgressPort::advance(uint64_t now_ns) {
  while (busy_ && wire_done_ns_ <= now_ns) {
    const uint64_t done = wire_done_ns_;
    ++counters_.sent_packets;
    counters_.sent_bytes += on_wire_.bytes;
    // Branch-free: the simulator's every hop comes here, and almost never with this class.
    counters_.prio_sent_packets += on_wire_.priority_class;
    counters_.prio_sent_bytes += on_wire_.priority_class * uint64_t{on_wire_.bytes};
    const Departure d{on_wire_, done + prop_delay_ns_};
    if (sink_ != nullptr) {
      sink_(sink_ctx_, d);
    } else {
      departed_.push_back(d);
    }
    busy_ = false;
    now_ns_ = done;  // the next packet starts the instant this one ends
    start_next();
  }
  now_ns_ = std::max(now_ns_, now_ns);
  if (!busy_) start_next();
}

bool EgressPort::data_full(uint32_t extra_bytes) const {
  // Evaluated whole, not short-circuited: which caps are set differs between ports (a NIC has
  // none), and the simulator's hops go from one to another.
  return ((data_cap_bytes_ != 0) & (data_bytes_ + extra_bytes > data_cap_bytes_)) |
         ((data_cap_packets_ != 0) & (data_.size() >= data_cap_packets_));
}

bool EgressPort::trim(Packet* p) {
  uint32_t cut = cfg_.trim_bytes;
  if (cut == 0) {  // plane0: only a packet that says where its heads end can be cut
    if (!p->trimmable || p->plane0_bytes == 0) return false;
    cut = p->plane0_bytes;
  }
  if (p->bytes > cut) {
    counters_.trimmed_bytes_removed += p->bytes - cut;
    p->bytes = cut;
    p->trimmed = true;
    ++counters_.trimmed_packets;
    if (recording_) transcript_.push_back(TranscriptEntry{p->flow, p->msg, p->psn});
  }
  return true;
}

Verdict EgressPort::to_header_queue(Packet p) {
  p.header_class = true;
  if (header_bytes_ + p.bytes > cfg_.header_queue_bytes) {
    ++counters_.dropped_header_packets;
    return Verdict::kDroppedHeader;
  }
  header_bytes_ += p.bytes;
  header_.push_back(p);
  return Verdict::kQueuedHeader;
}

void EgressPort::set_replay(const std::vector<TranscriptEntry>& entries) {
  replay_.clear();
  replay_.insert(entries.begin(), entries.end());
}

Verdict EgressPort::enqueue(Packet p, uint64_t now_ns) {
  advance(now_ns);
  ++counters_.received_packets;
  counters_.received_bytes += p.bytes;
  Verdict v;
  // Decide whether this packet is cut regardless of the queue (random, replay) or by it (trim).
  bool cut_now = false;
  if (mode_ == Mode::kRandom) {
    cut_now = p.trimmable && uniform_(rng_) < cfg_.random_p;
  } else if (mode_ == Mode::kReplay) {
    cut_now = p.trimmable && replay_.count(TranscriptEntry{p.flow, p.msg, p.psn}) != 0;
  }
  if (p.trimmed) {
    // Cut at an earlier hop: trimmed packets are remarked to the header class (NDP, UEC), so
    // they keep their priority, and their last chance, at every later hop.
    v = to_header_queue(p);
  } else if (cut_now && trim(&p)) {
    v = to_header_queue(p);
  } else if (!busy_ && data_.empty() && header_.empty() && !data_full(p.bytes)) {
    start_idle(p);  // straight onto the idle link: it never waits in a queue
    v = Verdict::kQueued;
  } else if (!data_full(p.bytes)) {
    data_bytes_ += p.bytes;
    data_.push_back(p);
    v = Verdict::kQueued;
  } else if (mode_ != Mode::kTrim) {
    v = Verdict::kDropped;  // drop, and the queue overflow of random/replay
  } else if (cfg_.ndp_coin && !data_.empty() && data_.back().trimmable &&
             (cfg_.trim_bytes != 0 || data_.back().plane0_bytes != 0) && uniform_(rng_) < 0.5) {
    // NDP's choice: cut the tail of the queue and let the arrival take its place. (Only a tail
    // that can be cut: trim() refuses a plane0 cut without a trim point, and such a tail would
    // vanish uncounted.)
    Packet tail = data_.back();
    data_.pop_back();
    data_bytes_ -= tail.bytes;
    if (!data_full(p.bytes)) {
      data_bytes_ += p.bytes;
      data_.push_back(p);
      v = Verdict::kQueued;
    } else {
      v = p.trimmable && trim(&p) ? to_header_queue(p) : Verdict::kDropped;
    }
    if (trim(&tail)) (void)to_header_queue(tail);
  } else if (p.trimmable && trim(&p)) {
    v = to_header_queue(p);
  } else if (!p.trimmable && cfg_.trim_exact_to_header && p.header_bytes > 0 && p.header_bytes < p.bytes) {
    // Not a trim in the codec's sense (nothing of the payload survives): a loss notice.
    counters_.trimmed_bytes_removed += p.bytes - p.header_bytes;
    p.bytes = p.header_bytes;
    p.trimmed = true;
    ++counters_.exact_cut_packets;
    v = to_header_queue(p);
  } else {
    v = Verdict::kDropped;
  }
  if (v == Verdict::kDropped) {
    ++counters_.dropped_packets;
    counters_.dropped_bytes += p.bytes;
  }
  if (!busy_) start_next();
  // The maxima are taken once the link has its next packet: a packet that goes straight onto an
  // idle link never waits in a queue (data_queue_bytes() never counts it either).
  counters_.max_data_queue_bytes = std::max(counters_.max_data_queue_bytes, data_bytes_);
  counters_.max_header_queue_bytes = std::max(counters_.max_header_queue_bytes, header_bytes_);
  return v;
}

Verdict EgressPort::enqueue_priority(Packet p, uint64_t now_ns) {
  advance(now_ns);
  ++counters_.received_packets;
  counters_.received_bytes += p.bytes;
  p.priority_class = true;
  if (cfg_.prio_queue_bytes != 0 && prio_bytes_ + p.bytes > cfg_.prio_queue_bytes) {
    ++counters_.dropped_packets;
    counters_.dropped_bytes += p.bytes;
    ++counters_.prio_dropped_packets;
    counters_.prio_dropped_bytes += p.bytes;
    return Verdict::kDropped;
  }
  prio_bytes_ += p.bytes;
  prio_.push_back(p);
  prio_waiting_ = true;
  if (!busy_) start_next();
  counters_.max_prio_queue_bytes = std::max(counters_.max_prio_queue_bytes, prio_bytes_);
  return Verdict::kQueued;
}

}  // namespace trim::sw
