// CPU decoder: rebuilds a message from any mix of whole, partly trimmed, fully trimmed and
// missing packets. Each element uses the best level whose bits survived (full value, 16-bit
// prefix, or head); elements of packets that never arrived are estimated as 0. rht: planes 1+2
// carry the input's own bits, so only the coordinates that lost them are estimated, from the
// inverse rotation of the row's scaled signs (0 for missing heads). Not thread-safe: one
// Decoder per thread.
#pragma once

#include <cstdint>
#include <vector>

#include "codec/combine.h"
#include "codec/layout.h"

namespace trim::codec {

struct DecodeStats {
  // Elements on the wire, by the level of their own bits that arrived.
  uint64_t elems = 0, full = 0, plane1 = 0, head_only = 0, missing = 0;
  // Output elements that are not exact.
  uint64_t estimated = 0;
  uint64_t packets = 0, trimmed_packets = 0, duplicate_packets = 0, late_packets = 0;
};

// An exact packet's place in a message decoded by begin(): its row and elements, and the bytes
// of the buffer its payload is copied to.
struct InPlaceSlot {
  uint32_t row = 0;
  uint16_t first_elem = 0, elem_count = 0;
  uint8_t* dst = nullptr;
  uint32_t bytes = 0;
};

class Decoder {
 public:
  explicit Decoder(const CodecConfig& cfg);
  // Another connection's settings (its seed), keeping the scratch. Not while a message is open.
  void set_config(const CodecConfig& cfg) { cfg_ = cfg; }

  // Starts a message; `out` receives layout.bytes() bytes (and holds rotated fp32 rows until
  // they are finished).
  Status begin(const Layout& layout, const MessageId& id, void* out);
  // Starts a message whose values are combined into `dst` (dst = value (op) dst, coll's
  // reduce_into) instead of stored: rows decode into the decoder's scratch and each row is
  // combined once, by finish_row, when its values are final (a slot decoded again after a
  // retransmission, the fills of what never arrived); a whole exact packet (scheme none) is
  // combined straight from its payload. The bits are those of begin(buf) + finish() +
  // combine_into(dst, buf). fp32/fp16/bf16 messages combine as their own type; raw (exact) ones
  // as any type whose elements the message's packets and rows do not split.
  Status begin_combine(const Layout& layout, const MessageId& id, void* dst, RedType type, RedOp op);
  // Whether a message of `layout` can combine as `type` (what begin_combine checks first).
  static Status check_combine(const Layout& layout, RedType type, RedOp op);
  // Starts a message whose packets are decoded elsewhere (the GPU): only admit() may be used,
  // which validates and counts each packet as add() does.
  void begin_collect(const Layout& layout, const MessageId& id);
  // add() without the decoding: checks that p belongs to the message (cookie, message,
  // geometry, scheme, scale; a reject is counted and changes nothing) and records how much of
  // its slot arrived. *slot = the packet's slot in message order when it brings more bytes than
  // before (the caller keeps them), else UINT32_MAX (duplicate, or its row already finished).
  PacketError admit(const ParsedPacket& p, uint32_t* slot);
  // Adds one parsed packet. A packet that does not belong (cookie, message, geometry, scheme or
  // scale) is rejected, counted, and changes nothing. A slot is decoded again only when more of
  // it arrives than before (a retransmission after a trim).
  PacketError add(const ParsedPacket& p);
  // The packets after row `row`'s packet at `first_elem`, in message order, whose payloads a
  // message begun with begin() takes as they are (scheme none rows, not the raw tail) and that
  // have not arrived: at most `max`, stopping at one that has, at one shorter than the first
  // (where a sender's segmentation run ends), or before headers and payloads pass `max_bytes`.
  // A payload already at its slot's dst is not copied again (add).
  uint32_t exact_slots_after(uint32_t row, uint32_t first_elem, InPlaceSlot* out, uint32_t max,
                             uint32_t max_bytes) const;
  // Packet slots of the message that hold data (whole or trimmed): each counts once, however
  // often or under whatever psn its packet arrives.
  uint64_t slots_filled() const { return slots_filled_; }
  // Whether every packet of row r has arrived, whole or trimmed.
  bool row_complete(uint32_t r) const;
  // Estimates what never arrived (and, for rht, what lost its tail); when combining, combines
  // the row into the destination. Later packets of the row are ignored.
  void finish_row(uint32_t r);
  // Finishes every row. `estimated`, when given, gets one byte per output element of the
  // message (elements of the dtype, then the tail bytes): 1 where the value is not exact.
  DecodeStats finish(std::vector<uint8_t>* estimated = nullptr);

 private:
  struct RowState {
    bool seen = false;
    bool finished = false;
    Scheme scheme = Scheme::kNone;
    float scale = 0.0f;
    uint16_t bin_ratio = 0;
  };
  // Elements [0,n2) full, [n2,n1) 16-bit prefix, [n1,n0) head only (of which [0,nq) with their
  // 2-bit heads' bins), [n0,n) missing.
  struct Levels {
    uint32_t n, n0, n1, n2, nq;
  };
  Levels levels(Scheme scheme, bool tail, uint32_t n, int32_t received) const;
  void decode_slot(const ParsedPacket& p, const RowInfo& info, Scheme scheme);
  void decode_f32(const ParsedPacket& p, Scheme scheme, float* dst);
  void decode_16(const ParsedPacket& p, Scheme scheme, uint8_t* dst_bytes);
  uint8_t* row_heads(uint32_t r);  // plane 0 of rht row r, as it arrived
  uint8_t* row_bins(uint32_t r);   // plane Q of rht row r (2-bit heads), as it arrived
  // The head-only estimates of elements [begin, end) of a packet (p0: its plane 0, pq: plane Q
  // or null) into dst[0, end - begin).
  void fill_estimates(Scheme scheme, const RowState& row, const uint8_t* p0, const uint8_t* pq, const Levels& l,
                      uint32_t begin, uint32_t end, float* dst) const;
  // The coordinates of an rht row without their own bits (head only or missing), from R^-1 of
  // the scaled signs.
  void estimate_rht_row(const RowInfo& info, const RowState& row);
  // Combine mode: element bytes [off, off + bytes) of the message, from `src` into the destination.
  void combine_bytes(uint64_t off, const uint8_t* src, uint64_t bytes) const;
  void combine_row(const RowInfo& info);

  CodecConfig cfg_;
  Layout layout_;
  MessageId id_;
  uint8_t* out_ = nullptr;      // where rows decode: the message, or scratch_ when combining
  bool combine_ = false;
  uint8_t* combine_dst_ = nullptr;
  RedType combine_type_ = RedType::kF32;
  RedOp combine_op_ = RedOp::kSum;
  std::vector<uint8_t> scratch_;  // combine mode: the decoded message, a row combined at a time
  std::vector<uint8_t> direct_;   // combine mode, per slot: 1 = combined from its payload already
  std::vector<RowState> rows_;
  std::vector<uint32_t> row_first_slot_;
  std::vector<int32_t> got_;          // per packet slot: payload bytes received, -1 = none
  uint64_t slots_filled_ = 0;
  std::vector<Levels> row_levels_;    // estimate_rht_row's per-slot levels
  std::vector<uint8_t> heads_;        // rht rows: plane 0 of every packet, row_elems / 8 bytes a row
  std::vector<uint8_t> bins_;         // rht rows with 2-bit heads: plane Q likewise
  std::vector<uint16_t> tmp15_;
  std::vector<float> tmpf_;
  std::vector<uint64_t> signs_;
  DecodeStats stats_;
};

}  // namespace trim::codec
