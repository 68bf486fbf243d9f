// Helpers shared by the codec tests: make data, encode a message, cut packets, decode.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <optional>
#include <random>
#include <vector>

#include "codec/decoder.h"
#include "codec/encoder.h"
#include "codec/packet.h"

namespace trim::codec::testing {

inline CodecConfig config(Scheme scheme, uint32_t mtu = 4096, uint32_t row_elems = 32768, uint8_t head_bits = 1) {
  CodecConfig c;
  c.scheme = scheme;
  c.packet_bytes = mtu - kIpv4UdpBytes;
  c.row_elems = row_elems;
  c.head_bits = head_bits;
  return c;
}

inline std::vector<float> gaussian(size_t n, uint64_t seed, float sigma = 1.0f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist(0.0f, sigma);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// Bytes of `elems` elements of dtype d (Gaussian values, with a few special ones mixed in
// when `specials`), plus `extra` trailing bytes.
std::vector<uint8_t> message_bytes(DType d, size_t elems, size_t extra, uint64_t seed, bool specials);

// How many payload bytes of packet k survive (>= payload_bytes keeps it whole, < 0 drops it).
using CutFn = std::function<int64_t(size_t k, const ParsedPacket& p)>;

struct Decoded {
  std::vector<uint8_t> bytes;
  std::vector<uint8_t> estimated;
  DecodeStats stats;
  std::vector<std::vector<uint8_t>> packets;
};

inline MessageId test_id(uint32_t msg_seq = 7) { return MessageId{0x1122334455667788ull, msg_seq, true}; }

// A message as the sender cuts it (cfg.scheme), or ok = false after a failed expectation.
struct Encoded {
  bool ok = false;
  std::optional<Layout> layout;
  std::vector<std::vector<uint8_t>> packets;
};
Encoded encode(const CodecConfig& cfg, DType dtype, const std::vector<uint8_t>& msg, const MessageId& id = test_id());

// Encodes `msg` and decodes it back through parse_packet with the given cut per packet (the
// decoder gets what parse_packet verified: the prefix up to the last check point the cut kept).
// With `trust_cut`, the decoder gets the whole cut prefix instead, as if a check point ended
// there: the decoder's own any-prefix property, apart from the check points.
Decoded round_trip(const CodecConfig& cfg, DType dtype, const std::vector<uint8_t>& msg, const CutFn& cut,
                   const MessageId& id = test_id(), bool trust_cut = false);

inline int64_t keep_all(size_t, const ParsedPacket& p) { return p.hdr.payload_bytes; }
inline int64_t trim_all(size_t, const ParsedPacket& p) { return p.hdr.trim_bytes; }

inline std::vector<uint8_t> to_bytes(const std::vector<float>& v) {
  std::vector<uint8_t> b(v.size() * 4);
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

// Element i of a message of fp32 or bf16/fp16 values, as fp32.
float element_value(DType d, const std::vector<uint8_t>& b, size_t i);

// A round trip where each packet is trimmed to its head with probability t (draws seeded from
// t); cut[i] = 1 for the elements of trimmed packets. Asserts (gtest) that every other element
// arrived bit exact and that the decoder marked exactly the cut ones estimated.
struct RandomTrim {
  Decoded dec;
  std::vector<uint8_t> cut;
  size_t trimmed = 0;  // elements in trimmed packets
};
RandomTrim random_trim_round_trip(const CodecConfig& cfg, DType d, const std::vector<uint8_t>& msg, double t);

// With random trims of rate t = 0.1 .. 0.9, the NMSE of msg's values `x` grows as u (pi/2 - 1),
// u the fraction of elements trimmed, within 6%: what 1-bit heads of a rotation (rht, rotated)
// promise. The callers say why the band is wide enough for their messages.
void expect_nmse_tracks_trimmed_fraction(Scheme scheme, DType d, const std::vector<uint8_t>& msg,
                                         const std::vector<float>& x);

inline std::vector<float> as_floats(const std::vector<uint8_t>& b) {
  std::vector<float> f(b.size() / 4);
  std::memcpy(f.data(), b.data(), f.size() * 4);
  return f;
}

inline double sq_err(const std::vector<float>& a, const std::vector<float>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
  return s;
}
inline double sq_norm(const std::vector<float>& a) {
  double s = 0;
  for (float x : a) s += static_cast<double>(x) * x;
  return s;
}

}  // namespace trim::codec::testing
