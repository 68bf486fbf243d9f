#include "switch_sim/daemon/switch.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <poll.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "codec/packet.h"
#include "codec/rng.h"

namespace trim::sw::daemon {

namespace {

constexpr uint32_t kBatch = 64;               // datagrams per recvmmsg / sendmmsg
constexpr uint32_t kRxBufBytes = 65536;       // the largest UDP payload fits
constexpr int kRxBatchesPerTurn = 8;          // then serve departures again: keeps pacing tight
constexpr uint32_t kMaxSlots = 1u << 18;      // payload buffers: far above any sane queue
constexpr uint64_t kCrossMaxLagNs = 10000000;  // a stall longer than 10 ms skips cross instants
constexpr int kSocketBufBytes = 8 << 20;
constexpr uint64_t kNsPerMs = 1000000;

uint64_t port_key(uint32_t ip4_be, uint16_t port_host) { return (uint64_t{ip4_be} << 16) | port_host; }
uint64_t entry_key(const TranscriptEntry& e) { return codec::mix64(e.flow ^ codec::mix64((uint64_t{e.msg} << 32) | e.psn)); }

}  // namespace

Switch::Switch(Config cfg) : cfg_(std::move(cfg)) {
  // Its own stream: --loss-p must not shift the model's (random mode, NDP coin) choices.
  loss_rng_.seed(codec::mix64(cfg_.port.seed ^ 0x6c6f7373ull));
}

uint64_t Switch::clock_ns() const { return sock::now_ns() - t0_ns_; }

Status Switch::open() {
  if (!cfg_.replay.empty()) {
    std::ifstream in(cfg_.replay);
    if (!in) return Status(Code::kBadConfig, fmt::format("--replay {}: cannot open", cfg_.replay));
    TranscriptEntry e;
    while (in >> e.flow >> e.msg >> e.psn) {
      replay_.push_back(e);
      ++replay_left_[entry_key(e)];
    }
    if (!in.eof()) return Status(Code::kBadConfig, fmt::format("--replay {}: expected `flow msg psn` lines", cfg_.replay));
  }
  // The clock starts before any port exists: a port starts at clock_ns() (egress_for).
  t0_ns_ = sock::now_ns();
  if (cfg_.tun()) {
    TRIM_RETURN_IF_ERROR(open_tuns());
  } else {
    sock_ = sock::Fd(::socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    if (!sock_.valid()) return sock::errno_status("socket");
    // Large buffers: a burst of a whole window from several senders must not be lost in the
    // kernel before the model sees it (the model, not the socket, decides what is dropped).
    int buf = kSocketBufBytes;
    (void)setsockopt(sock_.get(), SOL_SOCKET, SO_RCVBUF, &buf, sizeof(buf));
    (void)setsockopt(sock_.get(), SOL_SOCKET, SO_SNDBUF, &buf, sizeof(buf));
    if (::bind(sock_.get(), reinterpret_cast<const sockaddr*>(&cfg_.listen), sizeof(cfg_.listen)) != 0) {
      return sock::errno_status("bind " + cfg_.listen_text);
    }
    sockaddr_in bound{};
    socklen_t blen = sizeof(bound);
    if (getsockname(sock_.get(), reinterpret_cast<sockaddr*>(&bound), &blen) != 0) return sock::errno_status("getsockname");
    bound_port_ = ntohs(bound.sin_port);
    // The fabric mode classes by DSCP: every datagram comes with the TOS it arrived with.
    const int on = 1;
    if (cfg_.fabric.on && setsockopt(sock_.get(), IPPROTO_IP, IP_RECVTOS, &on, sizeof on) != 0) {
      return sock::errno_status("setsockopt(IP_RECVTOS)");
    }
  }

  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGUSR1);
  sigfd_ = sock::Fd(signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC));
  if (!sigfd_.valid()) return sock::errno_status("signalfd");

  rx_bufs_.assign(kBatch, std::vector<uint8_t>(kRxBufBytes));
  for (size_t i = 0; i < cfg_.cross.size(); ++i) {
    const CrossSpec& s = cfg_.cross[i];
    // Stagger sources by a seeded fraction of a period, so two equal sources are not in phase.
    const uint64_t phase = codec::mix64(cfg_.port.seed + i) % 1000000;
    cross_.emplace_back(s, static_cast<uint32_t>(i), 0, phase);
    cross_fixed_port_.push_back(s.all_ports ? SIZE_MAX : SIZE_MAX - 1);
  }
  for (size_t i = 0; i < cross_.size(); ++i) {
    const CrossSpec& s = cfg_.cross[i];
    if (s.all_ports) continue;
    if (cfg_.tun()) {
      // A router's ports are its ranks: the DST host names one, its port means nothing.
      auto it = port_index_.find(port_key(s.dst.sin_addr.s_addr, 0));
      if (it == port_index_.end()) return Status(Code::kBadConfig, fmt::format("--cross {}: no rank has that address", s.text));
      cross_fixed_port_[i] = it->second;
      continue;
    }
    egress_for(s.dst.sin_addr.s_addr, ntohs(s.dst.sin_port));
    cross_fixed_port_[i] = port_index_.at(port_key(s.dst.sin_addr.s_addr, ntohs(s.dst.sin_port)));
  }
  return Status::ok();
}

Egress& Switch::egress_for(uint32_t ip4_be, uint16_t port_host) {
  const uint64_t key = port_key(ip4_be, port_host);
  auto it = port_index_.find(key);
  if (it != port_index_.end()) return *ports_[it->second];
  auto e = std::make_unique<Egress>(sock::make_addr(ip4_be, port_host), cfg_.port);
  e->name = sock::addr_string(ip4_be, port_host);
  if (!replay_.empty()) e->port.set_replay(replay_);
  e->port.record_transcript(!cfg_.transcript_out.empty());
  e->port.advance(clock_ns());
  port_index_.emplace(key, ports_.size());
  ports_.push_back(std::move(e));
  return *ports_.back();
}

uint32_t Switch::flow_id(uint64_t cookie) {
  auto it = flows_.find(cookie);
  if (it != flows_.end()) return it->second;
  const uint32_t id = static_cast<uint32_t>(flows_.size());
  flows_.emplace(cookie, id);
  return id;
}

uint64_t Switch::alloc_slot(const uint8_t* data, uint32_t len) {
  uint32_t idx;
  if (!free_slots_.empty()) {
    idx = free_slots_.back();
    free_slots_.pop_back();
  } else {
    if (slots_.size() >= kMaxSlots) return 0;
    idx = static_cast<uint32_t>(slots_.size());
    slots_.emplace_back();
    slot_len_.push_back(0);
    slot_class_.push_back(0);
    slot_tos_.push_back(0);
  }
  std::vector<uint8_t>& s = slots_[idx];
  if (s.size() < len) s.resize(len);
  std::memcpy(s.data(), data, len);
  slot_len_[idx] = len;
  return uint64_t{idx} + 1;
}

void Switch::free_slot(uint64_t tag) { free_slots_.push_back(static_cast<uint32_t>(tag - 1)); }

void Switch::generate_cross(uint64_t now_ns) {
  for (size_t i = 0; i < cross_.size(); ++i) {
    CrossSource& src = cross_[i];
    if (cross_fixed_port_[i] == SIZE_MAX && ports_.empty()) {
      (void)src.skip_stale(now_ns, 0);  // nothing to load yet: not a stall, not counted
      continue;
    }
    g_.cross_skipped += src.skip_stale(now_ns, kCrossMaxLagNs);
    while (src.next_ns() <= now_ns) {
      const uint64_t at = src.next_ns();
      const uint32_t n = src.count();
      const bool prio = src.spec().priority;
      const Packet p = src.take();
      auto put = [&](Egress& e) {
        for (uint32_t k = 0; k < n; ++k) {
          (void)(prio ? e.port.enqueue_priority(p, at) : e.port.enqueue(p, at));
          ++e.cross_packets;
        }
      };
      if (cross_fixed_port_[i] == SIZE_MAX) {
        for (auto& e : ports_) put(*e);
      } else {
        put(*ports_[cross_fixed_port_[i]]);
      }
    }
  }
}

void Switch::on_fabric_datagram(uint8_t* data, uint32_t len, uint8_t tos, uint64_t now_ns) {
  // Where it goes, and nothing else of our header: the destination stands in for IP routing in
  // UDP mode (little-endian, bytes 44..49; see docs/PROTOCOL.md). No CRC, class or trim point.
  if (len < 50 || codec::is_ctrl_datagram(data, len)) {
    ++g_.bad;
    return;
  }
  const uint32_t dst_ip = static_cast<uint32_t>(data[44]) | (static_cast<uint32_t>(data[45]) << 8) |
                          (static_cast<uint32_t>(data[46]) << 16) | (static_cast<uint32_t>(data[47]) << 24);
  const uint16_t dst_port = static_cast<uint16_t>(data[48] | (data[49] << 8));
  if (dst_ip == 0 || dst_port == 0) {
    ++g_.bad;
    return;
  }
  Egress& e = egress_for(dst_ip, dst_port);
  if (lose()) return;
  Ipv4Info info;
  info.tos = tos;
  info.total_len = len + codec::kIpv4UdpBytes;  // what the IP packet would be
  Packet p = fabric_packet(info, cfg_.fabric);
  p.flow = flow_id(port_key(dst_ip, dst_port));
  DscpCounters& k = g_.dscp[dscp_of(tos)];
  ++k.received;
  p.tag = alloc_slot(data, len);
  if (p.tag == 0) {
    ++g_.pool_exhausted;
    return;
  }
  slot_tos_[p.tag - 1] = tos;
  const Verdict v = e.port.enqueue(p, now_ns);
  if (v == Verdict::kDropped || v == Verdict::kDroppedHeader) {
    ++k.dropped;
    free_slot(p.tag);
  }
}

void Switch::on_datagram(uint8_t* data, uint32_t len, uint64_t now_ns) {
  ++g_.datagrams;
  codec::ParsedPacket pp;
  if (codec::is_ctrl_datagram(data, len)) {
    // ACKs and PINGs go direct; one arriving here is misdirected, never forwarded.
    ++g_.bad;
    ++g_.bad_ctrl;
    return;
  }
  // A header naming no receiver (address or port 0) is as useless as an unparsable one.
  if (codec::parse_packet(data, len, &pp) != codec::PacketError::kOk || pp.hdr.dst_port == 0 || pp.hdr.dst_ip4 == 0) {
    ++g_.bad;
    return;
  }
  Egress& e = egress_for(pp.hdr.dst_ip4, pp.hdr.dst_port);
  if (lose()) return;
  Packet p;
  // The model counts IP packets: what a real link serialises (Ethernet framing left out).
  p.bytes = len + codec::kIpv4UdpBytes;
  p.trimmable = pp.hdr.trimmable() && pp.hdr.trim_bytes > 0 && !pp.trimmed;
  p.plane0_bytes = p.trimmable ? codec::kIpv4UdpBytes + codec::kHeaderBytes + pp.hdr.trim_bytes : 0;
  p.header_bytes = codec::kIpv4UdpBytes + codec::kHeaderBytes;  // a loss notice (--trim-exact)
  p.flow = flow_id(pp.hdr.cookie);
  p.msg = pp.hdr.msg_seq;
  p.psn = pp.hdr.psn;
  p.tag = alloc_slot(data, len);
  if (p.tag == 0) {
    ++g_.pool_exhausted;
    return;
  }
  uint32_t* left = nullptr;
  if (cfg_.port.mode == Mode::kReplay && p.trimmable) {
    auto it = replay_left_.find(entry_key(TranscriptEntry{p.flow, p.msg, p.psn}));
    left = it == replay_left_.end() ? nullptr : &it->second;
    if (left != nullptr && *left == 0) p.trimmable = false;  // spent: this copy passes whole
  }
  const Verdict v = e.port.enqueue(p, now_ns);
  if (left != nullptr && *left > 0 && (v == Verdict::kQueuedHeader || v == Verdict::kDroppedHeader)) --*left;
  if (v == Verdict::kDropped || v == Verdict::kDroppedHeader) free_slot(p.tag);
}

void Switch::receive(int max_batches) {
  mmsghdr msgs[kBatch];
  iovec iov[kBatch];
  alignas(cmsghdr) uint8_t cbuf[kBatch][CMSG_SPACE(sizeof(int))];
  for (int turn = 0; turn < max_batches; ++turn) {
    for (uint32_t i = 0; i < kBatch; ++i) {
      iov[i] = iovec{rx_bufs_[i].data(), rx_bufs_[i].size()};
      msgs[i] = mmsghdr{};
      msgs[i].msg_hdr.msg_iov = &iov[i];
      msgs[i].msg_hdr.msg_iovlen = 1;
      msgs[i].msg_hdr.msg_control = cbuf[i];
      msgs[i].msg_hdr.msg_controllen = sizeof cbuf[i];
    }
    const int n = recvmmsg(sock_.get(), msgs, kBatch, MSG_DONTWAIT, nullptr);
    if (n <= 0) return;  // EAGAIN (or a transient error): back to the loop
    const uint64_t now = clock_ns();
    for (int i = 0; i < n; ++i) {
      // A datagram longer than the buffer is truncated: it fails parsing as any bad one.
      const bool truncated = (msgs[i].msg_hdr.msg_flags & MSG_TRUNC) != 0;
      if (truncated) {
        ++g_.datagrams;
        ++g_.bad;
        continue;
      }
      if (!cfg_.fabric.on) {
        on_datagram(rx_bufs_[i].data(), msgs[i].msg_len, now);
        continue;
      }
      ++g_.datagrams;
      uint8_t tos = 0;
      for (cmsghdr* cm = CMSG_FIRSTHDR(&msgs[i].msg_hdr); cm != nullptr; cm = CMSG_NXTHDR(&msgs[i].msg_hdr, cm)) {
        if (cm->cmsg_level == IPPROTO_IP && cm->cmsg_type == IP_TOS && cm->cmsg_len >= CMSG_LEN(1)) tos = *CMSG_DATA(cm);
      }
      on_fabric_datagram(rx_bufs_[i].data(), msgs[i].msg_len, tos, now);
    }
    if (static_cast<uint32_t>(n) < kBatch) return;
  }
}

void Switch::advance_all(uint64_t now_ns) {
  for (auto& e : ports_) {
    e->port.advance(now_ns);
    std::vector<Departure>& d = e->port.departed();
    for (const Departure& x : d) e->on_link.push_back(x);
    d.clear();
  }
}

bool Switch::send_due(uint64_t now_ns) {
  mmsghdr msgs[kBatch];
  iovec iov[kBatch];
  alignas(cmsghdr) uint8_t cbuf[kBatch][CMSG_SPACE(sizeof(int))];
  bool cut[kBatch];
  for (auto& ep : ports_) {
    Egress& e = *ep;
    while (!e.on_link.empty() && e.on_link.front().arrive_ns <= now_ns) {
      // Cross packets reach the far end and vanish.
      if (e.on_link.front().packet.tag == 0) {
        e.on_link.pop_front();
        continue;
      }
      // A run of due real packets, up to a batch, stopping at the first cross packet.
      uint32_t n = 0;
      for (; n < kBatch && n < e.on_link.size(); ++n) {
        const Departure& d = e.on_link[n];
        if (d.arrive_ns > now_ns || d.packet.tag == 0) break;
        const uint32_t idx = static_cast<uint32_t>(d.packet.tag - 1);
        uint8_t* data = slots_[idx].data();
        uint32_t len = slot_len_[idx];
        cut[n] = false;
        if (cfg_.fabric.on) {
          // Our socket builds fresh IP/UDP headers: the cut and the remark are all there is to do.
          const uint32_t keep = d.packet.bytes > codec::kIpv4UdpBytes ? d.packet.bytes - codec::kIpv4UdpBytes : 0;
          cut[n] = keep < len;
          len = std::min(len, keep);
        } else if (d.packet.trimmed) {
          // The model's size counts IP + UDP; the header itself always survives (a fixed
          // trim size below it would leave nothing the receiver could parse).
          const uint32_t keep = d.packet.bytes > codec::kIpv4UdpBytes ? d.packet.bytes - codec::kIpv4UdpBytes : 0;
          len = std::min(len, std::max(keep, codec::kHeaderBytes));
          codec::mark_trimmed(data);
          cut[n] = true;
        }
        iov[n] = iovec{data, len};
        msgs[n] = mmsghdr{};
        msgs[n].msg_hdr.msg_name = &e.dst;
        msgs[n].msg_hdr.msg_namelen = sizeof(e.dst);
        msgs[n].msg_hdr.msg_iov = &iov[n];
        msgs[n].msg_hdr.msg_iovlen = 1;
        if (cfg_.fabric.on) {
          // The DSCP it came with, or the trimmed one for the trimmed class (ECN kept).
          const uint8_t tos = slot_tos_[idx];
          const int out = d.packet.header_class ? (cfg_.fabric.trimmed_dscp << 2) | (tos & 3) : tos;
          cmsghdr* cm = reinterpret_cast<cmsghdr*>(cbuf[n]);
          cm->cmsg_level = IPPROTO_IP;
          cm->cmsg_type = IP_TOS;
          cm->cmsg_len = CMSG_LEN(sizeof(int));
          std::memcpy(CMSG_DATA(cm), &out, sizeof out);
          msgs[n].msg_hdr.msg_control = cbuf[n];
          msgs[n].msg_hdr.msg_controllen = CMSG_SPACE(sizeof(int));
        }
      }
      const int sent = sendmmsg(sock_.get(), msgs, n, 0);
      uint32_t done = 0;
      if (sent < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == ENOBUFS) return false;
        ++e.send_errors;  // e.g. the receiver's port is gone: lose this packet, keep going
        done = 1;
      } else {
        done = static_cast<uint32_t>(sent);
        for (uint32_t k = 0; k < done; ++k) {
          ++e.forwarded_packets;
          e.forwarded_bytes += iov[k].iov_len;
          if (cut[k]) ++e.forwarded_trimmed;
          const Packet& fp = e.on_link[k].packet;
          if (cfg_.fabric.on && fp.header_class) {
            DscpCounters& dc = g_.dscp[dscp_of(slot_tos_[fp.tag - 1])];
            ++(cut[k] ? dc.trimmed : dc.remarked);
          }
        }
      }
      for (uint32_t k = 0; k < done; ++k) {
        free_slot(e.on_link.front().packet.tag);
        e.on_link.pop_front();
      }
      if (done < n && sent >= 0) return false;  // partial: the socket buffer is full
    }
  }
  return true;
}

uint64_t Switch::next_wake_ns() const {
  uint64_t t = UINT64_MAX;
  for (const auto& e : ports_) {
    t = std::min(t, e->port.next_event_ns());
    if (!e->on_link.empty()) t = std::min(t, e->on_link.front().arrive_ns);
  }
  for (size_t i = 0; i < cross_.size(); ++i) {
    // A source for `all` with no port seen yet has nowhere to go: no reason to wake for it.
    if (cross_fixed_port_[i] == SIZE_MAX && ports_.empty()) continue;
    t = std::min(t, cross_[i].next_ns());
  }
  return t;
}

Status Switch::run() {
  const uint64_t end_ns =
      cfg_.duration_s > 0 ? static_cast<uint64_t>(cfg_.duration_s * 1e9) : UINT64_MAX;
  const uint64_t interval_ns = uint64_t{cfg_.stats_interval_ms} * kNsPerMs;
  uint64_t next_stats_ns = interval_ns > 0 ? interval_ns : UINT64_MAX;
  bool stop = false;
  std::vector<pollfd> fds;
  while (!stop) {
    ++g_.loop_wakeups;
    uint64_t now = clock_ns();
    generate_cross(now);
    if (cfg_.tun()) receive_tun(kRxBatchesPerTurn);
    else receive(kRxBatchesPerTurn);
    now = clock_ns();
    advance_all(now);
    want_pollout_ = cfg_.tun() ? !send_due_tun(now) : !send_due(now);
    if (now >= next_stats_ns) {
      std::printf("%s\n", stats_json("interval", now).c_str());
      std::fflush(stdout);
      while (next_stats_ns <= now) next_stats_ns += interval_ns;
    }
    if (now >= end_ns) break;

    const uint64_t wake = std::min({next_wake_ns(), next_stats_ns, end_ns});
    now = clock_ns();
    timespec ts{0, 0};
    if (wake > now) {
      const uint64_t d = wake - now;
      ts.tv_sec = static_cast<time_t>(d / 1000000000);
      ts.tv_nsec = static_cast<long>(d % 1000000000);
    }
    // The signalfd first, then the packet fds: the UDP socket, or every TUN device.
    const short io_events = static_cast<short>(POLLIN | (want_pollout_ ? POLLOUT : 0));
    fds.assign(1, pollfd{sigfd_.get(), POLLIN, 0});
    if (cfg_.tun()) {
      for (const sock::Fd& t : tuns_) fds.push_back(pollfd{t.get(), io_events, 0});
    } else {
      fds.push_back(pollfd{sock_.get(), io_events, 0});
    }
    const bool forever = wake == UINT64_MAX && !want_pollout_;
    const int r = ppoll(fds.data(), fds.size(), forever ? nullptr : &ts, nullptr);
    if (r < 0 && errno != EINTR) return sock::errno_status("ppoll");
    if (r > 0 && (fds[0].revents & POLLIN) != 0) {
      signalfd_siginfo si;
      while (::read(sigfd_.get(), &si, sizeof(si)) == static_cast<ssize_t>(sizeof(si))) {
        if (si.ssi_signo == SIGUSR1) {
          std::printf("%s\n", stats_json("stats", clock_ns()).c_str());
          std::fflush(stdout);
        } else {
          stop = true;
        }
      }
    }
  }
  std::printf("%s\n", stats_json("final", clock_ns()).c_str());
  std::fflush(stdout);
  return write_transcript();
}

Status Switch::write_transcript() const {
  if (cfg_.transcript_out.empty()) return Status::ok();
  std::ofstream out(cfg_.transcript_out, std::ios::trunc);
  if (!out) return Status(Code::kBadConfig, fmt::format("--transcript-out {}: cannot write", cfg_.transcript_out));
  for (const auto& e : ports_) {
    for (const TranscriptEntry& t : e->port.transcript()) {
      if ((t.flow & kCrossFlowBit) != 0) continue;  // synthetic: not reproducible, not replayed
      out << t.flow << ' ' << t.msg << ' ' << t.psn << '\n';
    }
  }
  out.flush();
  if (!out) return Status(Code::kInternal, fmt::format("--transcript-out {}: write failed", cfg_.transcript_out));
  return Status::ok();
}

std::string Switch::stats_json(const char* event, uint64_t now_ns) const {
  PortCounters tot;
  uint64_t fwd = 0, fwd_bytes = 0, fwd_trimmed = 0, cross = 0, send_err = 0;
  std::string per_port;
  for (const auto& ep : ports_) {
    const Egress& e = *ep;
    const PortCounters& c = e.port.counters();
    tot.add(c);
    fwd += e.forwarded_packets;
    fwd_bytes += e.forwarded_bytes;
    fwd_trimmed += e.forwarded_trimmed;
    cross += e.cross_packets;
    send_err += e.send_errors;
    if (!per_port.empty()) per_port += ',';
    per_port += fmt::format(
        "{{\"dst\":\"{}\",\"received\":{},\"sent\":{},\"trimmed\":{},\"dropped\":{},\"dropped_header\":{},"
        "\"bytes\":{},\"max_queue\":{},\"queue_bytes\":{},\"queue_packets\":{},\"header_queue_bytes\":{},"
        "\"forwarded\":{},\"forwarded_trimmed\":{},\"forwarded_bytes\":{},\"cross\":{},\"send_errors\":{},"
        "\"prio_sent\":{},\"prio_dropped\":{},\"prio_max_queue\":{},\"prio_queue_bytes\":{},\"model\":{}}}",
        e.name, c.received_packets, c.sent_packets, c.trimmed_packets, c.dropped_packets, c.dropped_header_packets,
        c.sent_bytes, c.max_data_queue_bytes, e.port.data_queue_bytes(), e.port.data_queue_packets(),
        e.port.header_queue_bytes(), e.forwarded_packets, e.forwarded_trimmed, e.forwarded_bytes, e.cross_packets,
        e.send_errors, c.prio_sent_packets, c.prio_dropped_packets, c.max_prio_queue_bytes, e.port.prio_queue_bytes(),
        c.to_json(true));
  }
  // TUN mode: flat per-class keys (CLASS_received, ...), so one-level JSON readers find them.
  std::string extra;
  if (cfg_.fabric.on) {
    std::string dscps;
    for (uint32_t d = 0; d < 64; ++d) dscps += cfg_.fabric.trimmable.test(d) ? (dscps.empty() ? "" : ",") + std::to_string(d) : "";
    extra += fmt::format(",\"fabric\":1,\"trim_dscp\":\"{}\",\"trimmed_dscp\":{},\"trim_size\":{},\"trim_l2_bytes\":{},"
                         "\"trimmed_share\":{},\"rewrite\":\"{}\"",
                         dscps, cfg_.fabric.trimmed_dscp, cfg_.fabric.trim_size, cfg_.fabric.l2_bytes,
                         cfg_.fabric.trimmed_share, cfg_.fabric.rewrite_text());
    for (uint32_t d = 0; d < 64; ++d) {
      const DscpCounters& k = g_.dscp[d];
      if (k.received == 0) continue;
      extra += fmt::format(",\"dscp_{0}_received\":{1},\"dscp_{0}_trimmed\":{2},\"dscp_{0}_remarked\":{3},"
                           "\"dscp_{0}_dropped\":{4}",
                           d, k.received, k.trimmed, k.remarked, k.dropped);
    }
  }
  if (cfg_.tun()) {
    extra += fmt::format(",\"no_route\":{}", g_.no_route);
    for (int c = 0; c < static_cast<int>(IpClass::kCount); ++c) {
      const ClassCounters& k = g_.cls[c];
      const char* n = ip_class_name(static_cast<IpClass>(c));
      extra += fmt::format(",\"{0}_received\":{1},\"{0}_forwarded\":{2},\"{0}_trimmed\":{3},\"{0}_dropped\":{4},\"{0}_lost\":{5}",
                           n, k.received, k.forwarded, k.trimmed, k.dropped, k.lost);
    }
  }
  return fmt::format(
      "{{\"event\":\"{}\",\"t_ms\":{:.3f},\"mode\":\"{}\",\"rate_gbps\":{},\"received\":{},\"sent\":{},"
      "\"trimmed\":{},\"dropped\":{},\"dropped_header\":{},\"bytes\":{},\"bad\":{},\"bad_ctrl\":{},"
      "\"max_queue\":{},\"datagrams\":{},\"forwarded\":{},\"forwarded_trimmed\":{},\"forwarded_bytes\":{},"
      "\"cross\":{},\"cross_skipped\":{},\"send_errors\":{},\"pool_exhausted\":{},\"flows\":{},"
      "\"wakeups\":{},\"lost\":{},\"prio_sent\":{},\"prio_dropped\":{},\"prio_max_queue\":{}{},\"ports\":[{}]}}",
      event, static_cast<double>(now_ns) / 1e6, mode_name(cfg_.port.mode), cfg_.port.rate_gbps,
      tot.received_packets, tot.sent_packets, tot.trimmed_packets, tot.dropped_packets, tot.dropped_header_packets,
      tot.sent_bytes, g_.bad, g_.bad_ctrl, tot.max_data_queue_bytes, g_.datagrams, fwd, fwd_trimmed, fwd_bytes, cross,
      g_.cross_skipped, send_err, g_.pool_exhausted, flows_.size(), g_.loop_wakeups, g_.lost, tot.prio_sent_packets,
      tot.prio_dropped_packets, tot.max_prio_queue_bytes, extra, per_port);
}

}  // namespace trim::sw::daemon
