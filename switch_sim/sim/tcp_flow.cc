// --transport tcp: the simulator's flows driven by the TCP-like sender and receiver of tcp.h
// instead of our transport. Packets, ports, ACK delays and workloads are the same as for our
// transport (endpoints.cc, workload.cc): a segment is one packet of the same size (the same
// 108 bytes of headers, so both carry the same payload), and a message of the workload is the
// range of segments it was cut into. What changes is the endpoints' rules: the receiver ACKs
// cumulatively and hands messages over in order only (a hole holds back every message after
// it), and the sender recovers losses as tcp.h says.
#include "switch_sim/sim/sim.h"

namespace trim::sim {

void Simulator::tcp_new_flow(uint32_t fid) {
  if (tcp_.size() <= fid) tcp_.resize(fid + 1);
  TcpConfig c;
  c.min_rto_ns = cfg_.rto_ns;
  c.max_window = kMaxWindow;
  c.rack = cfg_.tcp_rack;
  // Linux takes an RTT sample from the handshake: the path's unloaded round trip.
  c.handshake_rtt_ns = 2 * flows_[fid].ack_delay_ns;
  c.max_rto_ns = std::min<uint64_t>(c.max_rto_ns, cfg_.max_sim_ns);
  TcpFlow& t = tcp_[fid];
  t.snd.reset(c);
  t.rcv.reset(kMaxWindow);
  t.rcv_msg = 0;
}

void Simulator::tcp_try_send(uint32_t fid) {
  Flow& f = flows_[fid];
  TcpSender& snd = tcp_[fid].snd;
  for (;;) {
    // new_packet_ready only when a new segment could go: it may queue a pacing wake-up.
    const TcpSender::Next probe = snd.next(false);
    const TcpSender::Next n = probe.send ? probe : snd.next(new_packet_ready(fid));
    if (!n.send) break;
    send_packet(fid, n.retx ? n.seq : take_new_packet(f), n.retx);
  }
  f.snd_una = snd.snd_una();
}

void Simulator::tcp_deliver(PktState& p, uint64_t t) {
  const uint32_t fid = p.flow();
  Flow& f = flows_[fid];
  TcpFlow& tf = tcp_[fid];
  const uint32_t before = tf.rcv.rcv_nxt();
  p.dup = !tf.rcv.on_segment(p.pkt.psn);
  p.cum_ack = tf.rcv.rcv_nxt();
  if (p.dup) {
    ++ctr_.duplicates;
    return;
  }
  if (p.pkt.msg < f.msgs.size() && f.msgs[p.pkt.msg].trimmable && f.kind != FlowKind::kBgConstant &&
      f.kind != FlowKind::kBgBursty) {
    ++ctr_.rs_packets;  // never trimmed (--mode drop): counted so rs_packets compares across runs
  }
  // Read before any hand-over: one may send packets, and growing the pool moves `p`.
  const uint32_t rcv_nxt = p.cum_ack;
  if (rcv_nxt == before) return;  // out of order: held until the hole is filled
  // The stream moved on: every message now wholly below rcv_nxt is handed over, in order.
  while (tf.rcv_msg < f.msgs.size()) {
    Msg& m = f.msgs[tf.rcv_msg];
    if (rcv_nxt - m.first_psn < m.packets) break;  // rcv_nxt <= its last segment
    m.received = m.packets;
    on_msg_complete(fid, tf.rcv_msg++, t);
  }
}

void Simulator::tcp_on_ack(const PktState& p, uint64_t t) {
  const uint32_t fid = p.flow();
  TcpSender& snd = tcp_[fid].snd;
  const uint64_t sack_before = snd.sack_marks(), fr_before = snd.fast_recoveries();
  snd.on_ack(p.cum_ack, p.pkt.psn, p.dup, t);
  ctr_.retx_rack += snd.sack_marks() - sack_before;
  ctr_.tcp_fast_recoveries += snd.fast_recoveries() - fr_before;
  if (snd.next_deadline_ns() != 0) arm_timer(fid, snd.next_deadline_ns());
  tcp_try_send(fid);
  recycle_if_finished(fid);
}

void Simulator::tcp_on_timer(uint32_t fid, uint64_t t) {
  TcpSender& snd = tcp_[fid].snd;
  const uint64_t marks_before = snd.rto_marks();
  if (snd.on_timer(t)) {
    ++ctr_.rto_events;
    ctr_.retx_rto += snd.rto_marks() - marks_before;
  }
  if (snd.next_deadline_ns() != 0) arm_timer(fid, snd.next_deadline_ns());
  tcp_try_send(fid);
}

}  // namespace trim::sim
