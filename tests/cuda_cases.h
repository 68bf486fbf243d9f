// Cases and CPU references shared by the GPU codec tests (tests/cuda_codec_test.cc) and the
// host emulation of its kernels (tests/cuda_index_test.cc).
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <random>
#include <string>
#include <vector>

#include "codec/planes.h"
#include "tests/codec_util.h"

namespace trim::gpu::testing {

using codec::CodecConfig;
using codec::DType;
using codec::Layout;
using codec::MessageId;
using codec::Scheme;

struct Case {
  Scheme scheme;
  DType dtype;
  uint32_t elems;
  uint32_t extra_bytes;  // a raw tail (< element size)
  uint32_t row_elems;
  uint32_t mtu;
  uint8_t head_planes;
  bool nonfinite;        // an inf in the first row (rht/sign fall back, sq/sd clip it)

  std::string name() const {
    return std::string(codec::scheme_name(scheme)) + "/" + codec::dtype_name(dtype) + " elems=" +
           std::to_string(elems) + "+" + std::to_string(extra_bytes) + " row=" + std::to_string(row_elems) +
           " mtu=" + std::to_string(mtu) + " heads=" + std::to_string(head_planes) + (nonfinite ? " inf" : "");
  }
  CodecConfig config() const { return codec::testing::config(scheme, mtu, row_elems, head_planes); }
};

// Every scheme and dtype, sizes 1, 3, 1000, 32769 and a multi-row message, row sizes across
// NCCL_TRIM_ROW_ELEMS' range, MTUs and head widths rotating so each value meets each scheme;
// then raw bytes (scheme none, exact traffic such as NCCL's LL lines) of sizes around packet
// and 8-byte boundaries.
inline std::vector<Case> all_cases() {
  std::vector<Case> out;
  const Scheme schemes[] = {Scheme::kNone, Scheme::kSign, Scheme::kSq, Scheme::kSd, Scheme::kRht};
  const DType dtypes[] = {DType::kF32, DType::kBF16, DType::kF16};
  const uint32_t sizes[] = {1, 3, 1000, 32769, 3 * 1024 + 5};
  const uint32_t rows[] = {8, 1024, 32768};
  const uint32_t mtus[] = {1500, 4096, 9000};
  uint32_t n = 0;
  for (Scheme s : schemes) {
    for (DType d : dtypes) {
      for (uint32_t e : sizes) {
        for (uint32_t r : rows) {
          const uint32_t extra = (n % 3 == 0) ? codec::dtype_bytes(d) - 1 : 0;
          out.push_back(Case{s, d, e, extra, r, mtus[n % 3], static_cast<uint8_t>(1 + (n / 3) % 2), n % 5 == 1});
          ++n;
        }
      }
    }
  }
  for (uint32_t e : {1u, 7u, 8u, 1000u, 4013u, 32769u, 100003u}) {
    for (uint32_t r : rows) {
      out.push_back(Case{Scheme::kNone, DType::kRaw, e, 0, r, mtus[n % 3], 1, false});
      ++n;
    }
  }
  return out;
}

inline std::vector<uint8_t> case_message(const Case& c, uint64_t seed) {
  std::vector<uint8_t> m = codec::testing::message_bytes(c.dtype, c.elems, c.extra_bytes, seed, true);
  if (c.nonfinite && c.elems > 2) {
    const size_t at = (c.elems / 2) * codec::dtype_bytes(c.dtype) % (std::min<size_t>(c.elems, c.row_elems) *
                                                                      codec::dtype_bytes(c.dtype));
    const size_t idx = at - at % codec::dtype_bytes(c.dtype);
    if (c.dtype == DType::kF32) {
      const float inf = INFINITY;
      std::memcpy(&m[idx], &inf, 4);
    } else {
      const uint16_t inf = c.dtype == DType::kBF16 ? 0x7F80 : 0x7C00;
      std::memcpy(&m[idx], &inf, 2);
    }
  }
  return m;
}

// A case's config, message and layout (layout.row_elems() == 0 when Layout::make failed).
struct Prepared {
  CodecConfig cfg;
  std::vector<uint8_t> msg;
  Layout layout;
};

inline Prepared prepare(const Case& c, uint64_t seed) {
  Prepared p{c.config(), case_message(c, seed), Layout()};
  auto layout = Layout::make(p.cfg, c.dtype, c.scheme, p.msg.size());
  EXPECT_TRUE(layout.is_ok()) << layout.status().to_string();
  if (layout.is_ok()) p.layout = *layout;
  return p;
}

// The CPU encoder's packets of a whole message in slot order (packet j at j * stride), with
// the portable reference kernels, which define the bits (the AVX-512 norms sum in another
// order, so their scale may differ in the last bit).
struct CpuPackets {
  std::vector<uint8_t> buf;
  std::vector<uint32_t> sizes;
  size_t stride;
};

inline CpuPackets cpu_encode(const CodecConfig& cfg, const Layout& layout, const MessageId& id, const uint8_t* msg) {
  CpuPackets p;
  p.stride = cfg.packet_bytes;
  p.buf.assign(layout.packets() * p.stride, 0);
  p.sizes.assign(layout.packets(), 0);
  codec::Encoder enc(cfg);
  uint64_t slot = 0;
  for (uint32_t r = 0; r < layout.rows(); ++r) {
    auto n = enc.encode_row(layout, id, msg, r, p.buf.data() + slot * p.stride, p.stride, p.sizes.data() + slot);
    EXPECT_TRUE(n.is_ok());
    slot += layout.row(r).packets;
  }
  return p;
}

// Bytes of each packet that arrive: whole, cut at a random byte (header kept), or missing (0).
inline std::vector<uint32_t> random_cuts(const CpuPackets& p, uint64_t seed, bool untrimmed) {
  std::mt19937_64 rng(seed);
  std::vector<uint32_t> got(p.sizes.size());
  for (size_t j = 0; j < got.size(); ++j) {
    const uint32_t size = p.sizes[j];
    const uint32_t roll = static_cast<uint32_t>(rng() % 10);
    if (untrimmed || roll < 4) {
      got[j] = size;
    } else if (roll < 5) {
      got[j] = 0;
    } else {
      got[j] = codec::kHeaderBytes + static_cast<uint32_t>(rng() % (size - codec::kHeaderBytes + 1));
    }
  }
  return got;
}

// codec::Decoder's output for those cuts (TRIMMED flag set on cut packets, as a switch does).
inline std::vector<uint8_t> cpu_decode(const CodecConfig& cfg, const Layout& layout, const MessageId& id,
                                       const CpuPackets& p, const std::vector<uint32_t>& got) {
  std::vector<uint8_t> out(layout.bytes(), 0xCD);
  codec::Decoder dec(cfg);
  EXPECT_TRUE(dec.begin(layout, id, out.data()).is_ok());
  for (size_t j = 0; j < got.size(); ++j) {
    if (got[j] == 0) continue;
    std::vector<uint8_t> pkt(p.buf.begin() + j * p.stride, p.buf.begin() + j * p.stride + p.sizes[j]);
    if (got[j] < pkt.size()) codec::mark_trimmed(pkt.data());
    codec::ParsedPacket pp;
    EXPECT_EQ(codec::parse_packet(pkt.data(), got[j], &pp), codec::PacketError::kOk);
    EXPECT_EQ(dec.add(pp), codec::PacketError::kOk);
  }
  dec.finish();
  return out;
}

// First differing packet byte, for a readable failure.
inline std::string first_packet_diff(const CpuPackets& want, const uint8_t* got, size_t got_stride) {
  for (size_t j = 0; j < want.sizes.size(); ++j) {
    for (uint32_t b = 0; b < want.sizes[j]; ++b) {
      const uint8_t w = want.buf[j * want.stride + b], g = got[j * got_stride + b];
      if (w != g) {
        return "packet " + std::to_string(j) + " byte " + std::to_string(b) + ": want " + std::to_string(w) +
               " got " + std::to_string(g);
      }
    }
  }
  return "";
}

}  // namespace trim::gpu::testing
