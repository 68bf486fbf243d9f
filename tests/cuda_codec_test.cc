// The GPU kernels against the CPU codec (their reference): byte-identical packets, bit-identical
// decodes of whole, trimmed and missing packets. Skipped, with the reason, when no CUDA device
// is usable; tests/cuda_index_test.cc checks the same index math on the host.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>

#include "cuda/gpu_codec.h"
#include "tests/cuda_cases.h"

namespace trim::gpu::testing {
namespace {

#define REQUIRE_GPU()                         \
  do {                                        \
    std::string why_;                         \
    if (!gpu_available(&why_)) GTEST_SKIP() << "no usable GPU: " << why_; \
  } while (0)

TEST(CudaCodec, ReportsWhyWhenUnavailable) {
  std::string why;
  if (gpu_available(&why)) GTEST_SKIP() << "a GPU is available";
  EXPECT_FALSE(why.empty());
  std::string err;
  EXPECT_EQ(GpuCodec::create(codec::CodecConfig(), &err), nullptr);
  EXPECT_EQ(err, why);
  int dummy = 0;
  EXPECT_FALSE(is_device_pointer(&dummy));
  PinnedBuffer pinned(4096, &err);
  EXPECT_EQ(pinned.data(), nullptr);
}

TEST(CudaCodec, PointerKinds) {
  REQUIRE_GPU();
  std::string err;
  DeviceBuffer dev(1024, &err);
  ASSERT_NE(dev.data(), nullptr) << err;
  PinnedBuffer pinned(1024, &err);
  ASSERT_NE(pinned.data(), nullptr) << err;
  std::vector<uint8_t> host(16);
  int device = -1;
  EXPECT_TRUE(is_device_pointer(dev.data(), &device));
  EXPECT_GE(device, 0);
  EXPECT_FALSE(is_device_pointer(pinned.data()));
  EXPECT_FALSE(is_device_pointer(host.data()));
  EXPECT_FALSE(is_device_pointer(nullptr));
}

// GPU encode of a whole message in two calls (row 0, then the rest), into pinned host memory
// or device memory; returns the packets in slot order at the CPU's stride.
std::vector<uint8_t> gpu_encode(GpuCodec* gc, const Layout& layout, const MessageId& id, const DeviceBuffer& msg,
                                size_t stride, bool to_device, std::vector<uint32_t>* sizes) {
  const uint64_t n = layout.packets();
  std::vector<uint8_t> out(n * stride, 0);
  sizes->assign(n, 0);
  std::string err;
  PinnedBuffer pinned(n * stride, &err);
  DeviceBuffer dev(n * stride, &err);
  EXPECT_NE(pinned.data(), nullptr) << err;
  uint8_t* dst = to_device ? dev.data() : pinned.data();
  const uint64_t first = layout.row(0).packets;
  GpuCodec::Ticket t1 = gc->encode_rows_async(layout, id, msg.data(), 0, 1, dst, stride, sizes->data());
  EXPECT_NE(t1, 0u) << gc->last_error();
  GpuCodec::Ticket t2 = t1;
  if (layout.rows() > 1) {
    t2 = gc->encode_rows_async(layout, id, msg.data(), 1, layout.rows() - 1, dst + first * stride, stride,
                               sizes->data() + first);
    EXPECT_NE(t2, 0u) << gc->last_error();
  }
  EXPECT_TRUE(gc->wait(t1)) << gc->last_error();
  EXPECT_TRUE(gc->wait(t2)) << gc->last_error();
  EXPECT_TRUE(gc->poll(t2));
  if (to_device) {
    EXPECT_TRUE(dev.download(out.data(), out.size()));
  } else {
    std::memcpy(out.data(), pinned.data(), out.size());
  }
  return out;
}

// A GpuCodec for a case's config, and its message in device memory.
struct GpuCase {
  Prepared pc;
  std::unique_ptr<GpuCodec> gc;
  DeviceBuffer msg;
};

GpuCase gpu_case(const Case& c, uint64_t seed) {
  GpuCase g{prepare(c, seed), nullptr, DeviceBuffer()};
  std::string err;
  g.gc = GpuCodec::create(g.pc.cfg, &err);
  EXPECT_NE(g.gc, nullptr) << err;
  g.msg = DeviceBuffer(g.pc.msg.size(), &err);
  EXPECT_TRUE(g.msg.upload(g.pc.msg.data(), g.pc.msg.size())) << err;
  return g;
}

TEST(CudaCodec, EncodeMatchesCpuEncoderByteForByte) {
  REQUIRE_GPU();
  const MessageId id = codec::testing::test_id(21);
  uint64_t seed = 1000;
  for (const Case& c : all_cases()) {
    SCOPED_TRACE(c.name());
    const GpuCase g = gpu_case(c, ++seed);
    ASSERT_TRUE(g.gc != nullptr && g.pc.layout.row_elems() != 0);
    const CpuPackets want = cpu_encode(g.pc.cfg, g.pc.layout, id, g.pc.msg.data());
    std::vector<uint32_t> sizes;
    const std::vector<uint8_t> got = gpu_encode(g.gc.get(), g.pc.layout, id, g.msg, want.stride, seed % 2 == 0, &sizes);
    EXPECT_EQ(sizes, want.sizes);
    ASSERT_EQ(first_packet_diff(want, got.data(), want.stride), "");
  }
}

// Decoded into a destination offset by a multiple of the element size (any offset for raw
// bytes), so raw rows' 8-byte stores start after an unaligned head.
TEST(CudaCodec, DecodeMatchesCpuDecoderWithCutsAndLosses) {
  REQUIRE_GPU();
  const MessageId id = codec::testing::test_id(22);
  uint64_t seed = 2000;
  for (const Case& c : all_cases()) {
    SCOPED_TRACE(c.name());
    const GpuCase g = gpu_case(c, ++seed);
    ASSERT_TRUE(g.gc != nullptr && g.pc.layout.row_elems() != 0);
    const Layout& layout = g.pc.layout;
    const CpuPackets pk = cpu_encode(g.pc.cfg, layout, id, g.pc.msg.data());
    std::string err;
    PinnedBuffer pinned(pk.buf.size(), &err);
    DeviceBuffer dpk(pk.buf.size(), &err);
    ASSERT_NE(pinned.data(), nullptr) << err;
    std::memcpy(pinned.data(), pk.buf.data(), pk.buf.size());
    ASSERT_TRUE(dpk.upload(pk.buf.data(), pk.buf.size()));
    DeviceBuffer dout(g.pc.msg.size() + 8, &err);
    for (int untrimmed = 1; untrimmed >= 0; --untrimmed) {
      const std::vector<uint32_t> got = random_cuts(pk, seed * 7 + untrimmed, untrimmed != 0);
      const std::vector<uint8_t> want = cpu_decode(g.pc.cfg, layout, id, pk, got);
      const uint8_t* src = (seed + untrimmed) % 2 == 0 ? dpk.data() : pinned.data();
      const size_t offset = (seed + untrimmed) % 8 / codec::dtype_bytes(c.dtype) * codec::dtype_bytes(c.dtype);
      uint8_t* dst = dout.data() + offset;
      // Two calls: row 0, then the rest, as a caller finishing rows one chunk at a time does.
      const uint64_t first = layout.row(0).packets;
      GpuCodec::Ticket t = g.gc->decode_rows_async(layout, id, src, pk.stride, got.data(), 0, 1, dst);
      ASSERT_NE(t, 0u) << g.gc->last_error();
      if (layout.rows() > 1) {
        t = g.gc->decode_rows_async(layout, id, src + first * pk.stride, pk.stride, got.data() + first, 1,
                                    layout.rows() - 1, dst);
        ASSERT_NE(t, 0u) << g.gc->last_error();
      }
      ASSERT_TRUE(g.gc->wait(t)) << g.gc->last_error();
      std::vector<uint8_t> out(g.pc.msg.size());
      ASSERT_TRUE(dout.download(out.data(), out.size(), offset));
      ASSERT_EQ(std::memcmp(want.data(), out.data(), out.size()), 0) << "untrimmed=" << untrimmed;
    }
  }
}

// Bad calls give ticket 0 and a reason, and leave the codec (and the thread's CUDA error
// state) usable: a launch that cannot get its shared memory must not make the next, valid
// launch read as failed.
TEST(CudaCodec, FailedCallsGiveTicketZeroAndNoStaleError) {
  REQUIRE_GPU();
  const MessageId id = codec::testing::test_id(24);
  std::string err;
  // 89-byte packets (8 fp32 elements each) of 2^15 rows: ~230 KiB of shared memory a block.
  CodecConfig tiny = codec::testing::config(Scheme::kSign, 4096, 32768);
  tiny.packet_bytes = 89;
  const CodecConfig ok_cfg = codec::testing::config(Scheme::kSign, 4096, 1024);
  std::unique_ptr<GpuCodec> bad = GpuCodec::create(tiny, &err), good = GpuCodec::create(ok_cfg, &err);
  ASSERT_TRUE(bad != nullptr && good != nullptr) << err;
  const std::vector<float> v = codec::testing::gaussian(32768, 5);
  DeviceBuffer dmsg(v.size() * 4 + 4, &err), dpk(1 << 24, &err);
  ASSERT_TRUE(dmsg.upload(v.data(), v.size() * 4));
  auto big = Layout::make(tiny, DType::kF32, Scheme::kSign, v.size() * 4);
  auto small = Layout::make(ok_cfg, DType::kF32, Scheme::kSign, v.size() * 4);
  ASSERT_TRUE(big.is_ok() && small.is_ok());
  std::vector<uint32_t> sizes(std::max(big->packets(), small->packets()));
  if (bad->encode_rows_async(*big, id, dmsg.data(), 0, 1, dpk.data(), tiny.packet_bytes, sizes.data()) == 0) {
    EXPECT_FALSE(bad->last_error().empty());
  }  // else this GPU has the shared memory for it
  const GpuCodec::Ticket t =
      good->encode_rows_async(*small, id, dmsg.data(), 0, small->rows(), dpk.data(), ok_cfg.packet_bytes, sizes.data());
  ASSERT_NE(t, 0u) << good->last_error();
  EXPECT_TRUE(good->wait(t)) << good->last_error();
  // A misaligned fp32 output, host memory as the message, and rows past the message.
  std::vector<uint32_t> got(small->packets(), 0);
  EXPECT_EQ(good->decode_rows_async(*small, id, dpk.data(), ok_cfg.packet_bytes, got.data(), 0, 1, dmsg.data() + 2),
            0u);
  EXPECT_NE(good->last_error().find("aligned"), std::string::npos) << good->last_error();
  EXPECT_EQ(good->encode_rows_async(*small, id, v.data(), 0, 1, dpk.data(), ok_cfg.packet_bytes, sizes.data()), 0u);
  EXPECT_EQ(good->encode_rows_async(*small, id, dmsg.data(), small->rows(), 1, dpk.data(), ok_cfg.packet_bytes,
                                    sizes.data()),
            0u);
  EXPECT_TRUE(good->poll(0));
}

// GPU encode then GPU decode of whole packets: every scheme gives back the input's bits (rht's
// planes 1+2 carry the input, so no inverse transform runs).
TEST(CudaCodec, UntrimmedRoundTripIsExact) {
  REQUIRE_GPU();
  const MessageId id = codec::testing::test_id(23);
  for (Scheme scheme : {Scheme::kRht, Scheme::kSign, Scheme::kSq, Scheme::kSd, Scheme::kNone}) {
    for (uint32_t row_elems : {1024u, 32768u}) {
      const CodecConfig cfg = codec::testing::config(scheme, 4096, row_elems);
      std::string err;
      std::unique_ptr<GpuCodec> gc = GpuCodec::create(cfg, &err);
      ASSERT_NE(gc, nullptr) << err;
      const std::vector<float> v = codec::testing::gaussian(3 * row_elems + 77, row_elems + 5);
      const size_t bytes = v.size() * 4;
      auto layout = Layout::make(cfg, DType::kF32, scheme, bytes);
      ASSERT_TRUE(layout.is_ok());
      DeviceBuffer dmsg(bytes, &err), dpk(layout->packets() * cfg.packet_bytes, &err), dout(bytes, &err);
      ASSERT_TRUE(dmsg.upload(v.data(), bytes));
      std::vector<uint32_t> sizes(layout->packets());
      GpuCodec::Ticket t = gc->encode_rows_async(*layout, id, dmsg.data(), 0, layout->rows(), dpk.data(),
                                                 cfg.packet_bytes, sizes.data());
      ASSERT_NE(t, 0u) << gc->last_error();
      t = gc->decode_rows_async(*layout, id, dpk.data(), cfg.packet_bytes, sizes.data(), 0, layout->rows(),
                                dout.data());
      ASSERT_NE(t, 0u) << gc->last_error();
      ASSERT_TRUE(gc->wait(t)) << gc->last_error();
      std::vector<float> out(v.size());
      ASSERT_TRUE(dout.download(out.data(), bytes));
      EXPECT_EQ(std::memcmp(out.data(), v.data(), bytes), 0) << codec::scheme_name(scheme) << " rows of " << row_elems;
    }
  }
}

}  // namespace
}  // namespace trim::gpu::testing
