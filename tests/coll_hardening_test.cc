// coll::Comm's per-communicator state (issue 38): error feedback only on the comms that declare
// their buffers, even when NCCL drives the same library in the same process; plugin log lines and
// warnings per communicator; allocation failures as errors; the exact float fallback's scratch
// linear in the ranks, and released after a one-off large op.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "coll/comm.h"
#include "coll/net_plugin.h"
#include "coll/reduce.h"
#include "tests/env_guard.h"
#include "tests/test_paths.h"

namespace {

using trim::coll::Comm;
using trim::coll::CommConfig;
using trim::coll::DType;
using trim::coll::NetPlugin;
using trim::coll::Outcome;
using trim::coll::RedOp;
using trim::testing::EnvGuard;

int64_t deadline_in_s(int s) { return trim::coll::mono_ns() + int64_t{s} * 1000000000; }

// n communicators in a ring on loopback, one thread per rank for the calls that need them all.
class Ring {
 public:
  explicit Ring(int n, const std::string& name = "ring", uint64_t comm_id = 11) {
    std::vector<std::string> handles;
    for (int r = 0; r < n; ++r) {
      CommConfig cfg;
      cfg.plugin_path = trim::testing::plugin_path();
      cfg.rank = r;
      cfg.nranks = n;
      cfg.comm_id = comm_id;
      cfg.check_ops = true;
      cfg.name = name + " rank " + std::to_string(r);
      std::unique_ptr<Comm> c;
      const Outcome o = Comm::create(cfg, &c);
      EXPECT_TRUE(o.ok()) << o.status.message();
      if (!o.ok()) return;
      handles.push_back(c->handle());
      comms_.push_back(std::move(c));
    }
    each([&](int r, Comm* c) {
      const Outcome o = c->connect(handles[static_cast<size_t>((r + 1) % n)], deadline_in_s(20));
      EXPECT_TRUE(o.ok()) << o.status.message();
    });
  }
  int size() const { return static_cast<int>(comms_.size()); }
  Comm* comm(int r) const { return comms_[static_cast<size_t>(r)].get(); }
  void each(const std::function<void(int, Comm*)>& f) {
    std::vector<std::thread> threads;
    for (int r = 0; r < size(); ++r) threads.emplace_back([&, r] { f(r, comm(r)); });
    for (auto& t : threads) t.join();
  }

 private:
  std::vector<std::unique_ptr<Comm>> comms_;
};

// The plugin's counter `key` from ncclTrimStatsJson (the library is loaded once per process, so
// any of its users sees the same counters).
uint64_t stat(const Comm& c, const std::string& key) {
  std::string json;
  EXPECT_TRUE(c.stats_json(&json));
  const std::string k = "\"" + key + "\":";
  const size_t at = json.find(k);
  EXPECT_NE(at, std::string::npos) << key << " not in " << json;
  return at == std::string::npos ? 0 : std::stoull(json.substr(at + k.size()));
}

std::vector<float> floats(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-3.0f, 3.0f);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

// ---- error feedback stays on the communicator that declared its buffers

// Each test sets NCCL_TRIM_ERROR_FEEDBACK itself; ef_conns is the process's count of send
// connections with error feedback, as rank 0 of a ring reports it.
class ErrorFeedbackScope : public ::testing::Test {
 protected:
  static uint64_t ef_conns(const Ring& ring) { return stat(*ring.comm(0), "ef_conns"); }
  EnvGuard ifname_{"NCCL_TRIM_IFNAME", "lo"};
};

// A process that runs both the trim backend and NCCL (`cpu:trim,cuda:nccl`) loads one copy of
// the plugin. The trim communicator is created first and declares its buffers; NCCL's
// connections, made after it through the same library, must not get the residual state: their
// staging slots hold different data every step, so a residual keyed by (address, size) would be
// added to an unrelated slice.
TEST_F(ErrorFeedbackScope, StaysOnTheDeclaringCommunicatorOnly) {
  EnvGuard ef("NCCL_TRIM_ERROR_FEEDBACK", "1");
  Ring trim_group(2, "trim");
  ASSERT_EQ(trim_group.size(), 2);
  const uint64_t after_trim = ef_conns(trim_group);
  // Both ranks' send comms are in this process: at least those two (earlier tests may add more).
  EXPECT_GE(after_trim, 2u);

  // NCCL: the same library, its own context (v11 init per communicator), a send and a receive
  // comm, and no declaration, as NCCL never makes one.
  auto opened = NetPlugin::open(trim::testing::plugin_path(), trim::coll::Api::kV11);
  ASSERT_TRUE(opened.is_ok()) << opened.status().message();
  std::unique_ptr<NetPlugin> nccl(opened.value());
  ASSERT_EQ(nccl->init(99, nullptr), ncclSuccess);
  char handle[NCCL_NET_HANDLE_MAXSIZE] = {};
  void* listen = nullptr;
  void* send = nullptr;
  void* recv = nullptr;
  ASSERT_EQ(nccl->listen(0, handle, &listen), ncclSuccess);
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while ((send == nullptr || recv == nullptr) && std::chrono::steady_clock::now() < until) {
    if (send == nullptr) {
      ASSERT_EQ(nccl->connect(0, handle, &send), ncclSuccess);
    }
    if (recv == nullptr) {
      ASSERT_EQ(nccl->accept(listen, &recv), ncclSuccess);
    }
  }
  ASSERT_NE(send, nullptr);
  ASSERT_NE(recv, nullptr);
  EXPECT_EQ(ef_conns(trim_group), after_trim) << "NCCL's send comm got error feedback";

  // A declaration after the comm has sent is refused: the engine may already read its state.
  std::vector<char> buf(4096, 1);
  void* mh = nullptr;
  ASSERT_EQ(nccl->reg_mr(send, buf.data(), buf.size(), &mh), ncclSuccess);
  void* req = nullptr;
  while (req == nullptr) ASSERT_EQ(nccl->isend(send, buf.data(), buf.size(), 0, mh, nullptr, &req), ncclSuccess);
  EXPECT_FALSE(nccl->declare_send_buffers(send).is_ok());
  EXPECT_EQ(ef_conns(trim_group), after_trim);
  EXPECT_EQ(nccl->dereg_mr(send, mh), ncclSuccess);
  EXPECT_EQ(nccl->close_send(send), ncclSuccess);
  EXPECT_EQ(nccl->close_recv(recv), ncclSuccess);
  EXPECT_EQ(nccl->close_listen(listen), ncclSuccess);
  EXPECT_EQ(nccl->finalize(), ncclSuccess);
}

TEST_F(ErrorFeedbackScope, OffUnlessTheKnobIsSet) {
  EnvGuard ef("NCCL_TRIM_ERROR_FEEDBACK", "0");
  Ring before(2, "probe");
  ASSERT_EQ(before.size(), 2);
  const uint64_t base = ef_conns(before);
  Ring trim_group(2, "trim", 12);
  ASSERT_EQ(trim_group.size(), 2);
  EXPECT_EQ(ef_conns(trim_group), base);
}

// ---- log lines and warnings per communicator

TEST(CollLog, WarningsAndPrefixesStayWithTheirCommunicator) {
  trim::coll::LogContext a("group A", NCCL_LOG_INFO);
  trim::coll::LogContext b("group B", NCCL_LOG_WARN);
  ::testing::internal::CaptureStderr();
  std::thread ta([&] {
    trim::coll::LogScope scope(&a);
    trim::coll::plugin_logger(NCCL_LOG_WARN, 0, "x.cc", 1, "A failed: %d", 1);
    trim::coll::plugin_logger(NCCL_LOG_INFO, 0, "x.cc", 2, "A info");
  });
  ta.join();
  std::thread tb([&] {
    trim::coll::LogScope scope(&b);
    trim::coll::plugin_logger(NCCL_LOG_INFO, 0, "x.cc", 3, "B info, not shown at WARN");
  });
  tb.join();
  trim::coll::plugin_logger(NCCL_LOG_WARN, 0, "x.cc", 4, "an engine thread's warning");
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("[group A] NCCL WARN x.cc:1 A failed: 1"), std::string::npos) << err;
  EXPECT_NE(err.find("[group A] NCCL INFO x.cc:2 A info"), std::string::npos) << err;
  EXPECT_EQ(err.find("B info"), std::string::npos) << err;
  EXPECT_NE(err.find("[trim-coll] NCCL WARN x.cc:4 an engine thread's warning"), std::string::npos) << err;
  EXPECT_EQ(a.warnings(), 1u);
  EXPECT_EQ(a.warning_since(0), "A failed: 1");
  EXPECT_EQ(a.warning_since(1), "");
  EXPECT_EQ(b.warnings(), 0u);
  EXPECT_EQ(b.warning_since(0), "") << "B quotes another communicator's warning";
}

// Two groups in one process: group A's failure (its peer went away) is not what group B, timing
// out at the same time, says the plugin said.
TEST(CollLog, AFailureIsNotQuotedByAnotherGroup) {
  EnvGuard ifname("NCCL_TRIM_IFNAME", "lo");
  Ring a(2, "group A", 21);
  Ring b(2, "group B", 22);
  ASSERT_EQ(a.size(), 2);
  ASSERT_EQ(b.size(), 2);
  std::vector<float> xa(1 << 16, 1.0f), xb(1 << 16, 1.0f);
  Outcome ob;
  // B's rank 0 calls alone: it can only time out.
  std::thread tb([&] { ob = b.comm(0)->all_reduce(xb.data(), xb.size(), DType::kF32, RedOp::kSum, deadline_in_s(3)); });
  // Meanwhile A's rank 1 goes away and A's rank 0 fails on it, with the plugin's warnings.
  EXPECT_TRUE(a.comm(1)->close().is_ok());
  const Outcome oa = a.comm(0)->all_reduce(xa.data(), xa.size(), DType::kF32, RedOp::kSum, deadline_in_s(2));
  tb.join();
  EXPECT_FALSE(oa.ok());
  ASSERT_FALSE(ob.ok());
  EXPECT_EQ(ob.fail, trim::coll::Fail::kTimeout) << ob.status.message();
  EXPECT_EQ(ob.status.message().find("the plugin said"), std::string::npos) << ob.status.message();
  EXPECT_EQ(ob.status.message().find("group A"), std::string::npos) << ob.status.message();
}

// ---- memory

// Float MAX/MIN/PROD are reduced exactly from gathered inputs. Gathering the whole n-block input
// of reduce_scatter at every rank took n^2 blocks; block by block it takes n.
TEST(CollMemory, ExactFallbackScratchIsLinearInRanks) {
  EnvGuard ifname("NCCL_TRIM_IFNAME", "lo");
  const int n = 4;
  Ring ring(n);
  ASSERT_EQ(ring.size(), n);
  const size_t per = 50000;
  const size_t block_bytes = per * sizeof(float);
  std::vector<std::vector<float>> in(n), out(n, std::vector<float>(per, -1.0f));
  for (int r = 0; r < n; ++r) in[static_cast<size_t>(r)] = floats(per * n, 100 + static_cast<uint64_t>(r));
  for (RedOp op : {RedOp::kMax, RedOp::kProd}) {
    ring.each([&](int r, Comm* c) {
      const Outcome o = c->reduce_scatter(in[static_cast<size_t>(r)].data(), out[static_cast<size_t>(r)].data(), per,
                                          DType::kF32, op, deadline_in_s(20));
      EXPECT_TRUE(o.ok()) << o.status.message();
    });
    for (int r = 0; r < n; ++r) {
      // x_{n-1} op x_{n-2} ... op x_0, the engine's rank order, on block r.
      std::vector<float> want(in[n - 1].begin() + static_cast<long>(r * per),
                              in[n - 1].begin() + static_cast<long>((r + 1) * per));
      for (int k = n - 2; k >= 0; --k) {
        trim::coll::reduce_into(want.data(), in[static_cast<size_t>(k)].data() + static_cast<size_t>(r) * per, per,
                                DType::kF32, op);
      }
      ASSERT_EQ(0, std::memcmp(want.data(), out[static_cast<size_t>(r)].data(), block_bytes))
          << trim::coll::op_name(op) << ", rank " << r;
      EXPECT_LE(ring.comm(r)->scratch_bytes(), static_cast<size_t>(n) * block_bytes)
          << "rank " << r << ": the fallback's scratch is not O(n) blocks";
    }
  }
}

TEST(CollMemory, ScratchIsReleasedAfterAOneOffLargeOp) {
  EnvGuard ifname("NCCL_TRIM_IFNAME", "lo");
  Ring ring(2);
  ASSERT_EQ(ring.size(), 2);
  auto rs = [&](size_t per) {
    std::vector<std::vector<float>> in(2), out(2, std::vector<float>(per));
    for (int r = 0; r < 2; ++r) in[static_cast<size_t>(r)] = floats(per * 2, static_cast<uint64_t>(r));
    ring.each([&](int r, Comm* c) {
      const Outcome o = c->reduce_scatter(in[static_cast<size_t>(r)].data(), out[static_cast<size_t>(r)].data(), per,
                                          DType::kF32, RedOp::kSum, deadline_in_s(20));
      EXPECT_TRUE(o.ok()) << o.status.message();
    });
  };
  rs(1 << 20);  // 8 MiB of scratch per rank
  EXPECT_GE(ring.comm(0)->scratch_bytes(), size_t{8} << 20);
  for (int i = 0; i < 40; ++i) rs(1000);
  EXPECT_LT(ring.comm(0)->scratch_bytes(), size_t{1} << 20) << "the large op's scratch was kept";
}

// An allocation that cannot succeed is the op's error on every rank, with the communicator
// failed (the connections closed so no peer waits), never an abort.
TEST(CollMemory, AllocationFailureIsAnErrorNotAnAbort) {
  EnvGuard ifname("NCCL_TRIM_IFNAME", "lo");
  Ring ring(2);
  ASSERT_EQ(ring.size(), 2);
  float x[4] = {1, 2, 3, 4};
  // 2^43 floats gathered from 2 ranks: 64 TiB of scratch, more than any machine here maps.
  const size_t huge = size_t{1} << 43;
  std::vector<std::string> why(2);
  ring.each([&](int r, Comm* c) {
    const Outcome o = c->all_reduce(x, huge, DType::kF32, RedOp::kMax, deadline_in_s(20));
    ASSERT_FALSE(o.ok());
    why[static_cast<size_t>(r)] = o.status.message();
    const Outcome later = c->all_reduce(x, 4, DType::kF32, RedOp::kSum, deadline_in_s(5));
    EXPECT_EQ(later.fail, trim::coll::Fail::kFailed) << later.status.message();
  });
  // The rank that got there first says why; its peer may instead see it close the connections.
  const bool named = std::any_of(why.begin(), why.end(), [](const std::string& w) {
    return w.find("out of memory") != std::string::npos && w.find("scratch") != std::string::npos;
  });
  EXPECT_TRUE(named) << why[0] << " / " << why[1];
  // A size no buffer can have is refused before anything is sent, and the communicator stays up.
  Ring ring2(2, "ring2", 13);
  ASSERT_EQ(ring2.size(), 2);
  ring2.each([&](int, Comm* c) {
    const Outcome o = c->reduce_scatter(x, x + 2, SIZE_MAX / 2, DType::kF32, RedOp::kSum, deadline_in_s(5));
    EXPECT_EQ(o.fail, trim::coll::Fail::kInvalid) << o.status.message();
    float y[2] = {1, 2};
    const Outcome ok = c->all_reduce(y, 2, DType::kF32, RedOp::kSum, deadline_in_s(20));
    EXPECT_TRUE(ok.ok()) << ok.status.message();
  });
}

}  // namespace

// A polling loop that waits long (a p2p receiver with nothing to receive, a peer still
// computing) sleeps a twentieth of the time it has been idle, 20 us to 2 ms: it pays at most
// ~5 % of a wait on waking and makes a few hundred wake-ups a second instead of thousands.
TEST(CollBackoff, SleepGrowsWithTheIdleTimeWithinItsBounds) {
  using trim::coll::Backoff;
  EXPECT_EQ(Backoff::sleep_ns(0), 20000);
  EXPECT_EQ(Backoff::sleep_ns(400000), 20000);
  EXPECT_EQ(Backoff::sleep_ns(1000000), 50000);
  EXPECT_EQ(Backoff::sleep_ns(10000000), 500000);
  EXPECT_EQ(Backoff::sleep_ns(40000000), 2000000);
  EXPECT_EQ(Backoff::sleep_ns(int64_t{1000} * 1000000000), 2000000);
}

TEST(CollBackoff, AnIdleLoopWakesAFewHundredTimesNotThousands) {
  using trim::coll::Backoff;
  Backoff backoff;
  const int64_t t0 = trim::coll::mono_ns();
  int passes = 0;
  while (trim::coll::mono_ns() - t0 < 300000000) {  // 300 ms idle
    backoff.idle();
    ++passes;
  }
  // Fixed 20 us sleeps make >= 3000 passes here (>= 100 us each with the timer's slack); the
  // growing sleep ~20 * ln(300 / 0.4) + 24 ~ 160, fewer when the machine is busy.
  EXPECT_LT(passes, 1000);
  EXPECT_GT(passes, 10);
}
