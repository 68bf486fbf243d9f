// libtrim-coll's C ABI (coll/trim_coll.h) over the built plugin: N communicators in this process,
// one thread per rank, on loopback. Every collective, dtype and op against a reference computed
// in the ring's own order (bit for bit: nothing is trimmed here), replicas identical, the
// descriptor check, abort, deadlines and argument errors.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "coll/net_plugin.h"
#include "coll/pipeline.h"
#include "coll/reduce.h"
#include "coll/ring.h"
#include "coll/trim_coll.h"
#include "codec/types.h"
#include "tests/env_guard.h"
#include "tests/test_paths.h"

namespace {

using trim::coll::DType;
using trim::coll::RedOp;
using trim::testing::EnvGuard;

constexpr int64_t kTimeoutMs = 20000;

struct RingOpts {
  int check_ops = 1;
  int profiler = 1;
  uint64_t comm_id = 7;
  int net_api = 0;  // 0: the newest table
};

// n communicators connected in a ring; `each` runs a function per rank on its own thread.
class Ring {
 public:
  Ring(int n, const RingOpts& o = RingOpts()) : comms_(static_cast<size_t>(n), nullptr) {
    const std::string plugin = trim::testing::plugin_path();
    std::vector<std::string> handles(static_cast<size_t>(n));
    for (int r = 0; r < n; ++r) {
      trim_coll_config cfg{};
      cfg.abi_version = TRIM_COLL_ABI_VERSION;
      cfg.plugin_path = plugin.c_str();
      cfg.rank = r;
      cfg.nranks = n;
      cfg.comm_id = o.comm_id;
      cfg.traffic_class = -1;
      cfg.profiler = o.profiler;
      cfg.check_ops = o.check_ops;
      cfg.net_api = o.net_api;
      cfg.log_level = 2;
      char h[TRIM_COLL_HANDLE_BYTES];
      const int rc = trim_coll_create(&cfg, &comms_[static_cast<size_t>(r)], h);
      EXPECT_EQ(rc, TRIM_COLL_OK) << trim_coll_last_error();
      handles[static_cast<size_t>(r)].assign(h, sizeof(h));
    }
    each([&](int r, trim_coll_comm* c) {
      const int rc = trim_coll_connect(c, handles[static_cast<size_t>((r + 1) % n)].data(), kTimeoutMs);
      EXPECT_EQ(rc, TRIM_COLL_OK) << trim_coll_last_error();
    });
  }
  ~Ring() {
    for (trim_coll_comm* c : comms_) EXPECT_EQ(trim_coll_destroy(c), TRIM_COLL_OK) << trim_coll_last_error();
  }
  Ring(const Ring&) = delete;
  Ring& operator=(const Ring&) = delete;

  int size() const { return static_cast<int>(comms_.size()); }
  trim_coll_comm* comm(int r) const { return comms_[static_cast<size_t>(r)]; }
  void each(const std::function<void(int, trim_coll_comm*)>& f) {
    std::vector<std::thread> threads;
    for (int r = 0; r < size(); ++r) threads.emplace_back([&, r] { f(r, comm(r)); });
    for (auto& t : threads) t.join();
  }

 private:
  std::vector<trim_coll_comm*> comms_;
};

// Deterministic inputs: rank r's element e of a buffer, as bytes of the dtype, chosen so that
// sums and products neither overflow floats nor stay trivially exact.
std::vector<uint8_t> input(DType d, size_t count, int rank, uint64_t salt) {
  const size_t eb = trim::coll::dtype_bytes(d);
  std::vector<uint8_t> out(count * eb);
  std::mt19937_64 rng(salt * 1000003u + static_cast<uint64_t>(rank));
  for (size_t e = 0; e < count; ++e) {
    const uint64_t bits = rng();
    const double v = (static_cast<double>(bits >> 11) / 9007199254740992.0) * 2.0 - 1.0;  // [-1, 1)
    uint8_t* p = out.data() + e * eb;
    switch (d) {
      case DType::kF32: { const float f = static_cast<float>(v * 3.0); std::memcpy(p, &f, 4); break; }
      case DType::kF64: { const double f = v * 3.0; std::memcpy(p, &f, 8); break; }
      case DType::kF16: { const uint16_t h = trim::codec::f32_to_f16(static_cast<float>(v * 3.0)); std::memcpy(p, &h, 2); break; }
      case DType::kBF16: { const uint16_t h = trim::codec::f32_to_bf16(static_cast<float>(v * 3.0)); std::memcpy(p, &h, 2); break; }
      default: std::memcpy(p, &bits, eb); break;  // integers: every bit pattern (sums wrap)
    }
  }
  return out;
}

// AllReduce's reference: SUM/AVG along the ring's chains (segment s starts at rank s, each next
// rank adds its own value to what it received); float MAX/MIN/PROD as the engine gathers them
// (x_0 op (x_1 op (... op x_{n-1}))); integer reductions in any order (they commute bit for bit).
std::vector<uint8_t> allreduce_reference(const std::vector<std::vector<uint8_t>>& in, DType d, RedOp op, size_t count) {
  const int n = static_cast<int>(in.size());
  const size_t eb = trim::coll::dtype_bytes(d);
  std::vector<std::vector<uint8_t>> x = in;
  if (op == RedOp::kAvg) {
    for (auto& v : x) trim::coll::scale_for_avg(v.data(), count, d, n);
  }
  std::vector<uint8_t> out(count * eb);
  const bool gathered = trim::coll::is_float(d) && op != RedOp::kSum && op != RedOp::kAvg;
  if (gathered || !trim::coll::is_float(d)) {
    if (!out.empty()) std::memcpy(out.data(), x[static_cast<size_t>(n - 1)].data(), out.size());
    for (int k = n - 2; k >= 0; --k) trim::coll::reduce_into(out.data(), x[static_cast<size_t>(k)].data(), count, d, op);
  } else {
    const trim::coll::RingGeometry geo(trim::coll::RingKind::kAllReduce, count, eb, n, trim::coll::kSliceBytes,
                                       trim::coll::kSimpleSlicesPerStep);
    for (int loop = 0; loop < geo.loops(); ++loop) {
      for (int seg = 0; seg < n; ++seg) {
        const trim::coll::Segment s = geo.segment(loop, seg);
        std::vector<uint8_t> acc(x[static_cast<size_t>(seg)].begin() + static_cast<long>(s.first * eb),
                                 x[static_cast<size_t>(seg)].begin() + static_cast<long>((s.first + s.elems) * eb));
        for (int j = 1; j < n; ++j) {
          // acc (received) op own: reduce_into(dst=own copy, in=acc).
          std::vector<uint8_t> own(x[static_cast<size_t>((seg + j) % n)].begin() + static_cast<long>(s.first * eb),
                                   x[static_cast<size_t>((seg + j) % n)].begin() +
                                       static_cast<long>((s.first + s.elems) * eb));
          trim::coll::reduce_into(own.data(), acc.data(), s.elems, d, op);
          acc = own;
        }
        if (!acc.empty()) std::memcpy(out.data() + s.first * eb, acc.data(), acc.size());
      }
    }
  }
  if (op == RedOp::kAvg) trim::coll::finish_avg(out.data(), count, d, n);
  return out;
}

std::string what(DType d, RedOp op, size_t count, int n) {
  return std::string(trim::coll::dtype_name(d)) + " " + trim::coll::op_name(op) + " x" + std::to_string(count) +
         " on " + std::to_string(n) + " ranks";
}

void check_all_reduce(Ring& ring, DType d, RedOp op, size_t count, uint64_t salt) {
  const int n = ring.size();
  std::vector<std::vector<uint8_t>> in(static_cast<size_t>(n)), got(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) in[static_cast<size_t>(r)] = got[static_cast<size_t>(r)] = input(d, count, r, salt);
  ring.each([&](int r, trim_coll_comm* c) {
    const int rc = trim_coll_all_reduce(c, got[static_cast<size_t>(r)].data(), count, static_cast<int>(d),
                                        static_cast<int>(op), kTimeoutMs);
    EXPECT_EQ(rc, TRIM_COLL_OK) << trim_coll_last_error();
  });
  const std::vector<uint8_t> want = allreduce_reference(in, d, op, count);
  for (int r = 0; r < n; ++r) {
    ASSERT_TRUE(got[static_cast<size_t>(r)] == want) << what(d, op, count, n) << ": rank " << r << " differs";
  }
}

TEST(Coll, AllReduceEveryDtypeAndOpBitExactInRingOrder) {
  EnvGuard ifname("NCCL_TRIM_IFNAME", "lo");
  for (int n : {2, 3}) {
    Ring ring(n);
    uint64_t salt = 1;
    for (int d = 0; d < trim::coll::kNumDTypes; ++d) {
      for (int op = 0; op < trim::coll::kNumRedOps; ++op) {
        // Odd counts: slices rounded to 16 elements leave short and empty ones.
        for (size_t count : {size_t{1}, size_t{1001}}) {
          check_all_reduce(ring, static_cast<DType>(d), static_cast<RedOp>(op), count, ++salt);
        }
      }
    }
  }
}

// Receives posted before the op's descriptor check go through a slot and are reduced by the
// caller afterwards. Only the first may be: a 4-rank 4 MiB AllReduce used to post eight there,
// two thirds of its receives, and paid an extra pass over each (issue 39).
TEST(Coll, OnlyTheFirstReceiveIsStagedBeforeTheDescriptorCheck) {
  EnvGuard ifname("NCCL_TRIM_IFNAME", "lo");
  Ring ring(3);
  for (int call = 0; call < 3; ++call) {
    const uint64_t before = trim::coll::testing::combined_recvs();
    // One loop: 3 segments of 1 MiB, 2 slices each; 4 reduce-scatter receives per rank, all among
    // the first 8 a rank posts.
    check_all_reduce(ring, DType::kF32, RedOp::kSum, (size_t{3} << 20) / 4, 20 + static_cast<uint64_t>(call));
    EXPECT_GE(trim::coll::testing::combined_recvs() - before, 3u * 3u) << "call " << call;
  }
}

TEST(Coll, LargeFloatSumSpansLoopsBitExact) {
  EnvGuard ifname("NCCL_TRIM_IFNAME", "lo");
  Ring ring(4);
  // 3 MiB + 5 floats: several loops of 4 x 2 x 1 MiB, a short last loop with uneven segments.
  check_all_reduce(ring, DType::kF32, RedOp::kSum, (size_t{3} << 20) / 4 * 4 + 5, 99);
  check_all_reduce(ring, DType::kBF16, RedOp::kSum, (size_t{5} << 20) + 3, 100);
}

// Reduce-scatter receives are combined by the plugin (ncclTrimIrecvCombine) when it offers that,
// and staged and reduced here when it does not: the same bits either way.
TEST(Coll, ReduceScatterCombinesOnReceiptOrFallsBack) {
  EnvGuard ifname("NCCL_TRIM_IFNAME", "lo");
  for (bool disabled : {false, true}) {
    trim::coll::testing::set_combine_disabled(disabled);
    const uint64_t before = trim::coll::testing::combined_recvs();
    {
      Ring ring(3);
      // Two loops (one is 3 segments x 2 slices x 1 MiB): only a receive posted before the op's
      // descriptor check completes is staged (never combined into the caller's memory before it).
      check_all_reduce(ring, DType::kF32, RedOp::kSum, (size_t{6} << 20) / 4 + 300001, 5);
      check_all_reduce(ring, DType::kBF16, RedOp::kMax, 1001, 6);
      check_all_reduce(ring, DType::kI64, RedOp::kProd, 777, 7);
      check_all_reduce(ring, DType::kF16, RedOp::kAvg, 1001, 8);
    }
    const uint64_t used = trim::coll::testing::combined_recvs() - before;
    if (disabled) {
      EXPECT_EQ(used, 0u);
    } else {
      EXPECT_GT(used, 0u);  // the f32 op's second loop, at least
    }
  }
  trim::coll::testing::set_combine_disabled(false);  // the default
}

TEST(Coll, ReduceScatterAndAllGatherInRankBlocks) {
  EnvGuard ifname("NCCL_TRIM_IFNAME", "lo");
  for (int n : {2, 3, 4}) {
    Ring ring(n);
    for (size_t per : {size_t{0}, size_t{1}, size_t{777}, size_t{300000}}) {
      // ReduceScatter: rank r gets block r reduced along its chain, which starts at rank r+1:
      // ((x_{r+1} + x_{r+2}) + ...) + x_r.
      std::vector<std::vector<uint8_t>> in(static_cast<size_t>(n)), out(static_cast<size_t>(n));
      for (int r = 0; r < n; ++r) {
        in[static_cast<size_t>(r)] = input(DType::kF32, per * static_cast<size_t>(n), r, per + 5);
        out[static_cast<size_t>(r)].assign(per * 4, 0xee);
      }
      const std::vector<std::vector<uint8_t>> before = in;
      ring.each([&](int r, trim_coll_comm* c) {
        EXPECT_EQ(trim_coll_reduce_scatter(c, in[static_cast<size_t>(r)].data(), out[static_cast<size_t>(r)].data(),
                                           per, static_cast<int>(DType::kF32), TRIM_COLL_SUM, kTimeoutMs),
                  TRIM_COLL_OK)
            << trim_coll_last_error();
      });
      for (int r = 0; r < n; ++r) {
        ASSERT_TRUE(in[static_cast<size_t>(r)] == before[static_cast<size_t>(r)]) << "the input was written";
        std::vector<uint8_t> acc(in[static_cast<size_t>((r + 1) % n)].begin() + static_cast<long>(r * per * 4),
                                 in[static_cast<size_t>((r + 1) % n)].begin() + static_cast<long>((r + 1) * per * 4));
        for (int j = 2; j <= n; ++j) {
          std::vector<uint8_t> own(in[static_cast<size_t>((r + j) % n)].begin() + static_cast<long>(r * per * 4),
                                   in[static_cast<size_t>((r + j) % n)].begin() + static_cast<long>((r + 1) * per * 4));
          trim::coll::reduce_into(own.data(), acc.data(), per, DType::kF32, RedOp::kSum);
          acc = own;
        }
        ASSERT_TRUE(out[static_cast<size_t>(r)] == acc) << "reduce_scatter, rank " << r << ", " << per << " per rank";
      }
      // AllGather of odd byte counts: every rank ends with every rank's bytes in rank order.
      const size_t bytes = per * 3 + 1;
      std::vector<std::vector<uint8_t>> mine(static_cast<size_t>(n)), all(static_cast<size_t>(n));
      for (int r = 0; r < n; ++r) {
        mine[static_cast<size_t>(r)] = input(DType::kU8, bytes, r, bytes);
        all[static_cast<size_t>(r)].assign(bytes * static_cast<size_t>(n), 0);
      }
      ring.each([&](int r, trim_coll_comm* c) {
        EXPECT_EQ(trim_coll_all_gather(c, mine[static_cast<size_t>(r)].data(), all[static_cast<size_t>(r)].data(),
                                       bytes, kTimeoutMs),
                  TRIM_COLL_OK)
            << trim_coll_last_error();
      });
      for (int r = 0; r < n; ++r) {
        for (int k = 0; k < n; ++k) {
          ASSERT_EQ(0, std::memcmp(all[static_cast<size_t>(r)].data() + static_cast<size_t>(k) * bytes,
                                   mine[static_cast<size_t>(k)].data(), bytes))
              << "all_gather: rank " << r << "'s block " << k;
        }
      }
    }
  }
}

TEST(Coll, BroadcastFromEveryRootAndBarrier) {
  EnvGuard ifname("NCCL_TRIM_IFNAME", "lo");
  const int n = 3;
  Ring ring(n);
  for (int root = 0; root < n; ++root) {
    for (size_t bytes : {size_t{0}, size_t{5}, (size_t{2} << 20) + 7}) {
      const std::vector<uint8_t> payload = input(DType::kU8, bytes, root, bytes + 11);
      std::vector<std::vector<uint8_t>> buf(static_cast<size_t>(n), std::vector<uint8_t>(bytes, 0x5a));
      buf[static_cast<size_t>(root)] = payload;
      ring.each([&](int r, trim_coll_comm* c) {
        EXPECT_EQ(trim_coll_broadcast(c, buf[static_cast<size_t>(r)].data(), bytes, root, kTimeoutMs), TRIM_COLL_OK)
            << trim_coll_last_error();
      });
      for (int r = 0; r < n; ++r) {
        ASSERT_TRUE(buf[static_cast<size_t>(r)] == payload) << "root " << root << ", rank " << r << ", " << bytes;
      }
    }
  }
  // A barrier returns on no rank before the last one entered it.
  std::atomic<int> entered{0};
  std::atomic<bool> early{false};
  ring.each([&](int r, trim_coll_comm* c) {
    if (r == 1) std::this_thread::sleep_for(std::chrono::milliseconds(200));
    entered.fetch_add(1);
    EXPECT_EQ(trim_coll_barrier(c, kTimeoutMs), TRIM_COLL_OK) << trim_coll_last_error();
    if (entered.load() != n) early = true;
  });
  EXPECT_FALSE(early.load()) << "a rank left the barrier before every rank entered it";
}

TEST(Coll, OneRankIsLocal) {
  trim_coll_config cfg{};
  cfg.abi_version = TRIM_COLL_ABI_VERSION;
  const std::string plugin = trim::testing::plugin_path();
  cfg.plugin_path = plugin.c_str();
  cfg.nranks = 1;
  cfg.traffic_class = -1;
  trim_coll_comm* c = nullptr;
  char h[TRIM_COLL_HANDLE_BYTES];
  ASSERT_EQ(trim_coll_create(&cfg, &c, h), TRIM_COLL_OK) << trim_coll_last_error();
  ASSERT_EQ(trim_coll_connect(c, nullptr, 1000), TRIM_COLL_OK) << trim_coll_last_error();
  std::vector<int32_t> v = {7, -3, 5};
  ASSERT_EQ(trim_coll_all_reduce(c, v.data(), 3, TRIM_COLL_INT32, TRIM_COLL_AVG, 1000), TRIM_COLL_OK);
  EXPECT_EQ(v, (std::vector<int32_t>{7, -3, 5}));
  std::vector<int32_t> out(3);
  ASSERT_EQ(trim_coll_reduce_scatter(c, v.data(), out.data(), 3, TRIM_COLL_INT32, TRIM_COLL_SUM, 1000), TRIM_COLL_OK);
  EXPECT_EQ(out, v);
  ASSERT_EQ(trim_coll_all_gather(c, v.data(), out.data(), 12, 1000), TRIM_COLL_OK);
  EXPECT_EQ(out, v);
  EXPECT_EQ(trim_coll_broadcast(c, v.data(), 12, 0, 1000), TRIM_COLL_OK);
  EXPECT_EQ(trim_coll_barrier(c, 1000), TRIM_COLL_OK);
  EXPECT_EQ(trim_coll_destroy(c), TRIM_COLL_OK);
}

TEST(Coll, DisagreeingSizesFailClearlyOnEveryRankInsteadOfHanging) {
  EnvGuard ifname("NCCL_TRIM_IFNAME", "lo");
  const int n = 3;
  Ring ring(n);
  std::vector<int> rcs(static_cast<size_t>(n));
  std::vector<std::string> errors(static_cast<size_t>(n));
  const auto t0 = std::chrono::steady_clock::now();
  ring.each([&](int r, trim_coll_comm* c) {
    // Rank 1 passes 1024 elements where the others pass 1000.
    std::vector<float> v(r == 1 ? 1024 : 1000, 1.0f);
    rcs[static_cast<size_t>(r)] = trim_coll_all_reduce(c, v.data(), v.size(), TRIM_COLL_FLOAT32, TRIM_COLL_SUM, kTimeoutMs);
    errors[static_cast<size_t>(r)] = trim_coll_last_error();
  });
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(s, 10.0) << "the mismatch took " << s << " s to surface";
  // Ranks 1 and 2 each hear a descriptor that differs from their own (rank 0's, rank 1's). The
  // first to check it fails the mismatch and closes its connections; the other may then fail on
  // the closed connection before it checks. Nothing else can fail first, so at least one of them
  // reports the mismatch, naming both sizes, and every rank fails.
  int mismatches = 0;
  for (int r : {1, 2}) {
    if (rcs[static_cast<size_t>(r)] != TRIM_COLL_EMISMATCH) continue;
    ++mismatches;
    EXPECT_NE(errors[static_cast<size_t>(r)].find("1000 float32"), std::string::npos) << errors[static_cast<size_t>(r)];
    EXPECT_NE(errors[static_cast<size_t>(r)].find("1024 float32"), std::string::npos) << errors[static_cast<size_t>(r)];
  }
  EXPECT_GE(mismatches, 1) << errors[1] << "\n" << errors[2];
  for (int r = 0; r < n; ++r) EXPECT_NE(rcs[static_cast<size_t>(r)], TRIM_COLL_OK) << "rank " << r;
  // The communicators are failed for good, with the first error, and a refused call leaves the
  // caller's data alone (AVG would premultiply it).
  ring.each([&](int, trim_coll_comm* c) {
    float x = 1;
    EXPECT_EQ(trim_coll_all_reduce(c, &x, 1, TRIM_COLL_FLOAT32, TRIM_COLL_AVG, 1000), TRIM_COLL_EFAILED);
    EXPECT_NE(std::string(trim_coll_last_error()).find("failed earlier"), std::string::npos) << trim_coll_last_error();
    EXPECT_EQ(x, 1.0f);
  });
}

TEST(Coll, AbortEndsAWaitingCollectiveAndTheDeadlineAnother) {
  EnvGuard ifname("NCCL_TRIM_IFNAME", "lo");
  {
    Ring ring(2);
    // Only rank 0 calls; another thread aborts it after 200 ms.
    std::thread aborter([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      EXPECT_EQ(trim_coll_abort(ring.comm(0)), TRIM_COLL_OK);
    });
    std::vector<float> v(1 << 16, 1.0f);
    const auto t0 = std::chrono::steady_clock::now();
    EXPECT_EQ(trim_coll_all_reduce(ring.comm(0), v.data(), v.size(), TRIM_COLL_FLOAT32, TRIM_COLL_SUM, kTimeoutMs),
              TRIM_COLL_EABORTED)
        << trim_coll_last_error();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    aborter.join();
    EXPECT_LT(s, 2.0) << "abort took " << s << " s";
  }
  {
    Ring ring(2);
    std::vector<float> v(1000, 1.0f);
    const auto t0 = std::chrono::steady_clock::now();
    EXPECT_EQ(trim_coll_all_reduce(ring.comm(1), v.data(), v.size(), TRIM_COLL_FLOAT32, TRIM_COLL_SUM, 300),
              TRIM_COLL_ETIMEOUT)
        << trim_coll_last_error();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_GT(s, 0.25);
    EXPECT_LT(s, 3.0);
    EXPECT_NE(std::string(trim_coll_last_error()).find("deadline"), std::string::npos) << trim_coll_last_error();
  }
}

// Every ncclNetPlugin_vN an NCCL may load, from 2.19's v8 to 2.30's v12 (which 2.30 probes
// first; 0 picks it too): a float SUM that spans several slices and an odd integer MAX, each bit
// exact, and a table the library does not export is refused by name.
TEST(Coll, EveryNetApiVersionIsBitExact) {
  EnvGuard ifname("NCCL_TRIM_IFNAME", "lo");
  for (int api : {8, 9, 10, 11, 12, 0}) {
    SCOPED_TRACE("net_api " + std::to_string(api));
    RingOpts o;
    o.net_api = api;
    o.comm_id = 100 + static_cast<uint64_t>(api);
    Ring ring(3, o);
    check_all_reduce(ring, DType::kF32, RedOp::kSum, 300001, 40 + static_cast<uint64_t>(api));
    check_all_reduce(ring, DType::kI32, RedOp::kMax, 1001, 60 + static_cast<uint64_t>(api));
  }
  for (int api : {7, 13}) {
    trim_coll_config cfg{};
    cfg.abi_version = TRIM_COLL_ABI_VERSION;
    const std::string plugin = trim::testing::plugin_path();
    cfg.plugin_path = plugin.c_str();
    cfg.nranks = 2;
    cfg.traffic_class = -1;
    cfg.net_api = api;
    trim_coll_comm* c = nullptr;
    char h[TRIM_COLL_HANDLE_BYTES];
    EXPECT_EQ(trim_coll_create(&cfg, &c, h), TRIM_COLL_EINVAL) << api;
    EXPECT_NE(std::string(trim_coll_last_error()).find("net_api " + std::to_string(api)), std::string::npos)
        << trim_coll_last_error();
    EXPECT_EQ(c, nullptr);
  }
}

TEST(Coll, BadArgumentsAreRefusedBeforeAnythingIsSent) {
  EnvGuard ifname("NCCL_TRIM_IFNAME", "lo");
  Ring ring(2);
  float x = 1;
  EXPECT_EQ(trim_coll_all_reduce(ring.comm(0), &x, 1, 42, TRIM_COLL_SUM, 1000), TRIM_COLL_EINVAL);
  EXPECT_NE(std::string(trim_coll_last_error()).find("dtype 42"), std::string::npos) << trim_coll_last_error();
  EXPECT_EQ(trim_coll_all_reduce(ring.comm(0), &x, 1, TRIM_COLL_FLOAT32, 9, 1000), TRIM_COLL_EINVAL);
  EXPECT_EQ(trim_coll_all_reduce(ring.comm(0), nullptr, 1, TRIM_COLL_FLOAT32, TRIM_COLL_SUM, 1000), TRIM_COLL_EINVAL);
  EXPECT_EQ(trim_coll_broadcast(ring.comm(0), &x, 4, 2, 1000), TRIM_COLL_EINVAL);
  EXPECT_NE(std::string(trim_coll_last_error()).find("root 2"), std::string::npos) << trim_coll_last_error();
  std::vector<float> in(4), out(2);
  EXPECT_EQ(trim_coll_reduce_scatter(ring.comm(0), in.data(), in.data() + 1, 2, TRIM_COLL_FLOAT32, TRIM_COLL_SUM, 1000),
            TRIM_COLL_EINVAL);
  EXPECT_EQ(trim_coll_all_reduce(nullptr, &x, 1, TRIM_COLL_FLOAT32, TRIM_COLL_SUM, 1000), TRIM_COLL_EINVAL);
  // Refusals leave the communicators usable.
  check_all_reduce(ring, DType::kF32, RedOp::kSum, 100, 3);

  trim_coll_config cfg{};
  cfg.abi_version = TRIM_COLL_ABI_VERSION + 1;
  trim_coll_comm* c = nullptr;
  char h[TRIM_COLL_HANDLE_BYTES];
  EXPECT_EQ(trim_coll_create(&cfg, &c, h), TRIM_COLL_EINVAL);
  EXPECT_NE(std::string(trim_coll_last_error()).find("ABI"), std::string::npos) << trim_coll_last_error();
  cfg.abi_version = TRIM_COLL_ABI_VERSION;
  cfg.plugin_path = "/nonexistent/libnccl-net-trim.so";
  cfg.nranks = 2;
  EXPECT_EQ(trim_coll_create(&cfg, &c, h), TRIM_COLL_EPLUGIN);
  EXPECT_NE(std::string(trim_coll_last_error()).find("/nonexistent/libnccl-net-trim.so"), std::string::npos)
      << trim_coll_last_error();
  EXPECT_EQ(c, nullptr);
}

// Issue 39 item 4: the ring's caller blocks in ncclTrimWaitRequests until a request completes
// (instead of sleep-polling test()), stays bit exact, and still ends promptly on abort; without
// the extension (a plugin that lacks it) it sleep-polls as before, just as exact.
TEST(Coll, TheRingBlocksOnCompletionsOrSleepsWithoutTheExtension) {
  EnvGuard ifname("NCCL_TRIM_IFNAME", "lo");
  struct WaitOff {
    WaitOff() { trim::coll::testing::set_wait_disabled(true); }
    ~WaitOff() { trim::coll::testing::set_wait_disabled(false); }
  };
  {
    Ring ring(3);
    const uint64_t w0 = trim::coll::testing::waits();
    check_all_reduce(ring, DType::kF32, RedOp::kSum, 3000001, 11);
    EXPECT_GT(trim::coll::testing::waits(), w0) << "the ring never blocked on a completion";
    WaitOff off;
    const uint64_t w1 = trim::coll::testing::waits();
    check_all_reduce(ring, DType::kF32, RedOp::kSum, 3000001, 12);
    check_all_reduce(ring, DType::kI64, RedOp::kMax, 1001, 13);
    EXPECT_EQ(trim::coll::testing::waits(), w1);
  }
  Ring ring(2);
  const uint64_t w0 = trim::coll::testing::waits();
  std::atomic<int64_t> aborted_ns{0};
  std::thread aborter([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    aborted_ns.store(trim::coll::mono_ns());
    EXPECT_EQ(trim_coll_abort(ring.comm(0)), TRIM_COLL_OK);
  });
  std::vector<float> v(1 << 16, 1.0f);
  EXPECT_EQ(trim_coll_all_reduce(ring.comm(0), v.data(), v.size(), TRIM_COLL_FLOAT32, TRIM_COLL_SUM, kTimeoutMs),
            TRIM_COLL_EABORTED)
      << trim_coll_last_error();
  const int64_t late_ns = trim::coll::mono_ns() - aborted_ns.load();
  aborter.join();
  EXPECT_GT(trim::coll::testing::waits(), w0) << "the lone rank never blocked in a wait";
  EXPECT_LT(late_ns, 100'000'000) << "the abort was seen " << late_ns / 1000000 << " ms late";
}

}  // namespace
