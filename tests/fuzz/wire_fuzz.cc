// libFuzzer target: the transport's wire parsers, and behind each the state machine the engine
// would hand its result to (transport/engine_rx.cc). Byte 0 picks the target (wire_fuzz.h).
// Must never crash, hang, leak or read out of bounds. Every state machine is built afresh per
// input, so a crash replays from its input alone.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "codec/packet.h"
#include "common/le.h"
#include "common/log.h"
#include "tests/fuzz/wire_fuzz.h"
#include "transport/wire.h"

using namespace trim;
using namespace trim::transport;
using fuzz::Capture;

#define FUZZ_CHECK(cond)                                                              \
  do {                                                                                \
    if (!(cond)) {                                                                    \
      std::fprintf(stderr, "wire-fuzz: check failed: %s (line %d)\n", #cond, __LINE__); \
      std::abort();                                                                   \
    }                                                                                 \
  } while (0)

namespace {

// Rewrites the trailing CRC-32C of a fixed-size record covering bytes [0, at).
void fix_crc(uint8_t* b, size_t at) { le::put32(b + at, codec::crc32c(b, at)); }

// write(parse(x)) is a fixed point of parse-then-write: what parsed survives its own writer.
template <size_t N, typename T, typename Write, typename Parse>
void check_fixed_point(const T& v, Write write, Parse parse_ok) {
  uint8_t a[N], b[N];
  write(v, a);
  T again;
  FUZZ_CHECK(parse_ok(a, &again));
  write(again, b);
  FUZZ_CHECK(std::memcmp(a, b, N) == 0);
}

// What our own state machines emit must be valid on the wire.
void check_emitted(const Capture& tx) {
  for (const auto& pkt : tx.packets) {
    codec::ParsedPacket p;
    FUZZ_CHECK(codec::parse_packet(pkt.data(), pkt.size(), &p) == codec::PacketError::kOk);
    FUZZ_CHECK(p.hdr.cookie == fuzz::kCookie);
  }
  for (const CtrlPacket& c : tx.ctrls) {
    check_fixed_point<kCtrlBytes>(c, write_ctrl,
                                  [](const uint8_t* b, CtrlPacket* o) { return parse_ctrl(b, kCtrlBytes, o) == CtrlError::kOk; });
  }
}

// UDP control packets, one per kCtrlBytes chunk (a short last chunk must be refused), into a
// sender with one 64 KiB exact message in flight; then its timers.
void fuzz_ctrl(const uint8_t* in, size_t n, bool fix) {
  const std::vector<uint8_t> msg = fuzz::message_bytes(fuzz::kSendBytes);
  SendOp op;
  SendProto s(fuzz::conn_params(codec::Scheme::kNone));
  Capture tx;
  fuzz::start_sender(&s, &op, msg, &tx);
  FUZZ_CHECK(s.in_flight() > 0);
  // The same ACKs into a sender of one trimmable fp32 message with error feedback: each trim
  // report it takes makes it decode its own packets cut where the report says, when the
  // message completes.
  transport::ConnParams fp = fuzz::conn_params(codec::Scheme::kRht);
  fp.error_feedback = true;
  SendProto fs(fp);
  SendOp fop;
  fop.trimmable = true;
  fop.dtype = codec::DType::kF32;
  Capture ftx;
  fuzz::start_sender(&fs, &fop, msg, &ftx);
  uint64_t now = 0;
  for (size_t off = 0; off < n; off += kCtrlBytes) {
    std::vector<uint8_t> d(in + off, in + std::min(n, off + kCtrlBytes));  // exact size: ASan sees over-reads
    if (fix && d.size() == kCtrlBytes) fix_crc(d.data(), kCtrlBytes - 4);
    now += 100'000;
    CtrlPacket p;
    if (parse_ctrl(d.data(), d.size(), &p) != CtrlError::kOk) continue;
    check_fixed_point<kCtrlBytes>(p, write_ctrl,
                                  [](const uint8_t* b, CtrlPacket* o) { return parse_ctrl(b, kCtrlBytes, o) == CtrlError::kOk; });
    // The engine hands a sender only the ACKs addressed to it on its connection.
    if (p.type != CtrlType::kAck || p.to != Role::kSend || p.cookie != fuzz::kCookie) continue;
    s.on_ack(p, now);
    s.poll_tx(now, 1000, &tx);
    fs.on_ack(p, now);
    fs.poll_tx(now, 1000, &ftx);
  }
  // Past the tail probe, the timeout and a backed-off timeout.
  for (uint64_t later : {600'000ull, 3'000'000ull, 50'000'000ull}) {
    s.on_timer(now + later);
    s.poll_tx(now + later, 1000, &tx);
    FUZZ_CHECK(s.next_deadline_ns(now + later) > now + later);
  }
  FUZZ_CHECK(s.in_flight() < kSackBits && fs.in_flight() < kSackBits);
  FUZZ_CHECK(op.result.state() != OpResult::kFailed && fop.result.state() != OpResult::kFailed);
  FUZZ_CHECK(fs.counters().trims_reported >= fs.counters().trims_unmatched);
  if (op.result.state() == OpResult::kDone) FUZZ_CHECK(op.result.bytes() == fuzz::kSendBytes && !s.has_pending());
  check_emitted(tx);
}

// TCP control frames, one per kFrameBytes chunk, into a sender (64 KiB exact, then an empty
// message) and a receiver (two receives posted), as the engine dispatches them.
void fuzz_frames(const uint8_t* in, size_t n, bool fix) {
  const std::vector<uint8_t> msg = fuzz::message_bytes(fuzz::kSendBytes);
  std::vector<uint8_t> out0(fuzz::kSendBytes), out1(16);
  SendOp a, b, c;  // c is posted after the frames: it meets any CTS that came early
  RecvOp r0, r1;
  SendProto s(fuzz::conn_params(codec::Scheme::kNone));
  RecvProto r(fuzz::conn_params(codec::Scheme::kNone));
  Capture tx, rtx;
  a.data = msg.data();
  a.bytes = msg.size();
  b.seq = 1;
  FUZZ_CHECK(s.post(&a).is_ok() && s.post(&b).is_ok());
  r0.data = out0.data();
  r0.capacity = out0.size();
  r1.data = out1.data();
  r1.capacity = out1.size();
  r1.seq = 1;
  FUZZ_CHECK(r.post(&r0, &rtx).is_ok() && r.post(&r1, &rtx).is_ok());
  bool closed = false;
  uint64_t now = 0;
  for (size_t off = 0; off + kFrameBytes <= n && !closed; off += kFrameBytes) {
    std::vector<uint8_t> d(in + off, in + off + kFrameBytes);
    if (fix) fix_crc(d.data(), kFrameBytes - 4);
    Frame f;
    if (!parse_frame(d.data(), &f).is_ok()) break;  // the engine drops the connection
    check_fixed_point<kFrameBytes>(f, write_frame, [](const uint8_t* x, Frame* o) { return parse_frame(x, o).is_ok(); });
    now += 100'000;
    switch (f.type) {
      case FrameType::kCts: s.on_cts(f.seq, f.value); break;
      case FrameType::kEmpty: r.on_empty(f.seq); break;
      case FrameType::kFin:
        s.on_peer_fin(f.value);
        r.fail_all(Status(Code::kUnavailable, "peer closed"));
        closed = true;
        break;
      case FrameType::kHelloAck: FUZZ_CHECK(false);  // parse_frame never yields it
    }
    s.poll_tx(now, 1000, &tx);
    for (const Frame& e : tx.frames) {  // the sender's own empty-message frames reach the receiver
      if (e.type == FrameType::kEmpty && !closed) r.on_empty(e.seq);
    }
    tx.frames.clear();
  }
  if (!closed) {
    c.data = msg.data();
    c.bytes = 1000;
    c.seq = 2;
    FUZZ_CHECK(s.post(&c).is_ok());
    s.poll_tx(now + 100'000, 1000, &tx);
  }
  FUZZ_CHECK(s.in_flight() < kSackBits);
  for (const SendOp* op : {&a, &b, &c}) {
    if (op->result.state() == OpResult::kDone) FUZZ_CHECK(op->result.bytes() == op->bytes);
  }
  for (const RecvOp* op : {&r0, &r1}) {
    if (op->result.state() == OpResult::kDone) FUZZ_CHECK(op->result.bytes() <= op->capacity);
  }
  check_emitted(tx);
}

void fuzz_hello(const uint8_t* in, size_t n, bool fix) {
  if (n < kHelloBytes) return;
  std::vector<uint8_t> d(in, in + kHelloBytes);
  if (fix) fix_crc(d.data(), kHelloBytes - 4);
  Hello h;
  if (!parse_hello(d.data(), &h).is_ok()) return;
  check_fixed_point<kHelloBytes>(h, write_hello, [](const uint8_t* x, Hello* o) { return parse_hello(x, o).is_ok(); });
}

void fuzz_hello_ack(const uint8_t* in, size_t n, bool fix) {
  if (n < kFrameBytes) return;
  std::vector<uint8_t> d(in, in + kFrameBytes);
  if (fix) fix_crc(d.data(), kFrameBytes - 4);
  HelloAck h;
  if (!parse_hello_ack(d.data(), &h).is_ok()) return;
  check_fixed_point<kFrameBytes>(h, write_hello_ack,
                                 [](const uint8_t* x, HelloAck* o) { return parse_hello_ack(x, o).is_ok(); });
  // A hello-ack is no stream frame, and a stream frame no hello-ack.
  Frame f;
  FUZZ_CHECK(!parse_frame(d.data(), &f).is_ok());
}

void fuzz_handle(const uint8_t* in, size_t n, bool fix) {
  if (n < kHandleBytes) return;
  std::vector<uint8_t> d(in, in + kHandleBytes);
  if (fix) fix_crc(d.data(), 24);  // the handle's CRC covers bytes [0, 24)
  ListenHandle h;
  if (!parse_handle(d.data(), &h).is_ok()) return;
  check_fixed_point<kHandleBytes>(h, write_handle,
                                  [](const uint8_t* x, ListenHandle* o) { return parse_handle(x, o).is_ok(); });
}

// One data packet into a receiver with receive 0 (1 MiB) and receive 1 (16 KiB, so a seeded
// 64 KiB message sent as seq 1 tests the overflow guard) posted, then again as a duplicate.
// `marked`: it arrived with the trimmed DSCP (the engine sets marked_trimmed from the TOS byte).
void fuzz_data(const uint8_t* in, size_t n, bool fix, bool marked, codec::Scheme scheme) {
  std::vector<uint8_t> d(in, in + n);
  if (fix && n >= codec::kHeaderBytes) {
    // Keep the packet's own psn and destination (header bytes 40..49), refresh the CRC.
    codec::stamp_transport(d.data(), le::get32(d.data() + 40), le::get32(d.data() + 44), le::get16(d.data() + 48));
  }
  codec::ParsedPacket p;
  if (codec::parse_packet(d.data(), d.size(), &p) != codec::PacketError::kOk) return;
  if (p.hdr.cookie != fuzz::kCookie) return;  // the engine's connection lookup
  p.marked_trimmed = marked;
  std::vector<uint8_t> out0(fuzz::kRecvBytes), out1(fuzz::kSmallRecvBytes);  // exact size: ASan sees overflows
  RecvOp r0, r1;
  r0.data = out0.data();
  r0.capacity = out0.size();
  r1.data = out1.data();
  r1.capacity = out1.size();
  r1.seq = 1;
  RecvProto r(fuzz::conn_params(scheme));
  Capture tx;
  FUZZ_CHECK(r.post(&r0, &tx).is_ok() && r.post(&r1, &tx).is_ok());
  for (uint64_t now : {1000, 2000}) {
    r.on_data(p, now);
    r.flush_ack(&tx);
  }
  for (const RecvOp* op : {&r0, &r1}) {
    if (op->result.state() == OpResult::kDone) FUZZ_CHECK(op->result.bytes() <= op->capacity);
  }
  check_emitted(tx);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // Format every log line (that code runs too) but print none: rejected input is the norm here.
  log::set_forward([](void*, log::Level, const char*, int, const char*) {}, nullptr);
  log::set_level(log::Level::kDebug);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t sel = data[0];
  const bool fix = (sel & fuzz::kFixCrc) != 0;
  const uint8_t* in = data + 1;
  const size_t n = size - 1;
  switch ((sel & fuzz::kTargetMask) % fuzz::kNumTargets) {
    case fuzz::kCtrl: fuzz_ctrl(in, n, fix); break;
    case fuzz::kFrame: fuzz_frames(in, n, fix); break;
    case fuzz::kHello: fuzz_hello(in, n, fix); break;
    case fuzz::kHelloAck: fuzz_hello_ack(in, n, fix); break;
    case fuzz::kHandle: fuzz_handle(in, n, fix); break;
    case fuzz::kData:
      fuzz_data(in, n, fix, (sel & fuzz::kMarked) != 0, static_cast<codec::Scheme>(((sel >> 4) & 7) % codec::kNumSchemes));
      break;
  }
  return 0;
}
