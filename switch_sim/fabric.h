// trim-switch's fabric mode: a trimming switch as Spectrum-4/Cumulus, SONiC and Arista ship it
// (docs/DEPLOYMENT.md has the sources), at the level of the IPv4 packet. It never reads past the
// IP/UDP/TCP headers: a packet is trimmable by its DSCP alone (its traffic class), whatever the
// protocol; a trimmable packet that meets a full queue is cut to a fixed size (counted as a frame,
// so the IP packet keeps size - l2_bytes), remarked with the trimmed DSCP and queued in the
// trimmed class, which gets a share of the link (DWRR); a packet no longer than the trim size is
// remarked and queued there whole. What the cut leaves of the IP and UDP headers is configured,
// since switches differ and the sources do not all say: the IPv4 total length and checksum fixed
// or left, the UDP length rewritten or left, the UDP checksum zeroed, recomputed or left.
// No sockets, no state: the tests check it on hand-made packets.
#pragma once

#include <bitset>
#include <cstdint>
#include <string>

#include "switch_sim/ipv4.h"
#include "switch_sim/port.h"

namespace trim::sw {

struct FabricConfig {
  bool on = false;                 // false: the native mode (our header's class and trim point)
  std::bitset<64> trimmable;       // DSCPs whose traffic class may be trimmed
  uint8_t trimmed_dscp = 11;       // the remark of a trimmed packet (Cumulus's default)
  uint32_t trim_size = 256;        // frame bytes a trim keeps (Cumulus's default)
  uint32_t l2_bytes = 18;          // frame bytes beyond the IP packet the size counts (Ethernet + FCS)
  double trimmed_share = 0.25;     // the trimmed class's DWRR share of the link
  bool fix_ip = true;              // rewrite the IPv4 total length (and checksum) after a cut
  enum class UdpLen : uint8_t { kRewrite, kKeep } udp_len = UdpLen::kRewrite;
  enum class UdpCsum : uint8_t { kZero, kKeep, kRecompute } udp_csum = UdpCsum::kZero;

  // IP bytes a trimmed packet keeps.
  uint32_t ip_keep_bytes() const { return trim_size > l2_bytes ? trim_size - l2_bytes : 0; }
  // The rewrite policy as text (stats, logs).
  std::string rewrite_text() const;
};

inline uint8_t dscp_of(uint8_t tos) { return static_cast<uint8_t>(tos >> 2); }

// The port model's view of an IPv4 packet under the fabric's rules: bytes = IP total length;
// trimmable when its DSCP is; already in the trimmed class when it carries the trimmed DSCP
// (a trim upstream). Tag and flow are left to the caller.
Packet fabric_packet(const Ipv4Info& info, const FabricConfig& f);

// What the switch writes for a packet the model put in the trimmed class: the DSCP set to the
// trimmed value (ECN kept), cut to `ip_len` bytes when that is below its length, the IP and UDP
// headers as configured, the IPv4 header checksum valid for what it says. Returns the bytes to
// send (the cut length, even when the IP header still claims the original one).
uint32_t fabric_remark(uint8_t* pkt, const Ipv4Info& info, uint32_t ip_len, const FabricConfig& f);

// The UDP checksum (RFC 768, IPv4 pseudo header) of the UDP datagram at pkt + ihl of `udp_len`
// bytes, its checksum field taken as zero; 0xFFFF for a sum of zero.
uint16_t udp_checksum(const uint8_t* pkt, uint32_t ihl, uint32_t udp_len);

}  // namespace trim::sw
