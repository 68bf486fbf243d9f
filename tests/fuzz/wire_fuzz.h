// What wire_fuzz.cc and its seed writer (wire_seeds.cc) share: the meaning of the first input
// byte and the fixed connection the state machines run on, so that seeded packets and ACKs
// fit the fuzzer's sender and receiver exactly.
#pragma once

#include <cstdint>
#include <vector>

#include "transport/recv_proto.h"
#include "transport/send_proto.h"

namespace trim::fuzz {

// Input byte 0: bits 0-2 the target (modulo kNumTargets), bit 3 "arrived with the trimmed DSCP"
// (data target), bits 4-6 the receiver's scheme (data target), bit 7 "refresh the checksum" so
// mutations get past it.
enum Target : uint8_t { kCtrl = 0, kFrame, kHello, kHelloAck, kHandle, kData, kNumTargets };
constexpr uint8_t kTargetMask = 0x07;
constexpr uint8_t kMarked = 0x08;
constexpr uint8_t kFixCrc = 0x80;
inline uint8_t selector(Target t, codec::Scheme s, bool fix, bool marked = false) {
  return static_cast<uint8_t>(t | (static_cast<uint8_t>(s) << 4) | (fix ? kFixCrc : 0) | (marked ? kMarked : 0));
}

constexpr uint64_t kCookie = 0xC00C1E5EED;
constexpr uint64_t kSendBytes = 64 << 10;  // the sender's one exact message
constexpr uint64_t kRecvBytes = 1 << 20;   // the receiver's receive 0
constexpr uint64_t kSmallRecvBytes = 16 << 10;  // and its receive 1: smaller than the seeded messages

inline transport::ConnParams conn_params(codec::Scheme scheme) {
  transport::ConnParams p;
  p.codec.scheme = scheme;
  p.cookie = kCookie;
  p.dst_ip4_be = 0x0100007f;
  p.dst_port = 9;
  p.min_rto_ns = 1'000'000;
  return p;
}

inline std::vector<uint8_t> message_bytes(uint64_t n) {
  std::vector<uint8_t> v(n);
  for (uint64_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(i * 131 + (i >> 9));
  return v;
}

// Keeps whatever a state machine emits.
struct Capture final : transport::TxSink {
  std::vector<std::vector<uint8_t>> packets;
  std::vector<transport::CtrlPacket> ctrls;
  std::vector<transport::Frame> frames;
  void data(const uint8_t* h, uint32_t hn, const uint8_t* r, uint32_t rn) override {
    packets.emplace_back(h, h + hn);
    if (rn > 0) packets.back().insert(packets.back().end(), r, r + rn);
  }
  void ctrl(const transport::CtrlPacket& p) override { ctrls.push_back(p); }
  void frame(const transport::Frame& f) override { frames.push_back(f); }
};

// The ctrl target's sender: one exact message posted, cleared to send, first window out at t=0.
inline void start_sender(transport::SendProto* s, transport::SendOp* op, const std::vector<uint8_t>& msg,
                         Capture* tx) {
  op->data = msg.data();
  op->bytes = msg.size();
  op->seq = 0;
  if (!s->post(op).is_ok()) __builtin_trap();
  s->on_cts(0, msg.size());
  s->poll_tx(0, 1000, tx);
}

}  // namespace trim::fuzz
