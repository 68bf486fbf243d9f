// CPU encoder: one message row at a time into trimmable packets (docs/PROTOCOL.md).
// Not thread-safe: it owns per-row scratch; use one Encoder per thread.
#pragma once

#include <cstdint>
#include <vector>

#include "codec/layout.h"
#include "codec/packet.h"
#include "codec/planes.h"

namespace trim::codec {

class Encoder {
 public:
  explicit Encoder(const CodecConfig& cfg);
  const CodecConfig& config() const { return cfg_; }
  // Another connection's settings (its seed), keeping the row scratch.
  void set_config(const CodecConfig& cfg) { cfg_ = cfg; }

  // Encodes row `r` of the message at `msg` (layout.bytes() bytes). Packet k of the row is
  // written at out + k * stride (stride >= config().packet_bytes) and its size to sizes[k].
  // Returns the row's packet count (layout.row(r).packets).
  Result<uint32_t> encode_row(const Layout& layout, const MessageId& id, const void* msg, uint32_t r,
                              uint8_t* out, size_t stride, uint32_t* sizes);

  // Zero-copy form of a raw (scheme none, or tail) row: writes only the header of packet k of
  // row r into `header` (kHeaderBytes) and says where the packet's payload lies in the message.
  // header + message[payload_offset, +payload_bytes) is byte for byte what encode_row writes.
  struct RawSlice {
    uint64_t payload_offset = 0;
    uint32_t payload_bytes = 0;
  };
  static Result<RawSlice> raw_packet_header(const Layout& layout, const MessageId& id, uint32_t r, uint32_t k,
                                            uint8_t* header);

  // Every packet of a message, one vector each (tests, tools).
  Result<std::vector<std::vector<uint8_t>>> encode_message(const Layout& layout, const MessageId& id,
                                                           const void* msg);

 private:
  struct RowCtx;
  void encode_f32_row(const RowCtx& c, const float* v);
  static void log_unrotated(const RowCtx& c);
  // Planes of every packet of an fp32 sign-layout row (headers not yet written), norms from
  // src; tails != nullptr: an rht row, plane 0 from src (rotated), planes 1+2 from tails (the
  // input), in one pass.
  void pack_sign_payloads(const RowCtx& c, const float* src, const float* tails, Norms* norms);
  // Planes 1+2 of an fp32 value-layout row (sq, sd, rht): the input's bits 31..16 and 15..0.
  static void pack_value_tails(const RowCtx& c, const float* v);
  void encode_16_row(const RowCtx& c, const uint16_t* v);
  void encode_raw_row(const RowCtx& c, const uint8_t* bytes);
  // Headers of every packet of the row (sizes into c.sizes), once the row's scale is known.
  void write_row_headers(const RowCtx& c, Scheme scheme, float scale, uint16_t bin_ratio);
  // The fields every packet of a row shares.
  static PacketHeader row_header(const Layout& layout, const MessageId& id, const RowInfo& info, Scheme scheme,
                                 float scale, uint16_t bin_ratio);
  // 2-bit heads: plane Q of every packet of a sign-head row from `src` (the values whose signs
  // are the heads; sum_sq: their finite squares), and the bins' levels: returns the scale (the
  // outer level) and sets *bin_ratio.
  float pack_row_bins(const RowCtx& c, Scheme scheme, const float* src, double sum_sq, uint16_t* bin_ratio);
  // Element range and sizes of one packet; returns its payload size.
  static uint32_t set_packet_range(PacketHeader* h, const PlaneBytes& planes, uint32_t first, uint32_t n);
  // Plane 0 of sq/sd for elements [first, first + n) of the row.
  void pack_random_heads(const RowCtx& c, Scheme scheme, const float* v, uint32_t first, uint32_t n,
                         float clip, uint8_t* p0) const;

  CodecConfig cfg_;
  std::vector<float> f32_;         // rotated (rht) or widened (16-bit) row
  std::vector<uint64_t> signs_;
  // The CRC registers of planes 1 and 2 of each packet of the row, where the rht pass folded
  // them (two a packet; bytes 0: none); write_row_headers joins them only while spans_valid_
  // (the planes are still the ones folded).
  std::vector<PayloadSpanCrc> spans_;
  bool spans_valid_ = false;
};

}  // namespace trim::codec
