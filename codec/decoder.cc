#include "codec/decoder.h"

#include <algorithm>
#include <cstring>

#include "codec/planes.h"
#include "codec/rht.h"
#include "codec/rng.h"
#include "common/log.h"

namespace trim::codec {
namespace {

// With only bits 31..16 of an fp32 known, the middle of the remaining interval halves the
// worst error (relative error <= 2^-8 for normal numbers). Zero, subnormal, inf and NaN
// patterns get zeros so 0 stays 0 and inf stays inf.
inline uint32_t midpoint_fill(uint32_t top16) {
  const uint32_t exp = (top16 >> 7) & 0xFFu;
  return (exp != 0 && exp != 0xFFu) ? 0x8000u : 0u;
}

// A head-only element decodes to +-scale. For sign, rht and rotated the head is a sign bit
// sign bit, so 1 means negative; an sq/sd head of 1 means +L.
inline float head_estimate(Scheme scheme, uint32_t head, float scale) {
  const bool positive = (scheme == Scheme::kSq || scheme == Scheme::kSd) ? head != 0 : head == 0;
  return positive ? scale : -scale;
}

PacketError reject(PacketError e, const PacketHeader& h) {
  packet_error_counters().add(e);
  TRIM_TRACE("decoder: rejected packet msg {} row {} elem {}: {}", h.msg_seq, h.row, h.first_elem,
             packet_error_name(e));
  return e;
}

}  // namespace

Decoder::Decoder(const CodecConfig& cfg) : cfg_(cfg) {}

Status Decoder::begin(const Layout& layout, const MessageId& id, void* out) {
  if (out == nullptr && layout.bytes() != 0) return Status(Code::kInvalidArgument, "decoder output is null");
  begin_collect(layout, id);
  out_ = static_cast<uint8_t*>(out);
  if (layout.scheme() == Scheme::kRht) {
    // rht rows keep their heads for finish_row. Only bits inside what arrived are ever read:
    // no need to clear them.
    heads_.resize(static_cast<size_t>(layout.typed_rows()) * (layout.row_elems() / 8));
    if (layout.head_bits() == 2) bins_.resize(heads_.size());
  }
  return Status::ok();
}

Status Decoder::check_combine(const Layout& layout, RedType type, RedOp op) {
  if (!valid_red_type(static_cast<int>(type)) || !valid_red_op(static_cast<int>(op))) {
    return Status(Code::kInvalidArgument, "combine: unknown type or op");
  }
  const size_t esize = red_type_bytes(type);
  const bool same = (layout.dtype() == DType::kF32 && type == RedType::kF32) ||
                    (layout.dtype() == DType::kF16 && type == RedType::kF16) ||
                    (layout.dtype() == DType::kBF16 && type == RedType::kBF16);
  if (layout.dtype() != DType::kRaw && !same) {
    return Status(Code::kInvalidArgument, "combine: a " + std::string(dtype_name(layout.dtype())) +
                                              " message cannot combine as NCCL type " +
                                              std::to_string(static_cast<int>(type)));
  }
  // Every row must start on an element and no tail row may hold a part of one. Packets may cut
  // elements (raw packets are sized in bytes): those decode into the scratch and combine with
  // their row.
  bool whole = layout.bytes() % esize == 0 && (layout.rows() == 0 || !layout.row(layout.rows() - 1).tail);
  for (uint32_t r = 0; whole && r < layout.rows(); ++r) {
    const RowInfo info = layout.row(r);
    whole = info.byte_offset % esize == 0;
  }
  if (!whole) {
    return Status(Code::kInvalidArgument, "combine: a message of " + std::to_string(layout.bytes()) +
                                              " bytes does not cut into whole elements of " +
                                              std::to_string(esize) + " bytes");
  }
  return Status::ok();
}

Status Decoder::begin_combine(const Layout& layout, const MessageId& id, void* dst, RedType type, RedOp op) {
  TRIM_RETURN_IF_ERROR(check_combine(layout, type, op));
  if (dst == nullptr && layout.bytes() != 0) return Status(Code::kInvalidArgument, "combine destination is null");
  scratch_.resize(layout.bytes());  // every element is written before its row is combined
  TRIM_RETURN_IF_ERROR(begin(layout, id, scratch_.data()));
  combine_ = true;
  combine_dst_ = static_cast<uint8_t*>(dst);
  combine_type_ = type;
  combine_op_ = op;
  direct_.assign(got_.size(), 0);
  return Status::ok();
}

void Decoder::begin_collect(const Layout& layout, const MessageId& id) {
  combine_ = false;
  layout_ = layout;
  id_ = id;
  out_ = nullptr;
  stats_ = DecodeStats();
  rows_.assign(layout.rows(), RowState());
  layout.row_first_packets(&row_first_slot_);
  got_.assign(row_first_slot_.back(), -1);
  slots_filled_ = 0;
}

Decoder::Levels Decoder::levels(Scheme scheme, bool tail, uint32_t n, int32_t received) const {
  Levels l{n, 0, 0, 0, 0};
  if (received <= 0) return l;
  const uint32_t c = static_cast<uint32_t>(received);
  const PlaneBits bits = plane_bits(scheme, layout_.dtype(), tail, layout_.head_bits());
  if (bits.b0 == 0) {  // raw: an element survives whole or not at all
    l.n0 = l.n1 = l.n2 = std::min(n, c / (bits.b2 / 8));
    return l;
  }
  const PlaneBytes pb = plane_bytes(bits, n);
  l.n0 = std::min<uint64_t>(n, static_cast<uint64_t>(c) * 8);
  if (bits.bq != 0) l.nq = c > pb.q_offset() ? std::min<uint64_t>(n, static_cast<uint64_t>(c - pb.q_offset()) * 8) : 0;
  const uint32_t o1 = pb.p1_offset(), o2 = pb.p2_offset();
  l.n1 = c > o1 ? static_cast<uint32_t>(std::min<uint64_t>(n, (static_cast<uint64_t>(c - o1) * 8) / bits.b1)) : 0;
  if (bits.b2 == 0) {
    l.n2 = l.n1;  // 16-bit dtypes: planes 0+1 are the whole value
  } else {
    l.n2 = c > o2 ? std::min(n, (c - o2) / 2) : 0;
  }
  return l;
}

uint8_t* Decoder::row_heads(uint32_t r) { return heads_.data() + static_cast<size_t>(r) * (layout_.row_elems() / 8); }
uint8_t* Decoder::row_bins(uint32_t r) { return bins_.data() + static_cast<size_t>(r) * (layout_.row_elems() / 8); }

void Decoder::fill_estimates(Scheme scheme, const RowState& row, const uint8_t* p0, const uint8_t* pq,
                             const Levels& l, uint32_t begin, uint32_t end, float* dst) const {
  if (pq != nullptr) {
    fill_heads2(p0, pq, begin, end, l.nq, bin_levels(row.scale, row.bin_ratio), dst);
  } else {
    fill_heads(p0, begin, end, head_estimate(scheme, 1, row.scale), head_estimate(scheme, 0, row.scale), dst);
  }
}

void Decoder::decode_f32(const ParsedPacket& p, Scheme scheme, float* dst) {
  const PacketHeader& h = p.hdr;
  const uint32_t n = h.elem_count;
  const Levels l = levels(scheme, false, n, static_cast<int32_t>(p.payload_received));
  const PlaneBits bits = plane_bits(scheme, DType::kF32, false, layout_.head_bits());
  const PlaneBytes pb = plane_bytes(bits, n);
  const uint8_t* p0 = p.payload;
  const uint8_t* p1 = p0 + pb.p1_offset();
  const uint8_t* p2 = p0 + pb.p2_offset();
  const bool value_layout = bits.b1 == 16;
  // [0, n2): whole values.
  assemble_f32(p0, p1, p2, value_layout, l.n2, dst);
  // [n2, n1): bits 31..16 known, the rest filled with the middle of the interval.
  if (l.n1 > l.n2) {
    tmp15_.resize(l.n1);
    if (value_layout) {
      unpack16(p1, l.n1, tmp15_.data());
    } else {
      unpack15(p1, l.n1, tmp15_.data());
    }
    for (uint32_t i = l.n2; i < l.n1; ++i) {
      const uint32_t top = value_layout ? tmp15_[i] : (head_bit(p0, i) << 15) | tmp15_[i];
      dst[i] = bits_f32((top << 16) | midpoint_fill(top));
    }
  }
  if (scheme == Scheme::kRht) return;  // the rest is estimated by finish_row
  // [n1, n0): heads only.
  fill_estimates(scheme, rows_[h.row], p0, bits.bq != 0 ? p0 + pb.q_offset() : nullptr, l, l.n1, l.n0, dst + l.n1);
  if (scheme == Scheme::kSd && l.n0 > l.n1) {
    const uint64_t key = rng_key(cfg_.seed, id_.msg_seq, h.row, RngStream::kDither);
    subtract_dither(key, h.first_elem + l.n1, l.n0 - l.n1, h.scale, dst + l.n1);
  }
  // [n0, n): nothing arrived.
  std::fill(dst + l.n0, dst + n, 0.0f);
}

void Decoder::decode_16(const ParsedPacket& p, Scheme scheme, uint8_t* dst_bytes) {
  const PacketHeader& h = p.hdr;
  const uint32_t n = h.elem_count;
  const bool bf16 = layout_.dtype() == DType::kBF16;
  const Levels l = levels(scheme, false, n, static_cast<int32_t>(p.payload_received));
  const PlaneBits bits = plane_bits(scheme, layout_.dtype(), false, layout_.head_bits());
  const PlaneBytes pb = plane_bytes(bits, n);
  const bool value_layout = bits.b1 == 16;
  const uint8_t* p0 = p.payload;
  const uint8_t* p1 = p0 + pb.p1_offset();
  // Whole values [0, n1), head-only estimates [n1, n0) in fp32, nothing [n0, n).
  tmp15_.resize(n);
  tmpf_.resize(n);
  assemble16(p0, p1, value_layout, l.n1, tmp15_.data());
  if (scheme == Scheme::kRht) {  // [n1, n) is estimated by finish_row
    std::memcpy(dst_bytes, tmp15_.data(), 2 * static_cast<size_t>(l.n1));
    return;
  }
  if (bits.bq == 0 && scheme != Scheme::kSd) {
    // Head-only values are +-scale: narrowed once, then picked per head in 16 bits (the same
    // bits as narrowing each estimate); nothing [n0, n): 0 in both dtypes.
    const float scale = rows_[h.row].scale;
    const float est[2] = {head_estimate(scheme, 1, scale), head_estimate(scheme, 0, scale)};
    uint16_t est16[2];
    narrow16(est, 2, bf16, est16);
    fill_heads16(p0, l.n1, l.n0, est16[0], est16[1], tmp15_.data() + l.n1);
    std::fill(tmp15_.begin() + l.n0, tmp15_.begin() + n, uint16_t{0});
    std::memcpy(dst_bytes, tmp15_.data(), 2 * static_cast<size_t>(n));
    return;
  }
  fill_estimates(scheme, rows_[h.row], p0, bits.bq != 0 ? p0 + pb.q_offset() : nullptr, l, l.n1, l.n0,
                 tmpf_.data() + l.n1);
  if (scheme == Scheme::kSd && l.n0 > l.n1) {
    const uint64_t key = rng_key(cfg_.seed, id_.msg_seq, h.row, RngStream::kDither);
    subtract_dither(key, h.first_elem + l.n1, l.n0 - l.n1, h.scale, tmpf_.data() + l.n1);
  }
  std::fill(tmpf_.begin() + l.n0, tmpf_.begin() + n, 0.0f);
  narrow16(tmpf_.data() + l.n1, n - l.n1, bf16, tmp15_.data() + l.n1);
  std::memcpy(dst_bytes, tmp15_.data(), 2 * static_cast<size_t>(n));
}

void Decoder::decode_slot(const ParsedPacket& p, const RowInfo& info, Scheme scheme) {
  const PacketHeader& h = p.hdr;
  if (info.tail || scheme == Scheme::kNone) {
    const uint32_t esize = info.tail ? 1 : dtype_bytes(layout_.dtype());
    uint8_t* dst = out_ + info.byte_offset + static_cast<size_t>(h.first_elem) * esize;
    const uint32_t whole = std::min<uint32_t>(h.elem_count, p.payload_received / esize);
    const uint64_t off = info.byte_offset + static_cast<uint64_t>(h.first_elem) * esize;
    const uint64_t cesize = red_type_bytes(combine_type_);
    if (combine_ && whole == h.elem_count && off % cesize == 0 && static_cast<uint64_t>(whole) * esize % cesize == 0) {
      // Exact, final and in whole elements: combined from the payload, no staging.
      direct_[row_first_slot_[h.row] + h.first_elem / info.elems_per_packet] = 1;
      combine_bytes(off, p.payload, static_cast<uint64_t>(whole) * esize);
      return;
    }
    // A payload the kernel wrote in place already (transport/placed_rx.h) is not copied onto itself.
    if (dst != p.payload) std::memcpy(dst, p.payload, static_cast<size_t>(whole) * esize);
    std::memset(dst + static_cast<size_t>(whole) * esize, 0, static_cast<size_t>(h.elem_count - whole) * esize);
    return;
  }
  if (scheme == Scheme::kRht) {
    // The heads wait for finish_row, which estimates the coordinates whose tails were cut.
    const uint32_t p0_bytes = (h.elem_count + 7) / 8;
    std::memcpy(row_heads(h.row) + h.first_elem / 8, p.payload, std::min(p0_bytes, p.payload_received));
    if (layout_.head_bits() == 2 && p.payload_received > p0_bytes) {  // plane Q follows plane 0
      std::memcpy(row_bins(h.row) + h.first_elem / 8, p.payload + p0_bytes,
                  std::min(p0_bytes, p.payload_received - p0_bytes));
    }
  }
  if (layout_.dtype() == DType::kF32) {
    decode_f32(p, scheme, reinterpret_cast<float*>(out_ + info.byte_offset) + h.first_elem);
  } else {
    decode_16(p, scheme, out_ + info.byte_offset + 2 * static_cast<size_t>(h.first_elem));
  }
}

PacketError Decoder::admit(const ParsedPacket& p, uint32_t* slot) {
  *slot = UINT32_MAX;
  const PacketHeader& h = p.hdr;
  if (h.cookie != id_.cookie) return reject(PacketError::kWrongCookie, h);
  if (h.msg_seq != id_.msg_seq || h.msg_bytes != layout_.bytes() || h.dtype != layout_.dtype() ||
      h.row_log2 != layout_.row_log2() || h.head_bits != layout_.head_bits() || h.row >= layout_.rows()) {
    return reject(PacketError::kInconsistent, h);
  }
  const RowInfo info = layout_.row(h.row);
  // rht and rotated rows holding a NaN/inf travel as sign (Encoder::encode_row).
  const bool scheme_ok = h.scheme == info.scheme ||
                         ((info.scheme == Scheme::kRht || info.scheme == Scheme::kRotated) && h.scheme == Scheme::kSign);
  const uint32_t slot_in_row = h.first_elem / info.elems_per_packet;
  if (info.tail != h.tail() || !scheme_ok || h.first_elem % info.elems_per_packet != 0 ||
      h.elem_count != std::min(info.elems_per_packet, info.elems - h.first_elem)) {
    return reject(PacketError::kInconsistent, h);
  }
  RowState& row = rows_[h.row];
  if (row.seen &&
      (row.scheme != h.scheme || f32_bits(row.scale) != f32_bits(h.scale) || row.bin_ratio != h.bin_ratio)) {
    return reject(PacketError::kInconsistent, h);
  }
  stats_.packets++;
  stats_.trimmed_packets += p.trimmed ? 1 : 0;
  if (row.finished) {
    stats_.late_packets++;
    return PacketError::kOk;
  }
  row.seen = true;
  row.scheme = h.scheme;
  row.scale = h.scale;
  row.bin_ratio = h.bin_ratio;
  const uint32_t s = row_first_slot_[h.row] + slot_in_row;
  int32_t& got = got_[s];
  if (static_cast<int32_t>(p.payload_received) <= got) {
    stats_.duplicate_packets++;
    return PacketError::kOk;
  }
  if (got < 0) ++slots_filled_;
  got = static_cast<int32_t>(p.payload_received);
  *slot = s;
  return PacketError::kOk;
}

PacketError Decoder::add(const ParsedPacket& p) {
  if (out_ == nullptr && layout_.bytes() != 0) return reject(PacketError::kInconsistent, p.hdr);  // collect mode
  uint32_t slot;
  const PacketError e = admit(p, &slot);
  if (e == PacketError::kOk && slot != UINT32_MAX) decode_slot(p, layout_.row(p.hdr.row), p.hdr.scheme);
  return e;
}

uint32_t Decoder::exact_slots_after(uint32_t row, uint32_t first_elem, InPlaceSlot* out, uint32_t max,
                                    uint32_t max_bytes) const {
  if (out_ == nullptr || combine_ || layout_.scheme() != Scheme::kNone || row >= layout_.rows()) return 0;
  const uint64_t esize = dtype_bytes(layout_.dtype());
  RowInfo info = layout_.row(row);
  uint32_t k = first_elem / info.elems_per_packet + 1, n = 0;
  uint64_t total = 0;
  while (n < max) {
    if (k >= info.packets) {
      if (info.row + 1 >= layout_.rows()) break;
      info = layout_.row(info.row + 1);
      k = 0;
    }
    if (info.tail || got_[row_first_slot_[info.row] + k] >= 0) break;
    const uint32_t first = k * info.elems_per_packet;
    const uint32_t count = std::min(info.elems_per_packet, info.elems - first);
    const uint32_t bytes = static_cast<uint32_t>(count * esize);
    if (total + kHeaderBytes + bytes > max_bytes || (n > 0 && bytes > out[0].bytes)) break;
    out[n++] = InPlaceSlot{info.row, static_cast<uint16_t>(first), static_cast<uint16_t>(count),
                           out_ + info.byte_offset + first * esize, bytes};
    total += kHeaderBytes + bytes;
    if (bytes < out[0].bytes) break;
    ++k;
  }
  return n;
}

bool Decoder::row_complete(uint32_t r) const {
  if (r >= layout_.rows()) return false;
  for (uint32_t s = row_first_slot_[r]; s < row_first_slot_[r + 1]; ++s) {
    if (got_[s] < 0) return false;
  }
  return true;
}

void Decoder::finish_row(uint32_t r) {
  if (r >= layout_.rows() || rows_[r].finished) return;
  RowState& row = rows_[r];
  const RowInfo info = layout_.row(r);
  const Scheme scheme = row.seen ? row.scheme : info.scheme;
  const uint32_t esize = info.tail ? 1 : dtype_bytes(layout_.dtype());
  if (scheme == Scheme::kRht) {
    estimate_rht_row(info, row);
  } else {
    // Packets that never arrived: 0.
    for (uint32_t k = 0; k < info.packets; ++k) {
      if (got_[row_first_slot_[r] + k] >= 0) continue;
      const uint32_t first = k * info.elems_per_packet;
      const uint32_t n = std::min(info.elems_per_packet, info.elems - first);
      std::memset(out_ + info.byte_offset + static_cast<size_t>(first) * esize, 0, static_cast<size_t>(n) * esize);
    }
  }
  if (combine_) combine_row(info);
  row.finished = true;
}

void Decoder::combine_bytes(uint64_t off, const uint8_t* src, uint64_t bytes) const {
  combine_into(combine_dst_ + off, src, bytes / red_type_bytes(combine_type_), combine_type_, combine_op_);
}

void Decoder::combine_row(const RowInfo& info) {
  const uint64_t esize = info.tail ? 1 : dtype_bytes(layout_.dtype());
  const uint32_t first_slot = row_first_slot_[info.row];
  // Runs of slots not combined from their payload, each combined from the scratch in one call.
  uint32_t k = 0;
  while (k < info.packets) {
    if (direct_[first_slot + k] != 0) {
      ++k;
      continue;
    }
    uint32_t end = k + 1;
    while (end < info.packets && direct_[first_slot + end] == 0) ++end;
    const uint64_t lo = static_cast<uint64_t>(k) * info.elems_per_packet;
    const uint64_t hi = std::min<uint64_t>(info.elems, static_cast<uint64_t>(end) * info.elems_per_packet);
    const uint64_t off = info.byte_offset + lo * esize;
    combine_bytes(off, out_ + off, (hi - lo) * esize);
    k = end;
  }
}

void Decoder::estimate_rht_row(const RowInfo& info, const RowState& row) {
  const uint32_t epp = info.elems_per_packet;
  const int32_t* got = got_.data() + row_first_slot_[info.row];
  // Each slot's levels, once (levels() is not free next to a row's worth of work).
  row_levels_.resize(info.packets);
  uint32_t own = 0;  // coordinates with their own bits (at least the 16-bit prefix)
  for (uint32_t k = 0; k < info.packets; ++k) {
    row_levels_[k] = levels(Scheme::kRht, false, std::min(epp, info.elems - k * epp), got[k]);
    own += row_levels_[k].n1;
  }
  if (own == info.elems) return;  // nothing to estimate
  const bool f32 = layout_.dtype() == DType::kF32, bf16 = layout_.dtype() == DType::kBF16;
  // The row's scaled signs f*sign(R(V)) (0 where even the head is missing), rotated back: the
  // estimate of the coordinates whose own bits did not arrive. The others keep theirs. An fp32
  // row with no own bits at all (fully trimmed) is rotated in place, saving a copy.
  const bool in_place = f32 && own == 0;
  float* zrow = in_place ? reinterpret_cast<float*>(out_ + info.byte_offset) : nullptr;
  if (!in_place) {
    tmpf_.resize(info.elems);
    zrow = tmpf_.data();
  }
  const uint8_t* heads = row_heads(info.row);
  const uint8_t* bins = layout_.head_bits() == 2 ? row_bins(info.row) : nullptr;
  for (uint32_t k = 0; k < info.packets; ++k) {
    const Levels& l = row_levels_[k];
    float* z = zrow + k * epp;
    fill_estimates(Scheme::kRht, row, heads + k * epp / 8, bins != nullptr ? bins + k * epp / 8 : nullptr, l, 0,
                   l.n0, z);
    std::fill(z + l.n0, z + l.n, 0.0f);
  }
  rht_sign_words(rng_key(cfg_.seed, id_.msg_seq, info.row, RngStream::kRhtSigns), info.elems, &signs_);
  rht_row_inverse(zrow, info.elems, signs_);
  if (in_place) return;
  for (uint32_t k = 0; k < info.packets; ++k) {
    const Levels& l = row_levels_[k];
    const uint32_t begin = k * epp + l.n1, count = l.n - l.n1;
    if (count == 0) continue;
    if (f32) {
      std::memcpy(out_ + info.byte_offset + 4 * static_cast<size_t>(begin), tmpf_.data() + begin,
                  4 * static_cast<size_t>(count));
    } else {
      tmp15_.resize(count);
      narrow16(tmpf_.data() + begin, count, bf16, tmp15_.data());
      std::memcpy(out_ + info.byte_offset + 2 * static_cast<size_t>(begin), tmp15_.data(),
                  2 * static_cast<size_t>(count));
    }
  }
}

DecodeStats Decoder::finish(std::vector<uint8_t>* estimated) {
  const uint64_t typed_elems = layout_.bytes() / dtype_bytes(layout_.dtype());
  if (estimated != nullptr) estimated->assign(typed_elems + layout_.bytes() % dtype_bytes(layout_.dtype()), 0);
  DecodeStats s = stats_;
  for (uint32_t r = 0; r < layout_.rows(); ++r) {
    finish_row(r);
    const RowInfo info = layout_.row(r);
    const Scheme scheme = rows_[r].seen ? rows_[r].scheme : info.scheme;
    const uint64_t base = info.tail ? typed_elems : static_cast<uint64_t>(r) * layout_.row_elems();
    auto mark = [&](uint32_t begin, uint32_t end) {  // output elements [begin, end) of the row are estimates
      s.estimated += end - begin;
      if (estimated != nullptr) std::fill(estimated->begin() + base + begin, estimated->begin() + base + end, 1);
    };
    // Slot k is exact on the prefix [first, first + n2) of its elements; the rest is estimated
    // (rht too: its planes 1+2 are the input's bits, each coordinate stands on its own).
    for (uint32_t k = 0; k < info.packets; ++k) {
      const uint32_t first = k * info.elems_per_packet;
      const uint32_t n = std::min(info.elems_per_packet, info.elems - first);
      const Levels l = levels(scheme, info.tail, n, got_[row_first_slot_[r] + k]);
      s.elems += n;
      s.full += l.n2;
      s.plane1 += l.n1 - l.n2;
      s.head_only += l.n0 - l.n1;
      s.missing += n - l.n0;
      if (l.n2 < n) mark(first + l.n2, first + n);
    }
  }
  return s;
}

}  // namespace trim::codec
