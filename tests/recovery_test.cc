// transport/recovery.h on a fake clock: the loss-recovery rules the plugin's sender and
// trim-sim's endpoints share.
#include "transport/recovery.h"

#include <gtest/gtest.h>

namespace {

using trim::transport::Recovery;
using trim::transport::RecoveryConfig;

constexpr uint64_t kUs = 1000, kMs = 1000 * kUs;

RecoveryConfig config(uint64_t min_rto_ns = 10 * kMs) {
  RecoveryConfig c;
  c.min_rto_ns = min_rto_ns;
  return c;
}

TEST(Recovery, RttEstimatorFollowsRfc6298AndKarn) {
  Recovery r(config());
  r.on_delivered(0, 100 * kUs, false);
  EXPECT_EQ(r.srtt_ns(), 100 * kUs);
  EXPECT_EQ(r.rttvar_ns(), 50 * kUs);
  r.on_delivered(1 * kMs, 1 * kMs + 200 * kUs, false);  // err 100 us
  EXPECT_EQ(r.rttvar_ns(), (3 * 50 * kUs + 100 * kUs) / 4);
  EXPECT_EQ(r.srtt_ns(), (7 * 100 * kUs + 200 * kUs) / 8);
  const uint64_t srtt = r.srtt_ns();
  r.on_delivered(2 * kMs, 9 * kMs, true);  // a resend's ACK: ambiguous, no sample
  EXPECT_EQ(r.srtt_ns(), srtt);
}

TEST(Recovery, TimeoutBacksOffAndProgressResetsIt) {
  Recovery r(config(10 * kMs));
  EXPECT_EQ(r.rto_ns(), 10 * kMs);  // no sample: the floor
  r.on_delivered(0, 4 * kMs, false);  // srtt 4 ms + 4 x 2 ms > floor
  EXPECT_EQ(r.rto_ns(), 12 * kMs);
  EXPECT_EQ(r.rto_deadline_ns(), 0u);
  r.on_send(20 * kMs, true, true);
  EXPECT_EQ(r.rto_deadline_ns(), 32 * kMs);
  r.on_send(25 * kMs, true, true);  // already armed: unchanged
  EXPECT_EQ(r.rto_deadline_ns(), 32 * kMs);
  EXPECT_FALSE(r.on_timer(31 * kMs, true).timeout);
  Recovery::Fired f = r.on_timer(32 * kMs, true);
  EXPECT_TRUE(f.timeout);
  EXPECT_EQ(f.rto_ns, 12 * kMs);  // the timeout that fired, before the backoff
  EXPECT_EQ(r.backoff(), 2u);
  EXPECT_EQ(r.rto_deadline_ns(), 32 * kMs + 24 * kMs);
  for (int i = 0; i < 10; ++i) r.on_timer(r.rto_deadline_ns(), true);
  EXPECT_EQ(r.backoff(), 64u);  // capped
  EXPECT_EQ(r.rto_ns(), 64 * 12 * kMs);
  Recovery big(config(20 * kMs));
  big.on_send(0, true, true);
  for (int i = 0; i < 7; ++i) big.on_timer(big.rto_deadline_ns(), true);
  EXPECT_EQ(big.rto_ns(), RecoveryConfig{}.max_rto_ns);  // 64 x 20 ms, capped at 1 s
  r.on_progress(2000 * kMs, true);
  EXPECT_EQ(r.backoff(), 1u);
  EXPECT_EQ(r.rto_deadline_ns(), 2012 * kMs);
  r.on_progress(2001 * kMs, false);
  EXPECT_EQ(r.rto_deadline_ns(), 0u);  // nothing outstanding: disarmed
  EXPECT_EQ(r.next_deadline_ns(), UINT64_MAX);
}

TEST(Recovery, TimeoutWithNothingOutstandingJustDisarms) {
  Recovery r(config());
  r.on_send(0, true, true);
  const Recovery::Fired f = r.on_timer(r.rto_deadline_ns(), false);
  EXPECT_FALSE(f.timeout);
  EXPECT_EQ(r.rto_deadline_ns(), 0u);
  EXPECT_EQ(r.backoff(), 1u);
}

// RFC 8985: a packet sent no later than the most recently sent packet known delivered is lost
// at once when it was sent more than a reordering window before it (an order on send times),
// else once that packet's round trip plus max(window, timer floor) has passed since it was
// sent — the timed rule, which alone catches a loss in a window sent in one burst.
TEST(Recovery, RackOrdersBySendTimeAndTimesWhatWasSentTogether) {
  Recovery r(config());  // timer floor 20 us
  EXPECT_FALSE(r.rack_lost(0, 1 * kMs));  // nothing delivered yet: no clock
  EXPECT_EQ(r.rack_deadline_ns(0, 0), UINT64_MAX);
  r.on_delivered(0, 400 * kUs, false);  // srtt 400 us: window max(srtt/4, 20 us) = 100 us
  r.on_delivered(1000 * kUs, 1400 * kUs, false);  // RACK: sent at 1000 us, round trip 400 us
  EXPECT_EQ(r.reorder_window_ns(1400 * kUs), 100 * kUs);
  EXPECT_EQ(r.rack_deadline_ns(800 * kUs, 1400 * kUs), 0u);  // sent 200 us before it: lost now
  // Sent 10 us before the delivered one (same burst): lost at 990 + 400 + 100 us.
  EXPECT_EQ(r.rack_deadline_ns(990 * kUs, 1400 * kUs), 1490 * kUs);
  EXPECT_FALSE(r.rack_lost(990 * kUs, 1489 * kUs));
  EXPECT_TRUE(r.rack_lost(990 * kUs, 1490 * kUs));
  EXPECT_EQ(r.rack_deadline_ns(1001 * kUs, 9 * kMs), UINT64_MAX);  // sent after it: not judged
  // Trims reported: reordering by up to a round trip is expected for 8 round trips.
  r.on_trims_reported(1400 * kUs);
  EXPECT_EQ(r.reorder_window_ns(1400 * kUs), r.srtt_ns());
  EXPECT_EQ(r.rack_deadline_ns(800 * kUs, 1400 * kUs), 800 * kUs + 400 * kUs + r.srtt_ns());
  EXPECT_EQ(r.reorder_window_ns(1400 * kUs + 8 * r.srtt_ns()), r.srtt_ns() / 4);
  // A resend whose ACK came back within srtt/2 may be the original's: RACK does not move.
  r.on_delivered(5000 * kUs, 5100 * kUs, true);
  EXPECT_EQ(r.rack_deadline_ns(4950 * kUs, 5100 * kUs), UINT64_MAX);
  r.on_delivered(5000 * kUs, 5300 * kUs, true);
  const uint64_t later = 5300 * kUs + 8 * r.srtt_ns();
  const uint64_t deadline = r.rack_deadline_ns(4950 * kUs, later);
  EXPECT_EQ(deadline, 4950 * kUs + 300 * kUs + 100 * kUs);
  // The reorder timer: armed by the caller's pass, fires once.
  r.arm_rack(deadline);
  EXPECT_EQ(r.next_deadline_ns(), deadline);
  EXPECT_FALSE(r.on_timer(deadline - 1, true).rack);
  EXPECT_TRUE(r.on_timer(deadline, true).rack);
  EXPECT_FALSE(r.on_timer(deadline + 1, true).rack);
  r.arm_rack(UINT64_MAX);
  EXPECT_EQ(r.next_deadline_ns(), UINT64_MAX);
}

// A packet delivered trimmed took the switch's header queue, ahead of the data: its round trip
// is not the data's and its send time orders nothing.
TEST(Recovery, ATrimmedDeliveryNeitherSamplesTheRttNorMovesRack) {
  Recovery r(config());
  r.on_delivered(0, 2 * kMs, false);
  r.on_delivered(1 * kMs, 3 * kMs, false);  // RACK: sent at 1 ms
  const uint64_t srtt = r.srtt_ns(), rttvar = r.rttvar_ns();
  r.on_delivered(5 * kMs, 5200 * kUs, false, true);
  EXPECT_EQ(r.srtt_ns(), srtt);
  EXPECT_EQ(r.rttvar_ns(), rttvar);
  EXPECT_EQ(r.rack_deadline_ns(2 * kMs, 5200 * kUs), UINT64_MAX);  // sent after RACK's packet: not judged
  r.on_delivered(5 * kMs, 7 * kMs, false);  // the same send time delivered whole: it counts
  EXPECT_EQ(r.rack_deadline_ns(2 * kMs, 7 * kMs), 0u);
}

// RFC 8985's RACK_sent_after: of packets sent at the same time, the later sequence number
// left later (modulo 2^32), so it is not judged by the delivery of an earlier one.
TEST(Recovery, RackBreaksSendTimeTiesBySequence) {
  Recovery r(config());
  r.on_delivered(1 * kMs, 2 * kMs, false, false, 5);
  EXPECT_EQ(r.rack_deadline_ns(1 * kMs, 2 * kMs, 7), UINT64_MAX);  // behind it in the burst
  EXPECT_EQ(r.rack_deadline_ns(1 * kMs, 2 * kMs, 3), 1 * kMs + 1 * kMs + 250 * kUs);  // ahead of it
  r.on_delivered(1 * kMs, 2100 * kUs, false, false, 3);  // an earlier one of the burst: RACK stays
  EXPECT_EQ(r.rack_deadline_ns(1 * kMs, 2 * kMs, 4), 1 * kMs + 1 * kMs + r.reorder_window_ns(2 * kMs));
  Recovery w(config());
  w.on_delivered(1 * kMs, 2 * kMs, false, false, 0xFFFFFFFFu);
  EXPECT_EQ(w.rack_deadline_ns(1 * kMs, 2 * kMs, 1), UINT64_MAX);  // psn 1 after the wrap
  EXPECT_TRUE(trim::transport::sent_after(2, 0, 1, 9));
  EXPECT_FALSE(trim::transport::sent_after(1, 9, 1, 9));
}

// The plugin's configuration: the timed rule waits at least RTO/4 (the host's noise).
TEST(Recovery, ThePluginsTimedRuleWaitsAtLeastAQuarterOfTheMinimumRto) {
  Recovery r(RecoveryConfig::plugin(10 * kMs));
  r.on_delivered(0, 400 * kUs, false);
  r.on_delivered(1000 * kUs, 1400 * kUs, false);
  EXPECT_EQ(r.rack_deadline_ns(1000 * kUs, 1400 * kUs), 1000 * kUs + 400 * kUs + 2500 * kUs);
  EXPECT_EQ(r.rack_deadline_ns(800 * kUs, 1400 * kUs), 0u);  // the order rule is unchanged
}

TEST(Recovery, TailProbesComeBeforeTheTimeoutAndDouble) {
  Recovery r(config(10 * kMs));
  r.on_delivered(0, 100 * kUs, false);  // srtt 100 us: probe at max(200 us, 2.5 ms)
  r.on_send(1 * kMs, true, true);       // timeout at 11 ms
  EXPECT_EQ(r.probe_deadline_ns(), 1 * kMs + 2500 * kUs);
  EXPECT_EQ(r.next_deadline_ns(), 3500 * kUs);
  Recovery::Fired f = r.on_timer(3500 * kUs, true);
  EXPECT_TRUE(f.probe);
  EXPECT_FALSE(f.timeout);
  EXPECT_EQ(r.probe_deadline_ns(), 3500 * kUs + 5 * kMs);  // twice the last interval
  f = r.on_timer(8500 * kUs, true);
  EXPECT_TRUE(f.probe);
  EXPECT_EQ(r.probe_deadline_ns(), 0u);  // the next would be past the timeout
  f = r.on_timer(11 * kMs, true);
  EXPECT_TRUE(f.timeout);
  RecoveryConfig off = config();
  off.tail_probes = false;
  Recovery q(off);
  q.on_send(0, true, true);
  EXPECT_EQ(q.probe_deadline_ns(), 0u);
  EXPECT_EQ(q.next_deadline_ns(), q.rto_deadline_ns());
}

TEST(Recovery, NoProbeWhenNothingIsOutstandingOrAfterDisarm) {
  Recovery r(config());
  r.on_send(0, true, true);
  r.arm_probe(1 * kMs, false);
  EXPECT_EQ(r.probe_deadline_ns(), 0u);
  r.arm_probe(1 * kMs, true);
  EXPECT_NE(r.probe_deadline_ns(), 0u);
  r.disarm();
  EXPECT_EQ(r.next_deadline_ns(), UINT64_MAX);
}

// Eifel's response (RFC 4015) to a spurious timeout: the backoff ends and the timeout keeps a
// floor above the delay that fired it, which the next normal samples do not wash out; a true
// loss halves that floor.
TEST(Recovery, SpuriousTimeoutRaisesTheTimeoutAboveTheDelay) {
  Recovery r(config(10 * kMs));
  r.on_delivered(0, 100 * kUs, false);
  r.on_send(1 * kMs, true, true);
  EXPECT_TRUE(r.on_timer(r.rto_deadline_ns(), true).timeout);
  EXPECT_EQ(r.backoff(), 2u);
  r.on_spurious_timeout(12 * kMs);  // the original came back 12 ms after it left
  EXPECT_EQ(r.backoff(), 1u);
  EXPECT_EQ(r.srtt_ns(), 12 * kMs);
  EXPECT_EQ(r.rto_floor_ns(), 15 * kMs);
  for (int i = 0; i < 1000; ++i) r.on_delivered(20 * kMs + i * kUs, 20 * kMs + i * kUs + 100 * kUs, false);
  EXPECT_LT(r.srtt_ns(), 200 * kUs);  // srtt forgets the delay at once...
  EXPECT_EQ(r.rto_ns(), 15 * kMs);    // ...the timeout does not
  r.on_genuine_timeout();
  EXPECT_EQ(r.rto_ns(), 10 * kMs);    // 7.5 ms: the minimum again
  r.on_spurious_timeout(10 * RecoveryConfig{}.max_rto_ns);
  EXPECT_EQ(r.rto_floor_ns(), RecoveryConfig{}.max_rto_ns);
}

}  // namespace
