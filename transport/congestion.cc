#include "transport/congestion.h"

#include <algorithm>

namespace trim::transport {

namespace {
constexpr double kEwmaGain = 0.25;    // weight of the newest round trip in the trim estimate
constexpr double kLossFactor = 0.7;   // window kept after a loss
constexpr double kProbeFraction = 0.125;  // growth per round trip with no trims at all
}  // namespace

TrimCc::TrimCc(const CcConfig& cfg) : cfg_(cfg), cwnd_(cfg.init_window) {
  clamp();
  epoch_len_ = window();
}

void TrimCc::clamp() {
  cwnd_ = std::clamp(cwnd_, static_cast<double>(cfg_.min_window), static_cast<double>(cfg_.max_window));
}

void TrimCc::on_ack(uint64_t accepted, uint64_t trimmed, uint64_t nacked) {
  const uint64_t trims = trimmed + nacked;
  if (slow_start_ && trims == 0) {
    cwnd_ += static_cast<double>(accepted);  // doubles per round trip until the first signal
    clamp();
  } else if (trims != 0) {
    slow_start_ = false;
  }
  epoch_seen_ += accepted + nacked;
  epoch_trimmed_ += trims;
  if (epoch_seen_ >= epoch_len_) end_epoch();
}

void TrimCc::end_epoch() {
  const double f = epoch_seen_ == 0 ? 0.0 : static_cast<double>(epoch_trimmed_) / static_cast<double>(epoch_seen_);
  ewma_ = (1.0 - kEwmaGain) * ewma_ + kEwmaGain * f;
  if (!slow_start_ && !loss_in_epoch_) {
    if (f > cfg_.target_trim) {
      // Shrink in proportion to the excess: at twice the target the window loses `target`.
      cwnd_ *= std::max(0.5, 1.0 - (f - cfg_.target_trim));
    } else {
      // Below target: over-send. Fast when nothing is trimmed, one packet per round trip at the target.
      const double room = cfg_.target_trim > 0 ? 1.0 - f / cfg_.target_trim : (f == 0 ? 1.0 : 0.0);
      cwnd_ += std::max(1.0, cwnd_ * kProbeFraction * room);
    }
    clamp();
  }
  loss_in_epoch_ = false;
  epoch_seen_ = 0;
  epoch_trimmed_ = 0;
  epoch_len_ = std::max<uint64_t>(window(), 1);
}

void TrimCc::on_loss() {
  slow_start_ = false;
  if (loss_in_epoch_) return;
  loss_in_epoch_ = true;
  cwnd_ *= kLossFactor;
  clamp();
}

void TrimCc::on_timeout() {
  slow_start_ = false;
  cwnd_ = std::max(static_cast<double>(cfg_.min_window), cwnd_ / 2);
  clamp();
  loss_in_epoch_ = true;
}

}  // namespace trim::transport
