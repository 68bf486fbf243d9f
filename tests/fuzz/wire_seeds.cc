// Writes valid inputs for every wire-fuzz target (tests/fuzz/wire_fuzz.h) as its seeds: ACKs
// a real receiver sends for the fuzzer's 64 KiB exact message, each stream frame, a hello, a
// hello-ack, a handle (also of other handshake versions), and the data packets real senders emit
// (exact, and trimmable per scheme), in every shape of tests/fuzz/seed_cuts.h, with and without
// the trimmed DSCP.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "codec/packet.h"
#include "common/le.h"
#include "tests/fuzz/seed_cuts.h"
#include "tests/fuzz/wire_fuzz.h"
#include "transport/wire.h"

using namespace trim;
using namespace trim::transport;
using Bytes = std::vector<uint8_t>;

namespace {

std::string g_dir;
int g_count = 0;

void seed(uint8_t sel, const Bytes& body) {
  const std::string path = g_dir + "/wire-seed" + std::to_string(g_count++);
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) {
    std::perror(path.c_str());
    std::exit(1);
  }
  std::fputc(sel, f);
  std::fwrite(body.data(), 1, body.size(), f);
  std::fclose(f);
}

// Both with and without the checksum refresh bit: each is valid either way.
void seed2(fuzz::Target t, const Bytes& body, codec::Scheme s = codec::Scheme::kNone) {
  seed(fuzz::selector(t, s, false), body);
  seed(fuzz::selector(t, s, true), body);
}

// Every v2 shape of one data packet, arriving with and without the trimmed DSCP.
void data_shapes(const Bytes& pkt, codec::Scheme s) {
  for (const Bytes& v : fuzz::v2_variants(pkt)) {
    for (bool marked : {false, true}) seed(fuzz::selector(fuzz::kData, s, false, marked), v);
  }
}

// A record of another handshake version, its CRC (the last 4 of `crc_end` bytes) still valid.
Bytes with_version(Bytes b, size_t at, uint16_t version, size_t crc_end) {
  le::put16(b.data() + at, version);
  le::put32(b.data() + crc_end - 4, codec::crc32c(b.data(), crc_end - 4));
  return b;
}

Bytes ctrl_bytes(const CtrlPacket& p) {
  Bytes b(kCtrlBytes);
  write_ctrl(p, b.data());
  return b;
}

Bytes frame_bytes(FrameType t, uint64_t seq, uint64_t value) {
  Bytes b(kFrameBytes);
  write_frame(Frame{t, seq, value}, b.data());
  return b;
}

Bytes trimmed(Bytes pkt) {
  codec::ParsedPacket p;
  if (codec::parse_packet(pkt.data(), pkt.size(), &p) != codec::PacketError::kOk) std::exit(3);
  codec::mark_trimmed(pkt.data());
  pkt.resize(codec::kHeaderBytes + p.hdr.trim_bytes);
  return pkt;
}

void deliver(RecvProto* r, const Bytes& pkt) {
  codec::ParsedPacket p;
  if (codec::parse_packet(pkt.data(), pkt.size(), &p) != codec::PacketError::kOk) std::exit(3);
  r->on_data(p, 0);
}

// ACKs of the fuzzer's sender as a receiver would send them: in order, with a hole (a SACK),
// with an exact packet trimmed (a NACK), and complete; alone and back to back.
void ctrl_seeds(const std::vector<Bytes>& pkts) {
  const size_t n = pkts.size();
  if (n < 10) std::exit(4);
  Bytes out(fuzz::kRecvBytes);
  RecvOp op;
  op.data = out.data();
  op.capacity = out.size();
  RecvProto r(fuzz::conn_params(codec::Scheme::kNone));
  fuzz::Capture rtx;
  if (!r.post(&op, &rtx).is_ok()) std::exit(4);
  for (size_t i = 0; i < 5; ++i) deliver(&r, pkts[i]);
  r.flush_ack(&rtx);
  for (size_t i = 6; i < 9; ++i) deliver(&r, pkts[i]);
  r.flush_ack(&rtx);
  deliver(&r, trimmed(pkts[5]));
  r.flush_ack(&rtx);
  for (size_t i = 5; i < n; ++i) {
    if (i < 6 || i >= 9) deliver(&r, pkts[i]);
  }
  r.flush_ack(&rtx);
  if (rtx.ctrls.size() != 4 || op.result.state() != OpResult::kDone) std::exit(4);
  Bytes all;
  for (const CtrlPacket& a : rtx.ctrls) {
    const Bytes b = ctrl_bytes(a);
    seed2(fuzz::kCtrl, b);
    all.insert(all.end(), b.begin(), b.end());
  }
  seed2(fuzz::kCtrl, all);
  // ACKs naming cut packets (trim reports), for the error-feedback sender: a run of three
  // heads-only cuts, a short cut and one past the payload's end, then the whole window acked.
  CtrlPacket a = rtx.ctrls.front();
  a.cum_psn = 6;
  a.trim_count = 3;
  a.trims[0] = TrimReport{0, 3, 120};
  a.trims[1] = TrimReport{4, 1, 7};
  a.trims[2] = TrimReport{5, 1, 65535};
  Bytes reports = ctrl_bytes(a);
  a.cum_psn = static_cast<uint32_t>(n);
  a.trim_count = 1;
  a.trims[0] = TrimReport{6, static_cast<uint16_t>(n - 6), 300};
  a.trims[1] = a.trims[2] = TrimReport{};
  const Bytes rest = ctrl_bytes(a);
  reports.insert(reports.end(), rest.begin(), rest.end());
  seed2(fuzz::kCtrl, reports);
  CtrlPacket ping;
  ping.type = CtrlType::kPing;
  ping.cookie = fuzz::kCookie;
  ping.timestamp_ns = 12345;
  seed(fuzz::selector(fuzz::kCtrl, codec::Scheme::kNone, false), ctrl_bytes(ping));
}

void frame_seeds() {
  const Bytes frames[] = {frame_bytes(FrameType::kCts, 0, fuzz::kSendBytes), frame_bytes(FrameType::kCts, 1, 16),
                          frame_bytes(FrameType::kCts, 2, 1000),            frame_bytes(FrameType::kCts, 0, 100),
                          frame_bytes(FrameType::kEmpty, 0, 0),             frame_bytes(FrameType::kEmpty, 1, 0),
                          frame_bytes(FrameType::kFin, 0, 0),               frame_bytes(FrameType::kFin, 0, 1)};
  Bytes all;
  for (const Bytes& f : frames) {
    seed2(fuzz::kFrame, f);
    all.insert(all.end(), f.begin(), f.end());
  }
  seed2(fuzz::kFrame, all);
}

void handshake_seeds() {
  Hello h;
  h.listen_nonce = 0x1234;
  h.cookie = fuzz::kCookie;
  h.udp_ip4_be = 0x0100007f;
  h.udp_port = 40000;
  h.mtu = 9000;
  h.scheme = static_cast<uint8_t>(codec::Scheme::kRht);
  h.head_bits = 1;
  h.row_elems = 32768;
  h.seed = 0x7472696d;
  h.clip_sigmas = 2.5f;
  Bytes b(kHelloBytes);
  write_hello(h, b.data());
  seed2(fuzz::kHello, b);
  h.fabric_trim_bytes = 256;
  write_hello(h, b.data());
  seed2(fuzz::kHello, b);
  for (uint16_t version : {1, 2, 4}) seed2(fuzz::kHello, with_version(b, 4, version, kHelloBytes));
  for (uint32_t status : {kHelloOk, kHelloCodecMismatch, kHelloBadNonce, kHelloVersion, kHelloBadMtu}) {
    for (uint16_t version : {uint16_t{kFrameVersion}, uint16_t{0}, uint16_t{2}}) {
      if (status != kHelloVersion && version != kFrameVersion) continue;
      Bytes a(kFrameBytes);
      write_hello_ack(HelloAck{status, 0x0100007f, 40001, 9000, version}, a.data());
      seed2(fuzz::kHelloAck, a);
    }
  }
  for (uint16_t version : {uint16_t{kFrameVersion}, uint16_t{1}, uint16_t{2}}) {
    Bytes hd(kHandleBytes);
    write_handle(ListenHandle{0x0100007f, 4242, 99, version}, hd.data());
    seed2(fuzz::kHandle, hd);
  }
}

// The exact 64 KiB message sent as seq 1 (after a 1-byte seq 0): too big for receive 1.
std::vector<Bytes> second_message_packets(const Bytes& msg) {
  SendOp op0, op1;
  op0.data = op1.data = msg.data();
  op0.bytes = 1;
  op1.bytes = msg.size();
  op1.seq = 1;
  SendProto s(fuzz::conn_params(codec::Scheme::kNone));
  fuzz::Capture tx;
  if (!s.post(&op0).is_ok() || !s.post(&op1).is_ok()) std::exit(5);
  s.on_cts(0, 1);
  s.on_cts(1, msg.size());
  s.poll_tx(0, 1000, &tx);
  tx.packets.erase(tx.packets.begin());  // seq 0's one packet
  return tx.packets;
}

// A trimmable 64 KiB fp32 message as a sender of `scheme` sends it.
std::vector<Bytes> trimmable_packets(codec::Scheme scheme) {
  std::vector<float> v(fuzz::kSendBytes / 4);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>((i * 7919) % 2001) / 1000.0f - 1.0f;
  SendOp op;
  op.data = reinterpret_cast<const uint8_t*>(v.data());
  op.bytes = fuzz::kSendBytes;
  op.trimmable = true;
  op.dtype = codec::DType::kF32;
  SendProto s(fuzz::conn_params(scheme));
  fuzz::Capture tx;
  if (!s.post(&op).is_ok()) std::exit(5);
  s.on_cts(0, op.bytes);
  s.poll_tx(0, 1000, &tx);
  return tx.packets;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: wire-seeds DIR\n");
    return 2;
  }
  g_dir = argv[1];
  // The exact 64 KiB message exactly as the fuzzer's sender sends it.
  const Bytes msg = fuzz::message_bytes(fuzz::kSendBytes);
  SendOp op;
  SendProto s(fuzz::conn_params(codec::Scheme::kNone));
  fuzz::Capture tx;
  fuzz::start_sender(&s, &op, msg, &tx);
  ctrl_seeds(tx.packets);
  frame_seeds();
  handshake_seeds();
  for (size_t i = 0; i < tx.packets.size(); ++i) seed2(fuzz::kData, tx.packets[i]);
  seed2(fuzz::kData, trimmed(tx.packets[3]));
  data_shapes(tx.packets[3], codec::Scheme::kNone);
  seed2(fuzz::kData, tx.packets[0], codec::Scheme::kRht);  // exact data on an rht connection
  const std::vector<Bytes> second = second_message_packets(msg);
  for (size_t i = 0; i < second.size(); i += 4) seed2(fuzz::kData, second[i]);
  for (int k = 1; k < codec::kNumSchemes; ++k) {
    const codec::Scheme scheme = static_cast<codec::Scheme>(k);
    const std::vector<Bytes> pkts = trimmable_packets(scheme);
    if (pkts.size() < 2) return 5;
    seed2(fuzz::kData, pkts.front(), scheme);
    seed2(fuzz::kData, pkts.back(), scheme);
    seed2(fuzz::kData, trimmed(pkts.front()), scheme);
    data_shapes(pkts.front(), scheme);
    data_shapes(pkts.back(), scheme);
  }
  std::printf("wrote %d seeds to %s\n", g_count, argv[1]);
  return 0;
}
