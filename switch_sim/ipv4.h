// IPv4 packets as trim-switch's TUN router sees them: which class a packet belongs to (our
// trimmable/exact UDP data, our UDP control, other UDP, TCP, anything else), where our header
// and its trim point lie, and the header fixes a cut packet needs. No sockets, no state, so
// the tests check it on hand-made packets.
#pragma once

#include <cstdint>

#include "switch_sim/port.h"

namespace trim::sw {

// Every packet is counted under exactly one class (the router's per-protocol counters).
enum class IpClass : uint8_t {
  kTrimData,  // UDP whose payload is a valid nccl-trim data packet (trimmable or exact)
  kTrimCtrl,  // UDP carrying an nccl-trim ACK/PING/PONG
  kUdp,       // any other UDP
  kTcp,
  kOther,     // ICMP, fragments, other protocols
  kCount
};
const char* ip_class_name(IpClass c);

enum class IpError {
  kOk = 0,
  kShort,        // shorter than an IPv4 header, or than the header's own lengths
  kNotIpv4,      // version != 4 (IPv6 from a TUN is counted as bad: the router is IPv4 only)
  kBadHeader,    // IHL < 5, total length past the buffer, UDP length inconsistent
  kBadChecksum,  // IPv4 header checksum
};

struct Ipv4Info {
  IpClass cls = IpClass::kOther;
  uint8_t tos = 0;          // DSCP << 2 | ECN
  uint32_t ihl_bytes = 0;   // IP header length (options included)
  uint32_t total_len = 0;   // IPv4 total length (bytes that are the packet; trailing ones are not)
  uint8_t proto = 0;
  uint32_t src_be = 0, dst_be = 0;
  uint16_t sport = 0, dport = 0;  // host order, 0 when no UDP/TCP header
  // kTrimData only: what the port model needs to trim or cut it.
  bool trimmable = false;     // TRIMMABLE, a trim point, not yet trimmed
  bool already_trimmed = false;
  uint32_t plane0_ip_bytes = 0;  // IP bytes after a cut at the trim point
  uint32_t header_ip_bytes = 0;  // IP bytes of the bare IP + UDP + our header
  uint64_t cookie = 0;
  uint32_t msg = 0, psn = 0;
};

// Parses and classifies `len` bytes read from a TUN (IFF_NO_PI). Never reads past `len`.
// `ours` = false: never looks into a UDP payload (the fabric mode, a switch that knows nothing
// of our header): our packets are plain UDP then.
IpError parse_ipv4(const uint8_t* pkt, uint32_t len, Ipv4Info* out, bool ours = true);

// The model's view of a parsed packet (bytes = IP total length; tag and flow left to the caller).
Packet model_packet(const Ipv4Info& info);

// Cuts a kTrimData packet to `new_ip_len` bytes (never below its IP + UDP + our header): sets
// TRIMMED in our header, fixes the IPv4 total length and header checksum, the UDP length, and
// sets the UDP checksum to 0 (none, legal for IPv4: the cut bytes are gone). Returns the new
// length.
uint32_t cut_trim_packet(uint8_t* pkt, const Ipv4Info& info, uint32_t new_ip_len);

// The IPv4 header checksum of `ihl_bytes` bytes (the checksum field as it is).
uint16_t ipv4_header_checksum(const uint8_t* hdr, uint32_t ihl_bytes);

}  // namespace trim::sw
