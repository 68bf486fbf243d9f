#include "switch_sim/ipv4.h"

#include <algorithm>

#include "codec/packet.h"

namespace trim::sw {

namespace {

constexpr uint8_t kProtoTcp = 6;
constexpr uint8_t kProtoUdp = 17;
constexpr uint32_t kUdpBytes = 8;

uint16_t be16(const uint8_t* p) { return static_cast<uint16_t>((p[0] << 8) | p[1]); }
uint32_t raw32(const uint8_t* p) {  // as stored: the value stays in network byte order
  uint32_t v;
  __builtin_memcpy(&v, p, 4);
  return v;
}
void put_be16(uint8_t* p, uint32_t v) {
  p[0] = static_cast<uint8_t>(v >> 8);
  p[1] = static_cast<uint8_t>(v);
}

}  // namespace

const char* ip_class_name(IpClass c) {
  switch (c) {
    case IpClass::kTrimData: return "trim";
    case IpClass::kTrimCtrl: return "trimctl";
    case IpClass::kUdp: return "udp";
    case IpClass::kTcp: return "tcp";
    case IpClass::kOther: return "other";
    case IpClass::kCount: break;
  }
  return "?";
}

uint16_t ipv4_header_checksum(const uint8_t* hdr, uint32_t ihl_bytes) {
  uint32_t sum = 0;
  for (uint32_t i = 0; i + 1 < ihl_bytes; i += 2) {
    if (i == 10) continue;  // the checksum field itself counts as zero
    sum += be16(hdr + i);
  }
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  return static_cast<uint16_t>(~sum & 0xffff);
}

IpError parse_ipv4(const uint8_t* pkt, uint32_t len, Ipv4Info* out, bool ours) {
  *out = Ipv4Info{};
  if (len < 20) return IpError::kShort;
  if ((pkt[0] >> 4) != 4) return IpError::kNotIpv4;
  const uint32_t ihl = (pkt[0] & 0x0fu) * 4;
  const uint32_t total = be16(pkt + 2);
  if (ihl < 20) return IpError::kBadHeader;
  if (ihl > len || total > len) return IpError::kShort;
  if (total < ihl) return IpError::kBadHeader;
  if (ipv4_header_checksum(pkt, ihl) != be16(pkt + 10)) return IpError::kBadChecksum;
  out->ihl_bytes = ihl;
  out->tos = pkt[1];
  out->total_len = total;
  out->proto = pkt[9];
  out->src_be = raw32(pkt + 12);
  out->dst_be = raw32(pkt + 16);
  // A fragment (MF set or an offset) cannot be cut: the UDP length covers the whole datagram.
  const bool fragment = (be16(pkt + 6) & 0x3fff) != 0;
  if (fragment) return IpError::kOk;  // kOther
  const uint8_t* l4 = pkt + ihl;
  const uint32_t l4_len = total - ihl;
  if (out->proto == kProtoTcp) {
    if (l4_len < 20) return IpError::kBadHeader;
    out->cls = IpClass::kTcp;
    out->sport = be16(l4);
    out->dport = be16(l4 + 2);
    return IpError::kOk;
  }
  if (out->proto != kProtoUdp) return IpError::kOk;
  if (l4_len < kUdpBytes || be16(l4 + 4) != l4_len) return IpError::kBadHeader;
  out->cls = IpClass::kUdp;
  out->sport = be16(l4);
  out->dport = be16(l4 + 2);
  if (!ours) return IpError::kOk;
  const uint8_t* payload = l4 + kUdpBytes;
  const uint32_t payload_len = l4_len - kUdpBytes;
  if (codec::is_ctrl_datagram(payload, payload_len)) {
    out->cls = IpClass::kTrimCtrl;
    return IpError::kOk;
  }
  // Only a packet whose header validates (magic, version, CRC, fields) is ours; anything else
  // that happens to start with 'T' 'R' stays plain UDP and is never cut.
  codec::ParsedPacket pp;
  if (payload_len < codec::kHeaderBytes || payload[0] != (codec::kMagic & 0xff) || payload[1] != (codec::kMagic >> 8) ||
      codec::parse_packet(payload, payload_len, &pp) != codec::PacketError::kOk) {
    return IpError::kOk;
  }
  out->cls = IpClass::kTrimData;
  out->already_trimmed = pp.trimmed;
  out->trimmable = pp.hdr.trimmable() && pp.hdr.trim_bytes > 0 && !pp.trimmed;
  out->header_ip_bytes = ihl + kUdpBytes + codec::kHeaderBytes;
  out->plane0_ip_bytes = out->trimmable ? out->header_ip_bytes + pp.hdr.trim_bytes : 0;
  out->cookie = pp.hdr.cookie;
  out->msg = pp.hdr.msg_seq;
  out->psn = pp.hdr.psn;
  return IpError::kOk;
}

Packet model_packet(const Ipv4Info& info) {
  Packet p;
  p.bytes = info.total_len;
  if (info.cls == IpClass::kTrimData) {
    p.trimmable = info.trimmable;
    p.plane0_bytes = info.plane0_ip_bytes;
    // A bare header is a loss notice (--trim-exact): only for our packets; TCP and other UDP
    // keep header_bytes 0, so a full queue tail-drops them.
    p.header_bytes = info.header_ip_bytes;
    // Already cut upstream: the model sends it on in the header class (port.cc).
    p.trimmed = info.already_trimmed;
    p.msg = info.msg;
    p.psn = info.psn;
  }
  return p;
}

uint32_t cut_trim_packet(uint8_t* pkt, const Ipv4Info& info, uint32_t new_ip_len) {
  const uint32_t len = std::min(info.total_len, std::max(new_ip_len, info.header_ip_bytes));
  uint8_t* udp = pkt + info.ihl_bytes;
  codec::mark_trimmed(udp + kUdpBytes);
  put_be16(pkt + 2, len);
  put_be16(pkt + 10, 0);
  put_be16(pkt + 10, ipv4_header_checksum(pkt, info.ihl_bytes));
  put_be16(udp + 4, len - info.ihl_bytes);
  put_be16(udp + 6, 0);
  return len;
}

}  // namespace trim::sw
