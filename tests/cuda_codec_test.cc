// The GPU kernels against the CPU codec (their reference): byte-identical packets, bit-identical
// decodes of whole, trimmed and missing packets. Skipped, with the reason, when no CUDA device
// is usable; tests/cuda_index_test.cc checks the same index math on the host.
#include <gtest/gtest.h>

#include <cmath>

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

TEST(CudaCodec, EncodeMatchesCpuEncoderByteForByte) {
  REQUIRE_GPU();
  const MessageId id = codec::testing::test_id(21);
  uint64_t seed = 1000;
  for (const Case& c : all_cases()) {
    SCOPED_TRACE(c.name());
    const CodecConfig cfg = c.config();
    std::string err;
    std::unique_ptr<GpuCodec> gc = GpuCodec::create(cfg, &err);
    ASSERT_NE(gc, nullptr) << err;
    const std::vector<uint8_t> msg = case_message(c, ++seed);
    auto layout = Layout::make(cfg, c.dtype, c.scheme, msg.size());
    ASSERT_TRUE(layout.is_ok());
    DeviceBuffer dmsg(msg.size(), &err);
    ASSERT_TRUE(dmsg.upload(msg.data(), msg.size()));
    const CpuPackets want = cpu_encode(cfg, *layout, id, msg.data());
    std::vector<uint32_t> sizes;
    const std::vector<uint8_t> got = gpu_encode(gc.get(), *layout, id, dmsg, want.stride, seed % 2 == 0, &sizes);
    EXPECT_EQ(sizes, want.sizes);
    ASSERT_EQ(first_packet_diff(want, got.data(), want.stride), "");
  }
}

TEST(CudaCodec, DecodeMatchesCpuDecoderWithCutsAndLosses) {
  REQUIRE_GPU();
  const MessageId id = codec::testing::test_id(22);
  uint64_t seed = 2000;
  for (const Case& c : all_cases()) {
    SCOPED_TRACE(c.name());
    const CodecConfig cfg = c.config();
    std::string err;
    std::unique_ptr<GpuCodec> gc = GpuCodec::create(cfg, &err);
    ASSERT_NE(gc, nullptr) << err;
    const std::vector<uint8_t> msg = case_message(c, ++seed);
    auto layout = Layout::make(cfg, c.dtype, c.scheme, msg.size());
    ASSERT_TRUE(layout.is_ok());
    const CpuPackets pk = cpu_encode(cfg, *layout, id, msg.data());
    PinnedBuffer pinned(pk.buf.size(), &err);
    DeviceBuffer dpk(pk.buf.size(), &err);
    ASSERT_NE(pinned.data(), nullptr) << err;
    std::memcpy(pinned.data(), pk.buf.data(), pk.buf.size());
    ASSERT_TRUE(dpk.upload(pk.buf.data(), pk.buf.size()));
    DeviceBuffer dout(msg.size(), &err);
    for (int untrimmed = 1; untrimmed >= 0; --untrimmed) {
      const std::vector<uint32_t> got = random_cuts(pk, seed * 7 + untrimmed, untrimmed != 0);
      const std::vector<uint8_t> want = cpu_decode(cfg, *layout, id, pk, got);
      const uint8_t* src = (seed + untrimmed) % 2 == 0 ? dpk.data() : pinned.data();
      // Two calls: row 0, then the rest, as a caller finishing rows one chunk at a time does.
      const uint64_t first = layout->row(0).packets;
      GpuCodec::Ticket t = gc->decode_rows_async(*layout, id, src, pk.stride, got.data(), 0, 1, dout.data());
      ASSERT_NE(t, 0u) << gc->last_error();
      if (layout->rows() > 1) {
        t = gc->decode_rows_async(*layout, id, src + first * pk.stride, pk.stride, got.data() + first, 1,
                                  layout->rows() - 1, dout.data());
        ASSERT_NE(t, 0u) << gc->last_error();
      }
      ASSERT_TRUE(gc->wait(t)) << gc->last_error();
      std::vector<uint8_t> out(msg.size());
      ASSERT_TRUE(dout.download(out.data(), out.size()));
      ASSERT_EQ(std::memcmp(want.data(), out.data(), out.size()), 0) << "untrimmed=" << untrimmed;
    }
  }
}

// GPU encode then GPU decode of whole packets: rht fp32 within the codec's bound per row,
// ||V^ - V|| <= (2 log2 n + 4) 2^-24 ||V|| (docs/PROTOCOL.md), other fp32 schemes exact.
TEST(CudaCodec, UntrimmedRoundTripWithinFp32Bound) {
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
      for (uint32_t r = 0; r < layout->rows(); ++r) {
        const codec::RowInfo info = layout->row(r);
        const size_t first = static_cast<size_t>(r) * row_elems;
        double err2 = 0, norm2 = 0;
        for (uint32_t i = 0; i < info.elems; ++i) {
          const double d = static_cast<double>(out[first + i]) - v[first + i];
          err2 += d * d;
          norm2 += static_cast<double>(v[first + i]) * v[first + i];
        }
        const double bound = scheme == Scheme::kRht ? (2 * std::log2(static_cast<double>(row_elems)) + 4) * 0x1p-24 : 0;
        EXPECT_LE(std::sqrt(err2), bound * std::sqrt(norm2)) << codec::scheme_name(scheme) << " row " << r;
      }
    }
  }
}

}  // namespace
}  // namespace trim::gpu::testing
