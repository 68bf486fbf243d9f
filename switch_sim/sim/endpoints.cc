// The simulator's endpoints (each flow's sender and receiver) and the packet path through the
// ports. (Named apart from the plugin's transport/ on purpose: what is shared with it is the
// loss-recovery unit, transport/recovery.h, and nothing else.)
//
// Transport model (what --help states):
// - Window: a flow may have at most `cwnd` sequence numbers between its lowest unacknowledged
//   packet and its next new one (a span, as TCP's window, capped at kMaxWindow). --cc fixed keeps
//   cwnd = --window; --cc aimd adds 1/cwnd per ACK and halves it (at most once per window of
//   data) on a detected loss or on an ACK of a trimmed packet (trimming is a congestion mark).
// - ACKs: the receiver acknowledges every packet it gets (selective, per sequence number). ACKs
//   are not queued in the fabric: each reaches the sender after the reverse path's unloaded
//   latency (hops x (propagation + 64-byte serialisation)). This is a simplification: reverse
//   congestion and ACK loss are not modelled (they would hit trim and drop alike; with strict
//   header priority a real trimming switch would also favour ACKs).
// - Trimmed packets: heads of a trimmable packet are a delivery (acknowledged, never resent),
//   also when a fixed trim size cut into plane 0 (the rows decode with the heads that survived,
//   as the plugin's receiver does); a trimmed packet of exact class is NACKed and resent at
//   once. Exact packets are cut (to a bare header) only with --trim-exact 1, the default: NDP's
//   and UEC's scheme, where the header queue carries the loss notice and the sender resends after
//   one RTT instead of waiting for RACK, a probe or the RTO. --trim-exact 0 drops them.
// - Loss recovery is the plugin's own unit (transport/recovery.h), driven as send_proto.cc
//   drives it: RTT samples from first transmissions (Karn); RACK: when an ACK arrives, every
//   outstanding packet sent no later than the latest send known delivered is lost once that
//   packet's round trip plus a reordering window, max(srtt/4, RTO/4) (at least srtt while the
//   receiver reports trims), has passed since it was sent (a reorder timer catches the rest); a tail loss probe
//   max(2 x srtt, RTO/4) after the last new send or ACK resends the newest outstanding packet
//   (doubling while the timeout is ahead); the timeout max(--rto-us, srtt + 4 rttvar), doubling
//   (at most 64x, 1 s) until cumulative progress, resends what has been out that long (at least
//   the oldest packet). As the plugin's Eifel detection: when the first ACK of a packet it
//   resent is the original's, the timeout was spurious: its window cut is undone and the RTO
//   keeps a floor of 5/4 of that round trip (transport/recovery.h); counted spurious_rto.
// - Every loss (drop mode, or an exact/background packet dropped in trim mode, or heads lost in
//   a full header queue) is resent after its detection delay as a whole new transmission.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <stdexcept>

#include "switch_sim/sim/sim.h"

namespace trim::sim {

namespace {
uint64_t mix(uint64_t x) {  // splitmix64 finaliser: spreads flow ids over spines
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
}  // namespace

uint32_t Simulator::alloc_pkt() {
  if (free_pkts_.empty()) {
    if (pool_.size() >= kMaxPoolSlots) throw std::length_error("trim-sim: more packets in flight than kMaxPoolSlots");
    pool_.emplace_back();
    return static_cast<uint32_t>(pool_.size() - 1);
  }
  uint32_t i = free_pkts_.back();
  free_pkts_.pop_back();
  return i;
}

void Simulator::free_pkt(uint32_t slot) { free_pkts_.push_back(slot); }

uint32_t Simulator::new_flow(uint32_t src, uint32_t dst, FlowKind kind) {
  uint32_t fid;
  if (!free_flows_.empty()) {
    fid = free_flows_.back();
    free_flows_.pop_back();
  } else {
    flows_.emplace_back();
    hops_.emplace_back();
    fid = static_cast<uint32_t>(flows_.size() - 1);
    flows_[fid].slots.resize(kMaxWindow);
  }
  Flow& f = flows_[fid];
  const uint32_t gen = f.gen;
  // Reset every field but keep the vectors' capacity (no allocation for a recycled flow).
  std::vector<Msg> msgs = std::move(f.msgs);
  std::vector<Slot> slots = std::move(f.slots);
  std::vector<uint32_t> rtx = std::move(f.rtx);
  std::vector<uint64_t> bits = std::move(f.rcv_bits);
  f = Flow{};
  f.msgs = std::move(msgs);
  f.msgs.clear();
  // The old slots stay as they are (6 KB a flow, a million flows in a long run): a slot is only
  // read for a psn in [snd_una, next_psn), written when that psn was sent, or checked against
  // the psn it holds.
  f.slots = std::move(slots);
  f.rtx = std::move(rtx);
  f.rtx.clear();
  f.rcv_bits = std::move(bits);
  f.rcv_bits.clear();
  f.gen = gen;
  f.live = true;
  f.src = src;
  f.dst = dst;
  f.kind = kind;
  f.cwnd = cfg_.window_pkts;
  f.rec = transport::Recovery(transport::RecoveryConfig::plugin(cfg_.rto_ns, cfg_.tlp));
  f.spine_hash = static_cast<uint32_t>(mix(cfg_.seed ^ (static_cast<uint64_t>(fid) << 20) ^ gen));
  f.ecmp_spine = f.spine_hash % topo_.spines();
  const uint64_t ack_ser_ns = static_cast<uint64_t>(std::ceil(kAckBytes * 8.0 / cfg_.link_gbps));
  f.ack_delay_ns = topo_.hops(src, dst) * (cfg_.prop_ns + ack_ser_ns);
  hops_[fid] = FlowHop{f.gen, topo_.path(src, dst)};
  if (cfg_.transport == Transport::kTcp) tcp_new_flow(fid);
  return fid;
}

void Simulator::add_msg(Flow& f, uint64_t bytes, bool trimmable, bool ready) {
  Msg m;
  m.first_psn = f.msgs.empty() ? f.next_psn : f.msgs.back().first_psn + f.msgs.back().packets;
  m.bytes = static_cast<uint32_t>(bytes);
  m.packets = std::max<uint32_t>(1, static_cast<uint32_t>((bytes + payload_bytes() - 1) / payload_bytes()));
  m.trimmable = trimmable;
  m.ready = ready;
  if (f.msgs.empty()) f.base_psn = m.first_psn;
  f.msgs.push_back(m);
}

bool Simulator::flow_finished(const Flow& f) const {
  return f.send_msg >= f.msgs.size() && f.snd_una == f.next_psn && f.msgs_done == f.msgs.size();
}

void Simulator::arm_timer(uint32_t fid, uint64_t at) {
  Flow& f = flows_[fid];
  if (at < f.timer_at) {
    f.timer_at = at;
    q_.push(at, EventKind::kTimer, fid);
  }
}

bool Simulator::new_packet_ready(uint32_t fid) {
  Flow& f = flows_[fid];
  if (f.send_msg >= f.msgs.size()) {
    // Constant background keeps going while the workload runs.
    if (f.kind != FlowKind::kBgConstant || work_done_) return false;
    add_msg(f, cfg_.bg_flow_bytes, false, true);
    ctr_.bg_bytes += cfg_.bg_flow_bytes;
  }
  if (!f.msgs[f.send_msg].ready) return false;
  if (f.pace_ns != 0 && now_ns_ < f.next_send_ns) {
    if (f.pace_at != f.next_send_ns) {
      f.pace_at = f.next_send_ns;
      q_.push(f.pace_at, EventKind::kPace, fid);
    }
    return false;
  }
  return true;
}

uint32_t Simulator::take_new_packet(Flow& f) {
  if (f.pace_ns != 0) f.next_send_ns = std::max(now_ns_, f.next_send_ns) + f.pace_ns;
  Msg& m = f.msgs[f.send_msg];
  const uint32_t psn = f.next_psn++;
  const uint32_t i = psn - m.first_psn;
  const uint32_t pay = payload_bytes();
  const uint64_t off = static_cast<uint64_t>(i) * pay;
  Slot& s = f.slots[psn % kMaxWindow];
  s = Slot{};
  s.psn = psn;
  s.msg = f.send_msg;
  s.bytes = static_cast<uint16_t>(m.bytes > off ? std::min<uint64_t>(pay, m.bytes - off) : 0);
  s.trimmable = m.trimmable;
  if (i + 1 == m.packets) ++f.send_msg;
  return psn;
}

void Simulator::try_send(uint32_t fid) {
  if (cfg_.transport == Transport::kTcp) {
    tcp_try_send(fid);
    return;
  }
  Flow& f = flows_[fid];
  size_t rtx_head = 0;
  for (;;) {
    if (rtx_head < f.rtx.size()) {
      const uint32_t psn = f.rtx[rtx_head++];
      const Slot& s = f.slots[psn % kMaxWindow];
      if (s.psn != psn || s.state != SlotState::kLost) continue;  // acknowledged meanwhile
      send_packet(fid, psn, true);
      continue;
    }
    const uint32_t win = std::min<uint32_t>(kMaxWindow, std::max<uint32_t>(1, static_cast<uint32_t>(f.cwnd)));
    if (f.next_psn - f.snd_una >= win || !new_packet_ready(fid)) break;
    send_packet(fid, take_new_packet(f), false);
  }
  f.rtx.erase(f.rtx.begin(), f.rtx.begin() + static_cast<std::ptrdiff_t>(rtx_head));
}

void Simulator::send_packet(uint32_t fid, uint32_t psn, bool retx) {
  const uint32_t idx = alloc_pkt();
  Flow& f = flows_[fid];
  Slot& s = f.slots[psn % kMaxWindow];
  PktState& p = pool_[idx];
  p = PktState{};
  p.pkt.bytes = s.bytes + kOverheadBytes;
  p.pkt.trimmable = s.trimmable;
  // Plane 0 of fp32 rht: one sign bit per element after the header (codec/packet.h layout).
  p.pkt.plane0_bytes = s.trimmable ? kOverheadBytes + (s.bytes / 4 + 7) / 8 : 0;
  p.exact = !s.trimmable;
  p.pkt.header_bytes = kOverheadBytes;  // what a cut of an exact packet leaves (--trim-exact 1)
  p.pkt.flow = fid;
  p.pkt.msg = s.msg;
  p.pkt.psn = psn;
  p.pkt.tag = idx;
  // The port reads the class at every hop from the pool's copy (set here once).
  p.pkt.priority_class = cfg_.bg_priority && (f.kind == FlowKind::kBgConstant || f.kind == FlowKind::kBgBursty);
  p.xmit_ns = now_ns_;
  p.resent = retx;
  p.gen = f.gen;
  const uint32_t spines = topo_.spines();
  p.spine = cfg_.routing == Routing::kEcmp ? f.ecmp_spine : (f.spine_hash + f.spray_next++) % spines;
  s.xmit_ns = now_ns_;
  s.state = SlotState::kOut;
  ++ctr_.injected;
  if (s.trimmable) ++ctr_.injected_trimmable;
  if (retx) {
    s.resent = true;
    ++s.retx;
    ++ctr_.retx;
    if (s.trimmable) ++ctr_.retx_trimmable;
  }
  if (cfg_.transport == Transport::kTcp) {
    TcpSender& snd = tcp_[fid].snd;
    snd.on_sent(psn, retx, now_ns_);
    arm_timer(fid, snd.next_deadline_ns());
  } else {
    f.rec.on_send(now_ns_, !retx, true);
    arm_timer(fid, f.rec.next_deadline_ns());
  }
  enqueue_at(topo_.port_at(f.src, f.dst, p.spine, 0), idx, 0, now_ns_);
}

void Simulator::enqueue_at(uint32_t port, uint32_t slot, uint32_t hop, uint64_t t) {
  sw::EgressPort& ep = topo_.ports[port];
  const uint64_t pending_ns = ep.next_event_ns();
  // The tag is set in the pool's copy (which nothing else reads) and the packet passed from
  // there: tagging a stack copy made the argument's 16-byte loads straddle the 8-byte store,
  // a store-forwarding stall on every hop.
  sw::Packet& pkt = pool_[slot].pkt;
  pkt.tag = slot | static_cast<uint64_t>(hop) << 32;
  const sw::Verdict v = pkt.priority_class ? ep.enqueue_priority(pkt, t) : ep.enqueue(pkt, t);
  if (v == sw::Verdict::kDropped || v == sw::Verdict::kDroppedHeader) {
    ++ctr_.dropped;
    free_pkt(slot);
  }
  if (pending_ns == t) {
    // The port's completion due now came before its kPort event (enqueue advanced the port to
    // now first): that event, still queued for now, would find the port moved on and do
    // nothing. It is taken back and counted as popped, as it would have been at this very time
    // (the others keep their order, so nothing else changes).
    if (!q_.cancel_current(EventKind::kPort, port)) throw std::logic_error("trim-sim: a port's due kPort event is not queued");
    ++ctr_.events;
  }
  schedule_port(port, pending_ns);
}

void Simulator::on_departure(void* sim, const sw::Departure& d) {
  Simulator& s = *static_cast<Simulator*>(sim);
  const uint32_t slot = static_cast<uint32_t>(d.packet.tag);
  const uint32_t hop = static_cast<uint32_t>(d.packet.tag >> 32) + 1;
  if (d.packet.header_class) s.pool_[slot].pkt = d.packet;  // it may have been cut
  s.q_.push(d.arrive_ns, EventKind::kArrive, slot | hop << kHopShift);
  // on_arrive reads the slot and the flow's hop record first, a link's delay (hundreds of
  // events) from now: fetched ahead, they wait in cache instead of stalling it.
  __builtin_prefetch(&s.pool_[slot]);
  __builtin_prefetch(&s.hops_[static_cast<uint32_t>(d.packet.flow)]);
}

// A port's kPort event is pushed whenever its next completion changes, so the one queued last is
// always at the port's next_event_ns(): an event at any other time is stale.
void Simulator::schedule_port(uint32_t port, uint64_t pending_ns) {
  const uint64_t next = topo_.ports[port].next_event_ns();
  if (next != pending_ns && next != UINT64_MAX) q_.push(next, EventKind::kPort, port);
}

void Simulator::on_port(uint32_t port, uint64_t t) {
  sw::EgressPort& ep = topo_.ports[port];
  if (ep.next_event_ns() != t) return;  // superseded
  ep.advance(t);
  schedule_port(port, UINT64_MAX);  // this event was the one queued
}

void Simulator::on_arrive(uint32_t id, uint64_t t) {
  const uint32_t slot = id & (kMaxPoolSlots - 1), hop = id >> kHopShift;
  const PktState& p = pool_[slot];
  const FlowHop& fh = hops_[p.flow()];
  // A recycled flow has new endpoints; a stale packet still follows the old path, so route by
  // what the packet was sent on: its flow's endpoints at send time equal the current ones
  // unless gen changed, in which case it is delivered as stale on the spot.
  if (p.gen != fh.gen) {
    ++ctr_.delivered;
    ++ctr_.stale;
    free_pkt(slot);
    return;
  }
  const uint32_t port = topo_.port_after(fh.path, p.spine, hop);
  if (port == UINT32_MAX && cfg_.fabric && p.pkt.trimmed && p.pkt.bytes < kOverheadBytes) {
    // A fabric switch cut it inside our header: the receiver can use nothing of it, not even
    // its psn. Lost, as a drop is (the sender's recovery repairs it).
    ++ctr_.dropped;
    ++ctr_.header_cuts;
    free_pkt(slot);
  } else if (port == UINT32_MAX) {
    deliver(slot, t);
  } else {
    enqueue_at(port, slot, hop, t);
  }
}

void Simulator::deliver(uint32_t slot, uint64_t t) {
  ++ctr_.delivered;
  PktState& p = pool_[slot];
  const uint32_t fid = p.flow();
  Flow& f = flows_[fid];
  if (p.pkt.trimmed) ++ctr_.delivered_trimmed;
  q_.push(t + f.ack_delay_ns, EventKind::kAck, slot);  // the pool slot now carries the ACK
  // on_ack reads the flow's sender state (the lines between the receiver's fields read here:
  // cwnd, the window, the recovery state) and the packet's window slot an ACK delay from now.
  const char* sender = reinterpret_cast<const char*>(&f);
  for (size_t at = 64; at < offsetof(Flow, pace_ns); at += 64) __builtin_prefetch(sender + at);
  __builtin_prefetch(&f.slots[p.pkt.psn % kMaxWindow]);
  if (cfg_.transport == Transport::kTcp) {
    tcp_deliver(p, t);
    return;
  }
  // Heads of exact data are useless: ask for the packet again.
  if (p.pkt.trimmed && p.exact) {
    p.nack = true;
    return;
  }
  const uint32_t word = p.pkt.psn / 64;
  if (f.rcv_bits.size() <= word) f.rcv_bits.resize(word + 1 + f.rcv_bits.size() / 2, 0);
  const uint64_t bit = 1ull << (p.pkt.psn % 64);
  if (f.rcv_bits[word] & bit) {
    ++ctr_.duplicates;
    p.dup = true;
    return;
  }
  f.rcv_bits[word] |= bit;
  if (p.pkt.psn < f.base_psn || p.pkt.msg >= f.msgs.size()) return;  // an earlier iteration's packet
  Msg& m = f.msgs[p.pkt.msg];
  // Trimmable workload data (the reduce-scatter half of a ring; incast/permutation payload
  // unless --exact), first deliveries only: what the NMSE estimate is built on.
  if (m.trimmable && f.kind != FlowKind::kBgConstant && f.kind != FlowKind::kBgBursty) {
    ++ctr_.rs_packets;
    if (p.pkt.trimmed) {
      // A cut inside plane 0 (a fixed trim size) leaves some elements without a head; those
      // decode as 0, an error of their whole energy (NMSE 1), the rest at the 1-bit level.
      const double heads = p.pkt.plane0_bytes > kOverheadBytes && p.pkt.bytes < p.pkt.plane0_bytes
                               ? static_cast<double>(p.pkt.bytes > kOverheadBytes ? p.pkt.bytes - kOverheadBytes : 0) /
                                     (p.pkt.plane0_bytes - kOverheadBytes)
                               : 1.0;
      const double nmse = heads * kTrimmedRowNmse + (1.0 - heads);
      ++ctr_.rs_trimmed;
      if (heads < 1.0) ++ctr_.rs_cut_heads;
      ctr_.rs_err_sum += nmse;
      if (f.kind == FlowKind::kRing) {
        const uint32_t step = p.pkt.msg / slices_per_step();
        ctr_.rs_err_weight += nmse * static_cast<double>(step + 1) / cfg_.hosts;
      }
    }
  }
  if (++m.received == m.packets) on_msg_complete(fid, p.pkt.msg, t);
}

void Simulator::mark_lost(Flow& f, Slot& s, uint64_t* ctr) {
  s.state = SlotState::kLost;
  f.rtx.push_back(s.psn);
  ++*ctr;
  if (cfg_.cc == Cc::kAimd && s.psn >= f.recover_psn) {
    f.cwnd = std::max(1.0, f.cwnd / 2);
    f.recover_psn = f.next_psn;
  }
}

void Simulator::on_ack(uint32_t slot, uint64_t t) {
  const PktState p = pool_[slot];
  free_pkt(slot);
  Flow& f = flows_[p.flow()];
  if (p.gen != f.gen || !f.live) return;
  if (cfg_.transport == Transport::kTcp) {
    tcp_on_ack(p, t);
    return;
  }
  Slot& s = f.slots[p.pkt.psn % kMaxWindow];
  if (s.psn != p.pkt.psn || s.state == SlotState::kFree || s.state == SlotState::kAcked) return;
  if (p.nack) {
    if (s.state == SlotState::kOut) {
      mark_lost(f, s, &ctr_.retx_nack);
      if (s.trimmable) ++ctr_.retx_nack_trimmable;
    }
    try_send(p.flow());
    return;
  }
  // Eifel, as send_proto.cc: the first ACK of a packet the open timeout resent says which copy
  // arrived (the plugin's ACK echo); the original's undoes the timeout, the resend's confirms it.
  if (f.rto_open && s.rto_resent) {
    f.rto_open = false;
    if (p.resent) {
      f.rec.on_genuine_timeout();
    } else {
      ++ctr_.spurious_rto;
      f.cwnd = std::max(f.cwnd, f.cwnd_before_rto);
      f.rec.on_spurious_timeout(t - p.xmit_ns);
    }
  }
  s.state = SlotState::kAcked;
  f.rec.on_delivered(p.xmit_ns, t, s.retx > 0, p.pkt.trimmed, p.pkt.psn);
  if (p.pkt.trimmed) f.rec.on_trims_reported(t);
  if (cfg_.cc == Cc::kAimd) {
    if (p.pkt.trimmed && p.pkt.psn >= f.recover_psn) {
      f.cwnd = std::max(1.0, f.cwnd / 2);
      f.recover_psn = f.next_psn;
    } else {
      f.cwnd = std::min<double>(kMaxWindow, f.cwnd + 1.0 / f.cwnd);
    }
  }
  bool progress = false;
  while (f.snd_una < f.next_psn) {
    Slot& u = f.slots[f.snd_una % kMaxWindow];
    if (u.psn != f.snd_una || u.state != SlotState::kAcked) break;
    u.state = SlotState::kFree;
    ++f.snd_una;
    progress = true;
  }
  if (f.rto_open && f.snd_una >= f.rto_end_psn) f.rto_open = false;  // all acknowledged, undecided
  // RACK, then the timers, as send_proto.cc's on_ack.
  rack_detect(f, t);
  const bool outstanding = f.snd_una != f.next_psn;
  if (progress) f.rec.on_progress(t, outstanding);
  f.rec.arm_probe(t, outstanding);
  if (f.rec.next_deadline_ns() != UINT64_MAX) arm_timer(p.flow(), f.rec.next_deadline_ns());
  const uint32_t fid = p.flow();
  try_send(fid);
  recycle_if_finished(fid);
}

void Simulator::recycle_if_finished(uint32_t fid) {
  Flow& g = flows_[fid];
  if (g.kind == FlowKind::kBgBursty && flow_finished(g)) {
    g.live = false;
    ++g.gen;
    hops_[fid].gen = g.gen;
    g.timer_at = UINT64_MAX;
    g.pace_at = UINT64_MAX;
    free_flows_.push_back(fid);
  }
}

void Simulator::rack_detect(Flow& f, uint64_t t) {
  uint64_t next = UINT64_MAX;
  const transport::Recovery::RackPass rule = f.rec.rack_pass(t);  // mark_lost leaves f.rec alone
  // RACK judges nothing before a packet is known delivered, nor a packet sent after the latest
  // one known delivered (deadline UINT64_MAX). First transmissions go out in psn order and resends
  // later still, so from a packet sent once, after that one, every later psn was sent after it
  // too: the pass stops there.
  for (uint32_t psn = f.snd_una; rule.valid && psn < f.next_psn; ++psn) {
    Slot& o = f.slots[psn % kMaxWindow];
    if (o.psn != psn) continue;
    if (!o.resent && o.xmit_ns > rule.xmit_ns) break;
    if (o.state != SlotState::kOut) continue;
    const uint64_t deadline = rule.deadline_ns(o.xmit_ns, psn);
    if (t >= deadline) {
      mark_lost(f, o, &ctr_.retx_rack);
    } else {
      next = std::min(next, deadline);
    }
  }
  f.rec.arm_rack(next);
}

void Simulator::on_timer(uint32_t fid, uint64_t t) {
  Flow& f = flows_[fid];
  if (f.timer_at != t || !f.live) return;
  f.timer_at = UINT64_MAX;
  if (cfg_.transport == Transport::kTcp) {
    tcp_on_timer(fid, t);
    return;
  }
  const transport::Recovery::Fired fired = f.rec.on_timer(t, f.snd_una != f.next_psn);
  if (fired.rack) rack_detect(f, t);
  if (fired.probe) {
    // The newest packet still out: resent without the window cut of a loss.
    for (uint32_t psn = f.next_psn; psn != f.snd_una;) {
      --psn;
      Slot& o = f.slots[psn % kMaxWindow];
      if (o.psn == psn && o.state == SlotState::kOut) {
        o.state = SlotState::kLost;
        f.rtx.push_back(psn);
        ++ctr_.retx_tlp;
        break;
      }
    }
  }
  if (fired.timeout) {
    ++ctr_.rto_events;
    if (!f.rto_open) f.cwnd_before_rto = f.cwnd;
    f.rto_open = true;
    f.rto_end_psn = f.next_psn;
    bool resent = false;
    for (uint32_t psn = f.snd_una; psn < f.next_psn; ++psn) {
      Slot& o = f.slots[psn % kMaxWindow];
      if (o.psn == psn && o.state == SlotState::kOut && t - o.xmit_ns >= fired.rto_ns) {
        mark_lost(f, o, &ctr_.retx_rto);
        o.rto_resent = resent = true;
      }
    }
    Slot& una = f.slots[f.snd_una % kMaxWindow];
    if (!resent && una.psn == f.snd_una && una.state == SlotState::kOut) {
      mark_lost(f, una, &ctr_.retx_rto);
      una.rto_resent = true;
    }
  }
  const uint64_t next = f.rec.next_deadline_ns();
  if (next != UINT64_MAX) arm_timer(fid, next);
  try_send(fid);
}

}  // namespace trim::sim
