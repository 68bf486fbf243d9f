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
  // The payload is not covered: a payload bit flip parses (UDP's checksum guards it).
  q = p;
  q[kHeaderBytes + 5] ^= 1;
  EXPECT_EQ(parse(q, q.size()), PacketError::kOk);
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
  check(PacketError::kBadField, [](PacketHeader& h) { h.head_planes = 3; });
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
  check(PacketError::kBadLength, [](PacketHeader& h) { h.head_planes = 2; });  // trim point disagrees
}

// CRC-32C's published check value, and the header CRC is CRC-32C of bytes 0..51 with the
// TRIMMED flag cleared (whichever path, table or SSE4.2, computed it).
TEST(Packet, HeaderCrcIsCrc32cOfTheFirst52Bytes) {
  const uint8_t check[] = {'1', '2', '3', '4', '5', '6', '7', '8', '9'};
  EXPECT_EQ(crc32c(check, sizeof check), 0xE3069283u);
  std::vector<uint8_t> p = good_packet();
  mark_trimmed(p.data());
  std::vector<uint8_t> copy(p.begin(), p.begin() + 52);
  copy[3] = static_cast<uint8_t>(copy[3] & ~kFlagTrimmed);
  const uint32_t stored = static_cast<uint32_t>(p[52]) | (static_cast<uint32_t>(p[53]) << 8) |
                          (static_cast<uint32_t>(p[54]) << 16) | (static_cast<uint32_t>(p[55]) << 24);
  EXPECT_EQ(stored, crc32c(copy.data(), copy.size()));
  EXPECT_EQ(parse(p, p.size()), PacketError::kOk);
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
  Result<Layout> layout = Layout::make(cfg, DType::kF32, Scheme::kRht, msg.size());
  ASSERT_TRUE(layout.is_ok());
  Encoder enc(cfg);
  auto packets = enc.encode_message(*layout, test_id(), msg.data());
  ASSERT_TRUE(packets.is_ok());
  Decoder dec(cfg);
  std::vector<uint8_t> out(msg.size(), 0xEE);
  MessageId other = test_id();
  other.cookie ^= 1;
  ASSERT_TRUE(dec.begin(*layout, other, out.data()).is_ok());
  ParsedPacket p;
  ASSERT_EQ(parse_packet(packets->at(0).data(), packets->at(0).size(), &p), PacketError::kOk);
  const uint64_t before = packet_error_counters().get(PacketError::kWrongCookie);
  EXPECT_EQ(dec.add(p), PacketError::kWrongCookie);
  EXPECT_EQ(packet_error_counters().get(PacketError::kWrongCookie), before + 1);
  EXPECT_EQ(out, std::vector<uint8_t>(msg.size(), 0xEE));

  ASSERT_TRUE(dec.begin(*layout, test_id(), out.data()).is_ok());
  EXPECT_EQ(dec.add(p), PacketError::kOk);
  // Same row, different scale: a forged or corrupted packet.
  PacketHeader h = p.hdr;
  std::vector<uint8_t> forged = packets->at(1);
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
