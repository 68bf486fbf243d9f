// The combining decode (Decoder::begin_combine) and the combine kernels (codec/combine.h): the
// same bits as decode-then-combine_into, through trims, drops, duplicates and retransmitted
// slots, and the AVX2 kernels bit-identical to the scalar reference.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "codec/combine.h"
#include "tests/codec_util.h"

namespace trim::codec::testing {
namespace {

std::vector<uint8_t> random_bytes(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint8_t> b(n);
  for (uint8_t& x : b) x = static_cast<uint8_t>(rng());
  return b;
}

// fp32 values with every special the ops treat apart: NaNs, infinities, zeros of both signs,
// subnormals, and values whose bf16 rounding ties.
std::vector<float> special_floats(size_t n, uint64_t seed) {
  std::vector<float> v = gaussian(n, seed, 3.0f);
  const float s[] = {std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::infinity(),
                     std::numeric_limits<float>::infinity(), 0.0f, -0.0f, 1e-40f, -2e-39f,
                     bits_f32(0x3F808000u), bits_f32(0x3F818000u), bits_f32(0x7F7FFFFFu),
                     bits_f32(0xFF800001u)};
  std::mt19937_64 rng(seed + 1);
  for (size_t i = 0; i < n; i += 7) v[i] = s[rng() % (sizeof s / sizeof s[0])];
  return v;
}

TEST(CombineKernel, MatchesScalarEverySizeAndOp) {
  std::printf("combine kernels: %s\n", combine_isa());
  for (RedType t : {RedType::kF32, RedType::kBF16, RedType::kF16, RedType::kF64, RedType::kI32, RedType::kU8}) {
    const size_t es = red_type_bytes(t);
    for (int op = 0; op < kNumRedOps; ++op) {
      for (size_t n : {0, 1, 7, 8, 9, 15, 16, 17, 31, 33, 100, 1001, 4099}) {
        for (size_t off : {0, 1, 3}) {
          std::vector<uint8_t> in(es * (n + off)), d(es * (n + off));
          if (t == RedType::kF32 || t == RedType::kBF16) {
            const std::vector<float> a = special_floats(n + off, n * 7 + off), b = special_floats(n + off, n * 11 + off + 5);
            for (size_t i = 0; i < n + off; ++i) {
              if (t == RedType::kF32) {
                std::memcpy(&in[4 * i], &a[i], 4);
                std::memcpy(&d[4 * i], &b[i], 4);
              } else {
                const uint16_t x = f32_to_bf16(a[i]), y = f32_to_bf16(b[i]);
                std::memcpy(&in[2 * i], &x, 2);
                std::memcpy(&d[2 * i], &y, 2);
              }
            }
          } else {
            in = random_bytes(in.size(), n + off);
            d = random_bytes(d.size(), n + off + 99);
          }
          std::vector<uint8_t> ref = d;
          combine_into_scalar(ref.data() + es * off, in.data() + es * off, n, t, static_cast<RedOp>(op));
          combine_into(d.data() + es * off, in.data() + es * off, n, t, static_cast<RedOp>(op));
          ASSERT_EQ(d, ref) << "type " << static_cast<int>(t) << " op " << op << " n " << n << " off " << off;
        }
      }
    }
  }
}

TEST(CombineKernel, ScalarIsTheRingsOrder) {
  // dst = in (op) dst, with MAX/MIN as std::max(in, dst) / std::min(in, dst): a NaN in `in`
  // wins max, one in dst does not.
  const float nan = std::numeric_limits<float>::quiet_NaN();
  float d[3] = {1.0f, nan, -0.0f};
  const float in[3] = {nan, 2.0f, 0.0f};
  combine_into(d, in, 3, RedType::kF32, RedOp::kMax);
  EXPECT_TRUE(std::isnan(d[0]));
  EXPECT_EQ(d[1], 2.0f);
  EXPECT_EQ(f32_bits(d[2]), f32_bits(0.0f));  // std::max(+0, -0) is its first operand
}

// One arrival: packet k with `keep` payload bytes (whole when >= its size).
struct Arrival {
  size_t k;
  int64_t keep;
};

// A receive of every kind the transport sees: whole, trimmed, dropped, duplicated, and trimmed
// first then retransmitted whole (while its row is open). Rows complete halfway are finished
// there, as RecvProto does, so later copies of their packets arrive late.
std::vector<Arrival> arrivals(const Encoded& e, uint64_t seed, bool exact) {
  std::mt19937_64 rng(seed);
  std::vector<Arrival> first, later;
  for (size_t k = 0; k < e.packets.size(); ++k) {
    ParsedPacket p;
    EXPECT_EQ(parse_packet(e.packets[k].data(), e.packets[k].size(), &p), PacketError::kOk);
    const int64_t whole = p.hdr.payload_bytes;
    const int64_t cut = exact ? whole / 3 : p.hdr.trim_bytes;
    switch (rng() % 10) {
      case 0: break;  // dropped
      case 1: case 2: first.push_back({k, cut}); break;
      case 3: first.push_back({k, cut}); later.push_back({k, whole}); break;  // retransmitted whole
      case 4: first.push_back({k, whole}); later.push_back({k, whole}); break;  // duplicate
      default: first.push_back({k, whole}); break;
    }
  }
  std::shuffle(first.begin(), first.end(), rng);
  first.insert(first.end(), later.begin(), later.end());
  return first;
}

void feed(Decoder& dec, const Encoded& e, const std::vector<Arrival>& arr) {
  for (size_t i = 0; i < arr.size(); ++i) {
    if (i == arr.size() / 2) {
      for (uint32_t r = 0; r < e.layout->rows(); ++r) {
        if (dec.row_complete(r)) dec.finish_row(r);
      }
    }
    std::vector<uint8_t> pkt = e.packets[arr[i].k];
    ParsedPacket whole;
    ASSERT_EQ(parse_packet(pkt.data(), pkt.size(), &whole), PacketError::kOk);
    const size_t len = kHeaderBytes + static_cast<size_t>(std::min<int64_t>(arr[i].keep, whole.hdr.payload_bytes));
    if (len < pkt.size()) mark_trimmed(pkt.data());
    ParsedPacket p;
    ASSERT_EQ(parse_packet(pkt.data(), len, &p), PacketError::kOk);
    ASSERT_EQ(dec.add(p), PacketError::kOk);
  }
}

// Decode + combine_into vs the combining decode, on the same arrivals, for every op.
void expect_same_bits(const CodecConfig& cfg, DType d, const std::vector<uint8_t>& msg, RedType t, uint64_t seed) {
  const Encoded e = encode(cfg, d, msg);
  ASSERT_TRUE(e.ok);
  const std::vector<Arrival> arr = arrivals(e, seed, d == DType::kRaw);
  std::vector<uint8_t> own = random_bytes(msg.size(), seed + 3);
  if (t == RedType::kF32) {
    const std::vector<float> f = special_floats(msg.size() / 4, seed + 4);
    std::memcpy(own.data(), f.data(), own.size());
  }
  for (int op = 0; op < kNumRedOps; ++op) {
    Decoder a(cfg), b(cfg);
    std::vector<uint8_t> decoded(msg.size(), 0xCD), want = own, got = own;
    ASSERT_TRUE(a.begin(*e.layout, test_id(), decoded.data()).is_ok());
    feed(a, e, arr);
    const DecodeStats sa = a.finish();
    combine_into_scalar(want.data(), decoded.data(), msg.size() / red_type_bytes(t), t, static_cast<RedOp>(op));
    ASSERT_TRUE(b.begin_combine(*e.layout, test_id(), got.data(), t, static_cast<RedOp>(op)).is_ok());
    feed(b, e, arr);
    const DecodeStats sb = b.finish();
    EXPECT_EQ(sa.estimated, sb.estimated);
    EXPECT_EQ(sa.late_packets, sb.late_packets);
    ASSERT_EQ(got, want) << scheme_name(cfg.scheme) << " " << dtype_name(d) << " op " << op << " seed " << seed;
  }
}

TEST(DecoderCombine, SameBitsAsDecodeThenCombine) {
  for (uint64_t seed : {1, 2, 3}) {
    for (Scheme s : {Scheme::kSign, Scheme::kRht, Scheme::kSq, Scheme::kSd}) {
      const CodecConfig cfg = config(s, 1500, 2048);
      expect_same_bits(cfg, DType::kF32, message_bytes(DType::kF32, 9001, 0, seed, true), RedType::kF32, seed);
      expect_same_bits(cfg, DType::kBF16, message_bytes(DType::kBF16, 5003, 0, seed, true), RedType::kBF16, seed);
      expect_same_bits(cfg, DType::kF16, message_bytes(DType::kF16, 4097, 0, seed, true), RedType::kF16, seed);
    }
  }
}

TEST(DecoderCombine, ExactMessagesOfEveryWidth) {
  // Raw packets are sized in bytes: at MTU 1502 and 9000 they cut 4- and 8-byte elements.
  for (uint32_t mtu : {1500u, 1502u, 9000u}) {
    const CodecConfig cfg = config(Scheme::kNone, mtu, 2048);
    const Result<Layout> l = Layout::make(cfg, DType::kRaw, Scheme::kNone, 8 * 3001);
    ASSERT_TRUE(l.is_ok());
    std::printf("mtu %u: %u bytes a packet\n", mtu, l.value().row(0).elems_per_packet);
    for (uint64_t seed : {1, 2}) {
    expect_same_bits(cfg, DType::kRaw, random_bytes(4 * 7001, seed), RedType::kF32, seed);
    expect_same_bits(cfg, DType::kRaw, random_bytes(8 * 3001, seed), RedType::kI64, seed);
    expect_same_bits(cfg, DType::kRaw, random_bytes(2 * 5003, seed), RedType::kBF16, seed);
    expect_same_bits(cfg, DType::kRaw, random_bytes(1 * 6007, seed), RedType::kU8, seed);
    }
  }
}

TEST(DecoderCombine, UntrimmedIsExact) {
  // Every packet whole: the destination gets exactly msg (op) own, element by element.
  const CodecConfig cfg = config(Scheme::kRht, 1500, 2048);
  const std::vector<uint8_t> msg = message_bytes(DType::kF32, 7777, 0, 5, false);
  const Encoded e = encode(cfg, DType::kF32, msg);
  ASSERT_TRUE(e.ok);
  std::vector<float> own = gaussian(7777, 6), want(7777);
  for (size_t i = 0; i < want.size(); ++i) want[i] = element_value(DType::kF32, msg, i) + own[i];
  Decoder dec(cfg);
  ASSERT_TRUE(dec.begin_combine(*e.layout, test_id(), own.data(), RedType::kF32, RedOp::kSum).is_ok());
  std::vector<Arrival> all;
  for (size_t k = 0; k < e.packets.size(); ++k) all.push_back({k, 1 << 20});
  feed(dec, e, all);
  EXPECT_EQ(dec.finish().estimated, 0u);
  EXPECT_EQ(std::memcmp(own.data(), want.data(), 4 * want.size()), 0);
}

TEST(DecoderCombine, RefusesWhatItCannotCombine) {
  const CodecConfig cfg = config(Scheme::kSign, 1500, 2048);
  std::vector<uint8_t> dst(64 * 1024);
  Decoder dec(cfg);
  Result<Layout> f32 = Layout::make(cfg, DType::kF32, Scheme::kSign, 4000);
  ASSERT_TRUE(f32.is_ok());
  EXPECT_FALSE(dec.begin_combine(f32.value(), test_id(), dst.data(), RedType::kBF16, RedOp::kSum).is_ok());
  EXPECT_FALSE(dec.begin_combine(f32.value(), test_id(), nullptr, RedType::kF32, RedOp::kSum).is_ok());
  EXPECT_FALSE(dec.begin_combine(f32.value(), test_id(), dst.data(), static_cast<RedType>(12), RedOp::kSum).is_ok());
  Result<Layout> tail = Layout::make(cfg, DType::kF32, Scheme::kSign, 4002);  // a raw tail row
  ASSERT_TRUE(tail.is_ok());
  EXPECT_FALSE(dec.begin_combine(tail.value(), test_id(), dst.data(), RedType::kF32, RedOp::kSum).is_ok());
  Result<Layout> raw = Layout::make(config(Scheme::kNone), DType::kRaw, Scheme::kNone, 4002);
  ASSERT_TRUE(raw.is_ok());
  EXPECT_FALSE(dec.begin_combine(raw.value(), test_id(), dst.data(), RedType::kF32, RedOp::kSum).is_ok());
  EXPECT_TRUE(dec.begin_combine(raw.value(), test_id(), dst.data(), RedType::kF16, RedOp::kSum).is_ok());
}

}  // namespace
}  // namespace trim::codec::testing
