// Cut datagrams the kernel drops (NCCL_TRIM_RX_CUT, docs/DEPLOYMENT.md). A switch that cuts a
// packet but leaves the IPv4 total length or the UDP length claiming the bytes it removed (SONiC
// lists this as a limitation) gets every trim dropped by the receiving kernel: IP drops a packet
// shorter than its total length (InTruncatedPkts), UDP one shorter than its UDP length
// (UdpInErrors). The UDP socket never sees them, so each would be a loss to resend. A packet
// socket (AF_PACKET, SOCK_DGRAM: data starts at the network header) sees every frame before
// those checks; a classic BPF filter in the kernel passes it only the frames the kernel
// is about to drop for their lengths, sent to our engine's port, so nothing the UDP socket
// delivers is seen twice. The engine hands each frame's UDP payload to the data path as if the
// UDP socket had delivered it short: its length (and DSCP) say it was trimmed.
#pragma once

#include <linux/filter.h>
#include <netinet/in.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "codec/packet.h"
#include "common/status.h"
#include "transport/socket.h"

namespace trim::transport {

// Why a frame from the packet socket is not a cut datagram of ours (the filter lets through only
// those; parse_cut_frame checks everything again, as the filter is only an optimisation).
enum class CutError {
  kOk = 0,
  kShort,          // less than an IPv4 header, or than its IHL plus a UDP header
  kNotIpv4,        // version is not 4
  kBadIhl,         // IHL below 5 (20 bytes)
  kNotUdp,         // another protocol
  kFragment,       // a fragment (MF or an offset): the kernel reassembles those; ours never are
  kNotOurs,        // another destination address or port
  kBadLength,      // a total length below IHL + 8, or a UDP length below 8
  kNotCut,         // both lengths fit what arrived: the kernel delivers it to the UDP socket
};
const char* cut_error_name(CutError e);

struct CutFrame {
  const uint8_t* payload = nullptr;  // the UDP payload: what the UDP socket would have returned
  size_t payload_bytes = 0;
  sockaddr_in from{};  // source address and port, as recvmsg would have given them
  uint8_t tos = 0;     // the IPv4 header's TOS byte (DSCP << 2 | ECN), as IP_RECVTOS gives it
};

// Parses one frame (data at the IPv4 header, `bytes` as arrived). Accepts only IPv4 UDP, not a
// fragment, to `port` (and `ip4_be`, unless 0), whose IPv4 total length or UDP length exceeds
// what arrived. The IPv4 header checksum is not checked: a switch that leaves the length may
// leave the checksum too (SONiC names both), and our header's check points vouch for the payload.
CutError parse_cut_frame(const uint8_t* frame, size_t bytes, uint32_t ip4_be, uint16_t port, CutFrame* out);

// Whether a codec packet read from the packet socket may be used, and how much of it. Such a
// datagram came in before netfilter and the kernel's UDP checks, and no UDP checksum vouches for
// it (the kernel verifies none on a datagram it drops for its lengths), so only the packet's own
// check points may: they are verified whatever its flags say (parse_packet skips them on a whole
// packet flagged UDP_CHECKSUMMED, which a packet from the tap may be), and a packet without them
// (raw, exact traffic: scheme none) has nothing to vouch for its bytes and is refused.
enum class CutCheck {
  kOk = 0,         // p->payload_received is now the prefix the check points verified
  kNoCheckPoints,  // refused: nothing vouches for its payload
  kBadCheckPoint,  // refused: a check point that arrived does not match (forged or corrupted)
};
const char* cut_check_name(CutCheck c);
// `data`, `len`: the datagram parse_packet accepted into `p` (header checks passed). Walks every
// check point that arrived and, when all match, sets p->payload_received and p->trimmed to what
// they verified; on kBadCheckPoint, `*newly_failed` says whether parse_packet had not already
// counted the failure (as bad_payload_check). Never reads past `len`.
CutCheck verify_cut_packet(const uint8_t* data, size_t len, codec::ParsedPacket* p, bool* newly_failed);

// The classic BPF program that passes the frames parse_cut_frame accepts (but for the length
// sanity checks it leaves to the parser) and drops everything else in the kernel. It first
// checks that the frame is IPv4 by its link-layer protocol (an ancillary load: the socket sees
// every protocol); `match_protocol` false leaves that out, for a test that runs the program on
// a socket whose messages have none.
std::vector<sock_filter> cut_filter(uint32_t ip4_be, uint16_t port, bool match_protocol = true);

// The packet socket of one engine: non-blocking, filtered to its port, bound to the interface
// that holds its address (every interface when none does), outgoing frames ignored. It listens
// to every protocol (ETH_P_ALL), which makes it a tap: the kernel hands it each frame, and takes
// the frame back when the filter rejects it, before IP sees it. Bound to ETH_P_IP on a device
// instead, it would come after IP's handler, which would then get every IPv4 packet of the
// device shared, and copy each one.
class CutSocket {
 public:
  CutSocket() = default;
  // Fails (EPERM) without CAP_NET_RAW.
  static Result<CutSocket> open(uint32_t ip4_be, uint16_t port);
  int fd() const { return fd_.get(); }
  bool valid() const { return fd_.valid(); }
  const std::string& ifname() const { return ifname_; }  // "" when bound to every interface
  // Frames the kernel dropped because the socket's queue was full, since the last call.
  uint64_t take_drops();

 private:
  Fd fd_;
  std::string ifname_;
};

}  // namespace trim::transport
