// trim-sim's TCP-like baseline (switch_sim/sim/tcp.h) on its own: one sender and one receiver
// over a lossless pipe of fixed delay and rate, with chosen segments lost on their first
// transmission(s). Checks the properties the baseline stands on: a single loss with 3 or more
// segments after it is repaired by fast retransmit (no timeout), and with RACK one with fewer, or
// a lost resend; a tail loss waits the minimum RTO (doubling when the resend is lost too); the
// window halves on a loss; data reaches the application in order.
#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <queue>
#include <tuple>
#include <vector>

#include "switch_sim/sim/tcp.h"

namespace trim::sim {
namespace {

constexpr uint64_t kOneWayNs = 5'000;  // 10 us round trip
constexpr uint64_t kSegNs = 720;       // a 9000-byte segment at 100 Gbit/s

struct Result {
  uint64_t done_ns = 0;  // when the receiver had every segment in order
  uint64_t timeouts = 0, fast_recoveries = 0;
  std::map<uint32_t, int> sends;                      // per segment: transmissions
  std::vector<std::pair<double, double>> cuts;        // cwnd before and after each fast recovery
  std::vector<uint32_t> delivered;                    // segments handed over, in hand-over order
  double cwnd_after_timeout = -1;
};

// Sends `total` segments; segment s is lost on its first lose[s] transmissions.
Result run(uint32_t total, std::map<uint32_t, int> lose, uint64_t min_rto_ns, bool rack = true) {
  TcpConfig cfg;
  cfg.min_rto_ns = min_rto_ns;
  cfg.rack = rack;
  cfg.handshake_rtt_ns = 2 * kOneWayNs;
  TcpSender snd(cfg);
  TcpReceiver rcv;
  Result r;
  enum Kind { kData, kAck, kTimer };
  // (time, order, kind, seq, cum_ack, dup): ties in push order.
  using Ev = std::tuple<uint64_t, uint64_t, int, uint32_t, uint32_t, bool>;
  std::priority_queue<Ev, std::vector<Ev>, std::greater<Ev>> q;
  uint64_t order = 0, link_free_ns = 0, now = 0, timer_at = 0;
  uint32_t next_new = 0;
  auto pump = [&] {
    for (TcpSender::Next n; (n = snd.next(next_new < total)).send;) {
      if (!n.retx) ++next_new;
      snd.on_sent(n.seq, n.retx, now);
      link_free_ns = std::max(link_free_ns, now) + kSegNs;
      if (r.sends[n.seq]++ >= lose[n.seq]) q.emplace(link_free_ns + kOneWayNs, order++, kData, n.seq, 0, false);
    }
    if (snd.next_deadline_ns() != 0 && snd.next_deadline_ns() != timer_at) {
      timer_at = snd.next_deadline_ns();
      q.emplace(timer_at, order++, kTimer, 0, 0, false);
    }
  };
  pump();
  while (!q.empty() && rcv.rcv_nxt() < total) {
    const auto [t, o, kind, seq, cum, dup] = q.top();
    q.pop();
    now = t;
    if (kind == kData) {
      const uint32_t before = rcv.rcv_nxt();
      const bool fresh = rcv.on_segment(seq);
      for (uint32_t s = before; s != rcv.rcv_nxt(); ++s) r.delivered.push_back(s);
      if (rcv.rcv_nxt() == total) r.done_ns = t;
      q.emplace(t + kOneWayNs, order++, kAck, seq, rcv.rcv_nxt(), !fresh);
    } else if (kind == kAck) {
      const double before = snd.cwnd();
      const uint64_t fr = snd.fast_recoveries();
      snd.on_ack(cum, seq, dup, t);
      if (snd.fast_recoveries() != fr) r.cuts.emplace_back(before, snd.cwnd());
    } else if (snd.on_timer(t) && r.cwnd_after_timeout < 0) {
      r.cwnd_after_timeout = snd.cwnd();
    }
    pump();
  }
  r.timeouts = snd.timeouts();
  r.fast_recoveries = snd.fast_recoveries();
  return r;
}

// The lossless run's completion, the yardstick for the others.
uint64_t clean_ns(uint32_t total) { return run(total, {}, 200'000'000).done_ns; }

TEST(SimTcp, LosslessRunHasNoRecovery) {
  const Result r = run(100, {}, 200'000'000);
  EXPECT_EQ(r.timeouts, 0u);
  EXPECT_EQ(r.fast_recoveries, 0u);
  EXPECT_EQ(r.delivered.size(), 100u);
  // Slow start from 10 segments over a 10 us round trip: 100 segments need 4 round trips at most.
  EXPECT_LT(r.done_ns, 100 * kSegNs + 5 * 2 * kOneWayNs);
}

TEST(SimTcp, SingleLossIsRepairedByFastRetransmitWithoutTimeout) {
  for (const uint64_t min_rto : {1'000'000ull, 200'000'000ull}) {
    const Result r = run(100, {{40, 1}}, min_rto);
    EXPECT_EQ(r.timeouts, 0u) << min_rto;
    EXPECT_EQ(r.fast_recoveries, 1u) << min_rto;
    EXPECT_EQ(r.sends.at(40), 2) << "resent once";
    for (const auto& [seq, n] : r.sends) {
      if (seq != 40) {
        EXPECT_EQ(n, 1) << seq << " resent spuriously";
      }
    }
    // A round trip or two late, not a minimum RTO (1 ms = 100 round trips here).
    EXPECT_LT(r.done_ns, clean_ns(100) + 4 * 2 * kOneWayNs) << min_rto;
  }
}

// A loss with nothing delivered after it (the stream's last segment) waits for the minimum RTO,
// with or without RACK; then cwnd is 1.
TEST(SimTcp, TailLossWaitsTheMinimumRto) {
  for (const uint64_t min_rto : {1'000'000ull, 200'000'000ull}) {
    for (const bool rack : {true, false}) {
      const Result r = run(100, {{99, 1}}, min_rto, rack);
      EXPECT_EQ(r.timeouts, 1u) << rack;
      EXPECT_EQ(r.fast_recoveries, 0u) << rack;
      EXPECT_GE(r.done_ns, min_rto) << rack;
      EXPECT_LT(r.done_ns, min_rto + clean_ns(100) + 2 * 2 * kOneWayNs) << rack;
      EXPECT_EQ(r.cwnd_after_timeout, 1.0);
    }
  }
}

// Without RACK, three segments SACKed above a hole start fast recovery and two do not (the hole
// waits for the timeout): the boundary of Linux's dupthresh of 3. With RACK (Linux's default),
// one segment delivered after the hole is enough, a round trip and a quarter later.
TEST(SimTcp, DupthreshWithoutRackAndRackWithFewerSacks) {
  const uint64_t min_rto = 200'000'000;
  const Result reno2 = run(100, {{97, 1}}, min_rto, false);  // 2 segments after it
  EXPECT_EQ(reno2.timeouts, 1u);
  EXPECT_EQ(reno2.fast_recoveries, 0u);
  EXPECT_GE(reno2.done_ns, min_rto);
  const Result reno3 = run(100, {{96, 1}}, min_rto, false);  // 3 segments after it
  EXPECT_EQ(reno3.timeouts, 0u);
  EXPECT_EQ(reno3.fast_recoveries, 1u);
  EXPECT_LT(reno3.done_ns, clean_ns(100) + 4 * 2 * kOneWayNs);
  const Result rack1 = run(100, {{98, 1}}, min_rto, true);  // 1 segment after it
  EXPECT_EQ(rack1.timeouts, 0u);
  EXPECT_EQ(rack1.fast_recoveries, 1u);
  EXPECT_LT(rack1.done_ns, clean_ns(100) + 4 * 2 * kOneWayNs);
}

// A resend lost again: without RACK only the timeout finds it; RACK finds it once a later send
// is delivered (here the new data that follows), with no timeout.
TEST(SimTcp, LostResendFoundByRackOnly) {
  const uint64_t min_rto = 200'000'000;
  const Result reno = run(300, {{40, 2}}, min_rto, false);
  EXPECT_EQ(reno.timeouts, 1u);
  EXPECT_EQ(reno.sends.at(40), 3);
  const Result rack = run(300, {{40, 2}}, min_rto, true);
  EXPECT_EQ(rack.timeouts, 0u);
  EXPECT_EQ(rack.sends.at(40), 3);
  EXPECT_LT(rack.done_ns, clean_ns(300) + 8 * 2 * kOneWayNs);
}

// The resend lost too: the second timeout comes twice the minimum RTO after the first.
TEST(SimTcp, TimeoutBacksOffExponentially) {
  const uint64_t min_rto = 1'000'000;
  const Result r = run(50, {{49, 2}}, min_rto);  // the last segment: no later send to tell
  EXPECT_EQ(r.timeouts, 2u);
  EXPECT_EQ(r.sends.at(49), 3);
  EXPECT_GE(r.done_ns, 3 * min_rto);
  EXPECT_LT(r.done_ns, 3 * min_rto + clean_ns(50) + 2 * 2 * kOneWayNs);
}

TEST(SimTcp, WindowHalvesOnLoss) {
  // Two losses far apart: each recovery halves the window it found (ssthresh = cwnd / 2).
  const Result r = run(2000, {{300, 1}, {1500, 1}}, 200'000'000);
  ASSERT_EQ(r.cuts.size(), 2u);
  for (const auto& [before, after] : r.cuts) {
    EXPECT_GT(before, 10.0) << "slow start grew it first";
    EXPECT_DOUBLE_EQ(after, before / 2);
  }
  EXPECT_EQ(r.timeouts, 0u);
}

TEST(SimTcp, DataReachesTheApplicationInOrder) {
  // Several losses in one window and a resend lost again: the hand-over is 0, 1, 2, ... whatever
  // order the segments arrived in.
  const Result r = run(300, {{50, 1}, {52, 1}, {53, 2}, {120, 1}, {299, 1}}, 1'000'000);
  ASSERT_EQ(r.delivered.size(), 300u);
  for (uint32_t i = 0; i < 300; ++i) ASSERT_EQ(r.delivered[i], i);

  TcpReceiver rcv(64);
  EXPECT_TRUE(rcv.on_segment(1));
  EXPECT_TRUE(rcv.on_segment(2));
  EXPECT_EQ(rcv.rcv_nxt(), 0u) << "held behind the hole at 0";
  EXPECT_FALSE(rcv.on_segment(2)) << "a duplicate";
  EXPECT_TRUE(rcv.on_segment(0));
  EXPECT_EQ(rcv.rcv_nxt(), 3u);
  EXPECT_FALSE(rcv.on_segment(1)) << "below rcv_nxt: a duplicate";
  EXPECT_TRUE(rcv.on_segment(66));  // wraps the 64-segment bitmap onto 2's old bit
  EXPECT_TRUE(rcv.on_segment(3));
  EXPECT_EQ(rcv.rcv_nxt(), 4u);
  EXPECT_THROW(rcv.on_segment(4 + 64), std::logic_error) << "past the receive window";
}

}  // namespace
}  // namespace trim::sim
