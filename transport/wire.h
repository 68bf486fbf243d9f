// Transport wire formats other than the codec's data packets (docs/PROTOCOL.md, "Transport"):
// UDP control packets (ACK, PING, PONG), the TCP control frames (handshake, clear-to-send,
// empty message, close) and the 128-byte listen handle NCCL carries between ranks.
// All integers little-endian; every parser is stateless, bounds-checked and never trusts a
// length it has not checked.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "codec/packet.h"
#include "common/status.h"

namespace trim::transport {

// ---- UDP control packets ----

constexpr uint16_t kCtrlMagic = codec::kCtrlMagic;  // 'T' 'C' on the wire
// 3: ACKs echo which copy of a packet arrived (echo_*), for the sender's spurious-timeout
// detection. 2: ACKs report which trimmable packets arrived cut (trims[]), for error feedback.
constexpr uint8_t kCtrlVersion = 3;
// Byte 7 of an ACK: its echo (echo_psn is valid; that packet's accepted copy was a resend).
constexpr uint8_t kEchoValid = 0x01, kEchoResent = 0x02;
constexpr uint32_t kSackBits = 1024;     // the receive window; senders never exceed it
constexpr uint32_t kMaxNacks = 16;
constexpr uint32_t kMaxTrimReports = 32;
constexpr uint32_t kCtrlBytes = 508;

enum class CtrlType : uint8_t { kAck = 1, kPing = 2, kPong = 3 };
// Which end of the connection a control packet is for (both ends share the cookie).
enum class Role : uint8_t { kSend = 0, kRecv = 1 };

// `count` packets from `psn` on, accepted cut: the receiver decoded `received` payload bytes of
// each (its check-pointed prefix), and estimated the rest.
struct TrimReport {
  uint32_t psn = 0;
  uint16_t count = 0;
  uint16_t received = 0;
};

// The first packet that advanced an ACK's cum_psn since the previous ACK (the hole it filled),
// and whether its accepted copy carried RESENT: Eifel's timestamp echo (RFC 3522) in one bit.
struct AckEcho {
  bool valid = false;
  bool resent = false;
  uint32_t psn = 0;
};

struct CtrlPacket {
  CtrlType type = CtrlType::kAck;
  Role to = Role::kSend;
  uint64_t cookie = 0;
  uint32_t cum_psn = 0;              // ACK: every psn before it has been accepted
  AckEcho echo;                      // ACK (version 3)
  uint64_t accepted_total = 0;       // ACK: data packets accepted so far (whole or trimmed)
  uint64_t trimmed_accepted_total = 0;  // ACK: of those, trimmed packets of trimmable messages
  uint64_t trimmed_nacked_total = 0;    // ACK: trimmed packets of exact messages (resend asked)
  uint64_t timestamp_ns = 0;         // PING: sender's clock; PONG: the PING's, echoed
  uint32_t nack_count = 0;
  uint32_t nacks[kMaxNacks] = {};    // ACK: psns trimmed on exact messages: resend now
  uint8_t sack[kSackBits / 8] = {};  // ACK: bit i = psn cum_psn + i accepted (bit 0 is 0)
  // ACK: trimmable packets accepted cut since the previous ACK (each reported once, in the ACK
  // that first acknowledges it: the receiver sends one early rather than let the list overflow).
  uint32_t trim_count = 0;
  TrimReport trims[kMaxTrimReports] = {};

  bool sacked(uint32_t i) const { return i < kSackBits && ((sack[i >> 3] >> (i & 7)) & 1) != 0; }
  void set_sack(uint32_t i) { sack[i >> 3] = static_cast<uint8_t>(sack[i >> 3] | (1u << (i & 7))); }
};

enum class CtrlError : int { kOk = 0, kShort, kBadMagic, kBadVersion, kBadChecksum, kBadField };
const char* ctrl_error_name(CtrlError e);

void write_ctrl(const CtrlPacket& p, uint8_t out[kCtrlBytes]);
CtrlError parse_ctrl(const uint8_t* data, size_t len, CtrlPacket* out);
// Whether a datagram is a control packet (else it should be a codec data packet).
inline bool is_ctrl(const uint8_t* data, size_t len) { return codec::is_ctrl_datagram(data, len); }

// ---- TCP control frames ----

constexpr uint32_t kFrameMagic = 0x434d5254;  // "TRMC"
// The handshake version: in the listen handle and the Hello, and the listener's in every
// HelloAck. 6: data packets may carry RESENT and ACKs are of control version 3 (the echo of the
// copy that arrived). 5: data packets of wire version 3 (byte 6 = head bits 1, 2 or 16, and the 2-bit
// heads' bin ratio). 4: ACKs of control version 2 (508 bytes, with trim reports). 3: data packets of wire version 2 (80-byte header with check points; DSCP per class)
// and the fabric's trim size in the Hello. 2: the connection's MTU is agreed (the smaller of both
// ends' offers), where 1 required equal MTUs (a mix would send packets the other end cannot
// decode). Every version keeps the
// handle's bytes [0, 28), the Hello's first 6 bytes and its size, and the HelloAck's layout, so
// that builds of different versions tell each other so (docs/PROTOCOL.md).
constexpr uint16_t kFrameVersion = 6;
constexpr size_t kHelloBytes = 96;
constexpr size_t kFrameBytes = 32;

// The connecting (send) side's first frame: who it is and how it encodes.
struct Hello {
  uint64_t listen_nonce = 0;  // from the handle: catches a connect to a recycled port
  uint64_t cookie = 0;        // random per connection; every data/control packet carries it
  uint32_t udp_ip4_be = 0;    // where the receiver sends ACKs
  uint16_t udp_port = 0;      // host order
  uint16_t mtu = 0;           // the MTU the sender offers on its device (resolved, never auto)
  uint8_t scheme = 0, head_bits = 0;
  uint32_t row_elems = 0;
  uint64_t seed = 0;
  float clip_sigmas = 0;
  uint16_t fabric_trim_bytes = 0;  // NCCL_TRIM_FABRIC_TRIM_BYTES: sizes packets, so both ends must agree
};
// The accepting side's answer.
struct HelloAck {
  uint32_t status = 0;        // 0 = accepted; else a HelloReject reason
  uint32_t udp_ip4_be = 0;    // where data packets go (or, through a switch, their header dst)
  uint16_t udp_port = 0;
  uint16_t mtu = 0;           // the connection's MTU: min(the Hello's, the receiver's own)
  uint16_t version = kFrameVersion;  // the listener's handshake version (0 from version 1, which sent none)
};
enum HelloReject : uint32_t {
  kHelloOk = 0,
  kHelloCodecMismatch = 1,
  kHelloBadNonce = 2,
  kHelloVersion = 3,
  kHelloBadMtu = 4,  // the Hello's MTU is below 256 (no valid sender offers one)
};

void write_hello(const Hello& h, uint8_t out[kHelloBytes]);
Status parse_hello(const uint8_t in[kHelloBytes], Hello* out);
void write_hello_ack(const HelloAck& h, uint8_t out[kFrameBytes]);
Status parse_hello_ack(const uint8_t in[kFrameBytes], HelloAck* out);

enum class FrameType : uint16_t {
  kHelloAck = 1,
  kCts = 2,     // receiver -> sender: receive `seq` is posted with `value` bytes of room
  kEmpty = 3,   // sender -> receiver: message `seq` has 0 bytes (no data packet carries it)
  kFin = 4,     // either way, before closing: `value` = receives completed (receiver) or sends posted
};
struct Frame {
  FrameType type = FrameType::kCts;
  uint64_t seq = 0;
  uint64_t value = 0;
};
void write_frame(const Frame& f, uint8_t out[kFrameBytes]);
Status parse_frame(const uint8_t in[kFrameBytes], Frame* out);

// ---- The listen handle (NCCL_NET_HANDLE_MAXSIZE = 128 bytes) ----

constexpr uint32_t kHandleMagic = 0x484d5254;  // "TRMH"
constexpr size_t kHandleBytes = 128;
// NCCL hands the same handle buffer to every retry of connect(); like NCCL's own socket
// transport we keep the in-progress connection there (a local pointer, never sent).
constexpr size_t kHandleStageOffset = 64;

struct ListenHandle {
  uint32_t ip4_be = 0;
  uint16_t tcp_port = 0;  // host order
  uint64_t nonce = 0;
  uint16_t version = kFrameVersion;  // the listener's handshake version
};
void write_handle(const ListenHandle& h, uint8_t out[kHandleBytes]);
// Accepts a handle of any handshake version (the fields above keep their place in every
// version) and reports it in out->version: connect reports a mismatch to both ends.
Status parse_handle(const uint8_t in[kHandleBytes], ListenHandle* out);

// psn arithmetic modulo 2^32.
inline int32_t psn_diff(uint32_t a, uint32_t b) { return static_cast<int32_t>(a - b); }

}  // namespace trim::transport
