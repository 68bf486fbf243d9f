// The engine's receive side: datagram batches (with the test-only fault injector), control
// packets, data packets and the TCP control frames of each connection.
#include <netinet/in.h>
#include <netinet/udp.h>
#include <sys/epoll.h>
#include <sys/socket.h>

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cstring>

#include "codec/layout.h"
#include "codec/packet.h"
#include "common/log.h"
#include "transport/engine.h"
#include "transport/engine_tx.h"
#include "transport/placed_rx.h"

namespace trim::transport {

namespace {
constexpr int kMaxBatchesPerTurn = 8;  // then timers and transmissions get their turn

// Said once per process, not once per engine.
std::atomic<bool> g_cut_off_said{false}, g_cut_reject_said{false}, g_cut_unverified_said{false};
}  // namespace

Status Engine::open_cut_socket() {
  if (cfg_.rx_cut == EngineConfig::RxCut::kOff) {
    if (!cfg_.rx_cut_off_why.empty() && !g_cut_off_said.exchange(true)) {
      TRIM_INFO("NET/Trim: NCCL_TRIM_RX_CUT=auto: off, {}", cfg_.rx_cut_off_why);
    }
    return Status::ok();
  }
  Result<CutSocket> s = CutSocket::open(ip4_be_, udp_port_);
  if (!s) {
    const std::string why = fmt::format("cannot open the packet socket that receives cut datagrams for {}: {} (it "
                                        "needs CAP_NET_RAW: root, or setcap cap_net_raw+ep on the program)",
                                        addr_string(ip4_be_, udp_port_), s.status().message());
    if (cfg_.rx_cut == EngineConfig::RxCut::kRequired) {
      return Status(Code::kBadConfig, "NCCL_TRIM_RX_CUT=packet: " + why + "; NCCL_TRIM_RX_CUT=auto or off runs without it");
    }
    if (!g_cut_off_said.exchange(true)) {
      TRIM_INFO("NET/Trim: NCCL_TRIM_RX_CUT=auto: off, {}; a trim whose lengths the switch left is then a loss, resent "
                "(docs/DEPLOYMENT.md)",
                why);
    }
    return Status::ok();
  }
  cut_ = std::move(s).value();
  TRIM_INFO("NET/Trim: progress engine for {}: cut datagrams to port {} whose lengths the switch left are read from "
            "a packet socket on {} (NCCL_TRIM_RX_CUT)",
            name_, udp_port_, cut_.ifname().empty() ? std::string("every interface") : cut_.ifname());
  return Status::ok();
}

// The packet socket's frames: each a datagram the kernel drops for its lengths (the filter
// passes nothing else), handed on as the short datagram the UDP socket would have delivered.
bool Engine::rx_cut_batch(uint64_t now, Tx* tx) {
  if (!cut_.valid()) return false;
  mmsghdr msgs[kBatch];
  iovec iov[kBatch];
  bool any = false;
  for (int turn = 0; turn < kMaxBatchesPerTurn; ++turn) {
    for (uint32_t i = 0; i < kBatch; ++i) {
      iov[i] = iovec{rx_bufs_[i].data(), rx_bufs_[i].size()};
      msgs[i] = mmsghdr{};
      msgs[i].msg_hdr.msg_iov = &iov[i];
      msgs[i].msg_hdr.msg_iovlen = 1;
    }
    const int n = recvmmsg(cut_.fd(), msgs, kBatch, MSG_DONTWAIT, nullptr);
    if (n <= 0) break;
    any = true;
    now = now_ns();
    for (int i = 0; i < n; ++i) {
      uint8_t* frame = rx_bufs_[i].data();
      CutFrame f;
      const CutError e = (msgs[i].msg_hdr.msg_flags & MSG_TRUNC) != 0
                             ? CutError::kShort
                             : parse_cut_frame(frame, msgs[i].msg_len, ip4_be_, udp_port_, &f);
      if (e != CutError::kOk) {
        ++cut_rejected_;
        global_stats().cut_rejected.fetch_add(1, std::memory_order_relaxed);
        if (!g_cut_reject_said.exchange(true)) {
          TRIM_WARN("NET/Trim: the packet socket passed a frame that is no cut datagram of ours ({}, {} bytes): "
                    "ignored, counted as cut_rejected, warned once",
                    (msgs[i].msg_hdr.msg_flags & MSG_TRUNC) != 0 ? "larger than the buffer" : cut_error_name(e),
                    msgs[i].msg_len);
        }
        continue;
      }
      ++cut_received_;
      global_stats().cut_received.fetch_add(1, std::memory_order_relaxed);
      const size_t at = static_cast<size_t>(f.payload - frame);  // the UDP payload, in our (mutable) buffer
      deliver(Datagram{frame + at, f.payload_bytes, f.from, f.tos, true}, now, tx);
    }
    release_held(now, tx);
    if (n < static_cast<int>(kBatch)) break;
  }
  return any;
}

bool Engine::from_peer(const Conn* c, const sockaddr_in& from, bool data) const {
  auto same = [](const sockaddr_in& a, const sockaddr_in& b) {
    return a.sin_addr.s_addr == b.sin_addr.s_addr && a.sin_port == b.sin_port;
  };
  return same(from, c->peer_udp) || (data && cfg_.has_switch && same(from, cfg_.switch_addr));
}

namespace {

// A datagram's GRO segment size (its length when not coalesced) and TOS byte, from its cmsgs.
void read_cmsgs(msghdr* mh, bool gro, uint32_t len, uint32_t* seg, uint8_t* tos) {
  *seg = len;
  *tos = 0;
  for (cmsghdr* cm = CMSG_FIRSTHDR(mh); cm != nullptr; cm = CMSG_NXTHDR(mh, cm)) {
    if (gro && cm->cmsg_level == SOL_UDP && cm->cmsg_type == UDP_GRO) {
      int gso_size = 0;
      std::memcpy(&gso_size, CMSG_DATA(cm), sizeof gso_size);
      if (gso_size > 0) *seg = static_cast<uint32_t>(gso_size);
    } else if (cm->cmsg_level == IPPROTO_IP && cm->cmsg_type == IP_TOS && cm->cmsg_len >= CMSG_LEN(1)) {
      *tos = *CMSG_DATA(cm);
    }
  }
  if (*seg < len) global_stats().gro_batches.fetch_add(1, std::memory_order_relaxed);
}

using CmsgSpace = uint8_t[CMSG_SPACE(sizeof(int)) + CMSG_SPACE(sizeof(int))];  // UDP_GRO, IP_TOS

// A wrong guess that moved this much back ends a turn's placed reads: the batched reads follow.
constexpr size_t kPlacedMissStopBytes = 1024;

}  // namespace

Engine::Placed Engine::rx_placed(uint64_t now, Tx* tx, bool* any) {
  sockaddr_in from{};
  alignas(cmsghdr) CmsgSpace cbuf;
  uint8_t* side = rx_bufs_[0].data();
  for (uint32_t n = 0; n < kBatch; ++n) {
    auto it = recv_by_cookie_.find(expecting_cookie_);
    Conn* c = it == recv_by_cookie_.end() || it->second->dead ? nullptr : it->second;
    if (c == nullptr || !c->recv->in_place_stream()) return n == 0 ? Placed::kNone : Placed::kStopped;
    // Between two messages (the next one's first packet tells where it goes) a datagram is
    // read alone too, so that the packets after it are placed again at once.
    const bool expecting = c->recv->expect(&expectation_, kMaxGsoBytes);
    if (!expecting) expectation_.slots = 0;
    PlacedRead r(expectation_, side, rx_bufs_[0].size());
    msghdr mh{};
    mh.msg_name = &from;
    mh.msg_namelen = sizeof from;
    mh.msg_iov = r.iov();
    mh.msg_iovlen = r.iovlen();
    mh.msg_control = cbuf;
    mh.msg_controllen = sizeof cbuf;
    const ssize_t got = recvmsg(udp_.get(), &mh, MSG_DONTWAIT);
    if (got < 0) return errno == EAGAIN || errno == EWOULDBLOCK ? Placed::kDrained : Placed::kStopped;
    *any = true;
    now = now_ns();
    if ((mh.msg_flags & MSG_TRUNC) != 0 || mh.msg_namelen != sizeof(sockaddr_in)) {
      ++global_stats().malformed;  // what it left in expected slots fills none of them
      continue;
    }
    const uint32_t len = static_cast<uint32_t>(got);
    uint32_t seg = len;
    uint8_t tos = 0;
    read_cmsgs(&mh, gro_, len, &seg, &tos);
    const uint32_t placed = r.settle(len, seg, expecting && from_peer(c, from, true));
    if (placed > 0) global_stats().placed_packets.fetch_add(placed, std::memory_order_relaxed);
    // Placed packets first, in the datagram's order; every byte of the rest is in `side` now.
    for (uint32_t k = 0; k < placed; ++k) {
      const codec::InPlaceSlot& s = expectation_.slot[k];
      deliver(Datagram{side + static_cast<size_t>(k) * seg, codec::kHeaderBytes + s.bytes, from, tos, false, s.dst}, now,
              tx);
    }
    for (size_t off = static_cast<size_t>(placed) * seg; off < len; off += seg) {
      deliver(Datagram{side + off, std::min<size_t>(seg, len - off), from, tos}, now, tx);
    }
    release_held(now, tx);
    if (expecting && static_cast<size_t>(placed) * seg < len) {
      global_stats().placed_misses.fetch_add(1, std::memory_order_relaxed);
      if (r.moved_bytes() >= kPlacedMissStopBytes) return Placed::kStopped;
    }
  }
  return Placed::kBudget;
}

bool Engine::rx_batch(uint64_t now, Tx* tx) {
  mmsghdr msgs[kBatch];
  iovec iov[kBatch];
  sockaddr_in from[kBatch];
  alignas(cmsghdr) CmsgSpace cbuf[kBatch];
  bool any = false;
  const Placed placed = rx_placed(now, tx, &any);
  const bool batched = placed == Placed::kNone || placed == Placed::kStopped;
  for (int turn = 0; batched && turn < kMaxBatchesPerTurn; ++turn) {
    for (uint32_t i = 0; i < kBatch; ++i) {
      iov[i] = iovec{rx_bufs_[i].data(), rx_bufs_[i].size()};
      msgs[i] = mmsghdr{};
      msgs[i].msg_hdr.msg_name = &from[i];
      msgs[i].msg_hdr.msg_namelen = sizeof(sockaddr_in);
      msgs[i].msg_hdr.msg_iov = &iov[i];
      msgs[i].msg_hdr.msg_iovlen = 1;
      msgs[i].msg_hdr.msg_control = cbuf[i];
      msgs[i].msg_hdr.msg_controllen = sizeof cbuf[i];
    }
    const int n = recvmmsg(udp_.get(), msgs, kBatch, MSG_DONTWAIT, nullptr);
    if (n <= 0) break;
    any = true;
    // Stamp what was just read with the time it was read, not the turn's start: this process
    // may have been stopped in between, and a stale stamp would make a peer that went on
    // sending look silent since then.
    now = now_ns();
    for (int i = 0; i < n; ++i) {
      if ((msgs[i].msg_hdr.msg_flags & MSG_TRUNC) != 0 || msgs[i].msg_hdr.msg_namelen != sizeof(sockaddr_in)) {
        ++global_stats().malformed;
        continue;
      }
      // A GRO batch is a run of datagrams of one size (the last may be shorter), back to back,
      // and of one TOS (GRO never merges packets whose IP headers differ in it).
      const uint32_t len = msgs[i].msg_len;
      uint32_t seg = len;
      uint8_t tos = 0;
      read_cmsgs(&msgs[i].msg_hdr, gro_, len, &seg, &tos);
      Datagram d{rx_bufs_[i].data(), 0, from[i], tos};
      for (uint32_t off = 0; off < len; off += seg) {
        d.data = rx_bufs_[i].data() + off;
        d.len = std::min(seg, len - off);
        deliver(d, now, tx);
      }
    }
    release_held(now, tx);  // a packet held back is released at the end of its batch at the latest
    if (n < static_cast<int>(kBatch)) break;
  }
  any |= rx_cut_batch(now, tx);
  for (Conn* c : conns_) {
    if (c->ack_due && c->recv) {
      tx->bind(c);
      c->recv->flush_ack(tx);
    }
    c->ack_due = false;
  }
  return any;
}

void Engine::dispatch(const Datagram& d, uint64_t now, Tx* tx) {
  if (is_ctrl(d.data, d.len)) {
    on_ctrl(d, now, tx);
  } else {
    on_data(d, now, tx);
  }
}

void Engine::release_held(uint64_t now, Tx* tx) {
  if (!holding_) return;
  holding_ = false;
  std::vector<uint8_t> held;
  held.swap(held_);
  dispatch(Datagram{held.data(), held.size(), held_from_, held_tos_, held_cut_}, now, tx);
  held_.swap(held);  // keep the buffer's capacity
}

// Test-only faults, applied as a lossy, reordering network before the packet reaches us.
// By reference: a Datagram rebuilt on the stack per packet cost a store-forwarding stall.
void Engine::deliver(const Datagram& in, uint64_t now, Tx* tx) {
  if (!faults_) {
    dispatch(in, now, tx);
    return;
  }
  Datagram d = in;  // a trim below shortens it
  if (coin() < cfg_.drop) {
    ++global_stats().injected_drops;
    return;
  }
  if (!is_ctrl(d.data, d.len) && cfg_.trim > 0 && coin() < cfg_.trim) {
    codec::ParsedPacket p;
    if (codec::parse_packet_at(d.data, payload_of(d), d.len, &p) == codec::PacketError::kOk && !p.trimmed) {
      codec::mark_trimmed(d.data);  // what a switch does: flag, then cut at the trim point
      d.len = codec::kHeaderBytes + p.hdr.trim_bytes;
      ++global_stats().injected_trims;
    }
  }
  if (!holding_ && cfg_.reorder > 0 && coin() < cfg_.reorder) {
    copy_datagram(d, &held_);
    held_from_ = d.from;
    held_tos_ = d.tos;
    held_cut_ = d.cut;
    holding_ = true;
    return;
  }
  const bool twice = cfg_.dup > 0 && coin() < cfg_.dup;
  std::vector<uint8_t> copy;
  if (twice) copy_datagram(d, &copy);
  dispatch(d, now, tx);
  if (twice) dispatch(Datagram{copy.data(), copy.size(), d.from, d.tos, d.cut}, now, tx);
  release_held(now, tx);  // the held packet now arrives behind this one
}

void Engine::copy_datagram(const Datagram& d, std::vector<uint8_t>* out) {
  if (d.payload == nullptr || d.len <= codec::kHeaderBytes) {
    out->assign(d.data, d.data + d.len);
    return;
  }
  out->assign(d.data, d.data + codec::kHeaderBytes);
  out->insert(out->end(), d.payload, d.payload + (d.len - codec::kHeaderBytes));
}

void Engine::on_ctrl(const Datagram& d, uint64_t now, Tx* tx) {
  CtrlPacket p;
  if (parse_ctrl(d.data, d.len, &p) != CtrlError::kOk) {
    ++global_stats().malformed;
    return;
  }
  auto& map = p.to == Role::kSend ? send_by_cookie_ : recv_by_cookie_;
  auto it = map.find(p.cookie);
  if (it == map.end()) {
    ++global_stats().unknown_conn;
    return;
  }
  Conn* c = it->second;
  if (!from_peer(c, d.from, false)) {
    ++global_stats().wrong_source;
    return;
  }
  c->last_heard_ns = now;
  if (c->dead) return;
  switch (p.type) {
    case CtrlType::kAck:
      if (c->send) c->send->on_ack(p, now);
      break;
    case CtrlType::kPing: {
      CtrlPacket pong;
      pong.type = CtrlType::kPong;
      pong.to = p.to == Role::kSend ? Role::kRecv : Role::kSend;
      pong.cookie = p.cookie;
      pong.timestamp_ns = p.timestamp_ns;
      tx->bind(c);
      tx->ctrl(pong);
      break;
    }
    case CtrlType::kPong: break;  // hearing it is the point
  }
}

void Engine::on_data(const Datagram& d, uint64_t now, Tx* tx) {
  codec::ParsedPacket p;
  // A switch that trims by DSCP rewrites it: that is how it says so (a cut is also seen in the
  // packet's length, whatever its DSCP). The ECN bits are the network's, not the class's.
  const bool marked = (d.tos & ~3u) == cfg_.tos_trimmed;
  const codec::PacketError e = codec::parse_packet_at(d.data, payload_of(d), d.len, &p);
  if (e != codec::PacketError::kOk) {
    // Cut inside our header (a trim size too small for it): nothing in it can be trusted or
    // used, not even the psn. A loss, which recovery repairs; counted apart from garbage.
    const bool ours = d.len >= 2 && d.data[0] == (codec::kMagic & 0xff) && d.data[1] == (codec::kMagic >> 8);
    if (e == codec::PacketError::kTruncatedHeader && (ours || marked)) {
      if (global_stats().header_cuts.fetch_add(1, std::memory_order_relaxed) == 0) {
        TRIM_WARN("NET/Trim: a packet arrived cut inside our {}-byte header ({} bytes{}): a trim size below {} "
                  "bytes (frame) leaves nothing usable, so every such trim is a loss to resend "
                  "(docs/DEPLOYMENT.md); counted as header_cuts, warned once",
                  codec::kHeaderBytes, d.len, marked ? ", trimmed DSCP" : "",
                  codec::kFabricL2Bytes + codec::kIpv4UdpBytes + codec::kHeaderBytes);
      }
    } else {
      ++global_stats().malformed;
    }
    return;
  }
  // A packet from the packet socket came in before netfilter, with no UDP checksum the kernel
  // verified: its check points alone vouch for it (whatever its flags claim), and one without
  // them is refused. Either refusal is counted as cut_rejected (and a failed point as
  // bad_payload_check), before the packet can reach a connection.
  if (d.cut) {
    bool newly_failed = false;
    const CutCheck check = verify_cut_packet(d.data, d.len, &p, &newly_failed);
    if (check != CutCheck::kOk) {
      if (newly_failed) codec::packet_error_counters().add(codec::PacketError::kBadPayloadCheck);
      ++cut_rejected_;
      global_stats().cut_rejected.fetch_add(1, std::memory_order_relaxed);
      if (!g_cut_unverified_said.exchange(true)) {
        TRIM_WARN("NET/Trim: a packet read from the packet socket (NCCL_TRIM_RX_CUT) has {} ({} bytes, psn {}): "
                  "nothing else vouches for a cut datagram, so it is dropped, counted as cut_rejected, warned once",
                  cut_check_name(check), d.len, p.hdr.psn);
      }
      return;
    }
  }
  p.marked_trimmed = marked;
  auto it = recv_by_cookie_.find(p.hdr.cookie);
  if (it == recv_by_cookie_.end()) {
    ++global_stats().unknown_conn;
    return;
  }
  Conn* c = it->second;
  if (!from_peer(c, d.from, true)) {
    ++global_stats().wrong_source;
    return;
  }
  c->last_heard_ns = now;
  if (c->dead) return;
  if (d.cut) ++c->recv->counters().cut_received;
  c->recv->on_data(p, now);
  if (p.hdr.scheme == codec::Scheme::kNone) expecting_cookie_ = p.hdr.cookie;  // its next packets may be placed
  c->ack_due = true;
  if (c->recv->reports_full()) {  // the ACK's trim reports are full: send it before the next cut
    tx->bind(c);
    c->recv->flush_ack(tx);
  }
}

void Engine::read_tcp(Conn* c, uint64_t now) {
  (void)now;
  if (!c->tcp_open) return;
  for (;;) {
    Result<bool> r = read_some(c->tcp.get(), c->tcp_buf, kFrameBytes, &c->tcp_have);
    if (!r) {
      c->tcp_open = false;
      epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, c->tcp.get(), nullptr);
      c->ctrl.abandon();
      c->ctrl_watched = false;
      if (!c->fin_received) {
        declare_dead(c, Status(Code::kUnavailable,
                               fmt::format("peer {} closed the control connection without saying goodbye "
                                           "(process exited or crashed?): {}",
                                           c->peer_name, r.status().message())));
      }
      return;
    }
    if (!r.value()) return;
    c->tcp_have = 0;
    Frame f;
    Status st = parse_frame(c->tcp_buf, &f);
    if (!st.is_ok()) {
      ++global_stats().malformed;
      declare_dead(c, st);
      return;
    }
    on_frame(c, f);
  }
}

void Engine::on_tcp_event(Conn* c, uint32_t events) {
  if ((events & EPOLLOUT) != 0) {
    c->ctrl.drain(c->tcp.get());
    sync_ctrl(c, now_ns());  // nothing waits any more: stop watching
  }
  if ((events & ~uint32_t{EPOLLOUT}) != 0) read_tcp(c, now_ns());
}

void Engine::sync_ctrl(Conn* c, uint64_t now) {
  CtrlOut& out = c->ctrl;
  if (!c->tcp_open) return;
  auto stalled = [&] { return out.waiting() && now > out.progress_ns() && now - out.progress_ns() > cfg_.timeout_ns; };
  // This process may itself have been stopped meanwhile (SIGSTOP, a preempted VM): the peer
  // may have read since, so the socket is asked before the peer is blamed.
  if (stalled()) out.drain(c->tcp.get());
  if (out.waiting() && (out.failed() || stalled())) {
    const std::string why =
        out.failed() ? out.why()
                     : fmt::format("{} control frames have waited {} ms for the peer to read its control connection "
                                   "(NCCL_TRIM_TIMEOUT_MS={})",
                                   out.queued_frames(), (now - out.progress_ns()) / 1'000'000, cfg_.timeout_ns / 1'000'000);
    out.abandon();  // the stream may have a hole now: nothing more is written, not even a FIN
    if (!c->dead) {
      global_stats().ctrl_stalled_conns.fetch_add(1, std::memory_order_relaxed);
      declare_dead(c, Status(Code::kUnavailable, fmt::format("peer {}: {}: declared dead (counter ctrl_stalled_conns)",
                                                             c->peer_name, why)));
    }
  }
  const bool watch = out.waiting();
  if (watch == c->ctrl_watched) return;
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLRDHUP | (watch ? uint32_t{EPOLLOUT} : 0u);
  ev.data.ptr = c;
  if (epoll_ctl(epoll_.get(), EPOLL_CTL_MOD, c->tcp.get(), &ev) != 0) {
    // Not expected; what waits then leaves with the next frame or stalls into the timeout.
    TRIM_WARN("NET/Trim: epoll_ctl(EPOLLOUT, control connection) failed: {}", std::strerror(errno));
    return;
  }
  c->ctrl_watched = watch;
}

void Engine::on_frame(Conn* c, const Frame& f) {
  if (c->dead) return;
  switch (f.type) {
    case FrameType::kCts:
      if (c->send) c->send->on_cts(f.seq, f.value);
      break;
    case FrameType::kEmpty:
      if (c->recv) c->recv->on_empty(f.seq);
      break;
    case FrameType::kFin: {
      c->fin_received = true;
      const Status closed(Code::kUnavailable, fmt::format("peer {} closed the connection", c->peer_name));
      if (c->send) c->send->on_peer_fin(f.value);
      if (c->recv) c->recv->fail_all(closed);
      c->dead_status = closed;
      c->dead.store(true, std::memory_order_release);
      break;
    }
    case FrameType::kHelloAck: break;  // handshake only; parse_frame never yields it
  }
}

}  // namespace trim::transport
