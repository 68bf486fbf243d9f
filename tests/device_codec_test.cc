// The DeviceCodec seam the GPU path runs through, with its CPU emulation (the backend CI can
// run): packets byte-identical to codec::Encoder, decode bit-identical to codec::Decoder, and
// work that becomes visible only when its ticket completes, in order.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "codec/decoder.h"
#include "codec/encoder.h"
#include "codec/packet.h"
#include "transport/device_codec.h"

namespace trim::transport {
namespace {

struct Message {
  codec::CodecConfig cfg;
  codec::Layout layout;
  codec::MessageId id{0x1234, 9, true};
  std::vector<float> values;
};

Message make_message(size_t elems, codec::Scheme scheme) {
  Message m;
  m.values.resize(elems);
  std::mt19937 g(static_cast<uint32_t>(elems));
  std::normal_distribution<float> d;
  for (float& v : m.values) v = d(g);
  m.layout = codec::Layout::make(m.cfg, codec::DType::kF32, scheme, elems * 4).value();
  return m;
}

bool wait(DeviceCodec& dc, DeviceCodec::Ticket t) {
  for (int i = 0; i < 100; ++i) {
    if (dc.poll(t)) return true;
  }
  return false;
}

// Odd sizes (one element, a partial row, several rows and a partial packet), every scheme the
// GPU path sends: encode by chunks of rows equals the CPU encoder byte for byte, and decoding
// those packets with some trimmed and one missing equals the CPU decoder bit for bit.
TEST(DeviceCodec, EmulatedMatchesTheCpuCodecOnOddSizes) {
  for (const size_t elems : {size_t{1}, size_t{3}, size_t{1000}, size_t{32769}, size_t{70001}}) {
    for (const codec::Scheme scheme : {codec::Scheme::kNone, codec::Scheme::kSign, codec::Scheme::kRht}) {
      SCOPED_TRACE(testing::Message() << elems << " elements, scheme " << static_cast<int>(scheme));
      Message m = make_message(elems, scheme);
      codec::Encoder enc(m.cfg);
      std::vector<std::vector<uint8_t>> cpu = enc.encode_message(m.layout, m.id, m.values.data()).value();
      Result<std::unique_ptr<DeviceCodec>> made = make_device_codec(DeviceMode::kEmulated, m.cfg);
      ASSERT_TRUE(made.is_ok());
      DeviceCodec& dc = *made.value();
      const size_t stride = m.cfg.packet_bytes;
      std::vector<uint8_t> staged(cpu.size() * stride);
      std::vector<uint32_t> sizes(cpu.size());
      // Chunks of two rows, as the send path launches them.
      std::vector<DeviceCodec::Ticket> tickets;
      uint64_t first_packet = 0;
      for (uint32_t r = 0; r < m.layout.rows(); r += 2) {
        const uint32_t n = std::min<uint32_t>(2, m.layout.rows() - r);
        tickets.push_back(dc.encode_rows(m.layout, m.id, m.values.data(), r, n, staged.data() + first_packet * stride,
                                         stride, sizes.data() + first_packet));
        ASSERT_NE(tickets.back(), 0u) << dc.last_error();
        for (uint32_t k = r; k < r + n; ++k) first_packet += m.layout.row(k).packets;
      }
      // Nothing is visible before its ticket completes (staging is poisoned until then).
      EXPECT_EQ(staged[0], 0xA5);
      ASSERT_TRUE(wait(dc, tickets.back()));
      for (size_t j = 0; j < cpu.size(); ++j) {
        ASSERT_EQ(sizes[j], cpu[j].size()) << "packet " << j;
        ASSERT_EQ(0, std::memcmp(staged.data() + j * stride, cpu[j].data(), cpu[j].size())) << "packet " << j;
      }
      // Received: every third packet trimmed to its header + 8 payload bytes, the last missing.
      std::vector<uint32_t> got(cpu.size());
      std::vector<float> want(elems, -1.0f), have(elems, -2.0f);
      codec::Decoder dec(m.cfg);
      ASSERT_TRUE(dec.begin(m.layout, m.id, want.data()).is_ok());
      for (size_t j = 0; j < cpu.size(); ++j) {
        got[j] = cpu[j].size();
        if (scheme != codec::Scheme::kNone && j % 3 == 1) {
          got[j] = std::min<uint32_t>(got[j], codec::kHeaderBytes + 8);
        }
        if (scheme != codec::Scheme::kNone && cpu.size() > 1 && j + 1 == cpu.size()) got[j] = 0;
        codec::ParsedPacket p;
        if (got[j] == 0) continue;
        ASSERT_EQ(codec::parse_packet(staged.data() + j * stride, got[j], &p), codec::PacketError::kOk);
        ASSERT_EQ(dec.add(p), codec::PacketError::kOk);
      }
      dec.finish();
      const DeviceCodec::Ticket t = dc.decode_rows(m.layout, m.id, staged.data(), stride, got.data(), 0,
                                                   m.layout.rows(), have.data());
      ASSERT_NE(t, 0u);
      EXPECT_EQ(have[0], -2.0f);  // not before the ticket
      ASSERT_TRUE(wait(dc, t));
      EXPECT_EQ(0, std::memcmp(want.data(), have.data(), elems * 4));
    }
  }
}

TEST(DeviceCodec, NoneModeMakesNoCodecAndRowsOutOfRangeFail) {
  codec::CodecConfig cfg;
  Result<std::unique_ptr<DeviceCodec>> none = make_device_codec(DeviceMode::kNone, cfg);
  ASSERT_TRUE(none.is_ok());
  EXPECT_EQ(none.value(), nullptr);
  Message m = make_message(100, codec::Scheme::kRht);
  std::unique_ptr<DeviceCodec> dc = make_device_codec(DeviceMode::kEmulated, cfg).value();
  std::vector<uint8_t> out(cfg.packet_bytes * 4);
  std::vector<uint32_t> sizes(4);
  EXPECT_EQ(dc->encode_rows(m.layout, m.id, m.values.data(), 0, m.layout.rows() + 1, out.data(), cfg.packet_bytes,
                            sizes.data()),
            0u);
  EXPECT_NE(dc->last_error().find("out of range"), std::string::npos) << dc->last_error();
}

TEST(DeviceCodec, ChunksAreAboutHalfAMebibyteOfRows) {
  codec::CodecConfig cfg;
  const codec::Layout big = codec::Layout::make(cfg, codec::DType::kF32, codec::Scheme::kRht, 4 << 20).value();
  EXPECT_EQ(device_rows_per_chunk(big), 4u);  // 4 rows of 2^15 fp32 = 512 KiB
  cfg.row_elems = 8;
  const codec::Layout tiny = codec::Layout::make(cfg, codec::DType::kF32, codec::Scheme::kRht, 4 << 20).value();
  EXPECT_EQ(device_rows_per_chunk(tiny), 16384u);
}

TEST(DeviceCodec, ProbeHonoursTheParams) {
  std::string why;
  EXPECT_EQ(probe_device_mode(false, 1, &why), DeviceMode::kEmulated);
  EXPECT_EQ(probe_device_mode(false, 2, &why), DeviceMode::kEmulatedFault);
  EXPECT_EQ(probe_device_mode(false, 3, &why), DeviceMode::kEmulatedHang);
  EXPECT_EQ(probe_device_mode(true, 0, &why), DeviceMode::kNone);
  EXPECT_EQ(why, "NCCL_TRIM_GPU=off");
  const DeviceMode m = probe_device_mode(false, 0, &why);
  if (m == DeviceMode::kNone) {
    EXPECT_FALSE(why.empty());  // no GPU here: says why
  }
}

}  // namespace
}  // namespace trim::transport
