// Exactness where the codec promises it, and the stated bounds where it does not.
#include <fmt/format.h>

#include <cmath>

#include "codec/fwht_internal.h"
#include "codec/rht.h"
#include "tests/codec_util.h"

namespace trim::codec::testing {
namespace {

const DType kFloatTypes[] = {DType::kF32, DType::kBF16, DType::kF16};
const uint32_t kMtus[] = {1500, 4096, 9000};

// Element i of a message of dtype dt set to the bits of a NaN with a payload (or an inf).
void put_special(std::vector<uint8_t>* msg, DType dt, size_t i, bool nan, bool negative) {
  if (dt == DType::kF32) {
    const uint32_t u = (negative ? 0x80000000u : 0u) | (nan ? 0x7FC00123u : 0x7F800000u);
    std::memcpy(&(*msg)[4 * i], &u, 4);
  } else {
    const uint16_t top = dt == DType::kBF16 ? (nan ? 0x7FC3 : 0x7F80) : (nan ? 0x7E05 : 0x7C00);
    const uint16_t h = static_cast<uint16_t>((negative ? 0x8000u : 0u) | top);
    std::memcpy(&(*msg)[2 * i], &h, 2);
  }
}

// Every scheme carries every bit of every element when nothing is trimmed: the output bytes
// equal the input bytes, for every dtype, 1-, 2- (sign-head schemes) and 16-bit heads, odd sizes (with an odd raw
// tail), several rows, and MTUs. The data mixes in 0, -0, denormals, the fp16 maximum and
// values that overflow fp16 to inf; the "nonfinite" variant adds NaNs with payloads and infs
// (rht sends such rows as sign, which is exact too).
TEST(CodecRoundTrip, UntrimmedIsBitExact) {
  const size_t sizes[] = {0, 1, 3, 1000, 32767, 32769, 100003};
  for (Scheme scheme : {Scheme::kNone, Scheme::kSign, Scheme::kSq, Scheme::kSd, Scheme::kRht}) {
    for (DType dt : kFloatTypes) {
      for (size_t elems : sizes) {
        for (uint32_t mtu : kMtus) {
          for (uint8_t heads : {uint8_t{1}, uint8_t{2}, uint8_t{16}}) {
            if (heads == 2 && (scheme == Scheme::kSq || scheme == Scheme::kSd)) continue;  // random heads: no bins
            for (bool nonfinite : {false, true}) {
              if (nonfinite && elems < 1000) continue;
              CodecConfig cfg = config(scheme, mtu, 32768, heads);
              const size_t tail = elems % 2 == 1 ? dtype_bytes(dt) - 1 : 0;  // odd sizes: a raw tail
              std::vector<uint8_t> msg = message_bytes(dt, elems, tail, elems * 31 + mtu + heads, true);
              if (nonfinite) {
                put_special(&msg, dt, 5, true, false);
                put_special(&msg, dt, 998, false, true);
                put_special(&msg, dt, elems - 1, true, true);  // the last row too
              }
              Decoded d = round_trip(cfg, dt, msg, keep_all);
              ASSERT_EQ(d.bytes, msg) << scheme_name(scheme) << " " << dtype_name(dt) << " elems=" << elems
                                      << " mtu=" << mtu << " heads=" << int{heads} << " nonfinite=" << nonfinite;
              EXPECT_EQ(d.stats.estimated, 0u);
              EXPECT_EQ(d.stats.missing + d.stats.head_only + d.stats.plane1, 0u);
              EXPECT_EQ(d.stats.full, elems + tail);
            }
          }
        }
      }
    }
  }
}

// The transport's zero-copy path sends header + a slice of the message; it must be byte for
// byte the packet encode_row builds, for raw bytes and typed exact messages with a tail row.
// The rotation's fast paths change no byte on the wire: every packet of an rht message is the
// same whichever FWHT path rotated it (the scalar one is the reference), for rows of 2^15 and
// the power-of-two pieces of odd last rows, with 0, -0 and denormals mixed in and a row holding
// an inf and a NaN (sent unrotated), at 1- and 2-bit heads.
TEST(CodecRoundTrip, RhtPacketsIdenticalOnEveryFwhtPath) {
  for (size_t elems : {size_t{1}, size_t{3}, size_t{1000}, size_t{32769}, size_t{3 * 32768 + 1003}}) {
    std::vector<uint8_t> msg = message_bytes(DType::kF32, elems, 0, 90 + elems, true);
    if (elems > 2 * 32768) {
      put_special(&msg, DType::kF32, 32768 + 5, false, true);  // row 1: -inf and a NaN
      put_special(&msg, DType::kF32, 2 * 32768 - 9, true, false);
    }
    for (uint8_t heads : {uint8_t{1}, uint8_t{2}}) {
      const CodecConfig cfg = config(Scheme::kRht, 4096, 32768, heads);
      ASSERT_TRUE(detail::fwht_force_isa("scalar"));
      const Encoded want = encode(cfg, DType::kF32, msg);
      for (const char* isa : {"avx2", "avx512"}) {
        if (!detail::fwht_force_isa(isa)) continue;
        const Encoded got = encode(cfg, DType::kF32, msg);
        ASSERT_TRUE(want.ok && got.ok);
        EXPECT_TRUE(got.packets == want.packets) << isa << " elems=" << elems << " heads=" << int{heads};
      }
    }
    (void)detail::fwht_force_isa(nullptr);
  }
}

// The rht pass that folds planes 1+2's CRC while writing them (AVX2 with PCLMUL), whose registers
// write_header joins instead of reading the planes: every packet byte for byte what the scalar
// kernels give (planes read back for the CRC). Odd rows (1, 7, 2^15 - 1, 2^15 + 3 elements: a
// last packet of n % 8 != 0 takes the unfolded path), messages at addresses off the vector
// width, 1- and 2-bit heads, MTUs whose packets hold 8k elements or not, a fabric cut inside the
// planes (a span cut by a check point is read), and a row with a NaN (sent unrotated).
TEST(CodecRoundTrip, RhtPacketsIdenticalWithFoldedPlaneCrcs) {
  if (!avx2::crc_supported()) GTEST_SKIP() << "no AVX2 + PCLMUL here";
  for (size_t elems : {size_t{1}, size_t{7}, size_t{1000}, size_t{32767}, size_t{32768}, size_t{32771}}) {
    for (size_t offset_bytes : {size_t{0}, size_t{4}, size_t{12}}) {
      std::vector<uint8_t> msg = message_bytes(DType::kF32, elems, 0, 7 + elems, false);
      if (elems == 32771 && offset_bytes == 12) put_special(&msg, DType::kF32, 500, true, false);
      std::vector<uint8_t> buf(offset_bytes);
      buf.insert(buf.end(), msg.begin(), msg.end());
      for (uint8_t heads : {uint8_t{1}, uint8_t{2}}) {
        for (uint32_t mtu : {1500u, 4096u, 9000u}) {
          for (uint32_t keep : {0u, 600u}) {
            CodecConfig cfg = config(Scheme::kRht, mtu, 32768, heads);
            cfg.fabric_keep_bytes = keep;
            Result<Layout> layout = Layout::make(cfg, DType::kF32, Scheme::kRht, msg.size());
            ASSERT_TRUE(layout.is_ok()) << layout.status().to_string();
            const MessageId id{0x5eedull, 3, true};
            kernels_force_scalar(true);
            auto want = Encoder(cfg).encode_message(*layout, id, buf.data() + offset_bytes);
            kernels_force_scalar(false);
            auto got = Encoder(cfg).encode_message(*layout, id, buf.data() + offset_bytes);
            ASSERT_TRUE(want.is_ok() && got.is_ok());
            ASSERT_EQ(want->size(), got->size());
            for (size_t k = 0; k < want->size(); ++k) {
              ASSERT_EQ((*want)[k], (*got)[k]) << "elems=" << elems << " offset=" << offset_bytes
                                               << " heads=" << int{heads} << " mtu=" << mtu << " keep=" << keep
                                               << " packet " << k;
            }
          }
        }
      }
    }
  }
}

TEST(CodecRoundTrip, ZeroCopyRawPacketsEqualEncodedPackets) {
  for (DType dt : {DType::kRaw, DType::kF32, DType::kBF16}) {
    for (size_t bytes : {size_t{1}, size_t{4097}, size_t{131075}, size_t{300001}}) {
      for (uint32_t mtu : {1500u, 9000u}) {
        CodecConfig cfg = config(Scheme::kNone, mtu, 1024);
        std::vector<uint8_t> msg = message_bytes(DType::kRaw, bytes, 0, bytes + mtu, false);
        Result<Layout> layout = Layout::make(cfg, dt, Scheme::kNone, bytes);
        ASSERT_TRUE(layout.is_ok()) << layout.status().to_string();
        const MessageId id{0xABCDEFull, 9, false};
        Result<std::vector<std::vector<uint8_t>>> encoded = Encoder(cfg).encode_message(*layout, id, msg.data());
        ASSERT_TRUE(encoded.is_ok());
        size_t k_total = 0;
        for (uint32_t r = 0; r < layout->rows(); ++r) {
          for (uint32_t k = 0; k < layout->row(r).packets; ++k, ++k_total) {
            std::vector<uint8_t> pkt(kHeaderBytes);
            Result<Encoder::RawSlice> slice = Encoder::raw_packet_header(*layout, id, r, k, pkt.data());
            ASSERT_TRUE(slice.is_ok()) << slice.status().to_string();
            ASSERT_LE(slice->payload_offset + slice->payload_bytes, bytes);
            pkt.insert(pkt.end(), msg.begin() + static_cast<ptrdiff_t>(slice->payload_offset),
                       msg.begin() + static_cast<ptrdiff_t>(slice->payload_offset + slice->payload_bytes));
            ASSERT_LT(k_total, encoded->size());
            ASSERT_EQ(pkt, (*encoded)[k_total]) << dtype_name(dt) << " bytes=" << bytes << " mtu=" << mtu
                                                << " row=" << r << " k=" << k;
          }
        }
        EXPECT_EQ(k_total, encoded->size());
      }
    }
  }
  // Encoded rows have no raw slices.
  CodecConfig cfg = config(Scheme::kRht);
  Result<Layout> layout = Layout::make(cfg, DType::kF32, Scheme::kRht, 4096);
  ASSERT_TRUE(layout.is_ok());
  uint8_t hdr[kHeaderBytes];
  EXPECT_FALSE(Encoder::raw_packet_header(*layout, test_id(), 0, 0, hdr).is_ok());
  EXPECT_FALSE(Encoder::raw_packet_header(*layout, test_id(), layout->rows(), 0, hdr).is_ok());
}

TEST(CodecRoundTrip, RawBytesOfAnyLength) {
  for (size_t bytes : {size_t{0}, size_t{1}, size_t{7}, size_t{4097}, size_t{100003}}) {
    CodecConfig cfg = config(Scheme::kNone, 1500);
    std::vector<uint8_t> msg = message_bytes(DType::kRaw, bytes, 0, bytes, false);
    Decoded d = round_trip(cfg, DType::kRaw, msg, keep_all);
    EXPECT_EQ(d.bytes, msg) << bytes;
  }
}

// A row with a NaN or inf is sent per element (the sign scheme) rather than rotated, so the
// non-finite value stays where it was and the rest of the row is exact.
TEST(CodecRoundTrip, RhtNonFiniteRowFallsBackToSign) {
  std::vector<float> v = gaussian(3000, 3);
  v[17] = NAN;
  v[2000] = -INFINITY;
  std::vector<uint8_t> msg(v.size() * 4);
  std::memcpy(msg.data(), v.data(), msg.size());
  Decoded d = round_trip(config(Scheme::kRht), DType::kF32, msg, keep_all);
  EXPECT_EQ(d.bytes, msg);
  ParsedPacket p;
  ASSERT_EQ(parse_packet(d.packets[0].data(), d.packets[0].size(), &p), PacketError::kOk);
  EXPECT_EQ(p.hdr.scheme, Scheme::kSign);
}

// The layout has no padding: a full packet carries exactly 32 bits (sign) or 33 bits (sq, sd,
// rht: a head that is not a bit of the value, plus the whole value) per fp32 element, rows that are not a power of two cost nothing extra, and no
// packet exceeds the budget.
TEST(CodecLayout, NoPaddingAndWithinBudget) {
  for (uint32_t mtu : kMtus) {
    for (Scheme s : {Scheme::kSign, Scheme::kRht, Scheme::kSq}) {
      CodecConfig cfg = config(s, mtu);
      for (size_t elems : {size_t{1000}, size_t{32768}, size_t{32769}}) {
        std::vector<uint8_t> msg = message_bytes(DType::kF32, elems, 0, 1, false);
        Decoded d = round_trip(cfg, DType::kF32, msg, keep_all);
        size_t payload = 0;
        for (const auto& p : d.packets) {
          EXPECT_LE(p.size(), cfg.packet_bytes);
          payload += p.size() - kHeaderBytes;
        }
        const size_t bits = s == Scheme::kSign ? 32 : 33;
        // Only a row's last packet may hold a count that is not a multiple of 8, and then
        // planes 0 and 1 each round up to a whole byte: at most 2 bytes per row.
        const size_t rows = (elems + 32767) / 32768;
        EXPECT_LE(payload * 8, elems * bits + 16 * rows) << "mtu=" << mtu;
        EXPECT_GE(payload * 8, elems * bits);
      }
    }
  }
  // At the default MTU a 2^15 fp32 rht row takes ceil(32768 / 960) packets of 960 elements
  // (3988 payload bytes / 33 bits, down to a multiple of 8); sign rows 992 elements a packet.
  Result<Layout> l = Layout::make(config(Scheme::kRht), DType::kF32, Scheme::kRht, 32768 * 4);
  ASSERT_TRUE(l.is_ok());
  EXPECT_EQ(l->row(0).elems_per_packet, 960u);
  EXPECT_EQ(l->packets(), 35u);
  l = Layout::make(config(Scheme::kSign), DType::kF32, Scheme::kSign, 32768 * 4);
  ASSERT_TRUE(l.is_ok());
  EXPECT_EQ(l->row(0).elems_per_packet, 992u);
  EXPECT_EQ(l->packets(), 34u);
}

TEST(CodecLayout, TrimPointAndClassInHeader) {
  for (uint8_t head_bits : {uint8_t{1}, uint8_t{2}, uint8_t{16}}) {
    CodecConfig cfg = config(Scheme::kRht, 4096, 32768, head_bits);
    std::vector<uint8_t> msg = message_bytes(DType::kF32, 1000, 0, 2, false);
    Decoded d = round_trip(cfg, DType::kF32, msg, keep_all);
    ParsedPacket p;
    ASSERT_EQ(parse_packet(d.packets[0].data(), d.packets[0].size(), &p), PacketError::kOk);
    EXPECT_TRUE(p.hdr.trimmable());
    // rht: plane 1 is the input's top 16 bits (960 elements in this first packet).
    const uint32_t n = p.hdr.elem_count;
    // 2-bit heads: one more bit per element for the bins (plane Q), so fewer fit.
    EXPECT_EQ(n, head_bits == 2 ? 936u : 960u);
    EXPECT_EQ(p.hdr.head_bits, head_bits);
    EXPECT_EQ(p.hdr.trim_bytes, head_bits == 1 ? n / 8 : head_bits == 2 ? 2 * (n / 8) : n / 8 + n * 2);
    EXPECT_EQ(p.hdr.payload_bytes, n * 33 / 8 + (head_bits == 2 ? n / 8 : 0));
    EXPECT_EQ(p.hdr.bin_ratio != 0, head_bits == 2);
  }
  Decoded exact = round_trip(config(Scheme::kNone), DType::kF32, message_bytes(DType::kF32, 10, 0, 3, false), keep_all);
  ParsedPacket p;
  ASSERT_EQ(parse_packet(exact.packets[0].data(), exact.packets[0].size(), &p), PacketError::kOk);
  EXPECT_FALSE(p.hdr.trimmable());
  EXPECT_EQ(p.hdr.trim_bytes, 0u);
  // An exact-class message of a lossy scheme is not marked trimmable either.
  MessageId id = test_id();
  id.trimmable = false;
  Decoded lossless = round_trip(config(Scheme::kRht), DType::kF32, message_bytes(DType::kF32, 10, 0, 3, false),
                                keep_all, id);
  ASSERT_EQ(parse_packet(lossless.packets[0].data(), lossless.packets[0].size(), &p), PacketError::kOk);
  EXPECT_FALSE(p.hdr.trimmable());
}

// NCCL_TRIM_FABRIC_TRIM_BYTES: packets carry few enough elements that IP/UDP, our header and
// every head fit in the fabric's trim size (counted with 18 bytes of Ethernet framing), unless
// that would leave fewer than kMinFabricElems a packet; what a packet carries is otherwise as
// the MTU allows.
TEST(CodecLayout, FabricTrimSizeFitsEveryHead) {
  EXPECT_EQ(fabric_keep_bytes(256), 256u - 18 - 28 - kHeaderBytes);
  EXPECT_EQ(fabric_keep_bytes(64), 0u) << "a cut inside our header keeps nothing";
  EXPECT_EQ(fabric_keep_bytes(0), 0u);
  for (uint32_t mtu : {1500u, 4096u, 9000u}) {
    for (uint8_t planes : {uint8_t{1}, uint8_t{2}, uint8_t{16}}) {  // head bits
      for (Scheme s : {Scheme::kSign, Scheme::kRht, Scheme::kSq}) {
        if (planes == 2 && s == Scheme::kSq) continue;
        for (DType d : {DType::kF32, DType::kBF16}) {
          CodecConfig cfg = config(s, mtu, 32768, planes);
          const uint32_t plain = Layout::elems_per_packet(s, d, false, cfg.packet_bytes, 32768, planes, 0);
          for (uint32_t size : {64u, 128u, 206u, 256u, 392u, 1024u}) {
            const uint32_t keep = fabric_keep_bytes(size);
            const uint32_t n = Layout::elems_per_packet(s, d, false, cfg.packet_bytes, 32768, planes, keep);
            const uint32_t trim = trim_point_bytes(plane_bytes(plane_bits(s, d, false, planes), n), s, planes);
            const uint32_t plain_trim = trim_point_bytes(plane_bytes(plane_bits(s, d, false, planes), plain), s, planes);
            const std::string what = fmt::format("mtu {} head bits {} {} {} size {}", mtu, planes, scheme_name(s),
                                                 dtype_name(d), size);
            EXPECT_LE(n, plain) << what;
            EXPECT_EQ(n % 8, 0u) << what;
            if (plain_trim <= keep) {
              EXPECT_EQ(n, plain) << what << ": the heads fit already";
            } else if (n >= kMinFabricElems && n < plain) {
              EXPECT_LE(trim, keep) << what;
              // The largest such count: 8 more elements would not fit.
              EXPECT_GT(trim_point_bytes(plane_bytes(plane_bits(s, d, false, planes), n + 8), s, planes), keep) << what;
            } else {
              EXPECT_EQ(n, plain) << what << ": too few elements would fit; MTU-sized packets";
            }
          }
        }
      }
    }
  }
  // The demo's numbers: fp32 rht at MTU 9000, a 256-byte trim size: 130 bytes of heads.
  CodecConfig cfg = config(Scheme::kRht, 9000);
  cfg.fabric_keep_bytes = fabric_keep_bytes(256);
  Result<Layout> l = Layout::make(cfg, DType::kF32, Scheme::kRht, 32768 * 4);
  ASSERT_TRUE(l.is_ok());
  EXPECT_EQ(l->row(0).elems_per_packet, 1040u);
  const std::string summary = fabric_trim_summary(cfg, 256, 9000);
  EXPECT_NE(summary.find("1040 elements"), std::string::npos) << summary;
  EXPECT_NE(summary.find("every head survives"), std::string::npos) << summary;
}

TEST(CodecLayout, RejectsWhatItCannotCarry) {
  EXPECT_FALSE(Layout::make(config(Scheme::kRht), DType::kRaw, Scheme::kRht, 100).is_ok());
  EXPECT_FALSE(Layout::make(config(Scheme::kNone), DType::kF32, Scheme::kNone, 1ull << 32).is_ok());
  CodecConfig bad = config(Scheme::kRht);
  bad.row_elems = 1000;
  EXPECT_FALSE(bad.validate().is_ok());
  bad = config(Scheme::kRht);
  bad.packet_bytes = 60;
  EXPECT_FALSE(bad.validate().is_ok());
}

// Exhaustive check of the 16-bit conversions: every non-NaN pattern survives widening and
// narrowing, and narrowing rounds to nearest even (checked against the widened neighbours).
TEST(CodecTypes, HalfAndBf16ConversionsAreExact) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const uint16_t v = static_cast<uint16_t>(h);
    const float f = f16_to_f32(v);
    if (!std::isnan(f)) {
      ASSERT_EQ(f32_to_f16(f), v) << h;
    }
    const float b = bf16_to_f32(v);
    if (!std::isnan(b)) {
      ASSERT_EQ(f32_to_bf16(b), v) << h;
    }
  }
  // Ties go to even; overflow goes to inf; tiny values to zero.
  EXPECT_EQ(f32_to_f16(1.0f + std::ldexp(1.0f, -11)), 0x3C00);
  EXPECT_EQ(f32_to_f16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3C02);
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7C00);
  EXPECT_EQ(f32_to_f16(65519.0f), 0x7BFF);
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -25)), 0x0000);
  EXPECT_EQ(f32_to_f16(std::ldexp(1.5f, -25)), 0x0001);
  EXPECT_EQ(f32_to_bf16(1.0f + std::ldexp(1.0f, -8)), 0x3F80);
  EXPECT_EQ(f32_to_bf16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3F82);
  // Random fp32 values: the fp16 result is the nearest representable value.
  std::mt19937 rng(5);
  for (int i = 0; i < 200000; ++i) {
    float x = bits_f32(rng() & 0x47FFFFFFu);  // |x| < 2^16 or so, any sign
    float y = f16_to_f32(f32_to_f16(x));
    if (std::isinf(y) || std::isnan(x)) continue;
    uint16_t h = f32_to_f16(x);
    float up = f16_to_f32(static_cast<uint16_t>(h + 1)), down = f16_to_f32(static_cast<uint16_t>(h - 1));
    if ((h & 0x7FFF) != 0 && (h & 0x7C00) != 0x7C00) {
      ASSERT_LE(std::fabs(y - x), std::fabs(up - x)) << x;
      ASSERT_LE(std::fabs(y - x), std::fabs(down - x)) << x;
    }
  }
}

}  // namespace
}  // namespace trim::codec::testing
