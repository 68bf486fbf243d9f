// What the tests that drive the connection state machines directly share: a transmit sink that
// captures everything, and a cumulative ACK.
#pragma once

#include <cstdint>
#include <vector>

#include "transport/proto.h"
#include "transport/recv_proto.h"
#include "transport/send_proto.h"
#include "transport/wire.h"

namespace trim::transport::testing {

inline constexpr uint64_t kTestCookie = 0xC00C1E;

struct Capture final : TxSink {
  std::vector<std::vector<uint8_t>> packets;
  std::vector<CtrlPacket> ctrls;
  std::vector<Frame> frames;
  void data(const uint8_t* h, uint32_t hn, const uint8_t* r, uint32_t rn) override {
    packets.emplace_back(h, h + hn);
    if (rn > 0) packets.back().insert(packets.back().end(), r, r + rn);
  }
  void ctrl(const CtrlPacket& p) override { ctrls.push_back(p); }
  void frame(const Frame& f) override { frames.push_back(f); }
};

// Everything below psn `cum` arrived (and was accepted).
inline CtrlPacket ack_upto(uint32_t cum) {
  CtrlPacket a;
  a.cookie = kTestCookie;
  a.cum_psn = cum;
  a.accepted_total = cum;
  return a;
}

// A trimmable fp32 send of `in` (message `seq`) and a receive of as many bytes into `out`.
inline void fp32_ops(const std::vector<float>& in, std::vector<float>* out, SendOp* so, RecvOp* ro, uint32_t seq = 0) {
  so->data = reinterpret_cast<const uint8_t*>(in.data());
  so->bytes = in.size() * 4;
  so->seq = seq;
  so->trimmable = true;
  so->dtype = codec::DType::kF32;
  ro->data = reinterpret_cast<uint8_t*>(out->data());
  ro->capacity = so->bytes;
  ro->seq = seq;
}

}  // namespace trim::transport::testing
