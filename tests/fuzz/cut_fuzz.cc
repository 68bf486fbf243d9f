// libFuzzer target: any bytes as a frame from NCCL_TRIM_RX_CUT's packet socket (data at the IPv4
// header) into parse_cut_frame. Must never crash or read out of bounds, and whatever it accepts
// must be a cut the kernel would drop, its payload exactly what the frame and the UDP header cover.
#include <arpa/inet.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "transport/cut_rx.h"

using trim::transport::CutError;
using trim::transport::CutFrame;
using trim::transport::parse_cut_frame;

namespace {
constexpr uint16_t kPort = 47000;
const uint32_t kAddr = htonl(0xC6120002);  // 198.18.0.2
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // An exact-size copy, so AddressSanitizer sees any read past `size`.
  std::vector<uint8_t> buf(data, data + size);
  // Most random frames stop at the version or the port: for inputs whose last byte is odd, make
  // the header an IPv4 UDP one to our address and port (IHL as given), so the length checks and
  // the payload arithmetic behind them see them too.
  if (size >= 28 && (data[size - 1] & 1) != 0) {
    buf[0] = static_cast<uint8_t>(0x40 | (buf[0] & 0x0F));
    buf[9] = 17;  // UDP
    std::memcpy(&buf[16], &kAddr, 4);
    const size_t ihl = static_cast<size_t>(buf[0] & 0x0F) * 4;
    if (ihl + 4 <= size) {
      buf[ihl + 2] = static_cast<uint8_t>(kPort >> 8);
      buf[ihl + 3] = static_cast<uint8_t>(kPort & 0xFF);
    }
  }
  CutFrame f;
  const CutError e = parse_cut_frame(buf.data(), buf.size(), kAddr, kPort, &f);
  if (e != CutError::kOk) return 0;
  // The kernel's view: IP trims the frame to its total length (padding past it is not data) and
  // drops it when the total is longer; UDP then drops a datagram longer than what is left. A cut
  // is a frame either would drop; its payload is what the UDP header and the frame both cover.
  const size_t ihl = static_cast<size_t>(buf[0] & 0x0F) * 4;
  if ((buf[0] >> 4) != 4 || ihl < 20 || buf[9] != 17 || size < ihl + 8) std::abort();
  const size_t total = (static_cast<size_t>(buf[2]) << 8) | buf[3];
  const size_t udp_len = (static_cast<size_t>(buf[ihl + 4]) << 8) | buf[ihl + 5];
  const size_t l4 = (total < size ? total : size) - ihl;
  if (total <= size && udp_len <= l4) std::abort();  // not cut: the kernel delivers it
  if (f.payload != buf.data() + ihl + 8) std::abort();
  if (f.payload_bytes != (udp_len < l4 ? udp_len : l4) - 8) std::abort();
  if (f.payload + f.payload_bytes > buf.data() + buf.size()) std::abort();
  (void)cut_error_name(e);
  return 0;
}
