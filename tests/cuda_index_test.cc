// The GPU kernels' index math and arithmetic order, run on the host (tests/cuda_emu.*):
// these tests need no GPU and run in CI. The same TRIM_HD functions run in cuda/*.cu.
#include <gtest/gtest.h>

#include "codec/fwht.h"
#include "codec/packet.h"
#include "tests/cuda_cases.h"
#include "tests/cuda_emu.h"

namespace trim::gpu::testing {
namespace {

TEST(CudaEmu, GeometryMatchesLayout) {
  for (const Case& c : all_cases()) {
    SCOPED_TRACE(c.name());
    const CodecConfig cfg = c.config();
    auto layout = Layout::make(cfg, c.dtype, c.scheme, static_cast<uint64_t>(c.elems) * codec::dtype_bytes(c.dtype) + c.extra_bytes);
    ASSERT_TRUE(layout.is_ok());
    const RowGeom g = make_geom(cfg, *layout);
    ASSERT_EQ(geom_rows(g), layout->rows());
    uint64_t slot = 0;
    for (uint32_t r = 0; r < layout->rows(); ++r) {
      const codec::RowInfo want = layout->row(r);
      const RowDesc got = row_desc(g, r);
      EXPECT_EQ(got.elems, want.elems);
      EXPECT_EQ(got.epp, want.elems_per_packet);
      EXPECT_EQ(got.packets, want.packets);
      EXPECT_EQ(got.byte_offset, want.byte_offset);
      EXPECT_EQ(got.tail, want.tail);
      EXPECT_EQ(got.scheme, want.scheme);
      EXPECT_EQ(row_first_slot(g, r), slot);
      slot += want.packets;
      for (uint32_t k = 0; k < want.packets; ++k) {
        const uint32_t n = std::min(want.elems_per_packet, want.elems - k * want.elems_per_packet);
        const codec::PlaneBytes pb = codec::plane_bytes(codec::plane_bits(want.scheme, c.dtype, want.tail), n);
        const Planes p = packet_planes(want.scheme, c.dtype, want.tail, n);
        EXPECT_EQ(p.p0, pb.p0);
        EXPECT_EQ(p.p1, pb.p1);
        EXPECT_EQ(p.p2, pb.p2);
      }
    }
  }
}

TEST(CudaEmu, HeaderBytesMatchWriteHeader) {
  std::mt19937_64 rng(3);
  for (int i = 0; i < 200; ++i) {
    HeaderFields f{};
    f.flags = static_cast<uint8_t>(rng() & 6);
    f.scheme = static_cast<uint8_t>(rng() % 5);
    f.dtype = static_cast<uint8_t>(rng() % 4);
    f.head_planes = static_cast<uint8_t>(1 + rng() % 2);
    f.row_log2 = static_cast<uint8_t>(3 + rng() % 13);
    f.cookie = rng();
    f.msg_seq = static_cast<uint32_t>(rng());
    f.msg_bytes = static_cast<uint32_t>(rng());
    f.row = static_cast<uint32_t>(rng());
    f.first_elem = static_cast<uint16_t>(rng());
    f.elem_count = static_cast<uint16_t>(rng());
    f.payload_bytes = static_cast<uint16_t>(rng());
    f.trim_bytes = static_cast<uint16_t>(rng());
    f.scale = static_cast<float>(rng() % 100000) / 7.0f;
    codec::PacketHeader h;
    h.flags = f.flags;
    h.scheme = static_cast<Scheme>(f.scheme);
    h.dtype = static_cast<DType>(f.dtype);
    h.head_planes = f.head_planes;
    h.row_log2 = f.row_log2;
    h.cookie = f.cookie;
    h.msg_seq = f.msg_seq;
    h.msg_bytes = f.msg_bytes;
    h.row = f.row;
    h.first_elem = f.first_elem;
    h.elem_count = f.elem_count;
    h.payload_bytes = f.payload_bytes;
    h.trim_bytes = f.trim_bytes;
    h.scale = f.scale;
    uint8_t want[kHeaderBytes], got[kHeaderBytes];
    codec::write_header(h, want);
    header_bytes(f, got);
    ASSERT_EQ(std::memcmp(want, got, kHeaderBytes), 0) << i;
  }
}

// The kernels' FWHT schedule (passes of up to 5 stages over padded shared memory) gives the
// reference's bits for every block size.
TEST(CudaEmu, FwhtPassesMatchReference) {
  for (int log2n = 0; log2n <= 15; ++log2n) {
    const uint32_t n = 1u << log2n;
    std::vector<float> v = codec::testing::gaussian(n, 10 + log2n);
    std::vector<uint64_t> signs = emu::sign_words(codec::CodecConfig(), 1, 2, n);
    std::vector<float> want(n);
    codec::rht_forward_reference(v.data(), want.data(), log2n, signs.data());
    std::vector<float> s(smem_floats(n));
    for (uint32_t i = 0; i < n; ++i) s[smem_index(i)] = rht_sign(signs.data(), i) ? -v[i] : v[i];
    emu::fwht_row(s, n, nullptr);
    for (uint32_t i = 0; i < n; ++i) ASSERT_EQ(codec::f32_bits(s[smem_index(i)]), codec::f32_bits(want[i])) << log2n << " " << i;
    codec::rht_inverse_reference(want.data(), log2n, signs.data());
    emu::fwht_row(s, n, signs.data());
    for (uint32_t i = 0; i < n; ++i) ASSERT_EQ(codec::f32_bits(s[smem_index(i)]), codec::f32_bits(want[i])) << log2n << " " << i;
  }
}

TEST(CudaEmu, EncodeMatchesCpuEncoderByteForByte) {
  const MessageId id = codec::testing::test_id(11);
  uint64_t seed = 100;
  for (const Case& c : all_cases()) {
    SCOPED_TRACE(c.name());
    const Prepared pc = prepare(c, ++seed);
    ASSERT_NE(pc.layout.row_elems(), 0u);
    const CpuPackets want = cpu_encode(pc.cfg, pc.layout, id, pc.msg.data());
    std::vector<uint8_t> got(want.buf.size(), 0);
    // Two calls, as a pipelining caller makes them: the first row alone, then the rest.
    emu::encode_rows(pc.cfg, pc.layout, id, pc.msg.data(), 0, 1, got.data(), want.stride);
    if (pc.layout.rows() > 1) {
      const uint64_t first = pc.layout.row(0).packets;
      emu::encode_rows(pc.cfg, pc.layout, id, pc.msg.data(), 1, pc.layout.rows() - 1, got.data() + first * want.stride,
                       want.stride);
    }
    ASSERT_EQ(first_packet_diff(want, got.data(), want.stride), "");
  }
}

// Decoded into a destination at every offset mod 8: the raw rows' 8-byte stores (raw_split)
// start where the destination's alignment puts them, and the result does not depend on it.
TEST(CudaEmu, DecodeMatchesCpuDecoderBitForBit) {
  const MessageId id = codec::testing::test_id(12);
  uint64_t seed = 500;
  for (const Case& c : all_cases()) {
    SCOPED_TRACE(c.name());
    const Prepared pc = prepare(c, ++seed);
    ASSERT_NE(pc.layout.row_elems(), 0u);
    const CpuPackets pk = cpu_encode(pc.cfg, pc.layout, id, pc.msg.data());
    for (int untrimmed = 1; untrimmed >= 0; --untrimmed) {
      const std::vector<uint32_t> got = random_cuts(pk, seed * 3 + untrimmed, untrimmed != 0);
      const std::vector<uint8_t> want = cpu_decode(pc.cfg, pc.layout, id, pk, got);
      const size_t offset = (seed + untrimmed) % 8;
      std::vector<uint8_t> out(pc.msg.size() + 8, 0xEE);
      emu::decode_rows(pc.cfg, pc.layout, id, pk.buf.data(), pk.stride, got.data(), 0, pc.layout.rows(),
                       out.data() + offset);
      ASSERT_EQ(std::memcmp(want.data(), out.data() + offset, want.size()), 0)
          << "untrimmed=" << untrimmed << " offset=" << offset;
    }
  }
}

// raw_split: every 8-byte store lands on an 8-byte-aligned address, and head + units + rest
// cover the row exactly once.
TEST(CudaEmu, RawSplitStoresWholeAlignedLines) {
  for (uint64_t addr = 0x1000; addr < 0x1010; ++addr) {
    for (uint32_t bytes : {0u, 1u, 7u, 8u, 9u, 15u, 16u, 17u, 4012u, 32768u, 131072u}) {
      const RawSplit sp = raw_split(addr, bytes);
      ASSERT_LE(sp.head, 7u);
      ASSERT_EQ(sp.rest, sp.head + 8 * sp.units);
      ASSERT_LE(sp.rest, bytes);
      ASSERT_LT(bytes - sp.rest, 8u);
      if (sp.units > 0) {
        ASSERT_EQ((addr + sp.head) % 8, 0u) << addr << " " << bytes;
      }
      // No aligned line is left to the byte-by-byte ends.
      const uint64_t first_line = (addr + 7) / 8 * 8, end_lines = (addr + bytes) / 8 * 8;
      ASSERT_EQ(sp.units, first_line < end_lines ? (end_lines - first_line) / 8 : 0u) << addr << " " << bytes;
    }
  }
}

}  // namespace
}  // namespace trim::gpu::testing
