// The wire header of every data packet and its validation. Byte layout: docs/PROTOCOL.md.
// The header is never trimmed: our switch's native mode cuts a packet at kHeaderBytes +
// trim_bytes (the end of plane 0, or of plane 1 with 16-bit heads) using only fields of this
// header; a fabric switch cuts at a fixed size and reads none of it. Either way the payload
// prefix that arrived is checked against the header's check points (lossy packets) before any
// of it is used: the UDP checksum of a trimmable datagram is 0 (none), since a switch that cuts
// it may not fix it.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

#include "codec/types.h"
#include "common/status.h"

namespace trim::codec {

constexpr uint16_t kMagic = 0x5254;  // bytes 'T' 'R' on the wire (little-endian)
// The transport's control packets (ACKs, pings: transport/wire.h) start with this instead; the
// two kinds of datagram on our wire are told apart by their first two bytes, here, low enough
// for a switch that must not depend on the transport.
constexpr uint16_t kCtrlMagic = 0x4354;  // 'T' 'C'
inline bool is_ctrl_datagram(const uint8_t* data, size_t len) {
  return len >= 2 && data[0] == (kCtrlMagic & 0xff) && data[1] == (kCtrlMagic >> 8);
}
// Both kinds start alike: u16 magic, u8 version, five bytes of the kind's own (3..7), then the
// connection's u64 cookie. write_prefix writes all of that but bytes 3..7.
void write_prefix(uint8_t* out, uint16_t magic, uint8_t version, uint64_t cookie);
uint64_t prefix_cookie(const uint8_t* data);
// 3: byte 6 is head_bits (1, 2 or 16) and bytes 50-51 the 2-bit heads' bin ratio (version 2:
// byte 6 counted head planes, 1 or 2). 2: the header grew to 80 bytes with the payload's check
// points (version 1: 56 bytes, the payload guarded by the UDP checksum alone).
constexpr uint8_t kVersion = 3;
constexpr uint32_t kHeaderBytes = 80;
// Check points of a lossy packet's payload: each a prefix length and the low 16 bits of the
// CRC-32C of header bytes [4, 40) followed by the payload up to it.
constexpr uint32_t kCheckPoints = 6;
constexpr uint32_t kIpv4UdpBytes = 28;

// flags
constexpr uint8_t kFlagTrimmed = 0x01;    // set by trim-switch's native mode when it cuts (not covered by the CRC; receivers ignore it)
constexpr uint8_t kFlagTrimmable = 0x02;  // a switch may trim; else it must drop (and the sender resends)
constexpr uint8_t kFlagTail = 0x04;       // the message's raw remainder bytes (size % element size)
// The sender left this datagram's UDP checksum to the kernel: if it arrives whole, the receiving
// kernel has verified every byte and the payload's check points are not recomputed (they exist
// for a prefix that a switch cut, or a datagram sent with checksum 0).
constexpr uint8_t kFlagUdpChecksummed = 0x08;
// A retransmission (any copy but the first; handshake version 6): the receiver echoes it in its
// ACK, so the sender tells a timeout whose original arrived after all (spurious) from a loss.
constexpr uint8_t kFlagResent = 0x10;
constexpr uint8_t kFlagsKnown = kFlagTrimmed | kFlagTrimmable | kFlagTail | kFlagUdpChecksummed | kFlagResent;

struct PacketHeader {
  uint8_t flags = 0;
  Scheme scheme = Scheme::kNone;
  DType dtype = DType::kRaw;
  uint8_t head_bits = 1;     // bits per element a trim keeps: 1, 2 (sign + magnitude bin) or 16
  uint8_t row_log2 = 15;     // rows hold up to 2^row_log2 elements
  uint64_t cookie = 0;       // per-connection random value, checked by the receiver
  uint32_t msg_seq = 0;      // message sequence on the connection (keys the shared randomness)
  uint32_t msg_bytes = 0;    // whole message size
  uint32_t row = 0;
  uint16_t first_elem = 0;   // within the row
  uint16_t elem_count = 0;
  uint16_t payload_bytes = 0;  // untrimmed payload size
  uint16_t trim_bytes = 0;     // payload bytes a trim keeps (0: nothing useful survives)
  float scale = 0.0f;          // rht: f = |V|^2/|R(V)|_1; sign: RMS; sq/sd: clip L; none: 0;
                               // 2-bit heads: the outer bin's level
  uint16_t bin_ratio = 0;      // 2-bit heads: inner level / outer level in 1/65535 units; else 0
  uint32_t psn = 0;            // transport packet sequence number
  uint32_t dst_ip4 = 0;        // destination (network byte order value), for a stateless switch
  uint16_t dst_port = 0;

  bool trimmable() const { return (flags & kFlagTrimmable) != 0; }
  bool tail() const { return (flags & kFlagTail) != 0; }
  bool resent() const { return (flags & kFlagResent) != 0; }
};

enum class PacketError : int {
  kOk = 0,
  kTruncatedHeader,   // fewer than kHeaderBytes bytes
  kBadMagic,
  kBadVersion,
  kBadChecksum,
  kBadField,          // an enum, flag or reserved field holds a value this version does not define
  kBadLength,         // payload_bytes / trim_bytes disagree with the element count and scheme
  kLengthPastPacket,  // more bytes than header + payload_bytes
  kElemOverflow,      // first_elem + elem_count past the row, or the row past the message
  kInconsistent,      // disagrees with earlier packets of the same row or with the layout
  kWrongCookie,       // not this connection's packet
  kBadPayloadCheck,   // counted, not returned: a check point failed; the packet keeps the prefix before it
  kCount
};
const char* packet_error_name(PacketError e);

// Process-wide counters of rejected packets, one per PacketError. Accepted ones are not counted
// here (the connections count what they receive): a locked add per packet cost ~2 % of a 4-rank
// run's CPU.
class PacketErrorCounters {
 public:
  void add(PacketError e) { counts_[static_cast<int>(e)].fetch_add(1, std::memory_order_relaxed); }
  uint64_t get(PacketError e) const { return counts_[static_cast<int>(e)].load(std::memory_order_relaxed); }

 private:
  std::atomic<uint64_t> counts_[static_cast<int>(PacketError::kCount)] = {};
};
PacketErrorCounters& packet_error_counters();

// NCCL_TRIM_HEAD_BITS's values, as byte 6 of the header carries them.
constexpr bool valid_head_bits(uint32_t b) { return b == 1 || b == 2 || b == 16; }
// Schemes whose head is a sign (of the value, or of its rotation): the ones 2-bit heads extend
// with a magnitude bin. sq/sd heads are random and have no bins.
constexpr bool sign_head(Scheme s) { return s == Scheme::kSign || s == Scheme::kRht || s == Scheme::kRotated; }

// 2-bit heads: a sign and whether |x| exceeds kBinThresholdRms x the row's RMS, the 4-level
// Lloyd-Max quantizer of a Gaussian (what rotated rows are, near enough). Each bin decodes to
// its level: the header's scale (outer) and scale x bin_ratio / 65535 (inner). An element whose
// bin bit was cut decodes to the mix of the two a Gaussian row has: kBinOuterFraction of its
// elements are outer.
constexpr float kBinThresholdRms = 0.9816f;
constexpr float kBinOuterFraction = 0.3263f;  // P(|N(0,1)| > 0.9816)
struct BinLevels {
  float outer = 0.0f, inner = 0.0f, unknown = 0.0f;  // |estimate| by bin; bin bit missing
};
BinLevels bin_levels(float scale, uint16_t bin_ratio);

// Plane geometry of `elems` elements of one scheme and dtype (docs/PROTOCOL.md). The payload is
// plane 0, plane Q (the bins of 2-bit heads), plane 1, plane 2.
struct PlaneBits {
  uint32_t b0, b1, b2;  // bits per element in planes 0, 1, 2; raw rows use b2 = 8 * element size
  uint32_t bq = 0;      // plane Q: 1 for a sign-head scheme with 2-bit heads
};
PlaneBits plane_bits(Scheme scheme, DType dtype, bool tail, uint32_t head_bits = 1);
struct PlaneBytes {
  uint32_t p0, p1, p2;
  uint32_t pq = 0;
  uint32_t total() const { return p0 + pq + p1 + p2; }
  uint32_t q_offset() const { return p0; }
  uint32_t p1_offset() const { return p0 + pq; }
  uint32_t p2_offset() const { return p0 + pq + p1; }
};
PlaneBytes plane_bytes(const PlaneBits& bits, uint32_t elems);
// Payload bytes up to the trim point: planes 0 and Q, or with 16-bit heads planes 0 and 1.
uint32_t trim_point_bytes(const PlaneBytes& planes, Scheme scheme, uint32_t head_bits);

// CRC-32C (Castagnoli); SSE4.2 when the CPU has it.
uint32_t crc32c(const uint8_t* data, size_t len);
// The payload prefix [0, received) of a lossy packet whose check points are in header `h`
// (the packet's first bytes): how much of it the check points vouch for, each point that
// arrived, in order, until one fails (*failed then true). parse_packet's own walk, for a caller
// that must verify what parse_packet may skip (a packet no kernel checksum vouches for).
uint32_t verified_prefix(const uint8_t* h, const uint8_t* payload, uint32_t received, bool* failed);

// CRC-32C of `crc`'s data followed by [data, data + len): crc32c_extend(0, d, n) = crc32c(d, n).
uint32_t crc32c_extend(uint32_t crc, const uint8_t* data, size_t len);

namespace detail {
// Which CRC-32C path runs (2: PCLMUL folding, 1: SSE4.2, 0: table), and a switch to force one
// (-1: the best again; false, changing nothing, where this CPU lacks it). Tests and benchmarks.
int crc32c_path();
bool crc32c_force_path(int path);
// x^e mod P, the CRC-32C polynomial, bit-reflected in the top half of 64 bits (x^0 is bit 63):
// the constants of a carry-less fold (codec/planes_avx2.cc folds planes while packing them).
uint64_t crc32c_xpow(uint32_t e);
// The constants of one carry-less fold of a 128-bit lane forward by `bytes`: `low` multiplies the
// lane's low quadword (x^(8 bytes + 63) mod P), `high` its high one (x^(8 bytes - 1) mod P).
struct CrcFoldConstants {
  uint64_t low, high;
  explicit CrcFoldConstants(uint32_t bytes) : low(crc32c_xpow(8 * bytes + 63)), high(crc32c_xpow(8 * bytes - 1)) {}
};
// The register `reg` (no inversion) followed by `bytes` zero bytes: reg * x^(8 bytes) mod P.
uint32_t crc32c_shift(uint32_t reg, uint32_t bytes);
}  // namespace detail

// Where a lossy packet's check points fall (payload prefix lengths, ascending, the last one
// payload_bytes): the end of the trim point, `planned_cut` (the payload bytes a fixed-size fabric
// trim keeps, 0: none), and points inside the heads. Returns how many (<= kCheckPoints).
uint32_t check_point_ends(uint32_t payload_bytes, uint32_t trim_bytes, uint32_t planned_cut,
                          uint16_t ends[kCheckPoints]);

// A payload span whose CRC-32C register the encoder already holds: `reg` is the register after
// payload[start, start + bytes) fed from a zero register, with no inversion (the kernel that
// wrote the span folded it on the way). write_header then joins it to the check points' running
// CRC by a shift instead of reading the bytes again; the result is the same to the bit.
struct PayloadSpanCrc {
  uint32_t start = 0, bytes = 0, reg = 0;
};

// Writes the header (with its CRC) into the first kHeaderBytes of `out`. For a lossy scheme the
// payload (h.payload_bytes) must already follow in `out`: the check points are computed over it,
// one at `planned_cut` too (see check_point_ends). `spans` (ascending, disjoint; may be null):
// parts of the payload whose CRC registers are known (a span that a check point cuts is read).
void write_header(const PacketHeader& h, uint8_t* out, uint32_t planned_cut = 0, const PayloadSpanCrc* spans = nullptr,
                  uint32_t span_count = 0);
// Rewrites the transport fields of an encoded packet and refreshes the CRC.
void stamp_transport(uint8_t* packet, uint32_t psn, uint32_t dst_ip4, uint16_t dst_port);
// The psn stamp_transport wrote (of one of our own packets: nothing is checked).
uint32_t stamped_psn(const uint8_t* packet);
// Sets kFlagUdpChecksummed (covered by the header CRC: call before stamp_transport).
void mark_udp_checksummed(uint8_t* packet);
// Sets kFlagResent and refreshes the CRC (a stamped packet about to be sent again).
void mark_resent(uint8_t* packet);
// Sets the TRIMMED flag and cuts nothing; a switch then sends kHeaderBytes + trim_bytes bytes.
void mark_trimmed(uint8_t* packet);

struct ParsedPacket {
  PacketHeader hdr;
  const uint8_t* payload = nullptr;
  // Payload bytes the decoder may use (<= hdr.payload_bytes): of a lossy packet, the longest
  // prefix whose check point arrived and matched; of a raw one (exact class, guarded by the
  // UDP checksum), every byte that arrived.
  uint32_t payload_received = 0;
  bool trimmed = false;         // bytes missing: cut (by any switch), or past a failed check point
  bool check_failed = false;    // a check point that arrived did not match (corruption)
  bool marked_trimmed = false;  // the network marked it trimmed (the trimmed DSCP); set by the transport
};

// Validates a received packet of `len` bytes without any per-connection state. Never reads
// past `len`. Counts the outcome in packet_error_counters(). The TRIMMED flag is ignored: a cut
// packet is one shorter than its header says. On failure *out is unspecified.
PacketError parse_packet(const uint8_t* data, size_t len, ParsedPacket* out);
// parse_packet for a datagram whose payload does not follow its header: `hdr` holds its first
// kHeaderBytes, `payload` the len - kHeaderBytes bytes after them (an exact payload the kernel
// wrote straight into its place, transport/placed_rx.h).
PacketError parse_packet_at(const uint8_t* hdr, const uint8_t* payload, size_t len, ParsedPacket* out);

// The header's fields read from the first kHeaderBytes of `hdr`, checking only that it is ours
// (magic, version) and that its scheme and dtype exist: no CRC, no geometry. For a receiver that
// must tell where a payload belongs before it reads anything else; parse_packet validates the
// packet afterwards.
bool peek_header(const uint8_t* hdr, PacketHeader* out);
// A whole packet this process encoded, as a receiver that kept `payload_kept` bytes of its
// payload decodes it (the sender's error feedback); not counted.
PacketError parse_own_packet(const uint8_t* data, size_t len, uint32_t payload_kept, ParsedPacket* out);

}  // namespace trim::codec
