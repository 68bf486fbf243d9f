// Closing one comm must leave every other comm between the same two engines working. NCCL keeps
// several (a send and a receive comm per channel per peer) over one engine, one UDP socket,
// found by cookie; one of them may be closed (abort, or one channel torn down) while a receive
// is posted on it and its sender sends nothing, or while data moves. The others' pending and
// new operations must complete with exact bytes, exact and trimmable alike; the closed comm's
// peer must fail cleanly. Each scenario runs many times: the failure this guards was seen once
// in three runs. Both ends live in this process here (two contexts on the one engine of the
// device); close_frozen_peer_test.cc puts the peer in another process and freezes it.
#include <gtest/gtest.h>

#include <time.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "tests/net_pair.h"
#include "tests/close_util.h"
#include "tests/env_guard.h"
#include "transport/net_internal.h"

namespace trim::net {
namespace {

using namespace close_test;

constexpr int kPairs = 4;
constexpr int kIterations = 20;
constexpr auto kBudget = std::chrono::seconds(40);  // per test: stop iterating past it
constexpr milliseconds kDrain{20000};

class CloseIsolation : public ::testing::Test {
 protected:
  void SetUp() override {
    for (Context** c : {&a_, &b_}) {
      Result<Context*> r = init(InitOptions());
      ASSERT_TRUE(r.is_ok()) << r.status().to_string();
      *c = r.value();
    }
  }
  void TearDown() override {
    close_all();
    for (Context* c : {a_, b_}) {
      if (c != nullptr) {
        EXPECT_TRUE(finalize(c).is_ok());
      }
    }
  }

  // kPairs pairs: even ones send from context a to b, odd ones from b to a.
  void connect_pairs() {
    pairs_.assign(kPairs, Pair());
    for (int i = 0; i < kPairs; ++i) {
      Pair& p = pairs_[i];
      p.send_ctx = i % 2 == 0 ? a_ : b_;
      Context* receiver = i % 2 == 0 ? b_ : a_;
      p.name = "pair " + std::to_string(i);
      ListenComm* l = nullptr;
      testing::connect_pair(p.send_ctx, receiver, &p.send, &p.recv, &l);
      if (l != nullptr) {
        EXPECT_TRUE(close_listen(l).is_ok());
      }
      ASSERT_TRUE(p.send != nullptr && p.recv != nullptr) << p.name << ": no connection";
    }
  }

  void close_all() {
    for (Pair& p : pairs_) {
      if (p.send != nullptr) {
        EXPECT_TRUE(close_send(p.send).is_ok());
      }
      if (p.recv != nullptr) {
        EXPECT_TRUE(close_recv(p.recv).is_ok());
      }
      p.send = nullptr;
      p.recv = nullptr;
    }
    pairs_.clear();
  }

  // Posts `rounds` messages on every pair in `which` (all receives first, then all sends).
  std::string post_rounds(const std::vector<int>& which, int rounds, uint32_t seed, std::vector<Transfer>* ts) {
    *ts = plan(pairs_, which, rounds, seed);
    return post_all(*ts);
  }
  std::string traffic(const std::vector<int>& which, int rounds, uint32_t seed) {
    std::vector<Transfer> ts;
    std::string e = post_rounds(which, rounds, seed, &ts);
    return e.empty() ? drain_and_check(ts, kDrain) : e;
  }

  // After pair 0's receive side was closed: posting on its send side fails cleanly, at once or
  // through test(), and never completes or hangs.
  static std::string closed_peer_send_fails(SendComm* s) {
    std::vector<uint8_t> msg = random_bytes(100000, 9);
    Result<Request*> r = post_send(s, msg.data(), msg.size());
    if (!r.is_ok()) return "";
    if (r.value() == nullptr) return "isend to a closed peer: no free slot";
    Outcome o = await(r.value(), milliseconds(10000));
    if (o.end == End::kFailed) return "";
    return o.end == End::kDone ? "isend to a closed peer completed" : "isend to a closed peer hangs";
  }

  bool over_budget() const { return Clock::now() - start_ > kBudget; }

  testing::EnvGuard ifname_{"NCCL_TRIM_IFNAME", "lo"};
  // AllReduce sends of fp32 of either half of the ring are trimmable: the fallback dtype and
  // the phase rule "all" (nothing tells the plugin the ring step here).
  testing::EnvGuard dtype_{"NCCL_TRIM_DTYPE", "fp32"};
  testing::EnvGuard phase_{"NCCL_TRIM_PHASE", "all"};
  Context* a_ = nullptr;
  Context* b_ = nullptr;
  std::vector<Pair> pairs_;
  const Clock::time_point start_ = Clock::now();
};

const std::vector<int> kOthers = {1, 2, 3};

// (a) + (c): a receive posted on pair 0 with no send to match it; pair 0's receive comm is
// closed; pairs 1-3 (both directions) then carry many messages, and pair 0's sender fails.
TEST_F(CloseIsolation, CloseRecvWithReceivePostedOthersKeepWorking) {
  int iterations = 0;
  for (; iterations < kIterations && !over_budget(); ++iterations) {
    SCOPED_TRACE("iteration " + std::to_string(iterations));
    connect_pairs();
    ASSERT_FALSE(HasFatalFailure());
    ASSERT_EQ(traffic({0, 1, 2, 3}, 4, 1000 + iterations), "");
    std::vector<uint8_t> dst(1 << 20);
    Result<Request*> r = post_recv(pairs_[0].recv, dst.data(), dst.size());
    ASSERT_TRUE(r.is_ok() && r.value() != nullptr);
    // Odd iterations let the CTS reach the sender first; even ones close at once.
    if (iterations % 2 == 1) std::this_thread::sleep_for(milliseconds(2));
    ASSERT_TRUE(close_recv(pairs_[0].recv).is_ok());
    pairs_[0].recv = nullptr;
    ASSERT_EQ(traffic(kOthers, 8, 2000 + iterations), "");
    ASSERT_EQ(closed_peer_send_fails(pairs_[0].send), "");
    ASSERT_EQ(traffic(kOthers, 4, 3000 + iterations), "");
    close_all();
  }
  EXPECT_GE(iterations, 5) << "too few iterations within the time budget to mean anything";
  EXPECT_NE(a_->classifier->summary().find("trimmable"), std::string::npos) << a_->classifier->summary();
  EXPECT_NE(b_->classifier->summary().find("trimmable"), std::string::npos) << b_->classifier->summary();
}

// (b): the same close while the other pairs are mid-transfer (several MiB posted each way).
TEST_F(CloseIsolation, CloseRecvWhileOthersAreMidTransfer) {
  int iterations = 0;
  for (; iterations < kIterations && !over_budget(); ++iterations) {
    SCOPED_TRACE("iteration " + std::to_string(iterations));
    connect_pairs();
    ASSERT_FALSE(HasFatalFailure());
    std::vector<uint8_t> dst(1 << 20);
    Result<Request*> r = post_recv(pairs_[0].recv, dst.data(), dst.size());
    ASSERT_TRUE(r.is_ok() && r.value() != nullptr);
    std::vector<Transfer> ts;
    ASSERT_EQ(post_rounds(kOthers, 8, 4000 + iterations, &ts), "");
    std::this_thread::sleep_for(std::chrono::microseconds(200 * (iterations % 4)));
    ASSERT_TRUE(close_recv(pairs_[0].recv).is_ok());
    pairs_[0].recv = nullptr;
    ASSERT_EQ(drain_and_check(ts, kDrain), "");
    ASSERT_EQ(closed_peer_send_fails(pairs_[0].send), "");
    ASSERT_EQ(traffic(kOthers, 4, 5000 + iterations), "");
    close_all();
  }
  EXPECT_GE(iterations, 5);
}

// The closed receive comm's sender was mid-transfer into it: its data now arrives for a
// cookie nobody owns. Pair 0's send ends (failed, or done if it beat the close); the others
// are untouched.
TEST_F(CloseIsolation, CloseRecvWhileItsOwnSenderIsMidTransfer) {
  int iterations = 0;
  for (; iterations < kIterations && !over_budget(); ++iterations) {
    SCOPED_TRACE("iteration " + std::to_string(iterations));
    connect_pairs();
    ASSERT_FALSE(HasFatalFailure());
    std::vector<uint8_t> src = random_bytes(8 << 20, 7), dst(8 << 20);
    Result<Request*> r = post_recv(pairs_[0].recv, dst.data(), dst.size());
    Result<Request*> s = post_send(pairs_[0].send, src.data(), src.size());
    ASSERT_TRUE(r.is_ok() && r.value() != nullptr && s.is_ok() && s.value() != nullptr);
    std::vector<Transfer> ts;
    ASSERT_EQ(post_rounds(kOthers, 8, 6000 + iterations, &ts), "");
    const auto moving = Clock::now() + std::chrono::seconds(5);
    while (__atomic_load_n(&dst[0], __ATOMIC_RELAXED) != src[0] && Clock::now() < moving) std::this_thread::yield();
    ASSERT_TRUE(close_recv(pairs_[0].recv).is_ok());
    pairs_[0].recv = nullptr;
    Outcome so = await(s.value(), milliseconds(10000));
    EXPECT_NE(so.end, End::kPending) << "the send into a closed receive comm hangs";
    ASSERT_EQ(drain_and_check(ts, kDrain), "");
    ASSERT_EQ(traffic(kOthers, 4, 7000 + iterations), "");
    close_all();
  }
  EXPECT_GE(iterations, 5);
}

// (e): a send comm closed with a send in flight (its receive posted, data moving) while the
// other pairs move data. Pair 0's receive ends (failed: the peer closed; or done if it won) and
// new receives on it fail; the others complete exactly.
TEST_F(CloseIsolation, CloseSendWithSendInFlightOthersKeepWorking) {
  int iterations = 0;
  for (; iterations < kIterations && !over_budget(); ++iterations) {
    SCOPED_TRACE("iteration " + std::to_string(iterations));
    connect_pairs();
    ASSERT_FALSE(HasFatalFailure());
    std::vector<uint8_t> src = random_bytes(8 << 20, 8), dst(8 << 20);
    Result<Request*> r = post_recv(pairs_[0].recv, dst.data(), dst.size());
    Result<Request*> s = post_send(pairs_[0].send, src.data(), src.size());
    ASSERT_TRUE(r.is_ok() && r.value() != nullptr && s.is_ok() && s.value() != nullptr);
    std::vector<Transfer> ts;
    ASSERT_EQ(post_rounds(kOthers, 8, 8000 + iterations, &ts), "");
    if (iterations % 2 == 0) {  // even: mid-transfer; odd: maybe before the first packet
      const auto moving = Clock::now() + std::chrono::seconds(5);
      while (__atomic_load_n(&dst[0], __ATOMIC_RELAXED) != src[0] && Clock::now() < moving) std::this_thread::yield();
    }
    ASSERT_TRUE(close_send(pairs_[0].send).is_ok());
    pairs_[0].send = nullptr;
    Outcome ro = await(r.value(), milliseconds(10000));
    EXPECT_NE(ro.end, End::kPending) << "a receive whose sender closed hangs";
    if (ro.end == End::kDone) {
      EXPECT_EQ(ro.bytes, src.size());
    }
    ASSERT_EQ(drain_and_check(ts, kDrain), "");
    std::vector<uint8_t> more(1000);
    Result<Request*> again = post_recv(pairs_[0].recv, more.data(), more.size());
    if (again.is_ok() && again.value() != nullptr) {
      EXPECT_EQ(await(again.value(), milliseconds(10000)).end, End::kFailed) << "a receive from a closed sender";
    } else {
      EXPECT_FALSE(again.is_ok());
    }
    ASSERT_EQ(traffic(kOthers, 4, 9000 + iterations), "");
    close_all();
  }
  EXPECT_GE(iterations, 5);
}

// The closed comm's peer is dead (the FIN) but stays open until NCCL tears it down, which may
// be much later: meanwhile the engine serving every other comm must not spin. (It once did: a
// dead connection's last keepalive time, never advanced, became a deadline always in the past
// once a keepalive period had gone by, and the engine burned a core until the comm was closed.)
TEST_F(CloseIsolation, DeadConnectionLeftOpenDoesNotSpinTheEngine) {
  connect_pairs();
  ASSERT_FALSE(HasFatalFailure());
  ASSERT_EQ(traffic({0, 1, 2, 3}, 4, 11), "");
  ASSERT_TRUE(close_recv(pairs_[0].recv).is_ok());
  pairs_[0].recv = nullptr;
  ASSERT_EQ(closed_peer_send_fails(pairs_[0].send), "");  // pair 0's send side is dead now
  // Past one keepalive period (at most 1 s), the process is idle: every thread sleeps.
  std::this_thread::sleep_for(milliseconds(1200));
  auto cpu_ms = [] {
    timespec t{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return static_cast<double>(t.tv_sec) * 1e3 + static_cast<double>(t.tv_nsec) / 1e6;
  };
  const double before = cpu_ms();
  std::this_thread::sleep_for(milliseconds(600));
  const double used = cpu_ms() - before;
  EXPECT_LT(used, 100.0) << "the process used " << used << " ms of CPU in 600 ms with nothing to do";
  ASSERT_EQ(traffic(kOthers, 4, 12), "");
}

}  // namespace
}  // namespace trim::net
