// What both seed writers (make_seeds.cc, wire_seeds.cc) derive from one valid wire-version-2
// data packet, so that the fuzzers start from every shape a v2 packet reaches a parser in:
// whole; cut at, just before and just past each of its check points (a fabric's fixed-size
// trim falls anywhere); cut inside the 80-byte header; our switch's native trim (TRIMMED flag,
// cut at the trim point); a payload byte corrupted between two points; another wire version
// (v1's 56-byte header, a future 3) and a malformed check-point table, each with a valid CRC.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "codec/packet.h"
#include "common/le.h"

namespace trim::fuzz {

inline std::vector<std::vector<uint8_t>> v2_variants(const std::vector<uint8_t>& pkt) {
  using Bytes = std::vector<uint8_t>;
  constexpr uint32_t kH = codec::kHeaderBytes;
  constexpr size_t kChecksAt = 52;  // docs/PROTOCOL.md, "Header"
  std::vector<Bytes> out;
  if (pkt.size() < kH) return out;
  auto cut = [&](size_t len) {
    if (len <= pkt.size()) out.emplace_back(pkt.begin(), pkt.begin() + static_cast<std::ptrdiff_t>(len));
  };
  // The header's CRC refreshed after an edit, keeping the packet's own psn and destination.
  auto restamp = [](Bytes* b) {
    codec::stamp_transport(b->data(), le::get32(b->data() + 40), le::get32(b->data() + 44),
                           le::get16(b->data() + 48));
  };
  out.push_back(pkt);
  std::vector<uint32_t> ends;
  for (uint32_t i = 0; i < codec::kCheckPoints; ++i) {
    const uint32_t end = le::get16(pkt.data() + kChecksAt + 4 * i);
    if (end != 0) ends.push_back(end);
  }
  for (uint32_t end : ends) {
    // A cut at a point keeps exactly the payload up to it: else the seeds are not what they claim.
    codec::ParsedPacket p;
    if (codec::parse_packet(pkt.data(), kH + end, &p) != codec::PacketError::kOk || p.payload_received != end ||
        p.check_failed) {
      std::fprintf(stderr, "seed_cuts: a cut at check point %u does not verify to it\n", end);
      std::exit(6);
    }
    cut(kH + end - 1);
    if (end != ends.back()) {
      cut(kH + end);
      cut(kH + end + 1);
    }
  }
  for (size_t len : {size_t{2}, size_t{3}, size_t{40}, size_t{56}, size_t{76}, size_t{kH - 1}, size_t{kH}}) cut(len);
  const uint32_t trim_bytes = le::get16(pkt.data() + 34);
  if (trim_bytes != 0) {
    Bytes t = pkt;
    codec::mark_trimmed(t.data());
    t.resize(kH + trim_bytes);
    out.push_back(t);
  }
  if (ends.size() >= 2) {  // the first point holds, the second fails
    Bytes c = pkt;
    c[kH + ends[1] - 1] ^= 0x40;
    out.push_back(c);
  }
  for (uint8_t version : {uint8_t{1}, uint8_t{3}}) {
    Bytes v = pkt;
    v[2] = version;
    restamp(&v);
    out.push_back(v);
    if (version == 1) {  // v1's header was 56 bytes: this header's first 56 bytes, then the payload
      v.erase(v.begin() + 56, v.begin() + kH);
      out.push_back(v);
    }
  }
  if (!ends.empty()) {  // an unused entry set: a malformed table
    Bytes m = pkt;
    le::put16(m.data() + kChecksAt + 4 * (codec::kCheckPoints - 1), 7);
    restamp(&m);
    out.push_back(m);
  }
  return out;
}

}  // namespace trim::fuzz
