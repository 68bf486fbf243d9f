// Trim-aware congestion control (docs/ARCHITECTURE.md, "Congestion control"). Window-based:
// the window grows while the trimmed fraction measured over the last round trip is below
// NCCL_TRIM_TARGET_TRIM and shrinks in proportion to the excess above it, so the sender keeps
// the bottleneck slightly over-subscribed and the switch compresses just in time (seed §5.3).
// Losses (a packet that never arrived: header queue overflow, a non-trimmable drop) and
// timeouts cut the window multiplicatively, as in any loss-based scheme.
#pragma once

#include <algorithm>
#include <cstdint>

namespace trim::transport {

struct CcConfig {
  double target_trim = 0.05;
  uint32_t max_window = 512;  // packets
  uint32_t min_window = 2;
  uint32_t init_window = 32;
};

class TrimCc {
 public:
  explicit TrimCc(const CcConfig& cfg);

  // An ACK reported `accepted` more packets accepted, of which `trimmed` were trimmed, and
  // `nacked` trimmed exact packets (each will be resent).
  void on_ack(uint64_t accepted, uint64_t trimmed, uint64_t nacked);
  // A packet was declared lost (fast retransmit). At most one cut per round trip.
  void on_loss();
  // The retransmission timer fired.
  void on_timeout();
  // A timeout turned out spurious (the data was only delayed): the window it cut comes back,
  // `cwnd_before` being window_exact() just before on_timeout. Slow start stays over: the
  // delay was a congestion signal of its own.
  void undo_timeout(double cwnd_before) {
    cwnd_ = std::max(cwnd_, cwnd_before);
    clamp();
  }
  double window_exact() const { return cwnd_; }

  uint32_t window() const { return static_cast<uint32_t>(cwnd_); }
  double trim_ewma() const { return ewma_; }
  bool slow_start() const { return slow_start_; }

 private:
  void end_epoch();
  void clamp();

  CcConfig cfg_;
  double cwnd_;
  double ewma_ = 0.0;
  bool slow_start_ = true;
  bool loss_in_epoch_ = false;
  uint64_t epoch_len_ = 0;   // packets to see before the epoch (about one round trip) ends
  uint64_t epoch_seen_ = 0;  // accepted + nacked in this epoch
  uint64_t epoch_trimmed_ = 0;
};

}  // namespace trim::transport
