// trim-sim's event queue (switch_sim/sim/event_queue.h) pops exactly in (time, push order), as
// the binary heap on (time, seq) it replaced did: the simulator's results depend on the order of
// events at equal times, so the calendar queue is checked against a reference std::priority_queue
// on random schedules with many ties, zero-delay pushes, moves from the far heap into the
// calendar, wrap-arounds of the calendar and large time jumps.
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <queue>
#include <random>
#include <set>
#include <stdexcept>
#include <tuple>
#include <vector>

#include "switch_sim/sim/event_queue.h"

namespace trim::sim {
namespace {

// (time, seq, kind, id), smallest first: the old heap's order.
using Ref = std::tuple<uint64_t, uint64_t, uint32_t, uint32_t>;
using RefQueue = std::priority_queue<Ref, std::vector<Ref>, std::greater<Ref>>;

// How far ahead a push lands: ties at now, the simulator's hop-sized delays (multiples of 8 ns,
// so many equal times), ms-sized timers, and jumps across every level up to 2^62.
uint64_t draw_delay(std::mt19937_64& rng) {
  switch (rng() % 8) {
    case 0: return 0;
    case 1: return 8 * (rng() % 4);
    case 2: return 8 * (rng() % 128);
    case 3: return rng() % 70000;
    case 4: return 2'500'000 + rng() % 4;
    case 5: return 1ull << (rng() % 40);
    case 6: return rng() % (1ull << (8 * (1 + rng() % 7)));
    default: return 720 * (1 + rng() % 3);
  }
}

void run_schedule(uint64_t seed, size_t operations, uint64_t start_ns) {
  std::mt19937_64 rng(seed);
  EventQueue q;
  RefQueue ref;
  uint64_t now_ns = start_ns, seq = 0;
  uint32_t next_id = 0;
  auto push = [&](uint64_t t) {
    const uint32_t kind = static_cast<uint32_t>(rng() % 7);
    q.push(t, static_cast<EventKind>(kind), next_id);
    ref.emplace(t, seq++, kind, next_id);
    ++next_id;
  };
  auto pop_and_check = [&]() {
    ASSERT_FALSE(q.empty());
    const Event e = q.pop();
    const Ref r = ref.top();
    ref.pop();
    ASSERT_EQ(e.time_ns, std::get<0>(r)) << "seed " << seed << " id " << e.id;
    ASSERT_EQ(static_cast<uint32_t>(e.kind), std::get<2>(r)) << "seed " << seed;
    ASSERT_EQ(e.id, std::get<3>(r)) << "seed " << seed << " at " << e.time_ns << " ns";
    now_ns = e.time_ns;
  };
  for (size_t i = 0; i < operations; ++i) {
    // Bursts of pushes (a hop's departure, arrival and ACK) between pops, as the simulator does;
    // a push is never before the last popped time.
    const int pushes = ref.empty() ? 1 + static_cast<int>(rng() % 4) : static_cast<int>(rng() % 3);
    for (int k = 0; k < pushes; ++k) {
      const uint64_t d = draw_delay(rng);
      push(d > UINT64_MAX - now_ns ? UINT64_MAX : now_ns + d);
    }
    if (!ref.empty()) pop_and_check();
    if (::testing::Test::HasFatalFailure()) return;
    ASSERT_EQ(q.size(), ref.size());
  }
  while (!ref.empty() && !::testing::Test::HasFatalFailure()) pop_and_check();
  EXPECT_TRUE(q.empty());
  EXPECT_EQ(q.pushed(), seq);
}

TEST(SimEventQueue, MatchesReferenceHeapOnRandomSchedules) {
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    run_schedule(seed, 20000, 0);
    if (::testing::Test::HasFatalFailure()) return;
  }
}

// Starting just below power-of-two boundaries and near the end of time.
TEST(SimEventQueue, MatchesReferenceAcrossLevelBoundariesAndLargeTimes) {
  const uint64_t starts[] = {255, 65535 - 100, (1ull << 32) - 3, (1ull << 56) - 1000, UINT64_MAX - (1ull << 41)};
  uint64_t seed = 100;
  for (uint64_t start : starts) {
    run_schedule(seed++, 20000, start);
    if (::testing::Test::HasFatalFailure()) return;
  }
}

TEST(SimEventQueue, EqualTimesPopInPushOrderFromFarHeapAndCalendar) {
  EventQueue q;
  // id 0 goes in far ahead (the far heap); the clock then walks up to its time in halving
  // steps, and ids 1.. join the same time, through the heap while far and the calendar once
  // near: all pop in push order.
  const uint64_t target = (3ull << 24) + (5ull << 16) + (7ull << 8) + 9;
  q.push(target, EventKind::kTimer, 0);
  uint32_t id = 1;
  for (uint64_t t = 1000; t < target; t += (target - t) / 2 + 1) {
    q.push(t, EventKind::kPort, 1000 + id);
    q.push(target, EventKind::kArrive, id++);
    const Event e = q.pop();
    ASSERT_EQ(e.time_ns, t);
  }
  q.push(target, EventKind::kAck, id++);
  for (uint32_t want = 0; want < id; ++want) {
    const Event e = q.pop();
    EXPECT_EQ(e.time_ns, target);
    EXPECT_EQ(e.id, want);
  }
  EXPECT_TRUE(q.empty());
}

TEST(SimEventQueue, ZeroDelayPushesPopAfterTheirTime) {
  EventQueue q;
  q.push(10, EventKind::kPort, 1);
  q.push(10, EventKind::kPort, 2);
  EXPECT_EQ(q.pop().id, 1u);
  q.push(10, EventKind::kIterStart, 3);  // at the current time: after what is already there
  EXPECT_EQ(q.pop().id, 2u);
  EXPECT_EQ(q.pop().id, 3u);
  EXPECT_TRUE(q.empty());
}

TEST(SimEventQueue, RefusesAPushIntoThePastOrAnIdTooLarge) {
  EventQueue q;
  q.push(1000, EventKind::kPort, 1);
  EXPECT_EQ(q.pop().time_ns, 1000u);
  EXPECT_THROW(q.push(999, EventKind::kPort, 2), std::logic_error);
  EXPECT_THROW(q.push(1000, EventKind::kPort, EventQueue::kMaxId + 1), std::logic_error);
  q.push(1000, EventKind::kPort, 3);
  EXPECT_EQ(q.pop().id, 3u);
}

// cancel_current (the simulator takes back a port's kPort event that an arrival at the same
// nanosecond made a no-op): on random schedules with many events per nanosecond (past the
// three a near slot holds inline, so from its overflow list too, and moved in from the mid wheel
// and the far heap), taking back a random event queued for the current time leaves every other
// event popping in (time, push order), as a reference set with that event erased does.
TEST(SimEventQueue, CancelCurrentTakesBackOneEventAndKeepsTheOthersInOrder) {
  for (uint64_t seed = 1; seed <= 10; ++seed) {
    std::mt19937_64 rng(seed);
    EventQueue q;
    std::set<Ref> ref;
    uint64_t now_ns = 0, seq = 0;
    uint32_t next_id = 0;
    size_t cancelled = 0;
    auto push = [&](uint64_t t) {
      const uint32_t kind = static_cast<uint32_t>(rng() % 7);
      q.push(t, static_cast<EventKind>(kind), next_id);
      ref.emplace(t, seq++, kind, next_id++);
    };
    for (int step = 0; step < 20000; ++step) {
      // Bursts at a few times ahead, with up to 6 events at one time, and now and then far out.
      const int pushes = ref.empty() ? 2 + static_cast<int>(rng() % 6) : static_cast<int>(rng() % 4);
      for (int k = 0; k < pushes; ++k) {
        const uint64_t r = rng() % 16;
        push(now_ns + (r < 12 ? 8 * (r % 3) : r < 15 ? 4096 + 8 * (rng() % 4) : 20'000'000 + rng() % 3));
      }
      // Take back a random event queued for now (when there is one), or ask for one that is not.
      std::vector<Ref> at_now;
      for (auto it = ref.lower_bound(Ref{now_ns, 0, 0, 0}); it != ref.end() && std::get<0>(*it) == now_ns; ++it) {
        at_now.push_back(*it);
      }
      if (!at_now.empty() && rng() % 2 == 0) {
        const Ref victim = at_now[rng() % at_now.size()];
        ASSERT_TRUE(q.cancel_current(static_cast<EventKind>(std::get<2>(victim)), std::get<3>(victim))) << "seed " << seed;
        ref.erase(victim);
        ++cancelled;
      } else {
        ASSERT_FALSE(q.cancel_current(EventKind::kPort, next_id + 1)) << "seed " << seed;
      }
      ASSERT_EQ(q.size(), ref.size());
      if (ref.empty()) continue;
      const Event e = q.pop();
      const Ref want = *ref.begin();
      ref.erase(ref.begin());
      ASSERT_EQ(e.time_ns, std::get<0>(want)) << "seed " << seed;
      ASSERT_EQ(static_cast<uint32_t>(e.kind), std::get<2>(want)) << "seed " << seed;
      ASSERT_EQ(e.id, std::get<3>(want)) << "seed " << seed << " at " << e.time_ns << " ns";
      now_ns = e.time_ns;
    }
    while (!ref.empty()) {
      const Event e = q.pop();
      ASSERT_EQ(e.id, std::get<3>(*ref.begin())) << "seed " << seed;
      ref.erase(ref.begin());
    }
    EXPECT_TRUE(q.empty());
    EXPECT_GT(cancelled, 1000u);  // the schedule did exercise it
  }
}

}  // namespace
}  // namespace trim::sim
