#include "switch_sim/daemon/cross.h"

#include <algorithm>
#include <cmath>

#include "codec/packet.h"

namespace trim::sw::daemon {

namespace {
constexpr uint64_t kNsPerMs = 1000000;
// Plane 0 of a real trimmable packet is its 1-bit heads: 1/32 of an fp32 payload. Synthetic
// trimmable packets are cut there too, so they weigh on the header queue as real ones do.
constexpr uint32_t kPlane0Divisor = 32;
}  // namespace

CrossSource::CrossSource(const CrossSpec& spec, uint32_t index, uint64_t start_ns, uint64_t phase_ns)
    : spec_(spec), flow_(kCrossFlowBit | index), start_ns_(start_ns) {
  interval_ns_ = std::max<uint64_t>(1, static_cast<uint64_t>(std::llround(spec.packet_bytes * 8.0 / spec.rate_gbps)));
  next_ns_ = start_ns + phase_ns % interval_ns_;
}

Packet CrossSource::take() {
  Packet p;
  p.bytes = spec_.packet_bytes;
  p.trimmable = spec_.trimmable;
  if (p.trimmable) {
    const uint32_t overhead = codec::kIpv4UdpBytes + codec::kHeaderBytes;
    p.plane0_bytes = overhead + (p.bytes > overhead ? (p.bytes - overhead) / kPlane0Divisor : 0);
  }
  p.flow = flow_;
  p.msg = 0;
  p.psn = psn_++;
  p.tag = 0;  // no payload: discarded on departure
  emitted_ += count();
  step();
  return p;
}

void CrossSource::step() {
  next_ns_ += interval_ns_;
  if (spec_.kind != CrossSpec::Kind::kOnOff || spec_.off_ms == 0) return;
  // On-off: emit only in the first on_ms of every (on_ms + off_ms) period since the start.
  const uint64_t period_ns = (uint64_t{spec_.on_ms} + spec_.off_ms) * kNsPerMs;
  const uint64_t on_ns = uint64_t{spec_.on_ms} * kNsPerMs;
  const uint64_t into = (next_ns_ - start_ns_) % period_ns;
  if (into >= on_ns) next_ns_ += period_ns - into;
}

uint64_t CrossSource::skip_stale(uint64_t now_ns, uint64_t max_lag_ns) {
  if (next_ns_ + max_lag_ns >= now_ns) return 0;
  // Jump arithmetically (a long stall at a high rate is millions of instants), then one step
  // so that an on-off source lands on an instant inside an on period.
  const uint64_t n = (now_ns - max_lag_ns - next_ns_) / interval_ns_;
  next_ns_ += n * interval_ns_;
  step();
  return n + 1;
}

}  // namespace trim::sw::daemon
