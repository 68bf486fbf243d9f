// The classifier: every combination of what NCCL says (profiler chain, setNetAttr, nothing),
// what the user declared, the phase rule, the size and the ring position, against a spec
// written out independently below. And the ring phase split itself.
#include <gtest/gtest.h>

#include <vector>

#include "transport/classify.h"

namespace trim::transport {
namespace {

TEST(RingPhase, FirstHalfOfEveryLoopIsReduceScatter) {
  for (int n = 2; n <= 9; ++n) {
    const int per_loop = 2 * (n - 1) * kTransfersPerRingStep;
    for (int loops : {1, 3}) {
      std::vector<Phase> got;
      for (int s = 0; s < per_loop * loops; ++s) got.push_back(ring_allreduce_phase(n, per_loop * loops, s));
      for (int l = 0; l < loops; ++l) {
        for (int k = 0; k < per_loop; ++k) {
          // n-1 ring steps of partial sums, then n-1 of final values; each ring step is 2 sends.
          const Phase want = k < (n - 1) * kTransfersPerRingStep ? Phase::kReduceScatter : Phase::kAllgather;
          EXPECT_EQ(got[static_cast<size_t>(l * per_loop + k)], want) << "n=" << n << " loop " << l << " send " << k;
        }
      }
    }
  }
  // Numbers that do not fit the schedule give no phase (the send stays exact).
  EXPECT_EQ(ring_allreduce_phase(4, 35, 3), Phase::kNone);   // not whole loops
  EXPECT_EQ(ring_allreduce_phase(4, 12, 12), Phase::kNone);  // past the op
  EXPECT_EQ(ring_allreduce_phase(4, 12, -1), Phase::kNone);
  EXPECT_EQ(ring_allreduce_phase(1, 4, 0), Phase::kNone);    // one rank: no ring
  EXPECT_EQ(ring_allreduce_phase(4, 0, 0), Phase::kNone);
}

enum class Source { kProfiler, kAttrOnly, kNothing };
enum class Position { kReduceScatter, kAllgather, kInconsistent };

constexpr int kRanks = 4;
constexpr int kLoopSends = 2 * (kRanks - 1) * kTransfersPerRingStep;  // 12

net::OpInfo profiler_info(net::Func f, net::Proto p, net::Algo a, net::DataType d, Position pos) {
  net::OpInfo i;
  i.func = f;
  i.proto = p;
  i.algo = a;
  i.dtype = d;
  i.n_ranks = kRanks;
  i.op_steps = pos == Position::kInconsistent ? 3 * kLoopSends - 1 : 3 * kLoopSends;
  i.step = pos == Position::kAllgather ? kLoopSends + 8 : kLoopSends + 1;  // ring step 4 (final values) or 0
  return i;
}

bool is_float16_or_32(net::DataType d) {
  return d == net::DataType::kF32 || d == net::DataType::kBF16 || d == net::DataType::kF16;
}

// The rule, stated once more from the issue text rather than from classify.cc.
bool spec(Source src, net::Func f, net::Proto p, net::Algo a, net::DataType pd, codec::DType declared, Position pos,
          PhaseRule rule, uint64_t bytes, bool force) {
  // NCCL said nothing (v8-v10, or v11 before any setNetAttr): never, unless forced.
  if (src == Source::kNothing || (src == Source::kAttrOnly && f == net::Func::kUnknown)) {
    if (!force) return false;
    f = net::Func::kAllReduce;
    p = net::Proto::kSimple;
    a = net::Algo::kUnknown;
  }
  if (f != net::Func::kAllReduce && f != net::Func::kReduceScatter) return false;
  if (p != net::Proto::kSimple) return false;
  const bool profiler = src == Source::kProfiler;
  if (profiler && pd != net::DataType::kUnknown) {
    if (!is_float16_or_32(pd)) return false;  // NCCL said integer / fp64 / fp8: exact, whatever was declared
  } else if (declared == codec::DType::kRaw) {
    return false;
  }
  if (bytes < 65536) return false;
  if (rule == PhaseRule::kAll || f == net::Func::kReduceScatter) return true;
  // Reduce-scatter rule on AllReduce: only a known ring position in the first half.
  return profiler && a == net::Algo::kRing && pos == Position::kReduceScatter;
}

TEST(Classify, TableOfEveryCombination) {
  const net::Func funcs[] = {net::Func::kUnknown, net::Func::kBroadcast, net::Func::kReduce, net::Func::kAllGather,
                             net::Func::kReduceScatter, net::Func::kAllReduce, net::Func::kP2p};
  const net::Proto protos[] = {net::Proto::kUnknown, net::Proto::kLL, net::Proto::kLL128, net::Proto::kSimple};
  const net::Algo algos[] = {net::Algo::kRing, net::Algo::kTree};
  const net::DataType pdtypes[] = {net::DataType::kUnknown, net::DataType::kF32, net::DataType::kBF16,
                                   net::DataType::kF16,     net::DataType::kF64, net::DataType::kInteger,
                                   net::DataType::kF8};
  const codec::DType declared[] = {codec::DType::kRaw, codec::DType::kF32};
  const Position positions[] = {Position::kReduceScatter, Position::kAllgather, Position::kInconsistent};
  const PhaseRule rules[] = {PhaseRule::kReduceScatter, PhaseRule::kAll};
  const uint64_t sizes[] = {65535, 65536};
  int cases = 0, trimmable = 0;
  for (Source src : {Source::kProfiler, Source::kAttrOnly, Source::kNothing})
    for (auto f : funcs)
      for (auto p : protos)
        for (auto a : algos)
          for (auto pd : pdtypes)
            for (auto d : declared)
              for (auto pos : positions)
                for (auto rule : rules)
                  for (auto b : sizes)
                    for (bool force : {false, true}) {
                      // Dimensions a source does not have are not enumerated twice.
                      if (src != Source::kProfiler && (pd != net::DataType::kUnknown || pos != Position::kReduceScatter)) continue;
                      if (src == Source::kNothing && (f != net::Func::kUnknown || p != net::Proto::kUnknown || a != net::Algo::kRing)) continue;
                      ClassifyInput in;
                      net::OpInfo info = profiler_info(f, p, a, pd, pos);
                      if (src == Source::kProfiler) in.info = &info;
                      if (src == Source::kAttrOnly) in.attr = net::OpAttr{f, a, p};
                      in.declared = d;
                      in.scheme = codec::Scheme::kRht;
                      in.bytes = b;
                      in.min_bytes = 65536;
                      in.phase = rule;
                      in.force = force;
                      const ClassifyResult r = classify(in);
                      const bool want = spec(src, f, p, a, pd, d, pos, rule, b, force);
                      ASSERT_EQ(r.trimmable, want)
                          << "source " << static_cast<int>(src) << " func " << static_cast<int>(f) << " proto "
                          << static_cast<int>(p) << " algo " << static_cast<int>(a) << " pdtype "
                          << static_cast<int>(pd) << " declared " << static_cast<int>(d) << " pos "
                          << static_cast<int>(pos) << " rule " << static_cast<int>(rule) << " bytes " << b
                          << " force " << force << ": " << exact_reason_name(r.reason);
                      EXPECT_EQ(r.reason == ExactReason::kTrimmable, want);
                      if (want) {
                        EXPECT_NE(r.dtype, codec::DType::kRaw);
                        EXPECT_EQ(r.source, src == Source::kProfiler && pd != net::DataType::kUnknown
                                                ? DtypeSource::kProfiler
                                                : DtypeSource::kDeclared);
                      } else {
                        EXPECT_EQ(r.dtype, codec::DType::kRaw);
                      }
                      ++cases;
                      trimmable += want;
                    }
  EXPECT_EQ(cases, 19728);  // profiler 18816 + setNetAttr only 896 + nothing 16
  EXPECT_GT(trimmable, 100);
}

TEST(Classify, ReasonsNameTheFirstObstacle) {
  ClassifyInput in;
  net::OpInfo info = profiler_info(net::Func::kAllReduce, net::Proto::kSimple, net::Algo::kRing,
                                   net::DataType::kInteger, Position::kReduceScatter);
  in.info = &info;
  in.scheme = codec::Scheme::kRht;
  in.bytes = 1 << 20;
  in.min_bytes = 65536;
  in.declared = codec::DType::kF32;  // the user's declaration loses to what NCCL says
  EXPECT_EQ(classify(in).reason, ExactReason::kNotFloat);
  info.dtype = net::DataType::kF32;
  EXPECT_TRUE(classify(in).trimmable);
  EXPECT_EQ(classify(in).phase, Phase::kReduceScatter);
  info = profiler_info(net::Func::kAllReduce, net::Proto::kSimple, net::Algo::kRing, net::DataType::kF32,
                       Position::kAllgather);
  EXPECT_EQ(classify(in).reason, ExactReason::kAllgatherPhase);
  in.phase = PhaseRule::kAll;
  EXPECT_TRUE(classify(in).trimmable);
  EXPECT_EQ(classify(in).phase, Phase::kAllgather);
  in.phase = PhaseRule::kReduceScatter;
  info.op_steps = 35;
  EXPECT_EQ(classify(in).reason, ExactReason::kPhaseUnknown);
  info.proto = net::Proto::kLL;
  EXPECT_EQ(classify(in).reason, ExactReason::kNotSimple);
  in.scheme = codec::Scheme::kNone;
  info.proto = net::Proto::kSimple;
  info.op_steps = 36;
  info.step = 13;
  EXPECT_EQ(classify(in).reason, ExactReason::kNoScheme);
}

}  // namespace
}  // namespace trim::transport
