// Built-in background traffic (--cross): synthetic packets that only occupy the egress queues
// and links of the ports they target. A source is a clock of emission instants; the daemon asks
// it for every instant up to now and enqueues one packet per target port (K for an incast).
#pragma once

#include <cstdint>

#include "switch_sim/daemon/config.h"
#include "switch_sim/port.h"

namespace trim::sw::daemon {

// Cross packets' transcript flows have the top bit set, so the daemon can leave them out of
// --transcript-out (their timing is not reproducible) and they never collide with real flows.
constexpr uint64_t kCrossFlowBit = uint64_t{1} << 63;

class CrossSource {
 public:
  // `index` names the source in its packets' flow; `phase_ns` staggers sources that share a port.
  CrossSource(const CrossSpec& spec, uint32_t index, uint64_t start_ns, uint64_t phase_ns);

  const CrossSpec& spec() const { return spec_; }
  // The next emission instant (ns on the daemon's clock).
  uint64_t next_ns() const { return next_ns_; }
  // Consumes the instant next_ns() and returns the packets to enqueue then (count() of them
  // per target port); moves next_ns() to the following instant.
  Packet take();
  uint32_t count() const { return spec_.kind == CrossSpec::Kind::kIncast ? spec_.senders : 1; }
  // After a stall (the daemon was descheduled) instants further back than `max_lag_ns` are
  // skipped rather than emitted as one burst the real source would never have sent.
  uint64_t skip_stale(uint64_t now_ns, uint64_t max_lag_ns);
  uint64_t emitted() const { return emitted_; }

 private:
  void step();

  CrossSpec spec_;
  uint64_t flow_;
  uint64_t start_ns_;
  uint64_t interval_ns_;  // one packet's time at the source's rate
  uint64_t next_ns_;
  uint32_t psn_ = 0;
  uint64_t emitted_ = 0;
};

}  // namespace trim::sw::daemon
