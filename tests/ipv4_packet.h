// Hand-made IPv4 packets for the tests of the switch's IPv4 paths (fabric_test,
// tun_bottleneck_test).
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#include "switch_sim/ipv4.h"

namespace trim::testing {

// An IPv4 packet 198.18.0.1 -> 198.18.0.2 (DF, TTL 64) of protocol `proto` around `l4`, with
// TOS `tos` and, when `option`, one word of NOP options (IHL 6); checksummed.
inline std::vector<uint8_t> ipv4_packet(uint8_t proto, const std::vector<uint8_t>& l4, uint8_t tos = 0,
                                        bool option = false) {
  const uint32_t ihl = option ? 24 : 20;
  std::vector<uint8_t> p(ihl + l4.size(), 0);
  p[0] = static_cast<uint8_t>(0x40 | (ihl / 4));
  p[1] = tos;
  p[2] = static_cast<uint8_t>(p.size() >> 8);
  p[3] = static_cast<uint8_t>(p.size());
  p[6] = 0x40;  // DF
  p[8] = 64;
  p[9] = proto;
  const uint8_t src[4] = {198, 18, 0, 1}, dst[4] = {198, 18, 0, 2};
  std::memcpy(&p[12], src, 4);
  std::memcpy(&p[16], dst, 4);
  if (option) p[20] = p[21] = p[22] = p[23] = 1;
  std::memcpy(&p[ihl], l4.data(), l4.size());
  const uint16_t c = sw::ipv4_header_checksum(p.data(), ihl);
  p[10] = static_cast<uint8_t>(c >> 8);
  p[11] = static_cast<uint8_t>(c);
  return p;
}

}  // namespace trim::testing
