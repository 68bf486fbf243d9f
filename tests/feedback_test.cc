// Error feedback (NCCL_TRIM_ERROR_FEEDBACK, transport/feedback.h): the receiver names the packets
// that arrived cut in its ACKs, and the sender adds what those trims took from a message to the
// next message sent from the same buffer. Driven through the connection state machines alone
// (no sockets, no threads), as tests/proto_test.cc does.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <chrono>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include "codec/packet.h"
#include "transport/codec_pool.h"
#include "transport/recv_proto.h"
#include "transport/send_proto.h"
#include "transport/wire.h"
#include "tests/proto_util.h"

namespace trim::transport {
namespace {

using testing::Capture;

ConnParams feedback_params(codec::Scheme scheme, bool feedback) {
  ConnParams p;
  p.codec.scheme = scheme;
  p.cookie = testing::kTestCookie;
  p.dst_ip4_be = 0x0100007f;
  p.dst_port = 9;
  p.error_feedback = feedback;
  p.min_rto_ns = 1'000'000'000;  // the fake clock never lets a timer fire
  return p;
}

// One connection carrying `steps` fp32 messages, all sent from one buffer, each cut at its trim
// point with probability `trim_p` (the same packets cut whatever `feedback` says, for a given
// seed). Returns the sum of what arrived minus the sum of what was given to send, relative to
// the latter: sum_t out_t - sum_t in_t, in units of |sum_t in_t|^2.
struct StepsRun {
  double sum_nmse = 0;
  double step_nmse = 0;  // mean over the steps of |out_t - in_t|^2 / |in_t|^2
  std::vector<double> nmse;  // per step
  std::vector<std::set<codec::Scheme>> schemes;  // per step: the schemes its packets' rows went as
  ConnCounters sent, received;
};

// `trim_p` per step: the last value repeats. cut_exact: exact packets are cut to their header
// with the same probability (trim-switch's trim_exact_to_header: the receiver asks for them
// again); drop_p: any data packet is lost with this probability (a resend may be lost again).
StepsRun run_steps(const ConnParams& params, int steps, std::vector<double> trim_p, uint32_t seed,
                   bool cut_exact = false, double drop_p = 0.0) {
  SendProto s(params);
  RecvProto r(params);
  Capture stx, rtx;
  constexpr size_t kElems = 3 * 32768 + 1000;  // three full rows and a short one
  std::vector<float> buf(kElems), out(kElems);
  std::vector<double> sum_in(kElems, 0.0), sum_out(kElems, 0.0);
  std::mt19937 g(seed);
  std::normal_distribution<float> normal(0, 1);
  std::mt19937_64 cut(seed * 7919 + 1);
  std::uniform_real_distribution<double> u(0, 1);
  StepsRun result;
  uint64_t now = 0;
  for (int t = 0; t < steps; ++t) {
    const double p_cut = trim_p[std::min<size_t>(static_cast<size_t>(t), trim_p.size() - 1)];
    result.schemes.emplace_back();
    // Gradients that keep a common direction plus noise, as a job's do step to step.
    std::mt19937 base(seed);
    for (size_t i = 0; i < kElems; ++i) buf[i] = normal(base) + 0.5f * normal(g);
    SendOp so;
    RecvOp ro;
    testing::fp32_ops(buf, &out, &so, &ro, static_cast<uint32_t>(t));
    EXPECT_TRUE(r.post(&ro, &rtx).is_ok());
    s.on_cts(static_cast<uint32_t>(t), ro.capacity);
    EXPECT_TRUE(s.post(&so).is_ok());
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while ((s.has_pending() || r.has_pending()) && std::chrono::steady_clock::now() < deadline) {
      s.on_timer(now);
      s.poll_tx(now, 1000, &stx);
      r.poll_codec();
      if (stx.packets.empty()) {
        // Codec pool tasks running: the fake clock waits for them. Else the connection waits on
        // a timer (a lost tail: the probe or the timeout), and the clock moves on.
        if (params.pool != nullptr) std::this_thread::yield();
        else now += 100'000;
        continue;
      }
      now += 100'000;
      for (auto& pkt : stx.packets) {
        codec::ParsedPacket parsed;
        size_t len = pkt.size();
        EXPECT_EQ(codec::parse_packet(pkt.data(), len, &parsed), codec::PacketError::kOk);
        if (!parsed.hdr.tail()) result.schemes.back().insert(parsed.hdr.scheme);
        if (drop_p > 0 && u(cut) < drop_p) continue;
        if ((parsed.hdr.trimmable() || cut_exact) && u(cut) < p_cut) {
          len = codec::kHeaderBytes + parsed.hdr.trim_bytes;
          EXPECT_EQ(codec::parse_packet(pkt.data(), len, &parsed), codec::PacketError::kOk);
        }
        r.on_data(parsed, now);
        if (r.reports_full()) r.flush_ack(&rtx);  // as the engine does
      }
      stx.packets.clear();
      r.flush_ack(&rtx);
      for (const CtrlPacket& a : rtx.ctrls) s.on_ack(a, now + 50'000);
      rtx.ctrls.clear();
    }
    EXPECT_EQ(ro.result.state(), OpResult::kDone);
    EXPECT_EQ(so.result.state(), OpResult::kDone);
    double err = 0, ref = 0;
    for (size_t i = 0; i < kElems; ++i) {
      sum_in[i] += buf[i];
      sum_out[i] += out[i];
      err += static_cast<double>(out[i] - buf[i]) * (out[i] - buf[i]);
      ref += static_cast<double>(buf[i]) * buf[i];
    }
    result.step_nmse += err / ref / steps;
    result.nmse.push_back(err / ref);
  }
  double err = 0, ref = 0;
  for (size_t i = 0; i < kElems; ++i) {
    err += (sum_out[i] - sum_in[i]) * (sum_out[i] - sum_in[i]);
    ref += sum_in[i] * sum_in[i];
  }
  result.sum_nmse = err / ref;
  result.sent = s.counters();
  result.received = r.counters();
  return result;
}

StepsRun run_steps(codec::Scheme scheme, bool feedback, int steps, double trim_p, uint32_t seed) {
  return run_steps(feedback_params(scheme, feedback), steps, {trim_p}, seed);
}

// Without feedback each step's estimate error adds up (|sum of T independent errors|^2 ~ T e);
// with it, what arrived over T steps is what was sent less the last residual (~e): T times
// smaller. T = 16 and the bound at a quarter leave a factor 4 for the spread of one seed.
void expect_feedback_cancels(codec::Scheme scheme) {
  constexpr int kSteps = 16;
  const StepsRun plain = run_steps(scheme, false, kSteps, 0.5, 3);
  const StepsRun fed = run_steps(scheme, true, kSteps, 0.5, 3);
  const char* name = codec::scheme_name(scheme);
  EXPECT_GT(plain.step_nmse, 0.05) << name << ": trims happened and cost accuracy";
  EXPECT_LT(fed.sum_nmse, plain.sum_nmse / 4) << name << ": plain " << plain.sum_nmse << ", fed back " << fed.sum_nmse;
  // A step with feedback delivers its predecessor's residual and leaves its own (|r_t-1 - r_t|^2,
  // about two estimate errors of x + r): worse than one estimate, bounded, not growing.
  EXPECT_LT(fed.step_nmse, 5 * plain.step_nmse) << name;
  // Every cut was reported, in the ACK that acknowledged it, and every message after the first
  // carried its predecessor's residual (half the packets are cut: every message loses some).
  EXPECT_EQ(fed.sent.trims_reported, fed.received.trimmed_accepted) << name;
  EXPECT_EQ(fed.sent.trims_unmatched, 0u) << name;
  EXPECT_EQ(fed.sent.ef_recorded, static_cast<uint64_t>(kSteps)) << name;
  EXPECT_EQ(fed.sent.ef_applied, static_cast<uint64_t>(kSteps - 1)) << name;
  EXPECT_EQ(plain.sent.ef_applied + plain.sent.ef_recorded, 0u) << name;
  EXPECT_EQ(plain.sent.trims_reported, plain.received.trimmed_accepted) << name << ": reports go out regardless";
}

TEST(ErrorFeedback, PerHopRhtLosesNothingOverTheSteps) { expect_feedback_cancels(codec::Scheme::kRht); }

TEST(ErrorFeedback, RotatedLosesNothingOverTheSteps) { expect_feedback_cancels(codec::Scheme::kRotated); }

// Encoded and decoded on a codec pool, the residual rides in the encode work (it must outlive an
// abandoned message's tasks): the same packets cut give the same results as on the engine's thread.
TEST(ErrorFeedback, PooledCodecGivesTheSameResults) {
  ConnParams p = feedback_params(codec::Scheme::kRht, true);
  const StepsRun inline_run = run_steps(p, 6, {0.5}, 13);
  p.pool = CodecPool::instance(2);
  const StepsRun pooled = run_steps(p, 6, {0.5}, 13);
  EXPECT_EQ(pooled.nmse, inline_run.nmse);
  EXPECT_EQ(pooled.sent.ef_applied, 5u);
  EXPECT_GT(pooled.sent.codec_tasks, 0u);
}

TEST(ErrorFeedback, UntrimmedTrafficIsBitExactAndLeavesNoResidual) {
  const StepsRun fed = run_steps(codec::Scheme::kRht, true, 3, 0.0, 5);
  EXPECT_EQ(fed.sum_nmse, 0.0);
  EXPECT_EQ(fed.sent.ef_applied + fed.sent.ef_recorded + fed.sent.trims_reported, 0u);
}

// The receiver merges runs of equal cuts, and says when its list is full, so that the engine
// sends the ACK before another cut packet could go unreported; the sender takes every report.
TEST(ErrorFeedback, ReceiverReportsEveryCutInTheAckThatCoversIt) {
  RecvProto r(feedback_params(codec::Scheme::kRht, true));
  SendProto s(feedback_params(codec::Scheme::kRht, true));
  Capture stx, rtx;
  std::vector<float> in(1 << 18, 1.5f), out(1 << 18);
  SendOp so;
  RecvOp ro;
  testing::fp32_ops(in, &out, &so, &ro);
  ASSERT_TRUE(r.post(&ro, &rtx).is_ok());
  s.on_cts(0, ro.capacity);
  ASSERT_TRUE(s.post(&so).is_ok());
  // The first round's 32 packets arrive whole (slow start doubles the window to 64); then psns
  // 32 and 33 are cut (one run) and every odd psn after them (runs of one): the second round
  // cuts as many runs as an ACK holds.
  uint64_t cut = 0;
  bool early = false;
  for (uint64_t now = 0; !early && s.has_pending(); now += 1000) {
    s.poll_tx(now, 1000, &stx);
    ASSERT_FALSE(stx.packets.empty());
    for (auto& pkt : stx.packets) {
      codec::ParsedPacket p;
      ASSERT_EQ(codec::parse_packet(pkt.data(), pkt.size(), &p), codec::PacketError::kOk);
      const uint32_t psn = p.hdr.psn;
      if (psn >= 32 && (psn < 34 || psn % 2 == 1)) {
        ASSERT_EQ(codec::parse_packet(pkt.data(), codec::kHeaderBytes + p.hdr.trim_bytes, &p), codec::PacketError::kOk);
        ++cut;
      }
      r.on_data(p, now);
      if (r.reports_full()) {
        r.flush_ack(&rtx);
        const CtrlPacket& a = rtx.ctrls.back();
        ASSERT_EQ(a.trim_count, kMaxTrimReports);
        EXPECT_EQ(a.cum_psn, psn + 1) << "the early ACK covers exactly the packets so far";
        EXPECT_EQ(a.trims[kMaxTrimReports - 1].psn, psn);
        early = true;
        break;
      }
    }
    stx.packets.clear();
    r.flush_ack(&rtx);
    for (const CtrlPacket& a : rtx.ctrls) {
      // Through the wire and back.
      uint8_t wire[kCtrlBytes];
      write_ctrl(a, wire);
      CtrlPacket back;
      ASSERT_EQ(parse_ctrl(wire, sizeof wire, &back), CtrlError::kOk);
      s.on_ack(back, now + 500);
    }
    if (!early) rtx.ctrls.clear();
  }
  ASSERT_TRUE(early) << "a round cut more runs than one ACK holds";
  EXPECT_EQ(rtx.ctrls[0].trims[0].psn, 32u);
  EXPECT_EQ(rtx.ctrls[0].trims[0].count, 2u) << "psns 32 and 33 share a report";
  EXPECT_EQ(s.counters().trims_reported, cut);
  EXPECT_EQ(s.counters().trims_unmatched, 0u);
  // The last ACK again (reordered, or duplicated): its packets are acknowledged now, so its
  // reports are counted as too late and change nothing.
  const CtrlPacket& last = rtx.ctrls.back();
  uint64_t named = 0;
  for (uint32_t i = 0; i < last.trim_count; ++i) named += last.trims[i].count;
  const uint64_t before = s.counters().trims_unmatched;
  s.on_ack(last, 1'000'000);
  EXPECT_EQ(s.counters().trims_unmatched - before, named);
}

// NCCL_TRIM_QUIET_MS: a connection that has seen no trim sends rht messages as
// NCCL_TRIM_QUIET_LAYOUT says; the first trim reported turns the rotation back on from the next
// message, and it stays on while trims keep coming. unrotated: sign rows in rht's packets, exact
// when untrimmed, sign estimates when cut.
TEST(QuietConnection, SendsUnrotatedUntilATrimIsReported) {
  ConnParams p = feedback_params(codec::Scheme::kRht, false);
  p.quiet_ns = 3'600'000'000'000ull;  // an hour: no test runs long enough to fall quiet again
  p.start_quiet = true;
  p.quiet_exact = false;
  const StepsRun run = run_steps(p, 4, {0.0, 0.5}, 11);
  using S = std::set<codec::Scheme>;
  EXPECT_EQ(run.schemes[0], S{codec::Scheme::kSign}) << "no trim yet: every row unrotated";
  EXPECT_EQ(run.nmse[0], 0.0) << "untrimmed: the exact bits";
  EXPECT_EQ(run.schemes[1], S{codec::Scheme::kSign}) << "laid out before its own trims were reported";
  EXPECT_GT(run.nmse[1], 0.05) << "its trims cost accuracy: sign estimates";
  EXPECT_EQ(run.schemes[2], S{codec::Scheme::kRht});
  EXPECT_EQ(run.schemes[3], S{codec::Scheme::kRht});
  EXPECT_EQ(run.sent.quiet_messages, 2u);
  // quiet_ns 0 (NCCL_TRIM_QUIET_MS=0, and ConnParams' default): rotated from the first message.
  const StepsRun always = run_steps(feedback_params(codec::Scheme::kRht, false), 2, {0.0}, 11);
  EXPECT_EQ(always.schemes[0], S{codec::Scheme::kRht});
  EXPECT_EQ(always.nmse[0], 0.0);
  EXPECT_EQ(always.sent.quiet_messages, 0u);
}

// NCCL_TRIM_QUIET_LAYOUT=exact (the default): a quiet connection's rht and rotated messages go
// as exact packets, and a cut of one is answered by a resend, so they arrive bit exact however
// the path treats them; the first cut (NACK) or loss reported makes the next message encoded.
TEST(QuietConnection, SendsExactUntilATrimOrLossIsReported) {
  using S = std::set<codec::Scheme>;
  for (const codec::Scheme scheme : {codec::Scheme::kRht, codec::Scheme::kRotated}) {
    SCOPED_TRACE(codec::scheme_name(scheme));
    ConnParams p = feedback_params(scheme, false);
    p.quiet_ns = 3'600'000'000'000ull;
    p.start_quiet = true;
    const StepsRun cut = run_steps(p, 4, {0.0, 0.5}, 11, /*cut_exact=*/true);
    EXPECT_EQ(cut.schemes[0], S{codec::Scheme::kNone}) << "quiet: exact packets";
    EXPECT_EQ(cut.nmse[0], 0.0);
    EXPECT_EQ(cut.schemes[1], S{codec::Scheme::kNone}) << "laid out before its own cuts were reported";
    EXPECT_EQ(cut.nmse[1], 0.0) << "its cut packets were asked for again and resent";
    EXPECT_GT(cut.received.trimmed_nacked, 0u);
    EXPECT_GT(cut.sent.nacks_received, 0u);
    EXPECT_EQ(cut.schemes[2], S{scheme}) << "a cut was reported: encoded again";
    EXPECT_EQ(cut.schemes[3], S{scheme});
    EXPECT_GT(cut.nmse[3], 0.05) << "and its own cuts are estimates, not resent";
    EXPECT_EQ(cut.sent.quiet_messages, 2u);
    // A loss ends the quiet too (a path that drops rather than trims): 5 % of the packets of
    // every message lost, resent by loss recovery, every message exact.
    const StepsRun lost = run_steps(p, 3, {0.0}, 12, false, 0.05);
    EXPECT_EQ(lost.schemes[0], S{codec::Scheme::kNone});
    EXPECT_GT(lost.sent.fast_retransmits + lost.sent.rto_events, 0u);
    for (int t = 0; t < 3; ++t) EXPECT_EQ(lost.nmse[t], 0.0) << "step " << t;
    EXPECT_EQ(lost.schemes[2], S{scheme}) << "losses were reported: encoded again";
  }
}

TEST(WireCtrl, TrimReportsRoundTripAndMalformedOnesAreRejected) {
  CtrlPacket a = testing::ack_upto(500);
  a.trim_count = kMaxTrimReports;
  for (uint32_t i = 0; i < kMaxTrimReports; ++i) a.trims[i] = TrimReport{400 + 3 * i, static_cast<uint16_t>(i + 1), 121};
  uint8_t buf[kCtrlBytes];
  write_ctrl(a, buf);
  CtrlPacket b;
  ASSERT_EQ(parse_ctrl(buf, sizeof buf, &b), CtrlError::kOk);
  ASSERT_EQ(b.trim_count, kMaxTrimReports);
  for (uint32_t i = 0; i < kMaxTrimReports; ++i) {
    EXPECT_EQ(b.trims[i].psn, a.trims[i].psn);
    EXPECT_EQ(b.trims[i].count, a.trims[i].count);
    EXPECT_EQ(b.trims[i].received, 121u);
  }
  auto fix_crc = [](uint8_t* p) {
    const uint32_t c = codec::crc32c(p, kCtrlBytes - 4);
    for (int i = 0; i < 4; ++i) p[kCtrlBytes - 4 + i] = static_cast<uint8_t>(c >> (8 * i));
  };
  uint8_t bad[kCtrlBytes];
  std::memcpy(bad, buf, sizeof bad);
  bad[6] = kMaxTrimReports + 1;  // more reports than the packet holds
  fix_crc(bad);
  EXPECT_EQ(parse_ctrl(bad, sizeof bad, &b), CtrlError::kBadField);
  a.trim_count = 3;
  write_ctrl(a, buf);
  std::memcpy(bad, buf, sizeof bad);
  bad[248 + 8 * 5] = 1;  // an unused report slot that is not zero
  fix_crc(bad);
  EXPECT_EQ(parse_ctrl(bad, sizeof bad, &b), CtrlError::kBadField);
  std::memcpy(bad, buf, sizeof bad);
  bad[248 + 8 * 1 + 4] = 0;  // a used report of no packet
  bad[248 + 8 * 1 + 5] = 0;
  fix_crc(bad);
  EXPECT_EQ(parse_ctrl(bad, sizeof bad, &b), CtrlError::kBadField);
  std::memcpy(bad, buf, sizeof bad);
  bad[7] = 0x04;  // an echo bit no version defines
  fix_crc(bad);
  EXPECT_EQ(parse_ctrl(bad, sizeof bad, &b), CtrlError::kBadField);
}

}  // namespace
}  // namespace trim::transport
