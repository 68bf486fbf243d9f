// Bad input never crashes: every malformed header gets its own error code and is counted.
#include <random>

#include "tests/codec_util.h"

namespace trim::codec::testing {
namespace {

std::vector<uint8_t> good_packet(Scheme scheme = Scheme::kRht, size_t elems = 1000) {
  std::vector<uint8_t> msg = message_bytes(DType::kF32, elems, 0, 40, false);
  Decoded d = round_trip(config(scheme), DType::kF32, msg, keep_all);
  return d.packets.at(0);
}

PacketError parse(const std::vector<uint8_t>& p, size_t len) {
  ParsedPacket out;
  return parse_packet(p.data(), len, &out);
}

PacketHeader header_of(const std::vector<uint8_t>& p) {
  ParsedPacket out;
  EXPECT_EQ(parse_packet(p.data(), p.size(), &out), PacketError::kOk);
  return out.hdr;
}

TEST(Packet, TruncatedHeaderAtEveryLength) {
  std::vector<uint8_t> p = good_packet();
  const uint64_t before = packet_error_counters().get(PacketError::kTruncatedHeader);
  for (size_t len = 0; len < kHeaderBytes; ++len) EXPECT_EQ(parse(p, len), PacketError::kTruncatedHeader) << len;
  EXPECT_EQ(packet_error_counters().get(PacketError::kTruncatedHeader) - before, kHeaderBytes);
  ParsedPacket out;
  EXPECT_EQ(parse_packet(nullptr, 100, &out), PacketError::kTruncatedHeader);
}

TEST(Packet, MagicVersionAndChecksum) {
  std::vector<uint8_t> p = good_packet();
  std::vector<uint8_t> q = p;
  q[0] ^= 0xFF;
  EXPECT_EQ(parse(q, q.size()), PacketError::kBadMagic);
  q = p;
  q[2] = kVersion + 1;
  EXPECT_EQ(parse(q, q.size()), PacketError::kBadVersion);
  // Any other header bit flipped fails the CRC, except TRIMMED, which switches may set.
  for (size_t byte = 3; byte < kHeaderBytes; ++byte) {
    for (int bit = 0; bit < 8; ++bit) {
      q = p;
      q[byte] ^= static_cast<uint8_t>(1u << bit);
      const PacketError e = parse(q, q.size());
      if (byte == 3 && (1u << bit) == kFlagTrimmed) {
        EXPECT_EQ(e, PacketError::kOk);
      } else {
        EXPECT_EQ(e, PacketError::kBadChecksum) << byte << ":" << bit;
      }
    }
  }
  // The payload is not the header CRC's: a payload bit flip parses, and the check points keep
  // the decoder from using it (CheckPoints.*).
  q = p;
  q[kHeaderBytes + 5] ^= 1;
  ParsedPacket out;
  EXPECT_EQ(parse_packet(q.data(), q.size(), &out), PacketError::kOk);
  EXPECT_TRUE(out.check_failed);
  EXPECT_EQ(out.payload_received, 0u);
}

// Headers with a valid CRC but impossible contents, built through write_header.
TEST(Packet, ImpossibleFieldsAreRejected) {
  const PacketHeader good = header_of(good_packet());
  auto check = [&](PacketError want, auto&& mutate) {
    PacketHeader h = good;
    mutate(h);
    std::vector<uint8_t> buf(kHeaderBytes + h.payload_bytes + 8, 0);
    write_header(h, buf.data());
    EXPECT_EQ(parse(buf, kHeaderBytes + std::min<size_t>(h.payload_bytes, buf.size() - kHeaderBytes)), want);
  };
  check(PacketError::kOk, [](PacketHeader&) {});
  check(PacketError::kBadField, [](PacketHeader& h) { h.flags |= 0x80; });
  check(PacketError::kBadField, [](PacketHeader& h) { h.scheme = static_cast<Scheme>(9); });
  check(PacketError::kBadField, [](PacketHeader& h) { h.dtype = static_cast<DType>(7); });
  check(PacketError::kBadField, [](PacketHeader& h) { h.head_bits = 3; });
  check(PacketError::kBadField, [](PacketHeader& h) { h.bin_ratio = 1; });  // 1-bit heads have no bins
  check(PacketError::kBadField, [](PacketHeader& h) { h.row_log2 = 16; });
  check(PacketError::kBadField, [](PacketHeader& h) { h.scale = NAN; });
  check(PacketError::kBadField, [](PacketHeader& h) { h.scale = -1.0f; });
  check(PacketError::kBadField, [](PacketHeader& h) { h.dtype = DType::kRaw; });
  check(PacketError::kElemOverflow, [](PacketHeader& h) { h.first_elem = 32000; });
  check(PacketError::kElemOverflow, [](PacketHeader& h) { h.row = 5; });
  check(PacketError::kElemOverflow, [](PacketHeader& h) { h.msg_bytes = 100; });
  check(PacketError::kBadLength, [](PacketHeader& h) { h.payload_bytes = static_cast<uint16_t>(h.payload_bytes + 1); });
  check(PacketError::kBadLength, [](PacketHeader& h) { h.trim_bytes = 0; });
  check(PacketError::kBadLength, [](PacketHeader& h) { h.elem_count = 0; });
  check(PacketError::kBadLength, [](PacketHeader& h) { h.head_bits = 16; });  // trim point disagrees
  check(PacketError::kBadLength, [](PacketHeader& h) { h.head_bits = 2; });   // no room for plane Q
  check(PacketError::kBadField, [](PacketHeader& h) {  // sq heads are random: no bins
    h.scheme = Scheme::kSq;
    h.head_bits = 2;
  });
}

uint32_t le32(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) | (static_cast<uint32_t>(p[2]) << 16) |
         (static_cast<uint32_t>(p[3]) << 24);
}
uint16_t le16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }

// Recomputes the header CRC (bytes 0..75, TRIMMED cleared, at 76) after a test edited the header.
void reseal(std::vector<uint8_t>* p) {
  std::vector<uint8_t> copy(p->begin(), p->begin() + 76);
  copy[3] = static_cast<uint8_t>(copy[3] & ~kFlagTrimmed);
  const uint32_t c = crc32c(copy.data(), copy.size());
  for (int i = 0; i < 4; ++i) (*p)[76 + i] = static_cast<uint8_t>(c >> (8 * i));
}

// CRC-32C's published check value, and the header CRC is CRC-32C of bytes 0..75 with the
// TRIMMED flag cleared (whichever path, table or SSE4.2, computed it).
// CRC-32C bit by bit, the definition: what every path (table, one SSE4.2 chain, three
// interleaved lanes joined by shift tables) must agree with, on every length around the lanes'
// blocks (3 x 1024 and 3 x 128 bytes) and at a split point of crc32c_extend.
uint32_t crc32c_bitwise(uint32_t crc, const uint8_t* d, size_t n) {
  crc = ~crc;
  for (size_t i = 0; i < n; ++i) {
    crc ^= d[i];
    for (int k = 0; k < 8; ++k) crc = (crc & 1u) ? (crc >> 1) ^ 0x82F63B78u : crc >> 1;
  }
  return ~crc;
}

// Every path this CPU runs (PCLMUL folding: 128-byte steps from 256 bytes on, then SSE4.2).
TEST(Packet, Crc32cMatchesTheBitwiseDefinitionOnEveryLength) {
  std::mt19937 rng(5);
  std::vector<uint8_t> data(2 * 3072 + 3 * 384 + 64);
  for (auto& b : data) b = static_cast<uint8_t>(rng());
  std::vector<size_t> lengths;
  for (size_t n = 0; n <= 640; ++n) lengths.push_back(n);
  for (size_t block : {768u, 1936u, 3072u, 3072u + 384u, 3072u + 2 * 384u + 383u, 6144u, 6144u + 384u}) {
    for (size_t n = block - 9; n <= block + 9 && n <= data.size(); ++n) lengths.push_back(n);
  }
  for (size_t n : {777u, 1000u, 2048u, 3993u, 4000u, 4700u}) lengths.push_back(n);
  for (int path = 0; path <= 2; ++path) {
    if (!detail::crc32c_force_path(path)) continue;
    for (size_t n : lengths) {
      for (size_t off : {0u, 1u, 3u}) {
        if (off + n > data.size()) continue;
        const std::string at = "path " + std::to_string(path) + " length " + std::to_string(n) + " offset " +
                               std::to_string(off);
        const uint32_t want = crc32c_bitwise(0, data.data() + off, n);
        ASSERT_EQ(crc32c(data.data() + off, n), want) << at;
        const size_t cut = n * 2 / 5;
        ASSERT_EQ(crc32c_extend(crc32c(data.data() + off, cut), data.data() + off + cut, n - cut), want) << at;
        ASSERT_EQ(crc32c_extend(0xFFFFFFFFu, data.data() + off, n), crc32c_bitwise(0xFFFFFFFFu, data.data() + off, n))
            << at;
      }
    }
  }
  ASSERT_TRUE(detail::crc32c_force_path(-1));
}

TEST(Packet, HeaderCrcIsCrc32cOfTheFirst76Bytes) {
  const uint8_t check[] = {'1', '2', '3', '4', '5', '6', '7', '8', '9'};
  EXPECT_EQ(crc32c(check, sizeof check), 0xE3069283u);
  EXPECT_EQ(crc32c_extend(crc32c(check, 4), check + 4, 5), 0xE3069283u);
  std::vector<uint8_t> p = good_packet();
  mark_trimmed(p.data());
  std::vector<uint8_t> copy(p.begin(), p.begin() + 76);
  copy[3] = static_cast<uint8_t>(copy[3] & ~kFlagTrimmed);
  EXPECT_EQ(le32(&p[76]), crc32c(copy.data(), copy.size()));
  EXPECT_EQ(parse(p, p.size()), PacketError::kOk);
}

// crc32c_shift is the register after that many zero bytes (the bitwise definition), on every
// length a payload span can have: the clmul form's bits 3..15 and the zero-byte steps below 8.
TEST(Packet, Crc32cShiftIsZeroBytesFedIn) {
  std::mt19937 rng(11);
  const std::vector<uint8_t> zeros(65535, 0);
  std::vector<uint32_t> lengths;
  for (uint32_t n = 0; n <= 300; ++n) lengths.push_back(n);
  // Repeats too: the last length's multiplier is kept.
  for (uint32_t n : {1920u, 1920u, 1936u, 3960u, 3960u, 4096u, 32767u, 32768u, 40000u, 65535u, 65535u, 9u, 9u, 8u})
    lengths.push_back(n);
  for (uint32_t n : lengths) {
    const uint32_t reg = static_cast<uint32_t>(rng());
    // The register after n zero bytes: crc32c_bitwise works on inverted values.
    EXPECT_EQ(detail::crc32c_shift(reg, n), ~crc32c_bitwise(~reg, zeros.data(), n)) << n;
  }
}

// A header written with known span CRCs (as the rht encoder passes them) is the header written
// by reading the payload, byte for byte: spans that a check point falls inside (a fabric cut)
// are read instead, and a wrong register shows in the check points (the spans are used).
TEST(Packet, WriteHeaderJoinsSpanCrcsToTheBit) {
  std::mt19937 rng(12);
  for (uint32_t elems : {8u, 16u, 128u, 960u, 968u}) {
    for (uint32_t cut : {0u, 1u, 200u, 1000u, 2000u}) {
      const uint32_t p0 = elems / 8, payload = p0 + 4 * elems;
      std::vector<uint8_t> a(kHeaderBytes + payload);
      for (size_t i = kHeaderBytes; i < a.size(); ++i) a[i] = static_cast<uint8_t>(rng());
      std::vector<uint8_t> b = a;
      PacketHeader h;
      h.scheme = Scheme::kRht;
      h.dtype = DType::kF32;
      h.head_bits = 1;
      h.elem_count = static_cast<uint16_t>(elems);
      h.payload_bytes = static_cast<uint16_t>(payload);
      h.trim_bytes = static_cast<uint16_t>(p0);
      h.scale = 0.25f;
      write_header(h, a.data(), cut);
      // Registers from zero, no inversion: ~crc32c_extend(~0, span).
      const uint8_t* pl = b.data() + kHeaderBytes;
      PayloadSpanCrc spans[2] = {{p0, 2 * elems, ~crc32c_extend(0xFFFFFFFFu, pl + p0, 2 * elems)},
                                 {p0 + 2 * elems, 2 * elems, ~crc32c_extend(0xFFFFFFFFu, pl + p0 + 2 * elems, 2 * elems)}};
      write_header(h, b.data(), cut, spans, 2);
      const std::string at = std::to_string(elems) + " elements, cut " + std::to_string(cut);
      ASSERT_EQ(a, b) << at;
      spans[1].reg ^= 1;
      write_header(h, b.data(), cut, spans, 2);
      EXPECT_NE(a, b) << at;
    }
  }
}

// The check points of a packet, as its header holds them.
std::vector<std::pair<uint32_t, uint32_t>> points_of(const std::vector<uint8_t>& p) {
  std::vector<std::pair<uint32_t, uint32_t>> out;
  for (uint32_t i = 0; i < kCheckPoints; ++i) {
    const uint32_t end = le16(&p[52 + 4 * i]);
    if (end != 0) out.emplace_back(end, le16(&p[54 + 4 * i]));
  }
  return out;
}

// What the check points vouch for: a cut anywhere in the payload gives the decoder the prefix up
// to the last check point it kept, never a byte more; the points are the CRC-32C of header bytes
// [4, 40) and the payload prefix, low 16 bits.
TEST(CheckPoints, EveryCutUsesThePrefixUpToItsLastCheckPoint) {
  for (Scheme scheme : {Scheme::kSign, Scheme::kRht, Scheme::kSq}) {
    const std::vector<uint8_t> p = good_packet(scheme);
    const PacketHeader h = header_of(p);
    const auto points = points_of(p);
    ASSERT_GE(points.size(), 4u) << scheme_name(scheme);
    ASSERT_EQ(points.back().first, h.payload_bytes);
    bool at_trim = false;
    for (size_t i = 0; i < points.size(); ++i) {
      at_trim = at_trim || points[i].first == h.trim_bytes;
      if (i > 0) {
        EXPECT_LT(points[i - 1].first, points[i].first);
      }
      std::vector<uint8_t> seeded(p.begin() + 4, p.begin() + 40);
      seeded.insert(seeded.end(), p.begin() + kHeaderBytes, p.begin() + kHeaderBytes + points[i].first);
      EXPECT_EQ(points[i].second, crc32c(seeded.data(), seeded.size()) & 0xFFFFu) << i;
    }
    EXPECT_TRUE(at_trim) << "a check point at the trim point";
    for (uint32_t cut = 0; cut <= h.payload_bytes; ++cut) {
      std::vector<uint8_t> exact(p.begin(), p.begin() + kHeaderBytes + cut);  // ASan sees overreads
      ParsedPacket out;
      ASSERT_EQ(parse_packet(exact.data(), exact.size(), &out), PacketError::kOk) << cut;
      uint32_t want = 0;
      for (const auto& pt : points) want = pt.first <= cut ? pt.first : want;
      EXPECT_EQ(out.payload_received, want) << cut;
      EXPECT_EQ(out.trimmed, cut < h.payload_bytes) << cut;
      EXPECT_FALSE(out.check_failed) << cut;
    }
  }
}

// A corrupted byte anywhere in the payload (or in a check value): the decoder gets the prefix
// before the failed point, and the failure is counted.
TEST(CheckPoints, CorruptionStopsAtTheFailedPoint) {
  const std::vector<uint8_t> p = good_packet();
  const auto points = points_of(p);
  const PacketHeader h = header_of(p);
  for (uint32_t at = 0; at < h.payload_bytes; at += 7) {
    std::vector<uint8_t> q = p;
    q[kHeaderBytes + at] ^= 0x10;
    const uint64_t before = packet_error_counters().get(PacketError::kBadPayloadCheck);
    ParsedPacket out;
    ASSERT_EQ(parse_packet(q.data(), q.size(), &out), PacketError::kOk);
    uint32_t want = 0;
    for (const auto& pt : points) want = pt.first <= at ? pt.first : want;
    EXPECT_TRUE(out.check_failed) << at;
    EXPECT_TRUE(out.trimmed) << at;
    EXPECT_EQ(out.payload_received, want) << at;
    EXPECT_EQ(packet_error_counters().get(PacketError::kBadPayloadCheck), before + 1);
  }
  std::vector<uint8_t> q = p;
  q[54] ^= 1;  // the first check value
  reseal(&q);
  ParsedPacket out;
  ASSERT_EQ(parse_packet(q.data(), q.size(), &out), PacketError::kOk);
  EXPECT_TRUE(out.check_failed);
  EXPECT_EQ(out.payload_received, 0u);
}

// A packet its sender left to the kernel's UDP checksum: arriving whole, the receiving kernel
// vouched for it and the points are not recomputed (a flipped payload byte is the kernel's to
// catch, which drops the datagram); cut short, its prefix is verified as any other. The flag is
// covered by the header CRC, so a switch cannot set it.
TEST(CheckPoints, WholeKernelChecksummedPacketsSkipThemCutOnesDoNot) {
  std::vector<uint8_t> p = good_packet();
  const PacketHeader h = header_of(p);
  mark_udp_checksummed(p.data());
  stamp_transport(p.data(), h.psn, h.dst_ip4, h.dst_port);
  EXPECT_NE(header_of(p).flags & kFlagUdpChecksummed, 0);
  std::vector<uint8_t> q = p;
  q[kHeaderBytes + h.payload_bytes - 1] ^= 0x10;
  ParsedPacket out;
  ASSERT_EQ(parse_packet(q.data(), q.size(), &out), PacketError::kOk);
  EXPECT_FALSE(out.check_failed);
  EXPECT_FALSE(out.trimmed);
  EXPECT_EQ(out.payload_received, h.payload_bytes);
  // Cut at the trim point, with a byte inside the heads flipped: verified, and caught.
  q = p;
  q[kHeaderBytes + h.trim_bytes / 2] ^= 0x10;
  ASSERT_EQ(parse_packet(q.data(), kHeaderBytes + h.trim_bytes, &out), PacketError::kOk);
  EXPECT_TRUE(out.check_failed);
  EXPECT_LT(out.payload_received, h.trim_bytes);
  // The flag set without resealing the header: a bad header CRC.
  q = good_packet();
  q[3] |= kFlagUdpChecksummed;
  EXPECT_EQ(parse(q, q.size()), PacketError::kBadChecksum);
}

// The points are seeded with the header's identity: another packet's payload (same sizes) under
// this header verifies nothing.
TEST(CheckPoints, BindThePayloadToItsHeader) {
  std::vector<uint8_t> msg = message_bytes(DType::kF32, 3000, 0, 44, false);
  Decoded d = round_trip(config(Scheme::kRht), DType::kF32, msg, keep_all);
  ASSERT_GE(d.packets.size(), 3u);
  ASSERT_EQ(d.packets[0].size(), d.packets[1].size());
  std::vector<uint8_t> spliced = d.packets[0];
  std::copy(d.packets[1].begin() + kHeaderBytes, d.packets[1].end(), spliced.begin() + kHeaderBytes);
  ParsedPacket out;
  ASSERT_EQ(parse_packet(spliced.data(), spliced.size(), &out), PacketError::kOk);
  EXPECT_TRUE(out.check_failed);
  EXPECT_EQ(out.payload_received, 0u);
}

// The table is validated like every other field: ascending, ending at the payload's end, unused
// entries zero, none on raw packets (the UDP checksum guards those).
TEST(CheckPoints, MalformedTablesAreRejected) {
  const std::vector<uint8_t> p = good_packet();
  auto edited = [&](const std::vector<uint8_t>& base, auto&& edit) {
    std::vector<uint8_t> q = base;
    edit(q);
    reseal(&q);
    return parse(q, q.size());
  };
  auto put16 = [](std::vector<uint8_t>& q, size_t at, uint32_t v) {
    q[at] = static_cast<uint8_t>(v);
    q[at + 1] = static_cast<uint8_t>(v >> 8);
  };
  const size_t n = points_of(p).size();
  ASSERT_LT(n, kCheckPoints + 1u);
  EXPECT_EQ(edited(p, [](std::vector<uint8_t>&) {}), PacketError::kOk);
  EXPECT_EQ(edited(p, [&](std::vector<uint8_t>& q) { put16(q, 52, le16(&q[56]) + 1); }), PacketError::kBadField);
  EXPECT_EQ(edited(p, [&](std::vector<uint8_t>& q) { put16(q, 52 + 4 * (n - 1), 0); put16(q, 54 + 4 * (n - 1), 0); }),
            PacketError::kBadField)
      << "the last point must be the payload's end";
  EXPECT_EQ(edited(p, [&](std::vector<uint8_t>& q) { put16(q, 52, 0); put16(q, 54, 0); }), PacketError::kBadField)
      << "used points come first";
  if (n < kCheckPoints) {
    EXPECT_EQ(edited(p, [&](std::vector<uint8_t>& q) { put16(q, 54 + 4 * n, 1); }), PacketError::kBadField)
        << "an unused point is all zero";
  }
  Decoded raw = round_trip(config(Scheme::kNone), DType::kF32, message_bytes(DType::kF32, 100, 0, 3, false), keep_all);
  EXPECT_EQ(edited(raw.packets[0], [](std::vector<uint8_t>&) {}), PacketError::kOk);
  EXPECT_EQ(edited(raw.packets[0], [&](std::vector<uint8_t>& q) { put16(q, 52, 4); }), PacketError::kBadField);
}

// Where the writer puts them: the payload's end, the trim point and a planned cut always, the
// rest inside the heads.
TEST(CheckPoints, PlacedAtTheTrimPointAndThePlannedCut) {
  uint16_t ends[kCheckPoints];
  uint32_t n = check_point_ends(4000, 125, 0, ends);
  EXPECT_EQ(std::vector<uint16_t>(ends, ends + n), (std::vector<uint16_t>{31, 62, 94, 125, 2062, 4000}));
  n = check_point_ends(4000, 125, 130, ends);
  EXPECT_EQ(std::vector<uint16_t>(ends, ends + n), (std::vector<uint16_t>{31, 62, 94, 125, 130, 4000}));
  n = check_point_ends(4000, 125, 4000, ends);  // a planned cut past the payload: no trim happens
  EXPECT_EQ(std::vector<uint16_t>(ends, ends + n), (std::vector<uint16_t>{31, 62, 94, 125, 2062, 4000}));
  n = check_point_ends(5, 1, 0, ends);  // tiny: no duplicates, no zero
  EXPECT_EQ(std::vector<uint16_t>(ends, ends + n), (std::vector<uint16_t>{1, 3, 5}));
  // Through the encoder: NCCL_TRIM_FABRIC_TRIM_BYTES's planned cut is a point of every packet.
  CodecConfig cfg = config(Scheme::kRht);
  cfg.fabric_keep_bytes = fabric_keep_bytes(256);
  Decoded d = round_trip(cfg, DType::kF32, message_bytes(DType::kF32, 3000, 0, 45, false), keep_all);
  for (const auto& pkt : d.packets) {
    bool found = false;
    for (const auto& pt : points_of(pkt)) found = found || pt.first == cfg.fabric_keep_bytes;
    EXPECT_TRUE(found || header_of(pkt).payload_bytes <= cfg.fabric_keep_bytes);
  }
}

TEST(Packet, LengthPastPacket) {
  std::vector<uint8_t> p = good_packet();
  p.push_back(0);
  EXPECT_EQ(parse(p, p.size()), PacketError::kLengthPastPacket);
}

// The decoder rejects packets of another connection or message, and rows whose packets
// disagree, without touching the output.
TEST(Packet, DecoderRejectsForeignAndInconsistentPackets) {
  CodecConfig cfg = config(Scheme::kRht);
  std::vector<uint8_t> msg = message_bytes(DType::kF32, 3000, 0, 41, false);
  const Encoded e = encode(cfg, DType::kF32, msg);
  ASSERT_TRUE(e.ok);
  Decoder dec(cfg);
  std::vector<uint8_t> out(msg.size(), 0xEE);
  MessageId other = test_id();
  other.cookie ^= 1;
  ASSERT_TRUE(dec.begin(*e.layout, other, out.data()).is_ok());
  ParsedPacket p;
  ASSERT_EQ(parse_packet(e.packets.at(0).data(), e.packets.at(0).size(), &p), PacketError::kOk);
  const uint64_t before = packet_error_counters().get(PacketError::kWrongCookie);
  EXPECT_EQ(dec.add(p), PacketError::kWrongCookie);
  EXPECT_EQ(packet_error_counters().get(PacketError::kWrongCookie), before + 1);
  EXPECT_EQ(out, std::vector<uint8_t>(msg.size(), 0xEE));

  ASSERT_TRUE(dec.begin(*e.layout, test_id(), out.data()).is_ok());
  EXPECT_EQ(dec.add(p), PacketError::kOk);
  // Same row, different scale: a forged or corrupted packet.
  PacketHeader h = p.hdr;
  std::vector<uint8_t> forged = e.packets.at(1);
  ParsedPacket q;
  ASSERT_EQ(parse_packet(forged.data(), forged.size(), &q), PacketError::kOk);
  h = q.hdr;
  h.scale *= 2;
  write_header(h, forged.data());
  ASSERT_EQ(parse_packet(forged.data(), forged.size(), &q), PacketError::kOk);
  EXPECT_EQ(dec.add(q), PacketError::kInconsistent);
  // Another message's packet.
  Decoded d2 = round_trip(cfg, DType::kF32, msg, keep_all, test_id(8));
  ASSERT_EQ(parse_packet(d2.packets[0].data(), d2.packets[0].size(), &q), PacketError::kOk);
  EXPECT_EQ(dec.add(q), PacketError::kInconsistent);
}

// Random garbage and random mutations of real packets: parse never crashes or reads past the
// buffer (ASan build), and the decoder accepts only what parses.
TEST(Packet, RandomMutationsNeverCrash) {
  std::mt19937_64 rng(42);
  std::vector<uint8_t> base = good_packet(Scheme::kSq, 700);
  CodecConfig cfg = config(Scheme::kSq);
  Result<Layout> layout = Layout::make(cfg, DType::kF32, Scheme::kSq, 700 * 4);
  ASSERT_TRUE(layout.is_ok());
  Decoder dec(cfg);
  std::vector<uint8_t> out(700 * 4);
  ASSERT_TRUE(dec.begin(*layout, test_id(), out.data()).is_ok());
  int ok = 0;
  for (int i = 0; i < 20000; ++i) {
    std::vector<uint8_t> p = base;
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int f = 0; f < flips; ++f) p[rng() % p.size()] ^= static_cast<uint8_t>(1u << (rng() % 8));
    const size_t len = rng() % 3 == 0 ? rng() % (p.size() + 1) : p.size();
    std::vector<uint8_t> exact(p.begin(), p.begin() + static_cast<long>(len));  // ASan sees overreads
    ParsedPacket out_p;
    if (parse_packet(exact.data(), exact.size(), &out_p) == PacketError::kOk) {
      ++ok;
      (void)dec.add(out_p);
    }
  }
  dec.finish();
  EXPECT_GT(ok, 0);  // payload-only mutations and TRIMMED flips do parse
  EXPECT_LT(ok, 20000);
}

}  // namespace
}  // namespace trim::codec::testing
