// The codec worker pool (transport/codec_pool.h): trimmable messages encoded and decoded on
// worker threads, a chunk of rows per task, must produce exactly what the progress engine's own
// encoder and decoder produce — byte for byte, in any arrival order, trimmed or not — and every
// task must end, whoever runs it.
#include <gtest/gtest.h>
#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "codec/combine.h"
#include "codec/packet.h"
#include "tests/codec_util.h"
#include "tests/stalled_workers.h"
#include "transport/codec_pool.h"
#include "transport/recv_proto.h"
#include "transport/send_proto.h"
#include "tests/proto_util.h"

namespace trim::transport {
namespace {

using testing::ack_upto;
using testing::Capture;

ConnParams params(codec::Scheme scheme, CodecPool* pool) {
  ConnParams p;
  p.codec.scheme = scheme;
  p.codec.seed = 0x5eed;
  p.cookie = testing::kTestCookie;
  p.dst_ip4_be = 0x0100007f;
  p.dst_port = 9;
  p.window_max = 1023;
  p.min_rto_ns = 1'000'000'000;  // no timer fires in these tests
  p.pool = pool;
  return p;
}

using Clock = std::chrono::steady_clock;

// Every packet of one trimmable message as the sender emits it (acknowledging as it goes).
std::vector<std::vector<uint8_t>> send_all(const ConnParams& p, codec::DType dtype, const std::vector<uint8_t>& msg) {
  SendProto s(p);
  SendOp op;
  op.data = msg.data();
  op.bytes = msg.size();
  op.trimmable = true;
  op.dtype = dtype;
  EXPECT_TRUE(s.post(&op).is_ok());
  s.on_cts(0, msg.size());
  Capture tx;
  uint32_t sent = 0;
  const auto deadline = Clock::now() + std::chrono::seconds(20);
  while (op.result.pending() && Clock::now() < deadline) {
    const uint32_t n = s.poll_tx(0, 1000, &tx);
    sent += n;
    if (n == 0) std::this_thread::sleep_for(std::chrono::microseconds(50));  // pool tasks running
    s.on_ack(ack_upto(sent), 10);
  }
  EXPECT_EQ(op.result.state(), OpResult::kDone);
  if (p.pool != nullptr) {
    EXPECT_GT(s.counters().codec_tasks + s.counters().codec_inline, 0u);
  }
  return tx.packets;
}

// The message the receiver rebuilds from `packets` (each cut to `keep[k]` bytes of payload when
// keep[k] >= 0), delivered in the given order; with `own`, a combining receive (RecvOp::combine,
// sum as `type`) into a copy of it instead.
std::vector<uint8_t> receive_all(const ConnParams& p, size_t bytes, const std::vector<std::vector<uint8_t>>& packets,
                                 const std::vector<int64_t>& keep, const std::vector<size_t>& order,
                                 const std::vector<uint8_t>* own = nullptr, codec::RedType type = codec::RedType::kF32) {
  RecvProto r(p);
  std::vector<uint8_t> out(bytes + 64, 0xEE);
  if (own != nullptr) std::copy(own->begin(), own->end(), out.begin());
  RecvOp op;
  op.data = out.data();
  op.capacity = out.size();
  op.combine = own != nullptr;
  op.combine_type = type;
  Capture tx;
  EXPECT_TRUE(r.post(&op, &tx).is_ok());
  bool encoded = false;  // exact messages (scheme none) never use the pool
  for (size_t k : order) {
    codec::ParsedPacket parsed;
    const std::vector<uint8_t>& pkt = packets[k];
    size_t len = pkt.size();
    if (keep[k] >= 0) len = std::min(len, codec::kHeaderBytes + static_cast<size_t>(keep[k]));
    EXPECT_EQ(codec::parse_packet(pkt.data(), len, &parsed), codec::PacketError::kOk);
    encoded = encoded || parsed.hdr.scheme != codec::Scheme::kNone;
    r.on_data(parsed, 0);
  }
  const auto deadline = Clock::now() + std::chrono::seconds(20);
  while (op.result.pending() && Clock::now() < deadline) {
    r.poll_codec();
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  EXPECT_EQ(op.result.state(), OpResult::kDone);
  EXPECT_EQ(r.counters().bad_packets, 0u);
  if (p.pool != nullptr && encoded) {
    EXPECT_GT(r.counters().codec_tasks + r.counters().codec_inline, 0u);
  }
  out.resize(bytes);
  return out;
}

struct Case {
  codec::Scheme scheme;
  codec::DType dtype;
  size_t elems, extra;  // elements of dtype, then raw tail bytes
};

std::vector<Case> cases() {
  return {
      {codec::Scheme::kRht, codec::DType::kF32, 262144, 0},      // 1 MiB: NCCL's ring slice, 8 tasks
      {codec::Scheme::kRht, codec::DType::kF32, 250001, 3},      // odd rows and a raw tail
      {codec::Scheme::kRht, codec::DType::kBF16, 300007, 1},     // 16-bit: two rows a task
      {codec::Scheme::kSign, codec::DType::kF16, 70001, 0},
      {codec::Scheme::kSq, codec::DType::kF32, 40000, 2},
      {codec::Scheme::kRht, codec::DType::kF32, 5, 0},           // one short row
  };
}

TEST(CodecPool, PooledSendsAreByteIdenticalToTheEngineEncoder) {
  CodecPool* pool = CodecPool::instance(3);
  for (const Case& c : cases()) {
    SCOPED_TRACE(::testing::Message() << codec::scheme_name(c.scheme) << " dtype " << static_cast<int>(c.dtype)
                                    << " elems " << c.elems << " +" << c.extra);
    const std::vector<uint8_t> msg = codec::testing::message_bytes(c.dtype, c.elems, c.extra, c.elems, true);
    const auto inline_pkts = send_all(params(c.scheme, nullptr), c.dtype, msg);
    const auto pooled_pkts = send_all(params(c.scheme, pool), c.dtype, msg);
    ASSERT_EQ(inline_pkts.size(), pooled_pkts.size());
    for (size_t k = 0; k < inline_pkts.size(); ++k) ASSERT_EQ(inline_pkts[k], pooled_pkts[k]) << "packet " << k;
  }
}

TEST(CodecPool, PooledReceivesDecodeExactlyAsTheEngineDecoderInAnyOrder) {
  CodecPool* pool = CodecPool::instance(3);
  std::mt19937_64 rng(42);
  for (const Case& c : cases()) {
    SCOPED_TRACE(::testing::Message() << codec::scheme_name(c.scheme) << " elems " << c.elems << " +" << c.extra);
    const std::vector<uint8_t> msg = codec::testing::message_bytes(c.dtype, c.elems, c.extra, c.elems + 1, true);
    const auto pkts = send_all(params(c.scheme, nullptr), c.dtype, msg);
    std::vector<size_t> in_order(pkts.size());
    for (size_t k = 0; k < pkts.size(); ++k) in_order[k] = k;
    std::vector<size_t> shuffled = in_order;
    std::shuffle(shuffled.begin(), shuffled.end(), rng);
    // Untrimmed: the exact original bytes, both ways, in either order.
    const std::vector<int64_t> whole(pkts.size(), -1);
    EXPECT_EQ(receive_all(params(c.scheme, nullptr), msg.size(), pkts, whole, in_order), msg);
    EXPECT_EQ(receive_all(params(c.scheme, pool), msg.size(), pkts, whole, shuffled), msg);
    // A third of the packets trimmed at their trim point: the same estimate, byte for byte.
    std::vector<int64_t> cut(pkts.size(), -1);
    for (size_t k = 0; k < pkts.size(); k += 3) {
      codec::ParsedPacket p;
      ASSERT_EQ(codec::parse_packet(pkts[k].data(), pkts[k].size(), &p), codec::PacketError::kOk);
      if (p.hdr.trimmable()) cut[k] = p.hdr.trim_bytes;
    }
    const std::vector<uint8_t> inline_out = receive_all(params(c.scheme, nullptr), msg.size(), pkts, cut, in_order);
    const std::vector<uint8_t> pooled_out = receive_all(params(c.scheme, pool), msg.size(), pkts, cut, shuffled);
    EXPECT_EQ(inline_out, pooled_out);
    if (c.elems > 1000) {

      EXPECT_NE(pooled_out, msg) << "the trims must have cost something";
    }
  }
}

// A combining receive (RecvProto on the engine, rows combined as soon as they are complete; or
// the pool's tasks) leaves own + the message exactly as a staged receive followed by
// combine_into does, whatever mix of whole and cut packets arrives in whatever order: cuts at
// the trim point and at any length (a row's packets at different levels), rows with no trim at
// all, and the unrotated (sign) rows a quiet rht connection sends before a trim is reported.
TEST(CodecPool, CombiningReceivesEqualStagedThenCombined) {
  CodecPool* pool = CodecPool::instance(3);
  std::mt19937_64 rng(7);
  const std::vector<Case> all = cases();
  for (const Case& c : all) {
    if (c.extra != 0) continue;  // a raw tail cannot combine (check_combine refuses the receive)
    const codec::RedType type = c.dtype == codec::DType::kF32    ? codec::RedType::kF32
                                : c.dtype == codec::DType::kBF16 ? codec::RedType::kBF16
                                                                 : codec::RedType::kF16;
    // 0: encoded; 1: quiet, unrotated (rht); 2: quiet, exact (rht: raw values, never cut here,
    // as a cut one would be asked for again).
    for (int quiet = 0; quiet < 3; ++quiet) {
      SCOPED_TRACE(::testing::Message() << codec::scheme_name(c.scheme) << " elems " << c.elems << " quiet "
                                        << quiet);
      ConnParams send_params = params(c.scheme, nullptr);
      send_params.quiet_ns = quiet > 0 ? 1'000'000'000'000 : 0;  // no trim reported yet: quiet
      send_params.start_quiet = true;
      send_params.quiet_exact = quiet == 2;
      const std::vector<uint8_t> msg = codec::testing::message_bytes(c.dtype, c.elems, 0, c.elems + 3, true);
      const std::vector<uint8_t> own = codec::testing::message_bytes(c.dtype, c.elems, 0, c.elems + 4, false);
      const auto pkts = send_all(send_params, c.dtype, msg);
      std::vector<size_t> order(pkts.size());
      for (size_t k = 0; k < pkts.size(); ++k) order[k] = k;
      std::shuffle(order.begin(), order.end(), rng);
      std::vector<int64_t> keep(pkts.size(), -1);
      size_t sign_rows = 0, exact_rows = 0;
      for (size_t k = 0; k < pkts.size(); ++k) {
        codec::ParsedPacket h;
        ASSERT_EQ(codec::parse_packet(pkts[k].data(), pkts[k].size(), &h), codec::PacketError::kOk);
        sign_rows += h.hdr.scheme == codec::Scheme::kSign && h.hdr.first_elem == 0;
        exact_rows += h.hdr.scheme == codec::Scheme::kNone && !h.hdr.tail() && h.hdr.first_elem == 0;
        const uint64_t die = h.hdr.trimmable() ? rng() % 4 : 3;
        if (die == 0) keep[k] = h.hdr.trim_bytes;  // trimmed
        if (die == 1) keep[k] = static_cast<int64_t>(rng() % (h.hdr.payload_bytes + 1));  // cut anywhere
      }
      const bool exact = c.scheme == codec::Scheme::kRht && quiet == 2;
      if (c.scheme == codec::Scheme::kRht && quiet == 1) {
        EXPECT_GT(sign_rows, 0u) << "no unrotated row was sent";
      }
      EXPECT_EQ(exact_rows > 0, exact) << "exact rows exactly when quiet and exact";
      std::vector<uint8_t> want = own;
      const std::vector<uint8_t> staged = receive_all(params(c.scheme, nullptr), msg.size(), pkts, keep, order);
      if (exact) {
        EXPECT_EQ(staged, msg) << "an exact message arrives bit exact";
      } else if (c.elems > 1000) {
        EXPECT_NE(staged, msg) << "the cuts must have cost something";
      }
      codec::combine_into(want.data(), staged.data(), msg.size() / codec::red_type_bytes(type), type,
                          codec::RedOp::kSum);
      for (CodecPool* with : {static_cast<CodecPool*>(nullptr), pool}) {
        const std::vector<uint8_t> got =
            receive_all(params(c.scheme, with), msg.size(), pkts, keep, order, &own, type);
        EXPECT_TRUE(got == want) << (with != nullptr ? "pool" : "engine");
      }
    }
  }
}

// A typed message's raw tail row says nothing of its layout (scheme none in all of them): arriving
// first, before any other packet of a quiet connection's exact message or of an encoded one, it
// is left unacknowledged for loss recovery to resend, and the message still arrives exact. A
// message of less than one element is its tail alone: taken at once, in either case.
TEST(CodecPool, ATailArrivingFirstWaitsForItsResend) {
  for (const bool quiet : {true, false}) {
    SCOPED_TRACE(quiet ? "quiet, exact" : "encoded");
    ConnParams send_params = params(codec::Scheme::kRht, nullptr);
    send_params.quiet_ns = quiet ? 1'000'000'000'000 : 0;
    send_params.start_quiet = true;
    const std::vector<uint8_t> tiny = codec::testing::message_bytes(codec::DType::kF32, 0, 3, 6, false);
    const auto alone = send_all(send_params, codec::DType::kF32, tiny);
    ASSERT_EQ(alone.size(), 1u);
    EXPECT_EQ(receive_all(params(codec::Scheme::kRht, nullptr), tiny.size(), alone, {-1}, {0}), tiny);
    const std::vector<uint8_t> msg = codec::testing::message_bytes(codec::DType::kF32, 70001, 3, 5, false);
    const auto pkts = send_all(send_params, codec::DType::kF32, msg);
    ASSERT_GE(pkts.size(), 3u);
    codec::ParsedPacket last;
    ASSERT_EQ(codec::parse_packet(pkts.back().data(), pkts.back().size(), &last), codec::PacketError::kOk);
    ASSERT_TRUE(last.hdr.tail());
    std::vector<size_t> order{pkts.size() - 1};  // the tail first, then all, the tail resent
    for (size_t k = 0; k < pkts.size(); ++k) order.push_back(k);
    const std::vector<int64_t> keep(pkts.size(), -1);
    EXPECT_EQ(receive_all(params(codec::Scheme::kRht, nullptr), msg.size(), pkts, keep, order), msg);
  }
}

// Thousands of tasks from two producers at once, more than the queue holds: every task runs
// exactly once (on a worker, or on its producer when the queue is full) and ends. The workers
// are held until both producers are done, so the queue really fills: every task beyond its
// 4096 cells (and the one each stalled worker holds) must have run inline, on its producer.
TEST(CodecPool, EveryTaskRunsOnceUnderLoad) {
  CodecPool* pool = CodecPool::instance(2);
  const codec::CodecConfig cfg = codec::testing::config(codec::Scheme::kSign, 4096, 64);
  const std::vector<uint8_t> msg = codec::testing::message_bytes(codec::DType::kF32, 64 * 4, 0, 9, false);
  Result<codec::Layout> layout = codec::Layout::make(cfg, codec::DType::kF32, codec::Scheme::kSign, msg.size());
  ASSERT_TRUE(layout.is_ok());
  const uint64_t run0 = pool->tasks_run() + pool->tasks_inline();
  const uint64_t inline0 = pool->tasks_inline();
  auto in_flight = std::make_shared<InFlight>(0);
  constexpr int kWorks = 1500;  // 4 tasks each: 6000 > the queue's 4096 cells
  std::vector<std::shared_ptr<CodecWork>> works(kWorks);
  for (auto& w : works) {
    w = std::make_shared<CodecWork>();
    w->cfg = cfg;
    w->layout = *layout;
    w->id = codec::MessageId{1, 2, true};
    w->src = msg.data();
    w->stride = cfg.packet_bytes;
    w->packets.resize(layout->packets() * w->stride);
    w->sizes.assign(layout->packets(), 0);
    w->row_first.resize(layout->rows() + 1);
    for (uint32_t r = 0; r <= layout->rows(); ++r) w->row_first[r] = r * layout->row(0).packets;
    w->reset_tasks(1, layout->rows());
    w->in_flight = in_flight;
  }
  auto produce = [&](int from, int to) {
    trim::testing::StalledWorkers::exempt_this_thread();  // its inline runs must not stall
    for (int i = from; i < to; ++i) {
      for (uint32_t t = 0; t < works[i]->tasks; ++t) pool->submit(works[i], t);
    }
  };
  {
    trim::testing::StalledWorkers stalled;
    std::thread a(produce, 0, kWorks / 2), b(produce, kWorks / 2, kWorks);
    a.join();
    b.join();
  }
  const auto deadline = Clock::now() + std::chrono::seconds(30);
  while (in_flight->load() != 0 && Clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ASSERT_EQ(in_flight->load(), 0u);
  for (const auto& w : works) {
    ASSERT_TRUE(w->all_done());
    EXPECT_EQ(w->first_error(), "");
    EXPECT_EQ(0, std::memcmp(w->packets.data(), works[0]->packets.data(), w->packets.size()));
  }
  const uint64_t total = static_cast<uint64_t>(kWorks) * layout->rows();
  EXPECT_EQ(pool->tasks_run() + pool->tasks_inline() - run0, total);
  constexpr uint64_t kCells = 4096;
  EXPECT_GE(pool->tasks_inline() - inline0, total - kCells - static_cast<uint64_t>(pool->threads()))
      << "a full queue must run the task on its producer";
}

// auto follows the CPUs this process may run on (its affinity mask, as under taskset or a
// container's cpuset), not the machine's: a quarter of them, at most 8. The mask is narrowed
// here (on this thread, which is what sched_getaffinity(0) reads) and restored after.
TEST(CodecPool, AutoThreadsFollowTheAffinityMask) {
  cpu_set_t mask;
  ASSERT_EQ(sched_getaffinity(0, sizeof mask, &mask), 0);
  const int cpus = CPU_COUNT(&mask);
  ASSERT_GT(cpus, 0);
  EXPECT_EQ(CodecPool::auto_threads(), std::min(cpus / 4, 8));
  std::vector<int> allowed;
  for (int c = 0; c < CPU_SETSIZE && static_cast<int>(allowed.size()) < cpus; ++c) {
    if (CPU_ISSET(c, &mask)) allowed.push_back(c);
  }
  // Narrower masks: one CPU (no workers), and where there are enough, 4 and 9 CPUs.
  for (int n : {1, 4, 9}) {
    if (n > cpus) continue;
    cpu_set_t narrow;
    CPU_ZERO(&narrow);
    for (int i = 0; i < n; ++i) CPU_SET(allowed[i], &narrow);
    ASSERT_EQ(sched_setaffinity(0, sizeof narrow, &narrow), 0);
    EXPECT_EQ(CodecPool::auto_threads(), n / 4) << n << " CPUs in the mask";
  }
  ASSERT_EQ(sched_setaffinity(0, sizeof mask, &mask), 0);
  EXPECT_EQ(CodecPool::auto_threads(), std::min(cpus / 4, 8));
}

}  // namespace
}  // namespace trim::transport
