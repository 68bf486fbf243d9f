// The 16-bit dtypes' vector kernels (bf16, fp16: planes_kernels_16.inc) against their portable
// references, bit for bit: every size 0..300 and large odd ones, every alignment, every special
// value class, guard bytes after each output; then whole bf16/fp16 messages through both paths.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "codec/decoder.h"
#include "codec/encoder.h"
#include "codec/planes.h"
#include "codec/types.h"

namespace trim::codec {
namespace {

struct Isa16 {
  const char* name;
  bool (*supported)();
  decltype(&scalar::widen16) widen16;
  decltype(&scalar::narrow16) narrow16;
  decltype(&scalar::pack16_sign_layout) pack16_sign_layout;
  decltype(&scalar::assemble16) assemble16;
  decltype(&scalar::widen16_sum_squares) widen16_sum_squares;
  decltype(&scalar::pack_heads_sum_abs) pack_heads_sum_abs;
  decltype(&scalar::fill_heads16) fill_heads16;
};
#define TRIM_ISA16(ns)                                                                                           \
  Isa16 {                                                                                                        \
    #ns, ns::supported, ns::widen16, ns::narrow16, ns::pack16_sign_layout, ns::assemble16, ns::widen16_sum_squares, \
        ns::pack_heads_sum_abs, ns::fill_heads16                                                                 \
  }

void PrintTo(const Isa16& isa, std::ostream* os) { *os << isa.name; }

class Planes16Kernel : public ::testing::TestWithParam<Isa16> {
 protected:
  void SetUp() override {
    if (!GetParam().supported()) GTEST_SKIP() << "this CPU has no " << GetParam().name;
  }
};
INSTANTIATE_TEST_SUITE_P(PlanesIsa, Planes16Kernel, ::testing::Values(TRIM_ISA16(avx512), TRIM_ISA16(avx2)),
                         [](const ::testing::TestParamInfo<Isa16>& info) { return std::string(info.param.name); });

std::vector<uint32_t> sizes() {
  std::vector<uint32_t> s;
  for (uint32_t n = 0; n <= 300; ++n) s.push_back(n);
  for (uint32_t n : {1000u, 1003u, 4097u, 32769u}) s.push_back(n);
  return s;
}

// 16-bit rows: random patterns and the special ones of both dtypes (NaNs quiet and signalling
// with payloads, infs, zeros, subnormals, the extremes), each sign.
std::vector<uint16_t> values16(uint32_t n, uint32_t seed) {
  static const uint16_t kSpecials[] = {0x0000, 0x0001, 0x03FF, 0x0400, 0x007F, 0x0080, 0x7BFF, 0x7C00, 0x7C01,
                                       0x7D55, 0x7E00, 0x7FFF, 0x7F7F, 0x7F80, 0x7F81, 0x7FC0, 0x3C00, 0x3F80};
  std::mt19937 rng(seed);
  std::vector<uint16_t> v(n);
  for (uint16_t& x : v) {
    x = static_cast<uint16_t>(rng());
    if (rng() % 3 == 0) x = static_cast<uint16_t>(kSpecials[rng() % std::size(kSpecials)] | (rng() % 2 ? 0x8000 : 0));
  }
  return v;
}

// fp32 rows for narrowing: every fp32 class, and values on and next to each rounding boundary of
// both dtypes (ties to even either way, fp16's subnormal steps and its overflow threshold).
std::vector<float> values32(uint32_t n, uint32_t seed) {
  static const uint32_t kSpecials[] = {0x7FC00000u, 0x7F800001u, 0xFFC12345u, 0x7FBFFFFFu, 0x7F800000u, 0xFF800000u,
                                       0x00000000u, 0x80000000u, 0x00000001u, 0x807FFFFFu, 0x7F7FFFFFu, 0x477FEFFFu,
                                       0x477FF000u, 0x477FE000u, 0x38800000u, 0x387FFFFFu, 0x33000000u, 0x33000001u,
                                       0x32FFFFFFu, 0x7F7F8000u, 0x7F7F7FFFu, 0xB3800000u, 0x3F808000u, 0x3F818000u};
  std::mt19937 rng(seed);
  std::vector<float> v(n);
  for (float& x : v) {
    uint32_t u = rng();
    switch (rng() % 6) {
      case 0: u = kSpecials[rng() % std::size(kSpecials)]; break;
      case 1: u = (u & 0xFFFF0000u) | (0x7FFFu + rng() % 3); break;  // bf16 ties and neighbours
      case 2: u = (u & 0xFFFFE000u) | (0xFFFu + rng() % 3); break;   // fp16 (normal) ties and neighbours
      case 3: {  // fp16's subnormal range (exponents 102..112): its ties and their neighbours
        const uint32_t exp = 102 + rng() % 11, shift = 126 - exp;  // 14..24 bits go
        const uint32_t keep = shift >= 23 ? 0 : (u & 0x7FFFFFu) >> shift << shift;
        const uint32_t low = ((1u << (shift - 1)) - 1 + rng() % 3) & 0x7FFFFFu;
        u = (u & 0x80000000u) | (exp << 23) | keep | low;
        break;
      }
      default: break;  // any pattern
    }
    x = bits_f32(u);
  }
  return v;
}

// AVX-512's fp16 widening is the hardware's, which quiets a signalling NaN (sets bit 22); the
// scalar one keeps it. No NaN bit reaches the wire (a NaN row goes as sign, from the input's own
// bits), so that lane may differ there, and only there.
bool widened_equal(const Isa16& k, bool bf16, float a, float b) {
  const bool quieted = !bf16 && std::string(k.name) == "avx512" && std::isnan(a) &&
                       (f32_bits(a) | 0x00400000u) == f32_bits(b);
  return f32_bits(a) == f32_bits(b) || quieted;
}

TEST_P(Planes16Kernel, EverySizeAndAlignmentMatchesReference) {
  const Isa16& k = GetParam();
  for (uint32_t n : sizes()) {
    for (uint32_t off = 0; off < 8; off += n > 300 ? 3 : 1) {
      const std::string at = "n=" + std::to_string(n) + " off=" + std::to_string(off);
      const std::vector<uint16_t> row = values16(n, 5 * n + off);
      std::vector<uint16_t> in(off + n + 8, 0x1234);
      std::copy(row.begin(), row.end(), in.begin() + off);
      const uint16_t* h = in.data() + off;
      for (bool bf16 : {true, false}) {
        std::vector<float> a(off + n + 8, 7.0f), b = a;
        scalar::widen16(h, n, bf16, a.data() + off);
        k.widen16(h, n, bf16, b.data() + off);
        for (size_t i = 0; i < a.size(); ++i) {
          ASSERT_TRUE(widened_equal(k, bf16, a[i], b[i]))
              << at << " bf16=" << bf16 << " i=" << i << ": " << std::hex << f32_bits(a[i]) << " vs " << f32_bits(b[i]);
        }
        const std::vector<float> f32 = values32(n, 3 * n + off + bf16);
        std::vector<float> fin(off + n, 0.0f);
        std::copy(f32.begin(), f32.end(), fin.begin() + off);
        std::vector<uint16_t> x(off + n + 8, 0xBEEF), y = x;
        scalar::narrow16(fin.data() + off, n, bf16, x.data() + off);
        k.narrow16(fin.data() + off, n, bf16, y.data() + off);
        for (size_t i = 0; i < x.size(); ++i) {
          ASSERT_EQ(x[i], y[i]) << at << " narrow bf16=" << bf16 << " i=" << i << " in=" << std::hex
                                << (i >= off && i < off + n ? f32_bits(fin[i]) : 0u);
        }
      }
      // Planes 0+1 (sign layout): the exact bytes, nothing written past them.
      const uint32_t p0 = (n + 7) / 8, p1 = (15 * n + 7) / 8;
      std::vector<uint8_t> pa(off + p0 + p1 + 32, 0xA5), pb = pa;
      scalar::pack16_sign_layout(h, n, pa.data() + off, pa.data() + off + p0);
      k.pack16_sign_layout(h, n, pb.data() + off, pb.data() + off + p0);
      ASSERT_EQ(pa, pb) << at << " pack";
      // Assemble: random planes (every head and field pattern), exactly the planes' bytes so a
      // read past them is a heap overflow under ASan; and the packed row back to its bits.
      std::mt19937 rng(n * 8 + off);
      for (bool value_layout : {false, true}) {
        const uint32_t q1 = value_layout ? 2 * n : p1;
        std::vector<uint8_t> planes(p0 + q1);
        for (uint8_t& c : planes) c = static_cast<uint8_t>(rng());
        std::vector<uint16_t> x(off + n + 8, 0xBEEF), y = x;
        scalar::assemble16(planes.data(), planes.data() + p0, value_layout, n, x.data() + off);
        k.assemble16(planes.data(), planes.data() + p0, value_layout, n, y.data() + off);
        ASSERT_EQ(x, y) << at << " assemble value_layout=" << value_layout;
      }
      // Head-only estimates in 16 bits: what narrowing fill_heads' fp32 estimates gives (the
      // decoder's former path), from any element on, for estimates of every class.
      std::vector<uint8_t> heads(p0);
      for (uint8_t& c : heads) c = static_cast<uint8_t>(rng());
      for (uint32_t begin : {0u, 1u, 3u, 8u, 9u, 16u, 17u, 33u}) {
        if (begin > n) continue;
        for (bool bf16 : {true, false}) {
          const float est[2] = {bits_f32(0xC0490FDBu ^ rng() % 65536), bits_f32(rng())};
          uint16_t est16[2];
          scalar::narrow16(est, 2, bf16, est16);
          std::vector<float> f(n - begin);
          scalar::fill_heads(heads.data(), begin, n, est[0], est[1], f.data());
          std::vector<uint16_t> want(off + n - begin + 8, 0xBEEF), got = want;
          scalar::narrow16(f.data(), n - begin, bf16, want.data() + off);
          k.fill_heads16(heads.data(), begin, n, est16[0], est16[1], got.data() + off);
          ASSERT_EQ(want, got) << at << " fill_heads16 begin=" << begin << " bf16=" << bf16;
        }
      }
      std::vector<uint8_t> packed(pb.begin() + off, pb.begin() + off + p0 + p1);
      std::vector<uint16_t> back(n);
      k.assemble16(packed.data(), packed.data() + p0, false, n, back.data());
      ASSERT_TRUE(std::equal(back.begin(), back.end(), h)) << at << " pack then assemble";
    }
  }
}

// Bits of a double, so signed zeros compare exactly.
uint64_t f64_bits(double d) {
  uint64_t u;
  std::memcpy(&u, &d, 8);
  return u;
}

// The fused norm kernels: widen16_sum_squares is widen16 + sum_squares (+ sum_abs) to the bit;
// pack_heads_sum_abs, called packet by packet, gives the sign bits and sum_abs's lanes. Rows with
// NaN/inf (finiteness and heads must still agree) and finite ones (every sum to the bit).
TEST_P(Planes16Kernel, FusedNormsMatchReference) {
  const Isa16& k = GetParam();
  for (uint32_t n : sizes()) {
    for (uint32_t off = 0; off < 8; off += n > 300 ? 3 : 1) {
      for (bool finite_only : {false, true}) {
        const std::string at = "n=" + std::to_string(n) + " off=" + std::to_string(off) + " finite=" +
                               std::to_string(finite_only);
        for (bool bf16 : {true, false}) {
          std::vector<uint16_t> in(off + n, 0);
          const std::vector<uint16_t> row = values16(n, 9 * n + off);
          const uint16_t exp_mask = bf16 ? 0x7F80 : 0x7C00;
          for (uint32_t i = 0; i < n; ++i) {
            in[off + i] = finite_only && (row[i] & exp_mask) == exp_mask ? 0x8000 : row[i];
          }
          for (bool with_abs : {false, true}) {
            std::vector<float> a(off + n + 8, 7.0f), b = a;
            bool fa = false, fb = false;
            double la = -1.0, lb = -1.0;
            const double sa = scalar::widen16_sum_squares(in.data() + off, n, bf16, a.data() + off, &fa,
                                                          with_abs ? &la : nullptr);
            const double sb =
                k.widen16_sum_squares(in.data() + off, n, bf16, b.data() + off, &fb, with_abs ? &lb : nullptr);
            for (size_t i = 0; i < a.size(); ++i) ASSERT_TRUE(widened_equal(k, bf16, a[i], b[i])) << at << " i=" << i;
            ASSERT_EQ(f64_bits(sa), f64_bits(sb)) << at << " bf16=" << bf16;
            ASSERT_EQ(fa, fb) << at;
            if (finite_only) {
              ASSERT_TRUE(fa) << at;
            }
            if (with_abs && fa) {
              ASSERT_EQ(f64_bits(la), f64_bits(lb)) << at << " bf16=" << bf16;
              ASSERT_EQ(f64_bits(la), f64_bits(scalar::sum_abs(a.data() + off, n))) << at;
            }
          }
        }
        // Heads of fp32 rows cut into packets of `epp` (a multiple of 8) at a byte offset.
        std::vector<float> f(off + n, 0.0f);
        const std::vector<float> row = values32(n, 13 * n + off);
        for (uint32_t i = 0; i < n; ++i) f[off + i] = finite_only && !std::isfinite(row[i]) ? -0.0f : row[i];
        const float* v = f.data() + off;
        for (uint32_t epp : {8u, 24u, 40u, 2032u}) {
          const uint32_t p0 = (n + 7) / 8;
          std::vector<uint8_t> pa(off + p0 + 16, 0xA5), pb = pa;
          double la[8], lb[8];
          std::fill(la, la + 8, 0.5);  // they add to what is there
          std::fill(lb, lb + 8, 0.5);
          for (uint32_t first = 0; first < n; first += epp) {
            const uint32_t m = std::min(epp, n - first);
            scalar::pack_heads_sum_abs(v + first, m, pa.data() + off + first / 8, la);
            k.pack_heads_sum_abs(v + first, m, pb.data() + off + first / 8, lb);
          }
          ASSERT_EQ(pa, pb) << at << " epp=" << epp;
          bool all_finite = true;
          (void)scalar::sum_squares(v, n, &all_finite);
          if (!all_finite) continue;
          for (int j = 0; j < 8; ++j) ASSERT_EQ(f64_bits(la[j]), f64_bits(lb[j])) << at << " epp=" << epp;
          double lanes[8] = {0, 0, 0, 0, 0, 0, 0, 0};
          for (uint32_t first = 0; first < n; first += epp) {
            k.pack_heads_sum_abs(v + first, std::min(epp, n - first), pb.data() + off + first / 8, lanes);
          }
          ASSERT_EQ(f64_bits(lanes_total(lanes)), f64_bits(scalar::sum_abs(v, n))) << at << " epp=" << epp;
        }
      }
    }
  }
}

// Every 16-bit pattern widens exactly and narrows back to itself (NaNs too: widening keeps the
// payload, narrowing keeps a quiet one); every 2^-12th fp32 pattern narrows as the reference.
TEST_P(Planes16Kernel, AllPatterns) {
  const Isa16& k = GetParam();
  std::vector<uint16_t> all(65536);
  for (uint32_t i = 0; i < 65536; ++i) all[i] = static_cast<uint16_t>(i);
  for (bool bf16 : {true, false}) {
    std::vector<float> a(65536), b(65536);
    scalar::widen16(all.data(), 65536, bf16, a.data());
    k.widen16(all.data(), 65536, bf16, b.data());
    for (uint32_t i = 0; i < 65536; ++i) {
      ASSERT_TRUE(widened_equal(k, bf16, a[i], b[i])) << "bf16=" << bf16 << " " << std::hex << i;
    }
    std::vector<uint16_t> x(65536), y(65536);
    scalar::narrow16(a.data(), 65536, bf16, x.data());
    k.narrow16(a.data(), 65536, bf16, y.data());
    ASSERT_EQ(x, y) << "bf16=" << bf16;
    for (uint32_t i = 0; i < 65536; ++i) {
      const bool quiet_nan = bf16 ? (i & 0x7FC0) == 0x7FC0 : (i & 0x7E00) == 0x7E00;
      const bool nan = bf16 ? (i & 0x7FFF) > 0x7F80 : (i & 0x7FFF) > 0x7C00;
      if (!nan || quiet_nan) {
        ASSERT_EQ(y[i], i) << "bf16=" << bf16 << " " << std::hex << i;
      }
    }
    std::vector<float> f(1u << 20);
    for (uint32_t i = 0; i < f.size(); ++i) f[i] = bits_f32(i * 4096u + (i % 4096));
    std::vector<uint16_t> fx(f.size()), fy(f.size());
    scalar::narrow16(f.data(), static_cast<uint32_t>(f.size()), bf16, fx.data());
    k.narrow16(f.data(), static_cast<uint32_t>(f.size()), bf16, fy.data());
    ASSERT_EQ(fx, fy) << "bf16=" << bf16;
  }
}

// Element i of a 16-bit message: Gaussian in the dtype, with the special patterns of both
// dtypes at some positions (NaN rows go as sign; infs, zeros, subnormals anywhere).
std::vector<uint8_t> message16(DType dt, uint32_t elems, uint32_t seed, bool nonfinite) {
  const bool bf16 = dt == DType::kBF16;
  static const uint16_t kFinite16[] = {0x0000, 0x8000, 0x0001, 0x8003, 0x03FF, 0x0080, 0x807F, 0x7BFF, 0xFBFF};
  static const uint16_t kNonFinite16[] = {0x7C00, 0xFC00, 0x7F80, 0xFF80, 0x7E05, 0x7C01, 0x7FC3, 0xFF81};
  std::mt19937 rng(seed);
  std::normal_distribution<float> g;
  std::vector<uint8_t> msg(2 * static_cast<size_t>(elems));
  for (uint32_t i = 0; i < elems; ++i) {
    uint16_t h = bf16 ? f32_to_bf16(g(rng)) : f32_to_f16(g(rng));
    if (rng() % 61 == 0) h = kFinite16[rng() % std::size(kFinite16)];
    if (nonfinite && rng() % 997 == 0) h = kNonFinite16[rng() % std::size(kNonFinite16)];
    std::memcpy(&msg[2 * i], &h, 2);
  }
  return msg;
}

// Whole bf16/fp16 messages on the vector path and the forced scalar path: the same packets
// (headers and payloads), an untrimmed decode that gives back every input bit, and the same
// bits out of both decoders for packets cut at the trim point, inside plane 1, or dropped.
TEST(Planes16Paths, ScalarAndVectorCodecsAgree) {
  if (std::string(kernels_isa()) == "scalar") GTEST_SKIP() << "no AVX-512 or AVX2 here: only one path to run";
  for (DType dt : {DType::kBF16, DType::kF16}) {
    for (uint32_t elems : {1u, 7u, 31u, 33u, 1000u, 32769u}) {
      for (uint8_t head_bits : {uint8_t{1}, uint8_t{2}, uint8_t{16}}) {
        for (Scheme scheme : {Scheme::kSign, Scheme::kRht, Scheme::kRotated, Scheme::kSq, Scheme::kSd}) {
          if (head_bits == 2 && !sign_head(scheme)) continue;
          for (bool nonfinite : {false, true}) {
            const std::string at = std::string(scheme_name(scheme)) + " " + dtype_name(dt) + " elems=" +
                                   std::to_string(elems) + " head_bits=" + std::to_string(head_bits) +
                                   " nonfinite=" + std::to_string(nonfinite);
            const std::vector<uint8_t> msg = message16(dt, elems, elems * 31 + head_bits, nonfinite);
            CodecConfig cfg;
            cfg.scheme = scheme;
            cfg.row_elems = 4096;
            cfg.head_bits = head_bits;
            if (!cfg.validate().is_ok()) continue;
            Layout layout = Layout::make(cfg, dt, scheme, msg.size()).value();
            const MessageId id{9, 3, true};
            std::vector<std::vector<uint8_t>> packets[2];
            for (int path = 0; path < 2; ++path) {
              kernels_force_scalar(path == 1);
              Encoder enc(cfg);
              packets[path] = enc.encode_message(layout, id, msg.data()).value();
            }
            kernels_force_scalar(false);
            // AVX-512 draws sq/sd's random heads in its own kernel (planes_test.cc's codec test
            // leaves those payloads out there too); elsewhere every byte must agree.
            const bool heads_may_differ = std::string(kernels_isa()) == "avx512" && !sign_head(scheme);
            ASSERT_EQ(packets[0].size(), packets[1].size()) << at;
            for (size_t k = 0; k < packets[0].size(); ++k) {
              const size_t compared = heads_may_differ ? kHeaderBytes : packets[0][k].size();
              ASSERT_EQ(packets[0][k].size(), packets[1][k].size()) << at;
              ASSERT_TRUE(std::equal(packets[0][k].begin(), packets[0][k].begin() + compared, packets[1][k].begin()))
                  << at << " packet " << k;
            }
            for (int cut = 0; cut < 4; ++cut) {  // 0: whole; 1: heads; 2: into plane 1; 3: some dropped
              std::vector<uint8_t> out[2];
              for (int path = 0; path < 2; ++path) {
                kernels_force_scalar(path == 1);
                Decoder dec(cfg);
                out[path].assign(msg.size(), 0xCD);
                ASSERT_TRUE(dec.begin(layout, id, out[path].data()).is_ok());
                for (size_t k = 0; k < packets[0].size(); ++k) {
                  if (cut == 3 && k % 3 == 1) continue;
                  ParsedPacket p;
                  size_t len = packets[0][k].size();
                  ASSERT_EQ(parse_packet(packets[0][k].data(), len, &p), PacketError::kOk) << at;
                  if (cut != 0 && k % 2 == 0) len = kHeaderBytes + p.hdr.trim_bytes + (cut == 2 ? 5 + k % 29 : 0);
                  len = std::min(len, packets[0][k].size());
                  ASSERT_EQ(parse_packet(packets[0][k].data(), len, &p), PacketError::kOk) << at;
                  ASSERT_EQ(dec.add(p), PacketError::kOk) << at;
                }
                dec.finish();
              }
              kernels_force_scalar(false);
              ASSERT_EQ(out[0], out[1]) << at << " cut=" << cut;
              if (cut == 0) {
                ASSERT_EQ(out[0], msg) << at << ": untrimmed must give back every bit";
              }
            }
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace trim::codec
