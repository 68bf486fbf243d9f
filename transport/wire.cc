#include "transport/wire.h"

#include <fmt/format.h>

#include <cmath>

#include "codec/packet.h"
#include "codec/types.h"
#include "common/le.h"

namespace trim::transport {

using namespace le;  // every field of every format below is little-endian

namespace {

constexpr size_t kCtrlCrcOffset = kCtrlBytes - 4;
constexpr size_t kNackOffset = 56;
constexpr size_t kSackOffset = kNackOffset + 4 * kMaxNacks;  // 120
constexpr size_t kTrimOffset = kSackOffset + kSackBits / 8;  // 248
static_assert(kTrimOffset + 8 * kMaxTrimReports == kCtrlCrcOffset, "control packet layout");

}  // namespace

const char* ctrl_error_name(CtrlError e) {
  switch (e) {
    case CtrlError::kOk: return "ok";
    case CtrlError::kShort: return "short";
    case CtrlError::kBadMagic: return "bad_magic";
    case CtrlError::kBadVersion: return "bad_version";
    case CtrlError::kBadChecksum: return "bad_checksum";
    case CtrlError::kBadField: return "bad_field";
  }
  return "unknown";
}

void write_ctrl(const CtrlPacket& p, uint8_t out[kCtrlBytes]) {
  std::memset(out, 0, kCtrlBytes);
  codec::write_prefix(out, kCtrlMagic, kCtrlVersion, p.cookie);
  out[3] = static_cast<uint8_t>(p.type);
  out[4] = static_cast<uint8_t>(p.to);
  out[5] = static_cast<uint8_t>(p.nack_count > kMaxNacks ? kMaxNacks : p.nack_count);
  out[6] = static_cast<uint8_t>(p.trim_count > kMaxTrimReports ? kMaxTrimReports : p.trim_count);
  put32(out + 16, p.cum_psn);
  if (p.echo.valid) {
    out[7] = static_cast<uint8_t>(kEchoValid | (p.echo.resent ? kEchoResent : 0));
    put32(out + 20, p.echo.psn);
  }
  put64(out + 24, p.accepted_total);
  put64(out + 32, p.trimmed_accepted_total);
  put64(out + 40, p.trimmed_nacked_total);
  put64(out + 48, p.timestamp_ns);
  for (uint32_t i = 0; i < out[5]; ++i) put32(out + kNackOffset + 4 * i, p.nacks[i]);
  std::memcpy(out + kSackOffset, p.sack, sizeof p.sack);
  for (uint32_t i = 0; i < out[6]; ++i) {
    put32(out + kTrimOffset + 8 * i, p.trims[i].psn);
    put16(out + kTrimOffset + 8 * i + 4, p.trims[i].count);
    put16(out + kTrimOffset + 8 * i + 6, p.trims[i].received);
  }
  put32(out + kCtrlCrcOffset, codec::crc32c(out, kCtrlCrcOffset));
}

CtrlError parse_ctrl(const uint8_t* data, size_t len, CtrlPacket* out) {
  if (len < kCtrlBytes) return CtrlError::kShort;
  if (get16(data) != kCtrlMagic) return CtrlError::kBadMagic;
  if (data[2] != kCtrlVersion) return CtrlError::kBadVersion;
  if (get32(data + kCtrlCrcOffset) != codec::crc32c(data, kCtrlCrcOffset)) return CtrlError::kBadChecksum;
  const uint8_t type = data[3], to = data[4], nacks = data[5], trims = data[6], echo = data[7];
  // An echo is all or nothing: without kEchoValid, the flags and the psn are zero.
  const bool echo_ok = (echo & ~(kEchoValid | kEchoResent)) == 0 &&
                       ((echo & kEchoValid) != 0 || (echo == 0 && get32(data + 20) == 0));
  if (type < 1 || type > 3 || to > 1 || nacks > kMaxNacks || trims > kMaxTrimReports || !echo_ok) {
    return CtrlError::kBadField;
  }
  // Unused report slots are zero, and a used one names at least one packet: one encoding per packet.
  for (uint32_t i = 0; i < kMaxTrimReports; ++i) {
    const bool used = i < trims, zero = get64(data + kTrimOffset + 8 * i) == 0;
    if (used ? get16(data + kTrimOffset + 8 * i + 4) == 0 : !zero) return CtrlError::kBadField;
  }
  CtrlPacket p;
  p.type = static_cast<CtrlType>(type);
  p.to = static_cast<Role>(to);
  p.nack_count = nacks;
  p.cookie = codec::prefix_cookie(data);
  p.cum_psn = get32(data + 16);
  p.echo.valid = (echo & kEchoValid) != 0;
  p.echo.resent = (echo & kEchoResent) != 0;
  p.echo.psn = get32(data + 20);
  p.accepted_total = get64(data + 24);
  p.trimmed_accepted_total = get64(data + 32);
  p.trimmed_nacked_total = get64(data + 40);
  p.timestamp_ns = get64(data + 48);
  for (uint32_t i = 0; i < nacks; ++i) p.nacks[i] = get32(data + kNackOffset + 4 * i);
  std::memcpy(p.sack, data + kSackOffset, sizeof p.sack);
  p.trim_count = trims;
  for (uint32_t i = 0; i < trims; ++i) {
    p.trims[i].psn = get32(data + kTrimOffset + 8 * i);
    p.trims[i].count = get16(data + kTrimOffset + 8 * i + 4);
    p.trims[i].received = get16(data + kTrimOffset + 8 * i + 6);
  }
  *out = p;
  return CtrlError::kOk;
}

// ---- TCP frames ----

void write_hello(const Hello& h, uint8_t out[kHelloBytes]) {
  std::memset(out, 0, kHelloBytes);
  put32(out + 0, kFrameMagic);
  put16(out + 4, kFrameVersion);
  put64(out + 8, h.listen_nonce);
  put64(out + 16, h.cookie);
  put32(out + 24, h.udp_ip4_be);
  put16(out + 28, h.udp_port);
  put16(out + 30, h.mtu);
  out[32] = h.scheme;
  out[33] = h.head_bits;
  put32(out + 36, h.row_elems);
  put64(out + 40, h.seed);
  put32(out + 48, codec::f32_bits(h.clip_sigmas));
  put16(out + 52, h.fabric_trim_bytes);
  put32(out + kHelloBytes - 4, codec::crc32c(out, kHelloBytes - 4));
}

Status parse_hello(const uint8_t in[kHelloBytes], Hello* out) {
  if (get32(in) != kFrameMagic) return Status(Code::kBadPacket, "handshake: not an nccl-trim peer (bad magic)");
  if (get16(in + 4) != kFrameVersion) {
    return Status(Code::kBadConfig,
                  fmt::format("handshake: the peer speaks nccl-trim handshake version {}, we speak version {} "
                              "(every rank must run the same nccl-trim build)",
                              get16(in + 4), kFrameVersion));
  }
  if (get32(in + kHelloBytes - 4) != codec::crc32c(in, kHelloBytes - 4)) {
    return Status(Code::kBadPacket, "handshake: checksum mismatch");
  }
  Hello h;
  h.listen_nonce = get64(in + 8);
  h.cookie = get64(in + 16);
  h.udp_ip4_be = get32(in + 24);
  h.udp_port = get16(in + 28);
  h.mtu = get16(in + 30);
  h.scheme = in[32];
  h.head_bits = in[33];
  h.row_elems = get32(in + 36);
  h.seed = get64(in + 40);
  h.clip_sigmas = codec::bits_f32(get32(in + 48));
  h.fabric_trim_bytes = get16(in + 52);
  *out = h;
  return Status::ok();
}

void write_hello_ack(const HelloAck& h, uint8_t out[kFrameBytes]) {
  std::memset(out, 0, kFrameBytes);
  put32(out + 0, kFrameMagic);
  put16(out + 4, static_cast<uint16_t>(FrameType::kHelloAck));
  put32(out + 8, h.status);
  put32(out + 12, h.udp_ip4_be);
  put16(out + 16, h.udp_port);
  put16(out + 18, h.mtu);
  put16(out + 20, h.version);
  put32(out + kFrameBytes - 4, codec::crc32c(out, kFrameBytes - 4));
}

Status parse_hello_ack(const uint8_t in[kFrameBytes], HelloAck* out) {
  if (get32(in) != kFrameMagic || get16(in + 4) != static_cast<uint16_t>(FrameType::kHelloAck) ||
      get32(in + kFrameBytes - 4) != codec::crc32c(in, kFrameBytes - 4)) {
    return Status(Code::kBadPacket, "handshake: malformed answer from the listener");
  }
  out->status = get32(in + 8);
  out->udp_ip4_be = get32(in + 12);
  out->udp_port = get16(in + 16);
  out->mtu = get16(in + 18);
  out->version = get16(in + 20);
  return Status::ok();
}

void write_frame(const Frame& f, uint8_t out[kFrameBytes]) {
  std::memset(out, 0, kFrameBytes);
  put32(out + 0, kFrameMagic);
  put16(out + 4, static_cast<uint16_t>(f.type));
  put64(out + 8, f.seq);
  put64(out + 16, f.value);
  put32(out + kFrameBytes - 4, codec::crc32c(out, kFrameBytes - 4));
}

Status parse_frame(const uint8_t in[kFrameBytes], Frame* out) {
  if (get32(in) != kFrameMagic || get32(in + kFrameBytes - 4) != codec::crc32c(in, kFrameBytes - 4)) {
    return Status(Code::kBadPacket, "control stream corrupted (bad magic or checksum)");
  }
  const uint16_t type = get16(in + 4);
  if (type < static_cast<uint16_t>(FrameType::kCts) || type > static_cast<uint16_t>(FrameType::kFin)) {
    return Status(Code::kBadPacket, fmt::format("control stream: unknown frame type {}", type));
  }
  out->type = static_cast<FrameType>(type);
  out->seq = get64(in + 8);
  out->value = get64(in + 16);
  return Status::ok();
}

// ---- Handle ----

void write_handle(const ListenHandle& h, uint8_t out[kHandleBytes]) {
  std::memset(out, 0, kHandleBytes);
  put32(out + 0, kHandleMagic);
  put16(out + 4, h.version);
  put16(out + 6, h.tcp_port);
  put32(out + 8, h.ip4_be);
  put64(out + 16, h.nonce);
  put32(out + 24, codec::crc32c(out, 24));
}

Status parse_handle(const uint8_t in[kHandleBytes], ListenHandle* out) {
  if (get32(in) != kHandleMagic || get32(in + 24) != codec::crc32c(in, 24)) {
    return Status(Code::kInvalidArgument, "connect: the handle is not an nccl-trim listen handle");
  }
  out->version = get16(in + 4);
  out->tcp_port = get16(in + 6);
  out->ip4_be = get32(in + 8);
  out->nonce = get64(in + 16);
  return Status::ok();
}

}  // namespace trim::transport
