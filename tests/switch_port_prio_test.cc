// The egress port's strict-priority class (EgressPort::enqueue_priority): another tenant's
// traffic served before training's header and data queues. Training gets the link time it
// leaves, and its packets are trimmed (or dropped) as its data queue fills; the priority class
// is never cut and drops only beyond its own cap. Unused, the port is unchanged (the golden
// traces, switch_port_golden_test.cc, check that byte for byte).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "switch_sim/port.h"
#include "tests/switch_port_runner.h"

namespace trim::sw {
namespace {

using testing::data_packet;
using testing::exact_packet;

constexpr uint32_t kBytes = 4096;
constexpr uint32_t kPlane0Bytes = 236;  // 108 bytes of headers + 1/32 of the payload, as cross.cc
constexpr uint64_t kCrossFlow = uint64_t{1} << 63;

// What a run leaves: training's and the cross class's departures and verdicts.
struct PacedRun {
  uint64_t train_sent_bytes = 0, cross_sent_bytes = 0;  // departed inside the window
  uint64_t train_arrived = 0, train_trimmed = 0, train_dropped = 0;  // arrivals inside the window
  uint64_t cross_cut = 0;  // cross departures that were cut or left the priority class (never)
  PortCounters counters;
};

// Training at train_load x R (trimmable, or exact when !trimmable) and cross at cross_load x R,
// both paced, for duration_ns; the cross class strict (priority) or FIFO with training (shared).
// The window [warmup_ns, duration_ns) leaves out the queues filling.
PacedRun run_paced(PortConfig cfg, double train_load, double cross_load, bool priority, uint64_t duration_ns,
              uint64_t warmup_ns, bool trimmable = true) {
  EgressPort port(cfg);
  PacedRun r;
  const double train_gap_ns = kBytes * 8.0 / (train_load * cfg.rate_gbps);
  const double cross_gap_ns = kBytes * 8.0 / (cross_load * cfg.rate_gbps);
  uint64_t k_train = 0, k_cross = 0;
  // Each arrival jittered by up to one gap (seeded): strictly periodic sources phase-lock with
  // the link, so that one FIFO tenant always finds the slot the other just missed.
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> jitter(0.0, 1.0);
  double j_train = jitter(rng), j_cross = jitter(rng);
  auto take_departures = [&]() {
    for (const Departure& d : port.departed()) {
      const uint64_t sent_ns = d.arrive_ns - cfg.prop_delay_ns;
      const bool in_window = sent_ns >= warmup_ns && sent_ns < duration_ns;
      if ((d.packet.flow & kCrossFlow) != 0) {
        if (d.packet.trimmed || d.packet.header_class || d.packet.bytes != kBytes || d.packet.priority_class != priority)
          ++r.cross_cut;
        if (in_window) r.cross_sent_bytes += d.packet.bytes;
      } else if (in_window) {
        r.train_sent_bytes += d.packet.bytes;
      }
    }
    port.departed().clear();
  };
  for (;;) {
    const uint64_t t_train = static_cast<uint64_t>((k_train + j_train) * train_gap_ns);
    const uint64_t t_cross = static_cast<uint64_t>((k_cross + j_cross) * cross_gap_ns);
    const uint64_t t = std::min(t_train, t_cross);
    if (t >= duration_ns) break;
    if (t_cross <= t_train) {
      Packet p = exact_packet(kBytes, kCrossFlow, 0, static_cast<uint32_t>(k_cross++));
      j_cross = jitter(rng);
      (void)(priority ? port.enqueue_priority(p, t) : port.enqueue(p, t));
    } else {
      const uint32_t psn = static_cast<uint32_t>(k_train++);
      j_train = jitter(rng);
      const Packet p = trimmable ? data_packet(kBytes, kPlane0Bytes, 1, 0, psn) : exact_packet(kBytes, 1, 0, psn);
      const Verdict v = port.enqueue(p, t);
      if (t >= warmup_ns) {
        ++r.train_arrived;
        r.train_trimmed += v == Verdict::kQueuedHeader;
        r.train_dropped += v == Verdict::kDropped || v == Verdict::kDroppedHeader;
      }
    }
    take_departures();
  }
  port.advance(duration_ns);
  take_departures();
  r.counters = port.counters();
  return r;
}

PortConfig ten_gbps(Mode mode, Priority prio) {
  PortConfig c;
  c.rate_gbps = 10;
  c.prop_delay_ns = 1000;
  c.data_queue_bytes = 65536;
  c.header_queue_bytes = 65536;
  c.mode = mode;
  c.priority = prio;
  c.trim_exact_to_header = false;
  return c;
}

// With the cross class at R_c = 0.4 R (strict priority) and training offering the full line
// rate, training's bytes on the link over 15 ms are R - R_c = 6 Gbit/s within 1 %, whatever
// the training classes' own scheduler and whether their overflow is trimmed or dropped; the
// cross class gets its whole 4 Gbit/s, never cut, never dropped.
TEST(SwitchPortPrio, TrainingGetsWhatTheCrossClassLeaves) {
  struct Case {
    Mode mode;
    Priority prio;
  } cases[] = {{Mode::kTrim, Priority::kStrict}, {Mode::kTrim, Priority::kWrr}, {Mode::kTrim, Priority::kDwrr},
               {Mode::kDrop, Priority::kStrict}};
  constexpr uint64_t kWarmupNs = 5'000'000, kEndNs = 20'000'000;
  constexpr double kWindowNs = kEndNs - kWarmupNs;
  for (const Case& c : cases) {
    PortConfig cfg = ten_gbps(c.mode, c.prio);
    if (c.prio == Priority::kDwrr) cfg.trim_bytes = 256;  // the fabric mode's fixed cut
    const PacedRun r = run_paced(cfg, 1.0, 0.4, true, kEndNs, kWarmupNs);
    const double train_gbps = r.train_sent_bytes * 8.0 / kWindowNs;
    const double cross_gbps = r.cross_sent_bytes * 8.0 / kWindowNs;
    const double cut = static_cast<double>(c.mode == Mode::kTrim ? r.train_trimmed : r.train_dropped) / r.train_arrived;
    std::printf("[ prio ] mode %s priority %d: training %.3f Gbit/s, cross %.3f Gbit/s, training %s %.1f %%\n",
                mode_name(c.mode), static_cast<int>(c.prio), train_gbps, cross_gbps,
                c.mode == Mode::kTrim ? "trimmed" : "dropped", 100 * cut);
    EXPECT_NEAR(train_gbps, 6.0, 0.06) << mode_name(c.mode);
    EXPECT_NEAR(cross_gbps, 4.0, 0.04);
    EXPECT_EQ(r.cross_cut, 0u);
    EXPECT_EQ(r.counters.prio_dropped_packets, 0u);
    EXPECT_EQ(r.counters.prio_sent_packets * kBytes, r.counters.prio_sent_bytes);
    if (c.mode == Mode::kTrim && c.prio == Priority::kStrict) {
      // Each arrival takes Td whole or Th = 236/4096 Td cut, in 0.6 of the link:
      // (1 - f) + f x 236/4096 = 0.6  =>  f = 0.4 / (1 - 236/4096) = 42.4 %.
      EXPECT_NEAR(cut, 0.4 / (1.0 - 236.0 / 4096), 0.02);
      EXPECT_EQ(r.train_dropped, 0u);
    } else if (c.mode == Mode::kDrop) {
      EXPECT_NEAR(cut, 0.4, 0.02);  // whole packets only: 0.6 of them get through
      EXPECT_EQ(r.counters.trimmed_packets, 0u);
    } else {
      EXPECT_GT(cut, 0.3);
    }
  }
}

// The same offered load as one FIFO (cross shared with training's data queue) cuts training
// less: the overflow is spread over both tenants (training trimmed, cross dropped). Strict
// priority puts all of it on training: the paper's high-trim regime.
TEST(SwitchPortPrio, StrictCrossTrimsTrainingMoreThanSharedFifo) {
  constexpr uint64_t kWarmupNs = 5'000'000, kEndNs = 20'000'000;
  const PortConfig cfg = ten_gbps(Mode::kTrim, Priority::kStrict);
  const PacedRun shared = run_paced(cfg, 1.0, 0.4, false, kEndNs, kWarmupNs);
  const PacedRun prio = run_paced(cfg, 1.0, 0.4, true, kEndNs, kWarmupNs);
  const double f_shared = static_cast<double>(shared.train_trimmed) / shared.train_arrived;
  const double f_prio = static_cast<double>(prio.train_trimmed) / prio.train_arrived;
  const double share_shared = shared.train_sent_bytes * 8.0 / (kEndNs - kWarmupNs) / cfg.rate_gbps;
  const double share_prio = prio.train_sent_bytes * 8.0 / (kEndNs - kWarmupNs) / cfg.rate_gbps;
  std::printf("[ prio ] training trimmed: shared FIFO %.1f %% (link share %.3f), strict cross %.1f %% (%.3f)\n",
              100 * f_shared, share_shared, 100 * f_prio, share_prio);
  EXPECT_GT(f_prio, f_shared + 0.05);
  EXPECT_GT(shared.counters.dropped_packets, 0u);  // the shared cross loses its part
  EXPECT_EQ(shared.counters.prio_sent_packets, 0u);
  EXPECT_EQ(prio.counters.dropped_packets, 0u);
  EXPECT_GT(share_shared, share_prio);
}

// Training at half the line rate never fills its queue alone; a burst of the cross class holds
// the link, and training is trimmed exactly while it is served, never before or after.
TEST(SwitchPortPrio, TrainingIsCutWhileTheCrossBurstIsServed) {
  for (Mode mode : {Mode::kTrim, Mode::kDrop}) {
    const PortConfig cfg = ten_gbps(mode, Priority::kStrict);
    EgressPort port(cfg);
    const uint64_t ser_ns = static_cast<uint64_t>(std::ceil(kBytes * 8.0 / cfg.rate_gbps));  // 3277
    constexpr uint32_t kBurst = 60;  // 240 KiB: within the 256 KiB cap
    const uint64_t burst_at_ns = 1'000'000, burst_end_ns = burst_at_ns + kBurst * ser_ns;
    const double gap_ns = 2.0 * ser_ns;  // training at R / 2
    uint64_t cut_before = 0, cut_during = 0, cut_after = 0, cross_seen = 0;
    uint64_t last_cross_sent_ns = 0;
    for (uint32_t k = 0; k < 1000; ++k) {
      const uint64_t t = static_cast<uint64_t>(k * gap_ns);
      if (t >= burst_at_ns && cross_seen == 0) {
        for (uint32_t i = 0; i < kBurst; ++i)
          EXPECT_EQ(port.enqueue_priority(exact_packet(kBytes, kCrossFlow, 0, i), burst_at_ns), Verdict::kQueued);
        cross_seen = kBurst;
      }
      const Verdict v = port.enqueue(data_packet(kBytes, kPlane0Bytes, 1, 0, k), t);
      const bool cut = v != Verdict::kQueued;
      if (t < burst_at_ns) cut_before += cut;
      else if (t < burst_end_ns + ser_ns) cut_during += cut;
      else cut_after += cut;
      for (const Departure& d : port.departed()) {
        if ((d.packet.flow & kCrossFlow) == 0) continue;
        EXPECT_FALSE(d.packet.trimmed);
        EXPECT_EQ(d.packet.bytes, kBytes);
        last_cross_sent_ns = d.arrive_ns - cfg.prop_delay_ns;
      }
      port.departed().clear();
    }
    // The burst goes out back to back after the training packet on the wire when it came.
    EXPECT_LE(last_cross_sent_ns, burst_end_ns + ser_ns);
    EXPECT_EQ(port.counters().prio_sent_packets, kBurst);
    EXPECT_EQ(port.counters().max_prio_queue_bytes, (kBurst - 1) * uint64_t{kBytes});
    EXPECT_EQ(cut_before, 0u);
    EXPECT_EQ(cut_after, 0u);
    // 16 packets of the burst's 30 training arrivals fill 64 KiB; the rest are cut.
    EXPECT_GE(cut_during, 12u) << mode_name(mode);
    if (mode == Mode::kTrim) {
      EXPECT_EQ(port.counters().trimmed_packets, cut_during);
      EXPECT_EQ(port.counters().dropped_packets, 0u);
    } else {
      EXPECT_EQ(port.counters().dropped_packets, cut_during);
      EXPECT_EQ(port.counters().trimmed_packets, 0u);
    }
  }
}

// The priority class's own cap: what fits is queued whole, the rest dropped and counted, the
// training queues untouched (the cross class never spills into them).
TEST(SwitchPortPrio, CrossDropsOnlyBeyondItsOwnCap) {
  PortConfig cfg = ten_gbps(Mode::kTrim, Priority::kStrict);
  cfg.prio_queue_bytes = 16 * kBytes;
  EgressPort port(cfg);
  uint32_t queued = 0, dropped = 0;
  for (uint32_t i = 0; i < 25; ++i) {
    const Verdict v = port.enqueue_priority(exact_packet(kBytes, kCrossFlow, 0, i), 0);
    queued += v == Verdict::kQueued;
    dropped += v == Verdict::kDropped;
  }
  // The first goes straight onto the wire; 16 more fill the cap.
  EXPECT_EQ(queued, 17u);
  EXPECT_EQ(dropped, 8u);
  const PortCounters& c = port.counters();
  EXPECT_EQ(c.prio_dropped_packets, 8u);
  EXPECT_EQ(c.prio_dropped_bytes, 8u * kBytes);
  EXPECT_EQ(c.dropped_packets, 8u);  // the totals count the class too
  EXPECT_EQ(c.max_prio_queue_bytes, 16u * kBytes);
  EXPECT_EQ(port.prio_queue_bytes(), 16u * kBytes);
  EXPECT_EQ(port.data_queue_bytes(), 0u);
  EXPECT_EQ(c.trimmed_packets, 0u);
  port.advance(1'000'000'000);
  EXPECT_EQ(port.counters().prio_sent_packets, 17u);
  EXPECT_EQ(port.counters().sent_packets, 17u);
  EXPECT_EQ(port.prio_queue_bytes(), 0u);
  EXPECT_EQ(port.next_event_ns(), UINT64_MAX);
  // A cap of 0 holds anything.
  cfg.prio_queue_bytes = 0;
  EgressPort open(cfg);
  for (uint32_t i = 0; i < 1000; ++i) EXPECT_EQ(open.enqueue_priority(exact_packet(kBytes, kCrossFlow, 0, i), 0), Verdict::kQueued);
}

// Counters: the JSON the golden traces pin has no priority keys unless asked; add() sums them.
TEST(SwitchPortPrio, CountersJsonAndTotals) {
  PortCounters a, b;
  a.prio_sent_packets = 3;
  a.prio_sent_bytes = 300;
  a.prio_dropped_packets = 1;
  a.prio_dropped_bytes = 100;
  a.max_prio_queue_bytes = 500;
  b.prio_sent_packets = 2;
  b.max_prio_queue_bytes = 900;
  EXPECT_EQ(a.to_json().find("prio"), std::string::npos);
  const std::string j = a.to_json(true);
  EXPECT_NE(j.find("\"max_header_queue_bytes\":0,\"prio_sent_packets\":3,\"prio_sent_bytes\":300,"
                   "\"prio_dropped_packets\":1,\"prio_dropped_bytes\":100,\"max_prio_queue_bytes\":500}"),
            std::string::npos)
      << j;
  a.add(b);
  EXPECT_EQ(a.prio_sent_packets, 5u);
  EXPECT_EQ(a.max_prio_queue_bytes, 900u);
}

}  // namespace
}  // namespace trim::sw
