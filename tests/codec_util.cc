#include "tests/codec_util.h"

namespace trim::codec::testing {

std::vector<uint8_t> message_bytes(DType d, size_t elems, size_t extra, uint64_t seed, bool specials) {
  const size_t esize = dtype_bytes(d);
  std::vector<uint8_t> out(elems * esize + extra);
  std::vector<float> g = gaussian(elems, seed);
  if (specials) {
    const float special[] = {0.0f, -0.0f, 1e-40f, -3e-39f, 65504.0f, -1e30f, 1.0f, -2.5f};
    for (size_t i = 0; i < elems; i += 97) g[i] = special[(i / 97) % 8];
  }
  for (size_t i = 0; i < elems; ++i) {
    if (d == DType::kF32) {
      std::memcpy(&out[4 * i], &g[i], 4);
    } else if (d == DType::kBF16 || d == DType::kF16) {
      uint16_t h = d == DType::kBF16 ? f32_to_bf16(g[i]) : f32_to_f16(g[i]);
      std::memcpy(&out[2 * i], &h, 2);
    } else {
      out[i] = static_cast<uint8_t>(f32_bits(g[i]));
    }
  }
  std::mt19937_64 rng(seed ^ 0xabcdef);
  for (size_t i = elems * esize; i < out.size(); ++i) out[i] = static_cast<uint8_t>(rng());
  return out;
}

float element_value(DType d, const std::vector<uint8_t>& b, size_t i) {
  if (d == DType::kF32) {
    float f;
    std::memcpy(&f, &b[4 * i], 4);
    return f;
  }
  uint16_t h;
  std::memcpy(&h, &b[2 * i], 2);
  return d == DType::kBF16 ? bf16_to_f32(h) : f16_to_f32(h);
}

RandomTrim random_trim_round_trip(const CodecConfig& cfg, DType d, const std::vector<uint8_t>& msg, double t) {
  const size_t esize = dtype_bytes(d), elems = msg.size() / esize;
  RandomTrim r;
  r.cut.assign(elems, 0);
  std::mt19937 rng(static_cast<uint32_t>(t * 100));
  std::bernoulli_distribution trim(t);
  r.dec = round_trip(cfg, d, msg, [&](size_t, const ParsedPacket& p) {
    if (!trim(rng)) return static_cast<int64_t>(p.hdr.payload_bytes);
    const size_t first = static_cast<size_t>(p.hdr.row) * cfg.row_elems + p.hdr.first_elem;
    std::fill_n(r.cut.begin() + static_cast<ptrdiff_t>(first), p.hdr.elem_count, 1);
    return static_cast<int64_t>(p.hdr.trim_bytes);
  });
  for (size_t i = 0; i < elems; ++i) {
    r.trimmed += r.cut[i];
    if (!r.cut[i]) {
      EXPECT_EQ(std::memcmp(&r.dec.bytes[esize * i], &msg[esize * i], esize), 0) << dtype_name(d) << " t=" << t << " i=" << i;
    }
    EXPECT_EQ(r.dec.estimated[i], r.cut[i]) << dtype_name(d) << " t=" << t << " i=" << i;
  }
  EXPECT_EQ(r.dec.stats.head_only, r.trimmed);
  return r;
}

void expect_nmse_tracks_trimmed_fraction(Scheme scheme, DType d, const std::vector<uint8_t>& msg,
                                         const std::vector<float>& x) {
  std::vector<float> y(x.size());
  for (double t : {0.1, 0.25, 0.5, 0.9}) {
    const RandomTrim cut = random_trim_round_trip(config(scheme), d, msg, t);
    for (size_t i = 0; i < y.size(); ++i) y[i] = element_value(d, cut.dec.bytes, i);
    const double u = static_cast<double>(cut.trimmed) / static_cast<double>(y.size());
    const double nmse = sq_err(x, y) / sq_norm(x);
    EXPECT_GT(u, 0.0) << t;
    EXPECT_NEAR(nmse / u, M_PI / 2 - 1, 0.06 * (M_PI / 2 - 1))
        << dtype_name(d) << " t=" << t << " u=" << u << " nmse=" << nmse;
  }
}

Encoded encode(const CodecConfig& cfg, DType dtype, const std::vector<uint8_t>& msg, const MessageId& id) {
  Encoded e;
  Result<Layout> layout = Layout::make(cfg, dtype, cfg.scheme, msg.size());
  EXPECT_TRUE(layout.is_ok()) << layout.status().to_string();
  if (!layout) return e;
  e.layout = layout.value();
  Encoder enc(cfg);
  auto packets = enc.encode_message(*layout, id, msg.data());
  EXPECT_TRUE(packets.is_ok()) << packets.status().to_string();
  if (!packets) return e;
  e.packets = std::move(packets).value();
  e.ok = true;
  return e;
}

Decoded round_trip(const CodecConfig& cfg, DType dtype, const std::vector<uint8_t>& msg, const CutFn& cut,
                   const MessageId& id, bool trust_cut) {
  Decoded d;
  Encoded e = encode(cfg, dtype, msg, id);
  if (!e.ok) return d;
  d.packets = std::move(e.packets);
  EXPECT_EQ(d.packets.size(), e.layout->packets());
  Decoder dec(cfg);
  d.bytes.assign(msg.size(), 0xCD);
  EXPECT_TRUE(dec.begin(*e.layout, id, d.bytes.data()).is_ok());
  for (size_t k = 0; k < d.packets.size(); ++k) {
    std::vector<uint8_t>& pkt = d.packets[k];
    EXPECT_LE(pkt.size(), cfg.packet_bytes);
    ParsedPacket whole;
    EXPECT_EQ(parse_packet(pkt.data(), pkt.size(), &whole), PacketError::kOk);
    int64_t keep = cut(k, whole);
    if (keep < 0) continue;
    size_t len = kHeaderBytes + static_cast<size_t>(std::min<int64_t>(keep, whole.hdr.payload_bytes));
    if (len < pkt.size()) mark_trimmed(pkt.data());
    ParsedPacket p;
    EXPECT_EQ(parse_packet(pkt.data(), len, &p), PacketError::kOk);
    if (trust_cut) {
      p.payload_received = static_cast<uint32_t>(len - kHeaderBytes);
      p.trimmed = p.payload_received < p.hdr.payload_bytes;
    }
    EXPECT_EQ(dec.add(p), PacketError::kOk);
  }
  d.stats = dec.finish(&d.estimated);
  return d;
}

}  // namespace trim::codec::testing
