#include "codec/encoder.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "codec/planes.h"
#include "codec/rht.h"
#include "codec/rng.h"
#include "common/log.h"

namespace trim::codec {

struct Encoder::RowCtx {
  const Layout* layout;
  const MessageId* id;
  RowInfo info;
  uint8_t* out;
  size_t stride;
  uint32_t* sizes;
};

namespace {

// Row scale of the `sign` scheme and base of the sq/sd clip: the RMS of the finite values.
float rms(double sum_sq, uint32_t n) { return n == 0 ? 0.0f : static_cast<float>(std::sqrt(sum_sq / n)); }

// A rotated row's head scale from its norms (|x|^2 = |R(x)|^2, the rotation is orthonormal):
// DRIVE's unbiased |x|^2 / |R(x)|_1, or the mean magnitude |R(x)|_1 / d, the sign's
// least-squares scale (NCCL_TRIM_HEAD_SCALE).
float rotated_scale(double sum_sq, double sum_abs, uint32_t d, bool mse) {
  if (!(sum_abs > 0.0)) return 0.0f;
  return static_cast<float>(mse ? sum_abs / d : sum_sq / sum_abs);
}

}  // namespace

void Encoder::log_unrotated(const RowCtx& c) {
  TRIM_DEBUG("encoder: message {} row {} holds NaN/inf or overflows the rotation: sent unrotated (sign)",
             c.id->msg_seq, c.info.row);
}

Encoder::Encoder(const CodecConfig& cfg) : cfg_(cfg) {}

PacketHeader Encoder::row_header(const Layout& layout, const MessageId& id, const RowInfo& info, Scheme scheme,
                                 float scale, uint16_t bin_ratio) {
  PacketHeader h;
  h.flags = static_cast<uint8_t>((info.tail ? kFlagTail : 0) |
                                 (id.trimmable && scheme != Scheme::kNone ? kFlagTrimmable : 0));
  h.scheme = scheme;
  h.dtype = layout.dtype();
  h.head_bits = layout.head_bits();
  h.row_log2 = layout.row_log2();
  h.cookie = id.cookie;
  h.msg_seq = id.msg_seq;
  h.msg_bytes = static_cast<uint32_t>(layout.bytes());
  h.row = info.row;
  h.scale = scale;
  h.bin_ratio = bin_ratio;
  return h;
}

uint32_t Encoder::set_packet_range(PacketHeader* h, const PlaneBytes& planes, uint32_t first, uint32_t n) {
  h->first_elem = static_cast<uint16_t>(first);
  h->elem_count = static_cast<uint16_t>(n);
  h->payload_bytes = static_cast<uint16_t>(planes.total());
  h->trim_bytes = static_cast<uint16_t>(trim_point_bytes(planes, h->scheme, h->head_bits));
  return planes.total();
}

void Encoder::write_row_headers(const RowCtx& c, Scheme scheme, float scale, uint16_t bin_ratio) {
  // One template per row; per packet only the element range and the sizes change, and those
  // are the same for every packet but the last.
  PacketHeader h = row_header(*c.layout, *c.id, c.info, scheme, scale, bin_ratio);
  const PlaneBits bits = plane_bits(scheme, h.dtype, c.info.tail, h.head_bits);
  const uint32_t d = c.info.elems, epp = c.info.elems_per_packet;
  PlaneBytes planes = plane_bytes(bits, epp);
  for (uint32_t k = 0, first = 0; first < d; ++k, first += epp) {
    const uint32_t n = std::min(epp, d - first);
    if (n != epp) planes = plane_bytes(bits, n);
    c.sizes[k] = kHeaderBytes + set_packet_range(&h, planes, first, n);
    const bool spans = spans_valid_ && spans_[2 * k].bytes != 0;
    write_header(h, c.out + k * c.stride, cfg_.fabric_keep_bytes, spans ? &spans_[2 * k] : nullptr, spans ? 2 : 0);
  }
}

Result<Encoder::RawSlice> Encoder::raw_packet_header(const Layout& layout, const MessageId& id, uint32_t r,
                                                     uint32_t k, uint8_t* header) {
  if (r >= layout.rows()) return Status(Code::kInvalidArgument, "row index past the message");
  const RowInfo info = layout.row(r);
  if (!info.tail && info.scheme != Scheme::kNone) {
    return Status(Code::kInvalidArgument, "raw_packet_header: the row is encoded, not raw");
  }
  if (k >= info.packets) return Status(Code::kInvalidArgument, "packet index past the row");
  PacketHeader h = row_header(layout, id, info, Scheme::kNone, 0.0f, 0);
  const uint32_t esize = info.tail ? 1 : dtype_bytes(layout.dtype());
  const uint32_t first = k * info.elems_per_packet;
  const uint32_t n = std::min(info.elems_per_packet, info.elems - first);
  RawSlice s;
  s.payload_bytes = set_packet_range(&h, plane_bytes(plane_bits(Scheme::kNone, h.dtype, info.tail), n), first, n);
  s.payload_offset = info.byte_offset + static_cast<uint64_t>(first) * esize;
  write_header(h, header);
  return s;
}

void Encoder::pack_random_heads(const RowCtx& c, Scheme scheme, const float* v, uint32_t first, uint32_t n,
                                float clip, uint8_t* p0) const {
  const uint64_t key = rng_key(cfg_.seed, c.id->msg_seq, c.info.row, RngStream::kDither);
  random_heads(key, first, v, n, clip, scheme == Scheme::kSd, p0);
}

void Encoder::pack_sign_payloads(const RowCtx& c, const float* src, const float* tails, Norms* norms) {
  const uint32_t d = c.info.elems, epp = c.info.elems_per_packet;
  const Scheme scheme = tails != nullptr ? Scheme::kRht : Scheme::kSign;
  const PlaneBits bits = plane_bits(scheme, DType::kF32, false, c.layout->head_bits());
  PlaneBytes planes = plane_bytes(bits, epp);
  if (tails != nullptr) spans_.resize(2 * static_cast<size_t>(c.info.packets));
  for (uint32_t k = 0, first = 0; first < d; ++k, first += epp) {
    const uint32_t n = std::min(epp, d - first);
    if (n != epp) planes = plane_bytes(bits, n);
    uint8_t* p0 = c.out + k * c.stride + kHeaderBytes;
    if (tails != nullptr) {
      uint8_t* p1 = p0 + planes.p1_offset();
      uint32_t regs[2] = {0, 0};
      const size_t ahead = k + 1 < c.info.packets ? c.stride : 0;  // the next packet's slot
      const bool folded = pack_f32_rht_crc(src + first, tails + first, n, p0, p1, p1 + 2 * n, norms, regs, ahead);
      spans_[2 * k] = {planes.p1_offset(), folded ? 2 * n : 0, regs[0]};
      spans_[2 * k + 1] = {planes.p1_offset() + 2 * n, folded ? 2 * n : 0, regs[1]};
    } else {
      pack_f32_sign_layout(src + first, n, p0, p0 + planes.p1_offset(), p0 + planes.p2_offset(), norms);
    }
  }
}

float Encoder::pack_row_bins(const RowCtx& c, Scheme scheme, const float* src, double sum_sq, uint16_t* bin_ratio) {
  const uint32_t d = c.info.elems, epp = c.info.elems_per_packet;
  const float threshold = kBinThresholdRms * rms(sum_sq, d);
  const PlaneBits bits = plane_bits(scheme, c.layout->dtype(), false, c.layout->head_bits());
  BinSums sums;
  for (uint32_t k = 0, first = 0; first < d; ++k, first += epp) {
    const uint32_t n = std::min(epp, d - first);
    uint8_t* pq = c.out + k * c.stride + kHeaderBytes + plane_bytes(bits, n).q_offset();
    pack_bins(src + first, n, threshold, pq, &sums);
  }
  // Each bin's mean magnitude: the least-squares levels. A row with no outer element (or no
  // finite one) has only one level.
  double inner = sums.inner != 0 ? sums.inner_abs / static_cast<double>(sums.inner) : 0.0;
  double outer = sums.outer != 0 ? sums.outer_abs / static_cast<double>(sums.outer) : inner;
  if (scheme != Scheme::kSign && !cfg_.head_scale_mse) {
    // unbiased: both levels scaled so that <estimate, x> = |x|^2, as f does for 1-bit heads.
    // k can exceed 1, so a row whose values come near the largest float keeps its unscaled
    // levels rather than send an infinite scale (which every receiver would reject).
    const double dot = inner * sums.inner_abs + outer * sums.outer_abs;
    const double k = dot > 0.0 ? sum_sq / dot : 1.0;
    if (outer * k <= static_cast<double>(std::numeric_limits<float>::max())) {
      inner *= k;
      outer *= k;
    }
  }
  *bin_ratio = outer > 0.0 ? static_cast<uint16_t>(std::lround(std::min(1.0, inner / outer) * 65535.0)) : 0;
  return static_cast<float>(outer);
}

void Encoder::pack_value_tails(const RowCtx& c, const float* v) {
  const uint32_t d = c.info.elems, epp = c.info.elems_per_packet;
  const PlaneBits bits = plane_bits(c.info.scheme, DType::kF32, false, c.layout->head_bits());
  for (uint32_t k = 0, first = 0; first < d; ++k, first += epp) {
    const uint32_t n = std::min(epp, d - first);
    uint8_t* p1 = c.out + k * c.stride + kHeaderBytes + plane_bytes(bits, n).p1_offset();
    pack16_from32(v + first, n, 16, p1);
    pack16_from32(v + first, n, 0, p1 + 2 * n);
  }
}

void Encoder::encode_f32_row(const RowCtx& c, const float* v) {
  const uint32_t d = c.info.elems, epp = c.info.elems_per_packet;
  spans_valid_ = false;
  Scheme scheme = c.info.scheme;
  float scale = 0.0f;
  uint16_t bin_ratio = 0;
  const bool bins = c.layout->head_bits() == 2;  // never for sq/sd: CodecConfig::validate
  if (scheme == Scheme::kSq || scheme == Scheme::kSd) {
    // The heads depend on the clip, so the norm comes first here.
    bool finite = true;
    scale = rms(sum_squares(v, d, &finite), d) * cfg_.clip_sigmas;
    for (uint32_t k = 0, first = 0; first < d; ++k, first += epp) {
      const uint32_t n = std::min(epp, d - first);
      pack_random_heads(c, scheme, v + first, first, n, scale, c.out + k * c.stride + kHeaderBytes);
    }
    pack_value_tails(c, v);
  } else {
    // sign reads the row once: payloads first, gathering the norms on the way; the headers
    // follow when the row's scale is known. rht takes its heads (the signs) and the norms from
    // the rotated row, and its planes 1+2 from the input, so an untrimmed packet is exact.
    const bool rht = scheme == Scheme::kRht && c.id->rotate;
    if (scheme == Scheme::kRht && !rht) scheme = Scheme::kSign;  // a quiet connection: unrotated
    const float* src = v;
    if (rht) {
      f32_.resize(d);
      rht_sign_words(rng_key(cfg_.seed, c.id->msg_seq, c.info.row, RngStream::kRhtSigns), d, &signs_);
      rht_row_forward(v, f32_.data(), d, signs_);
      src = f32_.data();
    }
    Norms norms;
    pack_sign_payloads(c, src, rht ? v : nullptr, &norms);
    spans_valid_ = rht && norms.finite;  // else every plane is rewritten below
    if (!norms.finite) {
      // A NaN or inf (in the input, or an overflow in the rotation) would smear over a whole
      // rotated block: such rows go per element, scaled by the RMS of their finite values.
      bool finite = true;
      norms.sum_sq = sum_squares(v, d, &finite);
      scale = rms(norms.sum_sq, d);
      if (rht) {
        Norms unused;
        pack_sign_payloads(c, v, nullptr, &unused);
        log_unrotated(c);
      }
      scheme = Scheme::kSign;
      src = v;
    } else if (rht || scheme == Scheme::kRotated) {
      // A rotated row is R(V) itself.
      scale = rotated_scale(norms.sum_sq, norms.sum_abs, d, cfg_.head_scale_mse);
    } else {
      scale = rms(norms.sum_sq, d);
    }
    // 2-bit heads: the bins of the values whose signs are the heads (src), and their levels.
    if (bins) scale = pack_row_bins(c, scheme, src, norms.sum_sq, &bin_ratio);
  }
  write_row_headers(c, scheme, scale, bin_ratio);
}

void Encoder::encode_16_row(const RowCtx& c, const uint16_t* v) {
  spans_valid_ = false;
  const uint32_t d = c.info.elems, epp = c.info.elems_per_packet;
  const bool bf16 = c.layout->dtype() == DType::kBF16;
  Scheme scheme = c.info.scheme;
  f32_.resize(d);
  // The widened row (heads of sq/sd, input of rht, bins) and its norms in one pass; |x|_1 only
  // where a rotated row's scale needs it (and only where the row is finite).
  bool finite = true;
  double l1 = 0.0;
  const double sum_sq =
      widen16_sum_squares(v, d, bf16, f32_.data(), &finite, scheme == Scheme::kRotated ? &l1 : nullptr);
  float scale = rms(sum_sq, d);
  if (scheme == Scheme::kSq || scheme == Scheme::kSd) scale *= cfg_.clip_sigmas;

  const bool unrotated = scheme == Scheme::kRht && !c.id->rotate;  // a quiet connection
  if (unrotated) {
    scheme = Scheme::kSign;
  } else if (scheme == Scheme::kRht && finite) {
    // Rotate in fp32: the heads are the signs of the rotated values, written here with |R(x)|_1
    // in one pass (packets hold multiples of 8 elements but the last: sum_abs's lanes). A row
    // that falls back to sign has all its planes rewritten below.
    // A bf16 row near the top of the range can overflow fp32 in the rotation: sent unrotated.
    rht_sign_words(rng_key(cfg_.seed, c.id->msg_seq, c.info.row, RngStream::kRhtSigns), d, &signs_);
    rht_row_forward(f32_.data(), f32_.data(), d, signs_);
    double lanes[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (uint32_t k = 0, first = 0; first < d; ++k, first += epp) {
      pack_heads_sum_abs(f32_.data() + first, std::min(epp, d - first), c.out + k * c.stride + kHeaderBytes, lanes);
    }
    const double rotated_l1 = lanes_total(lanes);  // inf or NaN when a rotated value overflowed
    if (std::isfinite(rotated_l1)) {
      scale = rotated_scale(sum_sq, rotated_l1, d, cfg_.head_scale_mse);
    } else {
      scheme = Scheme::kSign;
      widen16(v, d, bf16, f32_.data());  // the bins are the input's again
    }
  } else if (scheme == Scheme::kRht) {
    scheme = Scheme::kSign;
  }
  if (scheme != c.info.scheme && !unrotated) {
    log_unrotated(c);
  }
  if (scheme == Scheme::kRotated) {
    // Already rotated upstream: the sign layout, scaled as rht is; a NaN/inf row as sign.
    scale = rotated_scale(sum_sq, finite ? l1 : 0.0, d, cfg_.head_scale_mse);
    if (!finite) scheme = Scheme::kSign;
  }
  if (scheme == Scheme::kSign) scale = rms(sum_sq, d);

  // Planes 1 carry the input bits. sq/sd heads come from the widened values (f32_); rht's are
  // in place already.
  const PlaneBits bits = plane_bits(scheme, c.layout->dtype(), false, c.layout->head_bits());
  for (uint32_t k = 0, first = 0; first < d; ++k, first += epp) {
    const uint32_t n = std::min(epp, d - first);
    uint8_t* p0 = c.out + k * c.stride + kHeaderBytes;
    uint8_t* p1 = p0 + plane_bytes(bits, n).p1_offset();
    if (scheme == Scheme::kSign || scheme == Scheme::kRotated) {
      pack16_sign_layout(v + first, n, p0, p1);
      continue;
    }
    if (scheme != Scheme::kRht) pack_random_heads(c, scheme, f32_.data() + first, first, n, scale, p0);
    pack16_from16(v + first, n, p1);
  }
  // 2-bit heads: the bins of the values whose signs are the heads (f32_: widened, or rotated).
  uint16_t bin_ratio = 0;
  if (bits.bq != 0) scale = pack_row_bins(c, scheme, f32_.data(), sum_sq, &bin_ratio);
  write_row_headers(c, scheme, scale, bin_ratio);
}

void Encoder::encode_raw_row(const RowCtx& c, const uint8_t* bytes) {
  spans_valid_ = false;
  const uint32_t esize = c.info.tail ? 1 : dtype_bytes(c.layout->dtype());
  const uint32_t epp = c.info.elems_per_packet;
  for (uint32_t k = 0, first = 0; first < c.info.elems; ++k, first += epp) {
    const uint32_t n = std::min(epp, c.info.elems - first);
    std::memcpy(c.out + k * c.stride + kHeaderBytes, bytes + static_cast<size_t>(first) * esize,
                static_cast<size_t>(n) * esize);
  }
  write_row_headers(c, Scheme::kNone, 0.0f, 0);
}

Result<uint32_t> Encoder::encode_row(const Layout& layout, const MessageId& id, const void* msg, uint32_t r,
                                     uint8_t* out, size_t stride, uint32_t* sizes) {
  if (r >= layout.rows()) return Status(Code::kInvalidArgument, "row index past the message");
  if (stride < cfg_.packet_bytes) return Status(Code::kInvalidArgument, "packet stride below packet_bytes");
  if (layout.row_elems() != cfg_.row_elems) return Status(Code::kInvalidArgument, "layout built for another config");
  RowCtx c{&layout, &id, layout.row(r), out, stride, sizes};
  const uint8_t* base = static_cast<const uint8_t*>(msg) + c.info.byte_offset;
  if (c.info.tail || c.info.scheme == Scheme::kNone) {
    encode_raw_row(c, base);
  } else if (layout.dtype() == DType::kF32) {
    encode_f32_row(c, reinterpret_cast<const float*>(base));
  } else {
    encode_16_row(c, reinterpret_cast<const uint16_t*>(base));
  }
  return c.info.packets;
}

Result<std::vector<std::vector<uint8_t>>> Encoder::encode_message(const Layout& layout, const MessageId& id,
                                                                  const void* msg) {
  std::vector<std::vector<uint8_t>> packets;
  const uint32_t max_row_packets = std::max(layout.max_packets_per_row(), 1u);
  std::vector<uint8_t> buf(static_cast<size_t>(max_row_packets) * cfg_.packet_bytes);
  std::vector<uint32_t> sizes(max_row_packets);
  for (uint32_t r = 0; r < layout.rows(); ++r) {
    Result<uint32_t> n = encode_row(layout, id, msg, r, buf.data(), cfg_.packet_bytes, sizes.data());
    if (!n) return n.status();
    for (uint32_t k = 0; k < *n; ++k) {
      const uint8_t* p = buf.data() + static_cast<size_t>(k) * cfg_.packet_bytes;
      packets.emplace_back(p, p + sizes[k]);
    }
  }
  return packets;
}

}  // namespace trim::codec
