#include "codec/layout.h"
#include "common/param_enums.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

namespace trim::codec {

const char* scheme_name(Scheme s) {
  switch (s) {
    case Scheme::kNone: return "none";
    case Scheme::kSign: return "sign";
    case Scheme::kSq: return "sq";
    case Scheme::kSd: return "sd";
    case Scheme::kRht: return "rht";
    case Scheme::kRotated: return "rotated";
  }
  return "?";
}

const char* dtype_name(DType d) {
  switch (d) {
    case DType::kRaw: return "raw";
    case DType::kF32: return "f32";
    case DType::kBF16: return "bf16";
    case DType::kF16: return "f16";
  }
  return "?";
}

bool parse_scheme(const char* text, Scheme* out) {
  for (int i = 0; i < kNumSchemes; ++i) {
    if (std::strcmp(text, scheme_name(static_cast<Scheme>(i))) == 0) {
      *out = static_cast<Scheme>(i);
      return true;
    }
  }
  return false;
}

bool parse_dtype(const char* text, DType* out) {
  for (int i = 0; i < kNumDTypes; ++i) {
    if (std::strcmp(text, dtype_name(static_cast<DType>(i))) == 0) {
      *out = static_cast<DType>(i);
      return true;
    }
  }
  return false;
}

// NCCL_TRIM_SCHEME's choices are the wire's scheme numbers.
static_assert(static_cast<int>(param::Scheme::kNone) == static_cast<int>(Scheme::kNone) &&
                  static_cast<int>(param::Scheme::kSign) == static_cast<int>(Scheme::kSign) &&
                  static_cast<int>(param::Scheme::kSq) == static_cast<int>(Scheme::kSq) &&
                  static_cast<int>(param::Scheme::kSd) == static_cast<int>(Scheme::kSd) &&
                  static_cast<int>(param::Scheme::kRht) == static_cast<int>(Scheme::kRht),
              "NCCL_TRIM_SCHEME's choices must list the codec's schemes in wire order");

Result<CodecConfig> CodecConfig::from_params(const Params& p) {
  return from_params(p, p.mtu == kAuto ? kNoInterfaceMtuBytes : static_cast<uint32_t>(p.mtu));
}

Result<CodecConfig> CodecConfig::from_params(const Params& p, uint32_t mtu_bytes) {
  CodecConfig c;
  c.scheme = static_cast<Scheme>(param::scheme(p));  // the knob lists the schemes in wire order
  c.row_elems = static_cast<uint32_t>(p.row_elems);
  switch (param::head_bits(p)) {
    case param::HeadBits::k1: c.head_bits = 1; break;
    case param::HeadBits::k2: c.head_bits = 2; break;
    case param::HeadBits::k16: c.head_bits = 16; break;
  }
  // Below the IP/UDP headers the subtraction would wrap: leave 0 for validate() to refuse.
  c.packet_bytes = mtu_bytes > kIpv4UdpBytes ? packet_bytes_for_mtu(mtu_bytes) : 0;
  c.seed = p.seed;
  c.clip_sigmas = static_cast<float>(p.clip_sigmas);
  c.head_scale_mse = param::head_scale(p) == param::HeadScale::kMse;
  c.fabric_keep_bytes = codec::fabric_keep_bytes(static_cast<uint32_t>(p.fabric_trim_bytes));
  TRIM_RETURN_IF_ERROR(c.validate());
  return c;
}

Status CodecConfig::validate() const {
  if (row_elems < 8 || row_elems > 32768 || (row_elems & (row_elems - 1)) != 0) {
    return Status(Code::kInvalidArgument, fmt::format("row_elems {} is not a power of two in [8, 32768]", row_elems));
  }
  if (!valid_head_bits(head_bits)) {
    return Status(Code::kInvalidArgument, fmt::format("head_bits {} is not 1, 2 or 16", head_bits));
  }
  if (head_bits == 2 && !sign_head(scheme) && scheme != Scheme::kNone) {
    return Status(Code::kInvalidArgument,
                  fmt::format("NCCL_TRIM_HEAD_BITS=2 needs a scheme whose head is a sign (sign, rht); "
                              "NCCL_TRIM_SCHEME={} has random heads: use NCCL_TRIM_HEAD_BITS=1 or 16",
                              scheme_name(scheme)));
  }
  // Smallest useful packet: the header plus 8 elements of the widest layout (fp32 sq: 33 bits).
  const uint32_t min_packet = kHeaderBytes + 33;
  if (packet_bytes < min_packet || packet_bytes > 65535) {
    return Status(Code::kInvalidArgument,
                  fmt::format("packet_bytes {} is outside [{}, 65535]", packet_bytes, min_packet));
  }
  if (!(clip_sigmas > 0.0f)) return Status(Code::kInvalidArgument, "clip_sigmas must be positive");
  return Status::ok();
}

uint32_t Layout::elems_per_packet(Scheme scheme, DType dtype, bool tail, uint32_t packet_bytes,
                                  uint32_t row_elems, uint32_t head_bits, uint32_t fabric_keep_bytes) {
  const PlaneBits bits = plane_bits(scheme, dtype, tail, head_bits);
  const uint64_t budget_bits = static_cast<uint64_t>(packet_bytes - kHeaderBytes) * 8;
  const uint64_t per_elem = bits.b0 + bits.bq + bits.b1 + bits.b2;
  uint64_t n = budget_bits / per_elem;
  // Whole bytes per plane with no padding: lossy packets hold a multiple of 8 elements.
  if (bits.b0 != 0) n &= ~uint64_t{7};
  if (bits.b0 != 0 && fabric_keep_bytes != 0) {
    // Every head (the trim point) inside what a fabric trim keeps, unless that makes the packets
    // too small to be worth it (multiples of 8 elements: whole bytes per plane).
    const uint64_t trim_bits = head_bits == 16 ? bits.b0 + bits.b1 : bits.b0 + bits.bq;
    const uint64_t fit = (static_cast<uint64_t>(fabric_keep_bytes) * 8 / trim_bits) & ~uint64_t{7};
    if (fit >= kMinFabricElems) n = std::min(n, fit);
  }
  n = std::min<uint64_t>({n, 65535, row_elems});
  return static_cast<uint32_t>(n);
}

Result<Layout> Layout::make(const CodecConfig& cfg, DType dtype, Scheme scheme, uint64_t bytes) {
  TRIM_RETURN_IF_ERROR(cfg.validate());
  if (bytes > 0xFFFFFFFFull) {
    return Status(Code::kInvalidArgument, fmt::format("message of {} bytes exceeds the 4 GiB limit", bytes));
  }
  if (dtype == DType::kRaw && scheme != Scheme::kNone) {
    return Status(Code::kInvalidArgument, fmt::format("scheme {} needs a floating-point dtype", scheme_name(scheme)));
  }
  Layout l;
  l.dtype_ = dtype;
  l.scheme_ = scheme;
  l.bytes_ = bytes;
  l.row_elems_ = cfg.row_elems;
  l.row_log2_ = static_cast<uint8_t>(__builtin_ctz(cfg.row_elems));
  l.head_bits_ = cfg.head_bits;
  const uint32_t esize = dtype_bytes(dtype);
  l.typed_elems_ = bytes / esize;
  l.tail_bytes_ = static_cast<uint32_t>(bytes % esize);
  l.typed_rows_ = static_cast<uint32_t>((l.typed_elems_ + cfg.row_elems - 1) / cfg.row_elems);
  l.epp_ = elems_per_packet(scheme, dtype, false, cfg.packet_bytes, cfg.row_elems, cfg.head_bits,
                            cfg.fabric_keep_bytes);
  l.tail_epp_ = elems_per_packet(Scheme::kNone, DType::kRaw, true, cfg.packet_bytes, cfg.row_elems);
  for (uint32_t r = 0; r < l.rows(); ++r) l.packets_ += l.row(r).packets;
  return l;
}

std::string fabric_trim_summary(const CodecConfig& cfg, uint32_t fabric_trim_bytes, uint32_t mtu_bytes) {
  const uint32_t keep = fabric_keep_bytes(fabric_trim_bytes);
  const uint32_t packet = packet_bytes_for_mtu(mtu_bytes);
  std::string out = fmt::format(
      "a trim to {} B keeps {} B of frame (Ethernet), {} B IP/UDP, {} B of our header and {} B of payload; at MTU {}",
      fabric_trim_bytes, kFabricL2Bytes, kIpv4UdpBytes, kHeaderBytes, keep, mtu_bytes);
  if (keep == 0 && fabric_trim_bytes > 0) out += " the cut falls inside our header: every trim is a loss";
  for (DType d : {DType::kF32, DType::kBF16}) {
    const uint32_t n = Layout::elems_per_packet(cfg.scheme, d, false, packet, cfg.row_elems, cfg.head_bits, keep);
    const PlaneBytes planes = plane_bytes(plane_bits(cfg.scheme, d, false, cfg.head_bits), n);
    const uint32_t heads = trim_point_bytes(planes, cfg.scheme, cfg.head_bits);
    out += fmt::format("; {} {}: {} elements a packet ({} B), trim point at {} B: {}", dtype_name(d),
                       scheme_name(cfg.scheme), n, kHeaderBytes + planes.total(), heads,
                       heads <= keep ? std::string("every head survives")
                                     : fmt::format("{} of {} B of heads survive", keep, heads));
  }
  return out;
}

uint32_t Layout::max_packets_per_row() const { return (row_elems_ + epp_ - 1) / epp_; }

RowInfo Layout::row(uint32_t r) const {
  RowInfo info;
  info.row = r;
  if (r >= typed_rows_) {  // the tail: fewer than 8 raw bytes, one packet
    info.tail = true;
    info.elems = tail_bytes_;
    info.byte_offset = bytes_ - tail_bytes_;
    info.elems_per_packet = tail_epp_;
    info.packets = 1;
    info.scheme = Scheme::kNone;
    return info;
  }
  const uint64_t first = static_cast<uint64_t>(r) * row_elems_;
  info.elems = static_cast<uint32_t>(std::min<uint64_t>(row_elems_, typed_elems_ - first));
  info.byte_offset = first * dtype_bytes(dtype_);
  info.elems_per_packet = epp_;
  info.packets = (info.elems + epp_ - 1) / epp_;
  info.scheme = scheme_;
  return info;
}

void Layout::row_first_packets(std::vector<uint32_t>* out) const {
  out->resize(rows() + 1);
  uint32_t first = 0;
  for (uint32_t r = 0; r < rows(); ++r) {
    (*out)[r] = first;
    first += row(r).packets;
  }
  (*out)[rows()] = first;
}

}  // namespace trim::codec
