// Exact payloads received in place (transport/placed_rx.h). A datagram is written through
// PlacedRead's iovecs as the kernel writes it: the expected run must land in the receive's
// buffer with nothing left to copy, and anything else must come back into the side buffer byte
// for byte as a contiguous read would have left it. Either way the decoder then finishes the
// message exact, and no byte that had arrived is ever overwritten.
#include "transport/placed_rx.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <vector>

#include "codec/decoder.h"
#include "codec/packet.h"
#include "tests/codec_util.h"

namespace trim::transport {
namespace {

using codec::kHeaderBytes;
using codec::PacketError;
using codec::ParsedPacket;

constexpr uint32_t kMtu = 9000;                 // packets of 8972 bytes: a raw row is 3 x 8892 + 6092 payload bytes
constexpr uint32_t kMaxRead = 65507;            // what a GRO batch holds at most
constexpr uint64_t kCookie = 0x5EED5EED12345678ull;

// What the kernel does with a datagram and an iovec array: fills the pieces in order.
size_t scatter(const std::vector<uint8_t>& d, const iovec* iov, size_t n) {
  size_t at = 0;
  for (size_t i = 0; i < n && at < d.size(); ++i) {
    const size_t k = std::min(iov[i].iov_len, d.size() - at);
    std::memcpy(iov[i].iov_base, d.data() + at, k);
    at += k;
  }
  return at;
}

std::vector<uint8_t> random_bytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> b(n);
  for (uint8_t& x : b) x = static_cast<uint8_t>(rng());
  return b;
}

std::vector<uint8_t> concat(const std::vector<std::vector<uint8_t>>& packets) {
  std::vector<uint8_t> d;
  for (const auto& p : packets) d.insert(d.end(), p.begin(), p.end());
  return d;
}

// One exact message received in place: its decoder, driven as RecvProto drives it (the next
// packets are expected after the last exact one accepted), and the message it must rebuild.
class Receiver {
 public:
  explicit Receiver(size_t bytes, uint32_t seed = 1, uint64_t cookie = kCookie)
      : cfg_(codec::testing::config(codec::Scheme::kNone, kMtu)), dec_(cfg_) {
    msg_ = random_bytes(bytes, seed);
    id_ = codec::MessageId{cookie, 9, false};
    codec::testing::Encoded e = codec::testing::encode(cfg_, codec::DType::kRaw, msg_, id_);
    EXPECT_TRUE(e.ok);
    packets_ = std::move(e.packets);
    out_.assign(bytes, 0xCD);
    arrived_.assign(bytes, 0);
    EXPECT_TRUE(dec_.begin(*e.layout, id_, out_.data()).is_ok());
  }

  const std::vector<std::vector<uint8_t>>& packets() const { return packets_; }
  const std::vector<uint8_t>& msg() const { return msg_; }
  const std::vector<uint8_t>& out() const { return out_; }
  size_t moved() const { return moved_; }

  // Reads `d` (segments of `seg` bytes) through the current expectation; returns how many
  // segments were placed. Checks that the rest came back as written and that nothing that had
  // arrived changed.
  uint32_t read(const std::vector<uint8_t>& d, uint32_t seg, bool from_peer = true) {
    Expectation e;
    e.cookie = id_.cookie;
    e.msg_seq = id_.msg_seq;
    e.slots = last_valid_ ? dec_.exact_slots_after(last_row_, last_first_, e.slot, kMaxPlacedSlots, kMaxRead) : 0;
    std::vector<uint8_t> side(65536, 0x77);
    PlacedRead r(e, side.data(), side.size());
    const size_t len = scatter(d, r.iov(), r.iovlen());
    EXPECT_EQ(len, d.size());
    const uint32_t placed = r.settle(len, seg, from_peer);
    moved_ += r.moved_bytes();
    const size_t rest = std::min<size_t>(static_cast<size_t>(placed) * seg, len);
    EXPECT_TRUE(std::equal(d.begin() + rest, d.end(), side.begin() + rest)) << "the rest did not come back as written";
    for (uint32_t k = 0; k < placed; ++k) {
      const codec::InPlaceSlot& s = e.slot[k];
      EXPECT_EQ(0, std::memcmp(s.dst, d.data() + k * seg + kHeaderBytes, s.bytes)) << "segment " << k << " not in place";
      ParsedPacket p;
      EXPECT_EQ(codec::parse_packet_at(side.data() + k * seg, s.dst, kHeaderBytes + s.bytes, &p), PacketError::kOk);
      add(p);
    }
    for (size_t off = rest; off < len; off += seg) {
      ParsedPacket p;
      if (codec::parse_packet(side.data() + off, std::min<size_t>(seg, len - off), &p) == PacketError::kOk) add(p);
    }
    expect_arrived_intact();
    return placed;
  }

  // Delivers packet k the usual way (from a contiguous buffer).
  void deliver(size_t k) {
    ParsedPacket p;
    ASSERT_EQ(codec::parse_packet(packets_[k].data(), packets_[k].size(), &p), PacketError::kOk);
    add(p);
  }

  void expect_arrived_intact() const {
    for (size_t i = 0; i < msg_.size(); ++i) {
      if (arrived_[i] != 0 && out_[i] != msg_[i]) {
        ADD_FAILURE() << "byte " << i << " had arrived and was overwritten";
        return;
      }
    }
  }

 private:
  // A packet from another connection, or a wrong one, is refused here as RecvProto's decoder
  // refuses it; a whole exact packet that filled its slot is the one the next are expected after.
  void add(const ParsedPacket& p) {
    const uint64_t filled = dec_.slots_filled();
    if (p.hdr.cookie != id_.cookie || dec_.add(p) != PacketError::kOk || p.trimmed || dec_.slots_filled() == filled) {
      return;
    }
    last_valid_ = true;
    last_row_ = p.hdr.row;
    last_first_ = p.hdr.first_elem;
    const size_t off = static_cast<size_t>(p.hdr.row) * cfg_.row_elems + p.hdr.first_elem;
    std::fill(arrived_.begin() + off, arrived_.begin() + off + p.hdr.elem_count, 1);
  }

  codec::CodecConfig cfg_;
  codec::Decoder dec_;
  codec::MessageId id_;
  std::vector<uint8_t> msg_, out_, arrived_;
  std::vector<std::vector<uint8_t>> packets_;
  bool last_valid_ = false;
  uint32_t last_row_ = 0, last_first_ = 0;
  size_t moved_ = 0;
};

constexpr uint32_t kSeg = kMtu - codec::kIpv4UdpBytes;  // a full packet, header included

TEST(PlacedRx, InOrderRunsLandInPlaceWithNothingLeftToCopy) {
  Receiver rx(200003);  // 6 rows of 4 packets, then a last row of 3395 bytes
  const auto& pk = rx.packets();
  ASSERT_EQ(pk.size(), 25u);
  ASSERT_EQ(pk[0].size(), kSeg);
  ASSERT_LT(pk[3].size(), kSeg);
  rx.deliver(0);  // a message's first packet says where it goes: copied
  // Then each run the sender's segmentation makes (up to a row's short last packet) lands whole.
  EXPECT_EQ(rx.read(concat({pk[1], pk[2], pk[3]}), kSeg), 3u);
  for (size_t row = 1; row < 6; ++row) {
    EXPECT_EQ(rx.read(concat({pk[4 * row], pk[4 * row + 1], pk[4 * row + 2], pk[4 * row + 3]}), kSeg), 4u) << row;
  }
  EXPECT_EQ(rx.read(pk[24], static_cast<uint32_t>(pk[24].size())), 1u);
  EXPECT_EQ(rx.moved(), 0u);
  EXPECT_EQ(rx.out(), rx.msg());
}

TEST(PlacedRx, ARunCutShortByTheSenderLeavesTheRestExpected) {
  Receiver rx(100000);
  const auto& pk = rx.packets();
  rx.deliver(0);
  EXPECT_EQ(rx.read(pk[1], kSeg), 1u);  // the sender sent one packet alone: still placed
  EXPECT_EQ(rx.read(concat({pk[2], pk[3]}), kSeg), 2u);
  EXPECT_EQ(rx.moved(), 0u);
}

// Each datagram that is not the expected packet goes back to the side buffer as written (read()
// checks) and nothing placed earlier moves; the message still ends exact.
TEST(PlacedRx, AnythingElseIsMovedBackAsWritten) {
  Receiver rx(100000);
  const auto& pk = rx.packets();
  rx.deliver(0);
  ASSERT_EQ(rx.read(pk[1], kSeg), 1u);
  // Reordered: slot 2 is expected, slot 3 (the row's short packet) arrives.
  EXPECT_EQ(rx.read(pk[3], static_cast<uint32_t>(pk[3].size())), 0u);
  // A packet that arrived before, again (a resend).
  EXPECT_EQ(rx.read(pk[1], kSeg), 0u);
  // The expected packet, cut by a switch: an exact packet is NACKed, its bytes not placed.
  std::vector<uint8_t> cut(pk[2].begin(), pk[2].begin() + kHeaderBytes + 1000);
  codec::mark_trimmed(cut.data());
  EXPECT_EQ(rx.read(cut, static_cast<uint32_t>(cut.size())), 0u);
  // The expected packet from anyone but the peer.
  EXPECT_EQ(rx.read(pk[2], kSeg, /*from_peer=*/false), 0u);
  // Another connection's packet for the same slot.
  Receiver other(100000, 2, kCookie + 1);
  std::vector<uint8_t> foreign = other.packets()[2];
  codec::PacketHeader h;
  ASSERT_TRUE(codec::peek_header(foreign.data(), &h));
  ASSERT_EQ(h.cookie, kCookie + 1);
  EXPECT_EQ(rx.read(foreign, kSeg), 0u);
  // A control packet's size, and garbage as long as a packet.
  EXPECT_EQ(rx.read(std::vector<uint8_t>(120, 0xA5), 120), 0u);
  EXPECT_EQ(rx.read(std::vector<uint8_t>(kSeg, 0x5A), kSeg), 0u);
  // Slot 3 was the last to arrive: the next row is expected. A run whose first packet is
  // expected and whose second is not: the first is placed.
  EXPECT_EQ(rx.read(concat({pk[4], pk[9]}), kSeg), 1u);
  EXPECT_GT(rx.moved(), 0u);
  for (size_t k = 0; k < pk.size(); ++k) rx.deliver(k);
  EXPECT_EQ(rx.out(), rx.msg());
}

// Random mixes of in-order runs, resends, reordered and cut packets, other connections' packets
// and garbage, over 40 messages: no read overwrites a byte that had arrived (read() checks after
// each), and every message ends exact. Seeded: the same datagrams each run.
TEST(PlacedRx, RandomArrivalsNeverOverwriteWhatArrived) {
  std::mt19937 rng(12345);
  auto pick = [&](size_t n) { return static_cast<size_t>(rng() % n); };
  uint32_t placed = 0;
  size_t moved = 0;
  for (uint32_t m = 0; m < 40 && !HasFailure(); ++m) {
    Receiver rx(300000 + 7 * m, m);
    Receiver other(300000 + 7 * m, m + 1000, kCookie + 1);
    const auto& pk = rx.packets();
    size_t next = 0;  // the sender's next packet in order
    for (int i = 0; i < 120 && !HasFailure(); ++i) {
      std::vector<uint8_t> d;
      bool from_peer = true;
      switch (pick(8)) {
        case 0:
        case 1:
        case 2: {  // the sender's next run as its segmentation cuts it: up to 7 packets, a short one ends it
          std::vector<std::vector<uint8_t>> run;
          const size_t n = 1 + pick(7);
          while (run.size() < n && next < pk.size()) {
            run.push_back(pk[next++]);
            if (run.back().size() < kSeg) break;
          }
          if (next >= pk.size()) next = 0;  // then it resends from the start
          d = concat(run);
          break;
        }
        case 3: d = pk[pick(pk.size())]; break;  // a resend, or a packet ahead of the rest
        case 4: {  // a cut one
          d = pk[pick(pk.size())];
          d.resize(kHeaderBytes + pick(d.size() - kHeaderBytes));
          codec::mark_trimmed(d.data());
          break;
        }
        case 5: d = other.packets()[pick(other.packets().size())]; break;
        case 6: d.assign(1 + pick(kSeg), static_cast<uint8_t>(rng())); break;
        default: d = pk[next]; from_peer = false; break;
      }
      placed += rx.read(d, static_cast<uint32_t>(std::min<size_t>(kSeg, d.size())), from_peer);
    }
    moved += rx.moved();
    for (size_t k = 0; k < pk.size(); ++k) rx.deliver(k);
    EXPECT_EQ(rx.out(), rx.msg()) << "message " << m;
  }
  EXPECT_GT(placed, 200u);  // both paths were exercised
  EXPECT_GT(moved, 0u);
}

}  // namespace
}  // namespace trim::transport
