// Issue 39 item 4: the collectives' caller blocks until a request completes instead of
// sleep-polling test(). CompletionSignal's armed-flag protocol (no lost wake-up when a completion
// races the waiter's arming), and ncclTrimWaitRequests' engine (trim::net::wait_any) end to end.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "tests/env_guard.h"
#include "tests/net_pair.h"
#include "transport/completion.h"
#include "transport/net_api.h"
#include "transport/proto.h"

namespace trim::net {
namespace {

using Clock = std::chrono::steady_clock;
using transport::CompletionSignal;
using transport::OpResult;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// A completion that lands anywhere around the waiter's arm-recheck-wait must end the wait: a
// lost wake-up would sleep the whole 2 s timeout. The completer starts with the waiter and
// spins a random short while, so the race is hit from both sides across the iterations.
TEST(CompletionSignal, NoWakeUpIsLostWhenACompletionRacesTheWaiter) {
  CompletionSignal signal;
  OpResult res;
  std::atomic<int> round{-1};
  std::atomic<bool> stop{false};
  constexpr int kRounds = 2000;
  std::thread completer([&] {
    std::mt19937 rng(1);
    for (int done = 0; done < kRounds;) {
      if (stop.load()) return;
      if (round.load() != done) continue;
      for (volatile uint32_t spin = rng() % 2000; spin > 0; spin = spin - 1) {
      }
      res.finish(7);
      ++done;
    }
  });
  int blocked = 0;
  double slowest_s = 0;
  for (int i = 0; i < kRounds; ++i) {
    res.reset(&signal);
    round.store(i);
    const auto t0 = Clock::now();
    while (res.pending()) {
      const uint32_t gen = signal.arm();
      if (!res.pending_seq_cst()) break;
      ++blocked;
      signal.wait(gen, 2'000'000'000);
    }
    slowest_s = std::max(slowest_s, seconds_since(t0));
    if (slowest_s > 1.0) break;
    ASSERT_EQ(res.bytes(), 7u);
  }
  stop.store(true);
  completer.join();
  EXPECT_LT(slowest_s, 1.0) << "a waiter slept through a completion";
  EXPECT_GT(blocked, 0) << "the waiter never blocked: the race was not exercised";
}

// Nobody armed: a completion costs no system call; armed, one completion wakes and disarms,
// so the rest of an engine batch costs none either.
TEST(CompletionSignal, OneWakePerArmingNoneWhenNobodyWaits) {
  CompletionSignal signal;
  OpResult a, b, c;
  a.reset(&signal);
  b.reset(&signal);
  c.reset(&signal);
  a.finish(1);
  EXPECT_EQ(signal.wakes(), 0u);
  (void)signal.arm();
  b.finish(1);
  c.fail(Status(Code::kUnavailable, "x"));
  EXPECT_EQ(signal.wakes(), 1u);
}

// The engine's turn defers its wakes to the turn's end: none before flush(), one after (and
// what is left is flushed when the scope closes).
TEST(CompletionSignal, AnEngineTurnWakesOnceAtItsEnd) {
  CompletionSignal signal;
  OpResult a, b;
  a.reset(&signal);
  b.reset(&signal);
  const uint32_t gen = signal.arm();
  {
    transport::DeferredWakes wakes;
    a.finish(1);
    b.finish(2);
    EXPECT_EQ(signal.wakes(), 0u);
    wakes.flush();
    EXPECT_EQ(signal.wakes(), 1u);
    (void)signal.arm();
    OpResult c;
    c.reset(&signal);
    c.finish(3);
    EXPECT_EQ(signal.wakes(), 1u);
  }
  EXPECT_EQ(signal.wakes(), 2u);
  const auto t0 = Clock::now();
  signal.wait(gen, 2'000'000'000);  // the generation moved on: no wait
  EXPECT_LT(seconds_since(t0), 0.5);
}

TEST(CompletionSignal, AWaitEndsAtItsTimeoutWhenNothingCompletes) {
  CompletionSignal signal;
  const uint32_t gen = signal.arm();
  const auto t0 = Clock::now();
  signal.wait(gen, 50'000'000);
  const double s = seconds_since(t0);
  EXPECT_GE(s, 0.045);
  EXPECT_LT(s, 1.0);
  // A completion since arm(): the wait returns at once.
  OpResult r;
  r.reset(&signal);
  const uint32_t gen2 = signal.arm();
  r.finish(0);
  const auto t1 = Clock::now();
  signal.wait(gen2, 2'000'000'000);
  EXPECT_LT(seconds_since(t1), 0.5);
}

class WaitAny : public ::testing::Test {
 protected:
  void SetUp() override { testing::open_loopback(&ctx_, &send_, &recv_, &listen_); }
  void TearDown() override { testing::close_loopback(&ctx_, &send_, &recv_, &listen_); }
  // Blocks in wait_any until `r` is done (each wait at most 2 s); the completed size, -1 on error.
  static int64_t wait_done(Request* r, int* waits) {
    for (;;) {
      Completion c;
      if (!test(r, &c).is_ok()) return -1;
      if (c.done) return static_cast<int64_t>(c.sizes_bytes[0]);
      bool ready = false;
      if (!wait_any(&r, 1, 2'000'000'000, &ready).is_ok()) return -1;
      ++*waits;
    }
  }

  testing::EnvGuard ifname_{"NCCL_TRIM_IFNAME", "lo"};
  Context* ctx_ = nullptr;
  ListenComm* listen_ = nullptr;
  SendComm* send_ = nullptr;
  RecvComm* recv_ = nullptr;
};

// Many messages, each received by a thread that only blocks in wait_any and tests: every one
// arrives exact, and none waits for the timeout (2 s a wait) instead of its completion.
TEST_F(WaitAny, AReceiverBlockedOnItsRequestIsWokenByEachCompletion) {
  constexpr int kMessages = 200;
  constexpr size_t kBytes = 64 << 10;
  std::vector<uint8_t> out(kBytes), in(kBytes);
  int waits = 0;
  const auto t0 = Clock::now();
  for (int m = 0; m < kMessages; ++m) {
    for (size_t i = 0; i < kBytes; ++i) out[i] = static_cast<uint8_t>(i * 31 + static_cast<size_t>(m));
    RecvBuffer b;
    b.data = in.data();
    b.capacity_bytes = kBytes;
    Result<Request*> rr = irecv(recv_, 1, &b, false);
    ASSERT_TRUE(rr.is_ok() && rr.value() != nullptr);
    std::thread sender([&] {
      if (m % 4 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(2));  // the waiter is asleep by then
      Result<Request*> sr = isend(send_, out.data(), kBytes, 0, nullptr, nullptr);
      ASSERT_TRUE(sr.is_ok() && sr.value() != nullptr);
      int send_waits = 0;
      EXPECT_EQ(wait_done(sr.value(), &send_waits), static_cast<int64_t>(kBytes));
    });
    EXPECT_EQ(wait_done(rr.value(), &waits), static_cast<int64_t>(kBytes));
    sender.join();
    ASSERT_EQ(std::memcmp(in.data(), out.data(), kBytes), 0) << "message " << m;
  }
  const double s = seconds_since(t0);
  EXPECT_LT(s, 10.0) << "a wait ran to its timeout: a lost wake-up";
  EXPECT_GT(waits, 0);
}

// A wait with nothing coming ends at its timeout (the caller's abort and deadline checks run
// between waits); bad arguments are refused.
TEST_F(WaitAny, EndsAtItsTimeoutAndRefusesBadArguments) {
  std::vector<uint8_t> in(16);
  RecvBuffer b;
  b.data = in.data();
  b.capacity_bytes = in.size();
  Result<Request*> rr = irecv(recv_, 1, &b, false);
  ASSERT_TRUE(rr.is_ok() && rr.value() != nullptr);
  Request* r = rr.value();
  bool ready = true;
  const auto t0 = Clock::now();
  ASSERT_TRUE(wait_any(&r, 1, 30'000'000, &ready).is_ok());
  const double s = seconds_since(t0);
  EXPECT_FALSE(ready);
  EXPECT_GE(s, 0.025);
  EXPECT_LT(s, 1.0);
  EXPECT_FALSE(wait_any(&r, 0, 1000, &ready).is_ok());
  EXPECT_FALSE(wait_any(nullptr, 1, 1000, &ready).is_ok());
  Request* none = nullptr;
  EXPECT_FALSE(wait_any(&none, 1, 1000, &ready).is_ok());
  // Complete it so TearDown closes an idle pair.
  std::vector<uint8_t> out(16, 5);
  Result<Request*> sr = isend(send_, out.data(), out.size(), 0, nullptr, nullptr);
  ASSERT_TRUE(sr.is_ok() && sr.value() != nullptr);
  int waits = 0;
  EXPECT_EQ(wait_done(r, &waits), 16);
  EXPECT_EQ(wait_done(sr.value(), &waits), 16);
  EXPECT_EQ(in, out);
}

}  // namespace
}  // namespace trim::net
