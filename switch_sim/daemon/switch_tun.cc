// trim-switch's TUN router mode: the parts of Switch that read, route and write IPv4 packets.
// The loop, the ports, cross traffic and the stats are switch.cc's, shared with UDP mode.
#include <arpa/inet.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>

#include "codec/rng.h"
#include "switch_sim/daemon/switch.h"
#include "switch_sim/daemon/tun.h"

namespace trim::sw::daemon {

namespace {

constexpr uint32_t kTunReadsPerFd = 64;  // per device and turn: no rank starves the others

std::string ip_string(uint32_t ip_be) {
  char buf[INET_ADDRSTRLEN] = {};
  in_addr a{};
  a.s_addr = ip_be;
  inet_ntop(AF_INET, &a, buf, sizeof(buf));
  return buf;
}

}  // namespace

bool Switch::lose() {
  if (cfg_.loss_p <= 0 || uniform_(loss_rng_) >= cfg_.loss_p) return false;
  ++g_.lost;
  return true;
}

Status Switch::open_tuns() {
  const uint32_t base = ntohl(cfg_.tun_base_be);
  for (size_t k = 0; k < cfg_.tun_netns.size(); ++k) {
    TunSpec spec;
    spec.netns = cfg_.tun_netns[k];
    spec.name = cfg_.tun_name;
    spec.addr_be = htonl(base + static_cast<uint32_t>(k));
    spec.mtu = cfg_.tun_mtu;
    spec.txqueuelen = cfg_.tun_txqueuelen;
    Result<sock::Fd> fd = open_tun_in_netns(spec);
    if (!fd) return fd.status();
    tuns_.push_back(std::move(fd).value());
    // Port K is rank K's egress (ports_ index == rank): created here, before any packet.
    Egress& e = egress_for(spec.addr_be, 0);
    e.tun_fd = tuns_.back().get();
    e.name = spec.netns + "/" + ip_string(spec.addr_be);
  }
  return Status::ok();
}

void Switch::receive_tun(int max_batches) {
  std::vector<uint8_t>& buf = rx_bufs_[0];
  for (int turn = 0; turn < max_batches; ++turn) {
    bool more = false;
    for (const sock::Fd& fd : tuns_) {
      uint32_t n = 0;
      for (; n < kTunReadsPerFd; ++n) {
        const ssize_t got = ::read(fd.get(), buf.data(), buf.size());
        if (got <= 0) break;  // EAGAIN (or a transient error): this device is drained
        on_ip_packet(buf.data(), static_cast<uint32_t>(got), clock_ns());
      }
      more = more || n == kTunReadsPerFd;
    }
    if (!more) return;
  }
}

void Switch::on_ip_packet(uint8_t* data, uint32_t len, uint64_t now_ns) {
  ++g_.datagrams;
  Ipv4Info info;
  // The fabric mode never looks into a UDP payload: our packets are plain UDP to it.
  if (parse_ipv4(data, len, &info, !cfg_.fabric.on) != IpError::kOk) {
    ++g_.bad;  // IPv6 (router solicitations and the like), short or corrupt packets
    return;
  }
  ClassCounters& cc = g_.cls[static_cast<int>(info.cls)];
  ++cc.received;
  auto it = port_index_.find((uint64_t{info.dst_be} << 16) | 0);
  if (it == port_index_.end()) {
    ++g_.no_route;  // e.g. a broadcast, or an address outside the ranks'
    return;
  }
  if (lose()) {
    ++cc.lost;
    return;
  }
  Egress& e = *ports_[it->second];
  Packet p = cfg_.fabric.on ? fabric_packet(info, cfg_.fabric) : model_packet(info);
  DscpCounters& dc = g_.dscp[dscp_of(info.tos)];
  if (cfg_.fabric.on) ++dc.received;
  // Flows for transcripts: our connections by cookie, everything else by its 5-tuple.
  const uint64_t key = info.cls == IpClass::kTrimData
                           ? info.cookie
                           : codec::mix64((uint64_t{info.src_be} << 32 | info.dst_be) ^
                                          (uint64_t{info.proto} << 32 | uint64_t{info.sport} << 16 | info.dport));
  p.flow = flow_id(key);
  p.tag = alloc_slot(data, info.total_len);
  if (p.tag == 0) {
    ++g_.pool_exhausted;
    return;
  }
  slot_class_[p.tag - 1] = static_cast<uint8_t>(info.cls);
  slot_tos_[p.tag - 1] = info.tos;
  const Verdict v = e.port.enqueue(p, now_ns);
  if (v == Verdict::kDropped || v == Verdict::kDroppedHeader) {
    ++cc.dropped;
    if (cfg_.fabric.on) ++dc.dropped;
    free_slot(p.tag);
  }
}

bool Switch::send_due_tun(uint64_t now_ns) {
  for (auto& ep : ports_) {
    Egress& e = *ep;
    while (!e.on_link.empty() && e.on_link.front().arrive_ns <= now_ns) {
      const Departure& d = e.on_link.front();
      if (d.packet.tag == 0) {  // cross packets reach the far end and vanish
        e.on_link.pop_front();
        continue;
      }
      const uint32_t idx = static_cast<uint32_t>(d.packet.tag - 1);
      uint8_t* data = slots_[idx].data();
      uint32_t len = slot_len_[idx];
      ClassCounters& cc = g_.cls[slot_class_[idx]];
      bool cut = false;
      if (cfg_.fabric.on) {
        // The trimmed class: remarked, and cut when the model cut it (the IP length after it).
        Ipv4Info info;
        if (d.packet.header_class && parse_ipv4(data, len, &info, false) == IpError::kOk) {
          cut = d.packet.bytes < info.total_len;
          len = fabric_remark(data, info, d.packet.bytes, cfg_.fabric);
          DscpCounters& dc = g_.dscp[dscp_of(slot_tos_[idx])];
          ++(cut ? dc.trimmed : dc.remarked);
        }
      } else if (d.packet.trimmed) {
        // Only our data packets are ever cut (the model trims only what says it may, and cuts
        // to a header only what has one); the model's size is the IP length after the cut.
        Ipv4Info info;
        if (parse_ipv4(data, len, &info) == IpError::kOk && info.cls == IpClass::kTrimData) {
          len = cut_trim_packet(data, info, d.packet.bytes);
          cut = true;
        }
      }
      const ssize_t w = ::write(e.tun_fd, data, len);
      if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == ENOBUFS)) return false;
      if (w < 0) {
        ++e.send_errors;  // e.g. the namespace's device went down: lose it, keep going
      } else {
        ++e.forwarded_packets;
        e.forwarded_bytes += len;
        ++cc.forwarded;
        if (cut) {
          ++e.forwarded_trimmed;
          ++cc.trimmed;
        }
      }
      free_slot(d.packet.tag);
      e.on_link.pop_front();
    }
  }
  return true;
}

}  // namespace trim::sw::daemon
