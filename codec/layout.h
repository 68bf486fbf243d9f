// How a message is cut: rows of up to row_elems elements, each row into packets of at most
// packet_bytes bytes. Both ends derive the same geometry from (bytes, dtype, scheme, config).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "codec/packet.h"
#include "codec/types.h"
#include "common/params.h"
#include "common/status.h"

namespace trim::codec {

// The codec packet budget of an IP MTU: the MTU less the IPv4 (20) and UDP (8) headers. The
// one place that turns NCCL_TRIM_MTU into packet bytes.
constexpr uint32_t packet_bytes_for_mtu(uint32_t mtu_bytes) { return mtu_bytes - kIpv4UdpBytes; }

// NCCL_TRIM_MTU=auto where no interface decides (the codec demo, benches): a stand-in MTU. The
// transport never uses it: each connection's packet size comes from the MTU its two ends agreed
// at the handshake (transport/net_api.cc).
constexpr uint32_t kNoInterfaceMtuBytes = 4096;

struct CodecConfig {
  Scheme scheme = Scheme::kRht;
  uint32_t row_elems = 32768;     // power of two, 8..32768
  uint8_t head_bits = 1;          // bits per element a trim keeps: 1 (sign), 2 (sign + bin), 16
  uint32_t packet_bytes = packet_bytes_for_mtu(kNoInterfaceMtuBytes);  // whole codec packet, header included
  uint64_t seed = 0x7472696d;
  float clip_sigmas = 2.5f;       // sq/sd clip at L = clip_sigmas * RMS
  bool head_scale_mse = false;    // rht/rotated heads scaled |R(x)|_1 / d, not |x|^2 / |R(x)|_1
  // NCCL_TRIM_FABRIC_TRIM_BYTES as payload bytes: what a fixed-size trim of the fabric keeps
  // after the L2/IP/UDP headers and ours (0: no trim size configured). Lossy packets then hold
  // few enough elements that their trim point fits in it (where that leaves at least
  // kMinFabricElems a packet), and carry a check point there.
  uint32_t fabric_keep_bytes = 0;

  // Every codec knob; packet_bytes from NCCL_TRIM_MTU, auto read as kNoInterfaceMtuBytes.
  static Result<CodecConfig> from_params(const Params& p);
  // The same with packet_bytes from `mtu_bytes`, whatever NCCL_TRIM_MTU says.
  static Result<CodecConfig> from_params(const Params& p, uint32_t mtu_bytes);
  Status validate() const;
};

// Frame bytes a switch may count beyond the IP packet when it trims to a size: the Ethernet
// header (14) and FCS (4). The sources do not say which they count; planning for both is safe.
constexpr uint32_t kFabricL2Bytes = 18;
// Fewer elements than this a packet would cost more in headers than the trims save: the
// packets stay MTU-sized and a trim cuts into their heads instead.
constexpr uint32_t kMinFabricElems = 256;
// NCCL_TRIM_FABRIC_TRIM_BYTES (a frame size) as payload bytes a trim keeps; 0 when nothing past
// our header survives (or no size is set).
constexpr uint32_t fabric_keep_bytes(uint32_t fabric_trim_bytes) {
  return fabric_trim_bytes > kFabricL2Bytes + kIpv4UdpBytes + kHeaderBytes
             ? fabric_trim_bytes - kFabricL2Bytes - kIpv4UdpBytes - kHeaderBytes
             : 0;
}

// What survives a fixed-size trim of `fabric_trim_bytes` (a frame size) of this config's lossy
// packets at `mtu_bytes`, per element type: for the init log.
std::string fabric_trim_summary(const CodecConfig& cfg, uint32_t fabric_trim_bytes, uint32_t mtu_bytes);

// Which bits of a message's identity the encoder writes into every header.
struct MessageId {
  uint64_t cookie = 0;
  uint32_t msg_seq = 0;
  bool trimmable = true;  // false: exact class, a trim must be answered by a resend
  // rht only: false sends the rows unrotated, as sign rows within rht's packets (a connection
  // that sees no trims: NCCL_TRIM_QUIET_MS). Not on the wire: each header says its row's scheme.
  bool rotate = true;
};

struct RowInfo {
  uint32_t row = 0;
  uint32_t elems = 0;        // elements in this row (bytes for the tail row)
  uint64_t byte_offset = 0;  // where the row starts in the message
  uint32_t elems_per_packet = 0;
  uint32_t packets = 0;
  bool tail = false;         // the raw remainder bytes (message size % element size)
  Scheme scheme = Scheme::kNone;
};

class Layout {
 public:
  // Fails for messages of 4 GiB or more, or a lossy scheme over raw bytes.
  static Result<Layout> make(const CodecConfig& cfg, DType dtype, Scheme scheme, uint64_t bytes);

  DType dtype() const { return dtype_; }
  Scheme scheme() const { return scheme_; }
  uint64_t bytes() const { return bytes_; }
  uint32_t row_elems() const { return row_elems_; }
  uint8_t row_log2() const { return row_log2_; }
  uint8_t head_bits() const { return head_bits_; }
  uint32_t rows() const { return typed_rows_ + (tail_bytes_ != 0 ? 1u : 0u); }
  uint32_t typed_rows() const { return typed_rows_; }
  uint64_t packets() const { return packets_; }
  uint32_t max_packets_per_row() const;
  RowInfo row(uint32_t r) const;
  // Into *out (resized): the message-wide index of each row's first packet, then packets().
  void row_first_packets(std::vector<uint32_t>* out) const;
  // Elements per packet for rows of this scheme and dtype under `packet_bytes`; with
  // `fabric_keep_bytes`, few enough for the trim point (of `head_bits`) to fit in it.
  static uint32_t elems_per_packet(Scheme scheme, DType dtype, bool tail, uint32_t packet_bytes,
                                   uint32_t row_elems, uint32_t head_bits = 1, uint32_t fabric_keep_bytes = 0);

 private:
  DType dtype_ = DType::kRaw;
  Scheme scheme_ = Scheme::kNone;
  uint64_t bytes_ = 0;
  uint64_t typed_elems_ = 0;
  uint32_t row_elems_ = 0;
  uint8_t row_log2_ = 0;
  uint8_t head_bits_ = 1;
  uint32_t typed_rows_ = 0;
  uint32_t tail_bytes_ = 0;
  uint32_t epp_ = 0;       // typed rows
  uint32_t tail_epp_ = 0;  // tail row
  uint64_t packets_ = 0;
};

}  // namespace trim::codec
