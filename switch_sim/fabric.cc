#include "switch_sim/fabric.h"

#include <fmt/format.h>

#include <algorithm>

namespace trim::sw {

namespace {

constexpr uint8_t kProtoUdp = 17;
constexpr uint32_t kUdpBytes = 8;

uint16_t be16(const uint8_t* p) { return static_cast<uint16_t>((p[0] << 8) | p[1]); }
void put_be16(uint8_t* p, uint32_t v) {
  p[0] = static_cast<uint8_t>(v >> 8);
  p[1] = static_cast<uint8_t>(v);
}

}  // namespace

std::string FabricConfig::rewrite_text() const {
  const char* csum = udp_csum == UdpCsum::kZero ? "zero" : udp_csum == UdpCsum::kKeep ? "keep" : "recompute";
  return fmt::format("ip-length {}, udp-length {}, udp-checksum {}", fix_ip ? "rewrite" : "keep",
                     udp_len == UdpLen::kRewrite ? "rewrite" : "keep", csum);
}

Packet fabric_packet(const Ipv4Info& info, const FabricConfig& f) {
  Packet p;
  p.bytes = info.total_len;
  const uint8_t dscp = dscp_of(info.tos);
  p.trimmable = f.trimmable.test(dscp);
  // Trimmed upstream: the trimmed DSCP maps to the trimmed class at every hop.
  p.trimmed = dscp == f.trimmed_dscp;
  return p;
}

uint16_t udp_checksum(const uint8_t* pkt, uint32_t ihl, uint32_t udp_len) {
  uint64_t sum = 0;
  sum += be16(pkt + 12) + be16(pkt + 14) + be16(pkt + 16) + be16(pkt + 18);  // addresses
  sum += kProtoUdp + udp_len;
  const uint8_t* u = pkt + ihl;
  for (uint32_t i = 0; i + 1 < udp_len; i += 2) {
    if (i == 6) continue;  // the checksum field counts as zero
    sum += be16(u + i);
  }
  if (udp_len % 2 == 1) sum += static_cast<uint32_t>(u[udp_len - 1]) << 8;
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  const uint16_t c = static_cast<uint16_t>(~sum & 0xffff);
  return c == 0 ? 0xffff : c;  // 0 means "no checksum" in UDP over IPv4
}

uint32_t fabric_remark(uint8_t* pkt, const Ipv4Info& info, uint32_t ip_len, const FabricConfig& f) {
  const uint32_t len = std::min(info.total_len, std::max(ip_len, info.ihl_bytes));
  const bool cut = len < info.total_len;
  pkt[1] = static_cast<uint8_t>((f.trimmed_dscp << 2) | (pkt[1] & 3));
  if (cut && f.fix_ip) put_be16(pkt + 2, len);
  if (cut && info.proto == kProtoUdp && len >= info.ihl_bytes + kUdpBytes) {
    uint8_t* udp = pkt + info.ihl_bytes;
    const uint32_t udp_len = len - info.ihl_bytes;
    if (f.udp_len == FabricConfig::UdpLen::kRewrite) put_be16(udp + 4, udp_len);
    if (f.udp_csum == FabricConfig::UdpCsum::kZero) {
      put_be16(udp + 6, 0);
    } else if (f.udp_csum == FabricConfig::UdpCsum::kRecompute) {
      // Over what is left, as the header says it is (a kept UDP length past the cut cannot be
      // summed: what is not there is taken as gone, and the receiver drops it on the length).
      put_be16(udp + 6, udp_checksum(pkt, info.ihl_bytes, std::min(udp_len, static_cast<uint32_t>(be16(udp + 4)))));
    }
  }
  put_be16(pkt + 10, 0);
  put_be16(pkt + 10, ipv4_header_checksum(pkt, info.ihl_bytes));
  return len;
}

}  // namespace trim::sw
