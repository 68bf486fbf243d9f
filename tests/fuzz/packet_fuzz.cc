// libFuzzer target: any bytes into the packet parser, and whatever parses into a decoder
// of the layout its header describes. Must never crash, hang or read out of bounds.
#include <cstdint>
#include <vector>

#include "codec/decoder.h"
#include "codec/packet.h"

using namespace trim::codec;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // An exact-size copy, so AddressSanitizer sees any read past `size`.
  std::vector<uint8_t> buf(data, data + size);
  // The header CRC would stop almost every header mutation at the checksum: for half the
  // inputs (odd last byte) refresh it so the field checks and the decoder see them too.
  if (size >= kHeaderBytes && (data[size - 1] & 1) != 0) {
    stamp_transport(buf.data(), 0, 0, 0);
  }
  ParsedPacket p;
  if (parse_packet(buf.data(), buf.size(), &p) != PacketError::kOk) return 0;
  if (p.hdr.msg_bytes > (1u << 20)) return 0;  // keep the decoder's buffers small
  CodecConfig cfg;
  cfg.scheme = p.hdr.scheme;
  cfg.row_elems = 1u << p.hdr.row_log2;
  cfg.head_bits = p.hdr.head_bits;
  cfg.packet_bytes = kHeaderBytes + p.hdr.payload_bytes;
  if (cfg.packet_bytes < kHeaderBytes + 33) cfg.packet_bytes = kHeaderBytes + 33;
  trim::Result<Layout> layout = Layout::make(cfg, p.hdr.dtype, p.hdr.scheme, p.hdr.msg_bytes);
  if (!layout) return 0;
  std::vector<uint8_t> out(p.hdr.msg_bytes);
  Decoder dec(cfg);
  if (!dec.begin(*layout, MessageId{p.hdr.cookie, p.hdr.msg_seq, true}, out.data()).is_ok()) return 0;
  (void)dec.add(p);
  (void)dec.add(p);  // a duplicate
  std::vector<uint8_t> estimated;
  dec.finish(&estimated);
  return 0;
}
