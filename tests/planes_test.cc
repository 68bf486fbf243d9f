// The vector kernels must produce what their portable references produce, on odd sizes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "codec/decoder.h"
#include "codec/encoder.h"
#include "codec/planes.h"
#include "codec/types.h"

namespace trim::codec {
namespace {

const uint32_t kSizes[] = {1, 3, 8, 15, 16, 17, 31, 33, 1000, 1003, 4097};

std::vector<float> values(uint32_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<float> v(n);
  for (float& x : v) x = bits_f32(rng());  // every bit pattern, NaNs and infs included
  return v;
}

class PlanesKernel : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!avx512::supported()) GTEST_SKIP() << "this CPU has no AVX-512 (VBMI) + BMI2: only the scalar path runs";
  }
};

// The fp32 hot-path kernels (planes_kernels_f32.inc) of one vector ISA: AVX-512 and AVX2 both
// have them, and both must match the reference to the bit.
struct F32Isa {
  const char* name;
  bool (*supported)();
  decltype(&scalar::pack16_from32) pack16_from32;
  decltype(&scalar::pack_f32_sign_layout) pack_f32_sign_layout;
  decltype(&scalar::assemble_f32) assemble_f32;
  decltype(&scalar::fill_heads) fill_heads;
  decltype(&scalar::sum_squares) sum_squares;
  decltype(&scalar::sum_abs) sum_abs;
};
#define TRIM_F32_ISA(ns)                                                                                           \
  F32Isa { #ns, ns::supported, ns::pack16_from32, ns::pack_f32_sign_layout, ns::assemble_f32, ns::fill_heads, \
           ns::sum_squares, ns::sum_abs }

void PrintTo(const F32Isa& isa, std::ostream* os) { *os << isa.name; }

class PlanesF32Kernel : public ::testing::TestWithParam<F32Isa> {
 protected:
  void SetUp() override {
    if (!GetParam().supported()) GTEST_SKIP() << "this CPU has no " << GetParam().name;
  }
};
INSTANTIATE_TEST_SUITE_P(PlanesIsa, PlanesF32Kernel, ::testing::Values(TRIM_F32_ISA(avx512), TRIM_F32_ISA(avx2)),
                         [](const ::testing::TestParamInfo<F32Isa>& info) { return std::string(info.param.name); });

TEST_P(PlanesF32Kernel, PackMatchesReference) {
  const F32Isa& k = GetParam();
  for (uint32_t n : kSizes) {
    std::vector<float> v = values(n, n);
    const size_t bytes = 4 * n + 16;
    std::vector<uint8_t> a(bytes, 0xAA), b(bytes, 0xAA);
    for (int shift : {0, 16}) {
      scalar::pack16_from32(v.data(), n, shift, a.data());
      k.pack16_from32(v.data(), n, shift, b.data());
      EXPECT_EQ(a, b) << "pack16 n=" << n;
    }
    // The fused kernel: same planes, and the same norms to the bit (the scale in every header
    // depends on them: packets must not depend on the encoder's ISA, or on CPU vs GPU).
    std::vector<float> g(n);
    std::normal_distribution<float> dist;
    std::mt19937 rng(n);
    for (float& x : g) x = dist(rng);
    const uint32_t p0 = (n + 7) / 8, p1 = (15 * n + 7) / 8;
    std::fill(a.begin(), a.end(), 0xAA);
    std::fill(b.begin(), b.end(), 0xAA);
    Norms na, nb;
    scalar::pack_f32_sign_layout(g.data(), n, a.data(), a.data() + p0, a.data() + p0 + p1, &na);
    k.pack_f32_sign_layout(g.data(), n, b.data(), b.data() + p0, b.data() + p0 + p1, &nb);
    EXPECT_EQ(a, b) << "fused n=" << n;
    EXPECT_EQ(na.sum_sq, nb.sum_sq) << "n=" << n;
    EXPECT_EQ(na.sum_abs, nb.sum_abs) << "n=" << n;
    EXPECT_TRUE(na.finite && nb.finite);
    // Heads only (rht: plane 0 from the rotated values): plane 0 and the same norms, nothing
    // written past plane 0.
    std::vector<uint8_t> ha(a.size(), 0x5C), hb(a.size(), 0x5C);
    Norms ma, mb;
    scalar::pack_f32_sign_layout(g.data(), n, ha.data(), nullptr, nullptr, &ma);
    k.pack_f32_sign_layout(g.data(), n, hb.data(), nullptr, nullptr, &mb);
    EXPECT_EQ(ha, hb) << "heads only n=" << n;
    EXPECT_TRUE(std::equal(ha.begin(), ha.begin() + p0, a.begin())) << "n=" << n;
    EXPECT_TRUE(std::all_of(ha.begin() + p0, ha.end(), [](uint8_t x) { return x == 0x5C; })) << "n=" << n;
    EXPECT_EQ(ma.sum_sq, na.sum_sq) << "n=" << n;
    EXPECT_EQ(mb.sum_abs, na.sum_abs) << "n=" << n;
    // Huge finite values overflow fp32 squares: the kernel must fall back, not report inf.
    g[0] = 3e30f;
    Norms huge;
    k.pack_f32_sign_layout(g.data(), n, b.data(), b.data() + p0, b.data() + p0 + p1, &huge);
    EXPECT_TRUE(std::isfinite(huge.sum_sq) && huge.finite);
    EXPECT_NEAR(huge.sum_sq, 9e60, 1e-5 * 9e60);
  }
}

TEST_P(PlanesF32Kernel, AssembleAndHeadsMatchReference) {
  const F32Isa& k = GetParam();
  for (uint32_t n : kSizes) {
    std::mt19937 rng(n + 100);
    std::vector<uint8_t> payload(5 * n + 64);
    for (uint8_t& x : payload) x = static_cast<uint8_t>(rng());
    for (bool value_layout : {false, true}) {
      const uint32_t p0 = (n + 7) / 8, p1 = value_layout ? 2 * n : (15 * n + 7) / 8;
      std::vector<float> a(n), b(n);
      scalar::assemble_f32(payload.data(), payload.data() + p0, payload.data() + p0 + p1, value_layout, n, a.data());
      k.assemble_f32(payload.data(), payload.data() + p0, payload.data() + p0 + p1, value_layout, n, b.data());
      for (uint32_t i = 0; i < n; ++i) ASSERT_EQ(f32_bits(a[i]), f32_bits(b[i])) << "n=" << n << " i=" << i;
    }
    for (uint32_t begin : {0u, 1u, 5u, 16u}) {
      if (begin > n) continue;
      std::vector<float> a(n - begin), b(n - begin);
      scalar::fill_heads(payload.data(), begin, n, 2.5f, -2.5f, a.data());
      k.fill_heads(payload.data(), begin, n, 2.5f, -2.5f, b.data());
      EXPECT_EQ(a, b) << "heads n=" << n << " begin=" << begin;
    }
    std::vector<float> v = values(n, n + 7);
    bool fa = true, fb = true;
    const double sa = scalar::sum_squares(v.data(), n, &fa), sb = k.sum_squares(v.data(), n, &fb);
    EXPECT_EQ(fa, fb);
    EXPECT_EQ(sa, sb) << "n=" << n;
    const double aa = scalar::sum_abs(v.data(), n), ab = k.sum_abs(v.data(), n);
    EXPECT_TRUE((std::isnan(aa) && std::isnan(ab)) || aa == ab) << "n=" << n << ": " << aa << " vs " << ab;
    // And on finite data, where the value is used: the same to the bit.
    std::vector<float> g(n);
    std::normal_distribution<float> dist;
    for (float& x : g) x = dist(rng);
    EXPECT_EQ(scalar::sum_abs(g.data(), n), k.sum_abs(g.data(), n)) << "n=" << n;
  }
}

// Rows mixing Gaussian values with every special fp32 class: NaNs (quiet, signalling, negative,
// with payloads), infinities, zeros of both signs, denormals, the extremes. finite_only: no NaN or
// inf, so the norms are the values the header carries.
std::vector<float> special_values(uint32_t n, uint32_t seed, bool finite_only) {
  static const uint32_t kSpecials[] = {0x7FC00000u, 0x7F800001u, 0xFFC12345u, 0x7FBFFFFFu, 0x7F800000u, 0xFF800000u,
                                       0x00000000u, 0x80000000u, 0x00000001u, 0x807FFFFFu, 0x00400000u, 0x7F7FFFFFu,
                                       0xFF7FFFFFu, 0x00800000u};
  std::mt19937 rng(seed);
  std::normal_distribution<float> g;
  std::vector<float> v(n);
  for (float& x : v) {
    const uint32_t pick = rng() % 8;
    if (pick == 0) {
      x = bits_f32(kSpecials[rng() % (sizeof(kSpecials) / sizeof(kSpecials[0]))]);
    } else if (pick == 1) {
      x = bits_f32(rng());
    } else {
      x = g(rng) * (pick == 2 ? 1e-30f : 1.0f);
    }
    if (finite_only && !std::isfinite(x)) x = -0.0f;
  }
  return v;
}

// Bits of a double, so signed zeros compare exactly. A NaN sum (|NaN| added in) is any NaN: which
// payload survives two NaNs meeting depends on the operand order the compiler picks, and the
// encoder only asks whether the sum is finite (the row then goes as sign, scaled by sum_squares,
// which skips non-finite values and so is never NaN).
uint64_t f64_bits(double d) {
  if (std::isnan(d)) return 0x7FF8000000000000ull;
  uint64_t u;
  std::memcpy(&u, &d, 8);
  return u;
}

// Every size 0..300 and two large ones, inputs and outputs at every offset 0..7 (elements for
// floats, bytes for planes) and guard bytes after every output: planes, norms and decoded values
// the same bits as the reference, nothing written past the end.
TEST_P(PlanesF32Kernel, EverySizeAndAlignmentMatchesReference) {
  const F32Isa& k = GetParam();
  std::vector<uint32_t> sizes;
  for (uint32_t n = 0; n <= 300; ++n) sizes.push_back(n);
  sizes.push_back(4096 + 13);
  sizes.push_back(65536 + 7);
  for (uint32_t n : sizes) {
    for (uint32_t off = 0; off < 8; off += n > 300 ? 3 : 1) {
      const std::string at = "n=" + std::to_string(n) + " off=" + std::to_string(off);
      for (bool finite_only : {false, true}) {
        const std::vector<float> row = special_values(n, 7 * n + off, finite_only);
        std::vector<float> in(off + n + 8, 1.0f);
        std::copy(row.begin(), row.end(), in.begin() + off);
        const float* v = in.data() + off;
        const uint32_t p0 = (n + 7) / 8, p1 = (15 * n + 7) / 8;
        for (bool heads_only : {false, true}) {
          std::vector<uint8_t> a(off + p0 + p1 + 2 * n + 32, 0xA5), b = a;
          Norms na, nb;
          na.sum_sq = nb.sum_sq = 0.5;  // they add to what is there
          uint8_t *pa = a.data() + off, *pb = b.data() + off;
          scalar::pack_f32_sign_layout(v, n, pa, heads_only ? nullptr : pa + p0, pa + p0 + p1, &na);
          k.pack_f32_sign_layout(v, n, pb, heads_only ? nullptr : pb + p0, pb + p0 + p1, &nb);
          ASSERT_EQ(a, b) << at << " heads_only=" << heads_only;
          ASSERT_EQ(f64_bits(na.sum_sq), f64_bits(nb.sum_sq)) << at;
          ASSERT_EQ(f64_bits(na.sum_abs), f64_bits(nb.sum_abs)) << at << ": " << na.sum_abs << " vs " << nb.sum_abs;
          ASSERT_EQ(na.finite, nb.finite) << at;
        }
        for (int shift : {0, 16}) {  // the shifts the encoder uses (AVX-512 takes any other as 16)
          std::vector<uint8_t> a(off + 2 * n + 16, 0x3C), b = a;
          scalar::pack16_from32(v, n, shift, a.data() + off);
          k.pack16_from32(v, n, shift, b.data() + off);
          ASSERT_EQ(a, b) << at << " shift=" << shift;
        }
        bool fa = false, fb = false;
        const double sa = scalar::sum_squares(v, n, &fa), sb = k.sum_squares(v, n, &fb);
        ASSERT_EQ(f64_bits(sa), f64_bits(sb)) << at;
        ASSERT_EQ(fa, fb) << at;
        ASSERT_EQ(f64_bits(scalar::sum_abs(v, n)), f64_bits(k.sum_abs(v, n))) << at;
      }
      // Decode: random planes (every head and field pattern) at a byte offset, into a row at an
      // element offset.
      std::mt19937 rng(n * 8 + off);
      std::vector<uint8_t> payload(off + n / 8 + 1 + 4 * n);
      for (uint8_t& x : payload) x = static_cast<uint8_t>(rng());
      const uint8_t* pl = payload.data() + off;
      for (bool value_layout : {false, true}) {
        const uint32_t p0 = (n + 7) / 8, p1 = value_layout ? 2 * n : (15 * n + 7) / 8;
        // Exactly the planes' bytes, so a read past plane 2 is a heap overflow (ASan).
        std::vector<uint8_t> planes(pl, pl + p0 + p1 + 2 * n);
        std::vector<float> a(off + n + 8, 7.0f), b = a;
        scalar::assemble_f32(planes.data(), planes.data() + p0, planes.data() + p0 + p1, value_layout, n,
                             a.data() + off);
        k.assemble_f32(planes.data(), planes.data() + p0, planes.data() + p0 + p1, value_layout, n, b.data() + off);
        ASSERT_EQ(0, std::memcmp(a.data(), b.data(), 4 * a.size())) << at << " value_layout=" << value_layout;
      }
      for (uint32_t begin : {0u, 1u, 3u, 8u, 9u, 16u}) {
        if (begin > n) continue;
        std::vector<float> a(off + n - begin + 8, 7.0f), b = a;
        scalar::fill_heads(pl, begin, n, -0.0f, 1.25f, a.data() + off);
        k.fill_heads(pl, begin, n, -0.0f, 1.25f, b.data() + off);
        ASSERT_EQ(0, std::memcmp(a.data(), b.data(), 4 * a.size())) << at << " begin=" << begin;
      }
    }
  }
}

// rht's one-pass packet kernel (AVX2, and the dispatched one whatever the CPU): planes 0-2 the
// reference's bytes always, norms the reference's bits when every rotated value is finite, and
// the finiteness always. Rows: every size 0..300 and two large ones at offsets 0..7, with
// specials (most such rows hold a NaN or inf somewhere, vector part or scalar tail), finite
// rows, and rows finite but one value, placed at every position of the first 40.
TEST(PlanesRht, OnePassMatchesReference) {
  using Fn = void (*)(const float*, const float*, uint32_t, uint8_t*, uint8_t*, uint8_t*, Norms*);
  std::vector<std::pair<const char*, Fn>> kernels = {{"dispatch", pack_f32_rht}};
  if (avx2::supported()) kernels.emplace_back("avx2", avx2::pack_f32_rht);
  std::vector<uint32_t> sizes;
  for (uint32_t n = 0; n <= 300; ++n) sizes.push_back(n);
  sizes.push_back(4096 + 13);
  sizes.push_back(65536 + 7);
  for (const auto& [name, fn] : kernels) {
    for (uint32_t n : sizes) {
      for (uint32_t off = 0; off < 8; off += n > 300 ? 3 : 1) {
        for (int kind = 0; kind < 3; ++kind) {
          const std::string at = std::string(name) + " n=" + std::to_string(n) + " off=" + std::to_string(off) +
                                 " kind=" + std::to_string(kind);
          std::vector<float> rot(off + n + 8, 1.0f), in(off + n + 8, 2.0f);
          const std::vector<float> r = special_values(n, 11 * n + off, kind != 0), x = special_values(n, 13 * n + off, false);
          std::copy(r.begin(), r.end(), rot.begin() + off);
          std::copy(x.begin(), x.end(), in.begin() + off);
          if (kind == 2 && n > 0) rot[off + (n * 7 + off) % std::min(n, 40u)] = off % 2 ? -INFINITY : NAN;
          const uint32_t p0 = (n + 7) / 8;
          std::vector<uint8_t> a(off + p0 + 4 * n + 32, 0xA5), b = a;
          Norms na, nb;
          na.sum_sq = nb.sum_sq = 0.5;  // they add to what is there
          na.sum_abs = nb.sum_abs = 0.25;
          uint8_t *pa = a.data() + off, *pb = b.data() + off;
          scalar::pack_f32_rht(rot.data() + off, in.data() + off, n, pa, pa + p0, pa + p0 + 2 * n, &na);
          fn(rot.data() + off, in.data() + off, n, pb, pb + p0, pb + p0 + 2 * n, &nb);
          ASSERT_EQ(a, b) << at;
          ASSERT_EQ(na.finite, nb.finite) << at;
          if (kind != 0 && n > 0) {
            ASSERT_EQ(kind == 1, na.finite) << at;  // the rows are what they claim
          }
          if (na.finite) {
            ASSERT_EQ(f64_bits(na.sum_sq), f64_bits(nb.sum_sq)) << at;
            ASSERT_EQ(f64_bits(na.sum_abs), f64_bits(nb.sum_abs)) << at;
          }
        }
      }
    }
  }
}

// The AVX-512 rht pass with its CRC fold, on its own (dispatch takes it only on such CPUs):
// the reference's planes and norms, and the planes' CRC registers (from zero, no inversion),
// for every multiple of 8 up to 296 (16-element steps and an 8-element last one) and two large
// sizes, at offsets off the vector width, finite rows and rows with a NaN or inf.
TEST(PlanesRht, Avx512CrcPassMatchesReference) {
  if (!avx512::crc_supported()) GTEST_SKIP() << "no AVX-512 + VPCLMULQDQ here";
  std::vector<uint32_t> sizes;
  for (uint32_t n = 0; n <= 296; n += 8) sizes.push_back(n);
  sizes.push_back(4096 + 8);
  sizes.push_back(32768);
  for (uint32_t n : sizes) {
    for (uint32_t off = 0; off < 8; off += n > 296 ? 3 : 1) {
      for (int kind = 0; kind < 2; ++kind) {
        const std::string at = "n=" + std::to_string(n) + " off=" + std::to_string(off) + " kind=" + std::to_string(kind);
        std::vector<float> rot(off + n + 8, 1.0f), in(off + n + 8, 2.0f);
        const std::vector<float> r = special_values(n, 17 * n + off, true), x = special_values(n, 19 * n + off, false);
        std::copy(r.begin(), r.end(), rot.begin() + off);
        std::copy(x.begin(), x.end(), in.begin() + off);
        if (kind == 1 && n > 0) rot[off + (n * 5 + off) % n] = off % 2 ? INFINITY : NAN;
        const uint32_t p0 = n / 8;
        // Room for a second "packet" after the planes: half the runs let the pass claim it.
        std::vector<uint8_t> a(off + 2 * (p0 + 4 * n) + 32, 0xA5), b = a;
        Norms na, nb;
        na.sum_sq = nb.sum_sq = 0.5;  // they add to what is there
        na.sum_abs = nb.sum_abs = 0.25;
        uint8_t *pa = a.data() + off, *pb = b.data() + off;
        uint32_t regs[2] = {1, 1};
        scalar::pack_f32_rht(rot.data() + off, in.data() + off, n, pa, pa + p0, pa + p0 + 2 * n, &na);
        avx512::pack_f32_rht_crc(rot.data() + off, in.data() + off, n, pb, pb + p0, pb + p0 + 2 * n, &nb, regs,
                                 kind == 0 ? p0 + 4 * n : 0);
        ASSERT_EQ(a, b) << at;
        ASSERT_EQ(na.finite, nb.finite) << at;
        ASSERT_EQ(kind == 0 || n == 0, na.finite) << at;  // the rows are what they claim
        if (na.finite) {
          ASSERT_EQ(f64_bits(na.sum_sq), f64_bits(nb.sum_sq)) << at;
          ASSERT_EQ(f64_bits(na.sum_abs), f64_bits(nb.sum_abs)) << at;
        }
        ASSERT_EQ(regs[0], ~crc32c_extend(0xFFFFFFFFu, pa + p0, 2 * n)) << at;
        ASSERT_EQ(regs[1], ~crc32c_extend(0xFFFFFFFFu, pa + p0 + 2 * n, 2 * n)) << at;
      }
    }
  }
}

// 2-bit heads: plane Q and the bins' sums (to the bit: every encoder sends the same levels),
// on every bit pattern (NaN and inf: a bin bit, never a sum) and on Gaussian rows; the decode of
// signs and bins, with the bins cut anywhere (nq) and rows starting anywhere (begin).
TEST_F(PlanesKernel, TwoBitHeadsMatchReference) {
  for (uint32_t n : kSizes) {
    std::mt19937 rng(n + 300);
    std::normal_distribution<float> dist;
    std::vector<float> g(n);
    for (float& x : g) x = dist(rng);
    for (const std::vector<float>& v : {values(n, n + 9), g}) {
      for (float threshold : {0.0f, 0.9816f, 1e30f}) {
        std::vector<uint8_t> qa((n + 7) / 8 + 2, 0xEE), qb = qa;
        BinSums a, b;
        a.inner_abs = b.inner_abs = 1.0;  // they add to what is there
        scalar::pack_bins(v.data(), n, threshold, qa.data(), &a);
        avx512::pack_bins(v.data(), n, threshold, qb.data(), &b);
        ASSERT_EQ(qa, qb) << "n=" << n << " t=" << threshold;
        EXPECT_EQ(a.inner, b.inner);
        EXPECT_EQ(a.outer, b.outer);
        EXPECT_EQ(f32_bits(static_cast<float>(a.inner_abs)), f32_bits(static_cast<float>(b.inner_abs)));
        EXPECT_TRUE(a.inner_abs == b.inner_abs && a.outer_abs == b.outer_abs)
            << "n=" << n << " t=" << threshold << ": " << a.inner_abs << "/" << a.outer_abs << " vs " << b.inner_abs
            << "/" << b.outer_abs;
        EXPECT_EQ(qa[(n + 7) / 8], 0xEE) << "wrote past plane Q";
      }
    }
    std::vector<uint8_t> p0(n / 8 + 2), pq(n / 8 + 2);
    for (uint8_t& x : p0) x = static_cast<uint8_t>(rng());
    for (uint8_t& x : pq) x = static_cast<uint8_t>(rng());
    BinLevels levels;
    levels.outer = 1.5f, levels.inner = 0.0f, levels.unknown = 0.8f;  // inner 0: the sign of zero too
    for (uint32_t begin : {0u, 1u, 5u, 16u}) {
      for (uint32_t nq : {0u, 8u, 17u, n / 2, n}) {
        if (begin > n) continue;
        std::vector<float> a(n - begin), b(n - begin);
        scalar::fill_heads2(p0.data(), pq.data(), begin, n, nq, levels, a.data());
        avx512::fill_heads2(p0.data(), pq.data(), begin, n, nq, levels, b.data());
        for (uint32_t i = 0; i < n - begin; ++i) {
          ASSERT_EQ(f32_bits(a[i]), f32_bits(b[i])) << "n=" << n << " begin=" << begin << " nq=" << nq << " i=" << i;
        }
      }
    }
  }
}

TEST_F(PlanesKernel, RandomHeadsAndDitherMatchReference) {
  for (uint32_t n : kSizes) {
    std::vector<float> v(n);
    std::mt19937 rng(n + 200);
    std::normal_distribution<float> g;
    for (float& x : v) x = g(rng);
    if (n > 3) v[2] = NAN, v[3] = INFINITY;
    for (bool sd : {false, true}) {
      for (uint32_t first : {0u, 1000u, 5u}) {
        std::vector<uint8_t> a((n + 7) / 8 + 1, 0xAA), b((n + 7) / 8 + 1, 0xAA);
        scalar::random_heads(0x1234 + n, first, v.data(), n, 2.5f, sd, a.data());
        avx512::random_heads(0x1234 + n, first, v.data(), n, 2.5f, sd, b.data());
        EXPECT_EQ(a, b) << "n=" << n << " sd=" << sd << " first=" << first;
      }
    }
    std::vector<float> a = v, b = v;
    scalar::subtract_dither(77, 3, n, 1.5f, a.data());
    avx512::subtract_dither(77, 3, n, 1.5f, b.data());
    for (uint32_t i = 0; i < n; ++i) ASSERT_EQ(f32_bits(a[i]), f32_bits(b[i])) << "dither n=" << n << " i=" << i;
  }
}

// Packing then assembling is the identity for every bit pattern.
TEST(Planes, PackAssembleIdentity) {
  for (uint32_t n : kSizes) {
    std::vector<float> v = values(n, n + 3);
    const uint32_t p0 = (n + 7) / 8, p1 = (15 * n + 7) / 8;
    std::vector<uint8_t> payload(p0 + p1 + 2 * n);
    Norms norms;
    pack_f32_sign_layout(v.data(), n, payload.data(), payload.data() + p0, payload.data() + p0 + p1, &norms);
    std::vector<float> back(n);
    assemble_f32(payload.data(), payload.data() + p0, payload.data() + p0 + p1, false, n, back.data());
    for (uint32_t i = 0; i < n; ++i) ASSERT_EQ(f32_bits(back[i]), f32_bits(v[i])) << i;
  }
}

}  // namespace
}  // namespace trim::codec

namespace trim::codec {
namespace {

// kernels_isa() names the path the dispatch takes: the best this CPU has, scalar when forced.
TEST(PlanesPaths, IsaReported) {
  const std::string best = avx512::supported() ? "avx512" : avx2::supported() ? "avx2" : "scalar";
  EXPECT_EQ(best, kernels_isa());
  kernels_force_scalar(true);
  EXPECT_STREQ("scalar", kernels_isa());
  kernels_force_scalar(false);
  EXPECT_EQ(best, kernels_isa());
}

// A host without the vector kernels (AVX-512 or AVX2) runs the portable ones: it must put the
// same bytes on the wire, headers (scale, norms) included, and decode any packet, trimmed or
// not, to the same bits, so hosts with different CPUs interoperate.
TEST(PlanesPaths, ScalarAndVectorCodecsAgree) {
  if (std::string(kernels_isa()) == "scalar") GTEST_SKIP() << "no AVX-512 or AVX2 here: only one path to run";
  std::mt19937 rng(11);
  std::normal_distribution<float> g;
  for (DType dt : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (uint8_t head_bits : {uint8_t{1}, uint8_t{2}}) {
      for (Scheme scheme : {Scheme::kNone, Scheme::kSign, Scheme::kRht, Scheme::kSq, Scheme::kSd, Scheme::kRotated}) {
        if (head_bits == 2 && !sign_head(scheme)) continue;
        const uint32_t elems = 3001;
        std::vector<uint8_t> msg(elems * dtype_bytes(dt));
        for (uint32_t i = 0; i < elems; ++i) {
          const float x = g(rng);
          if (dt == DType::kF32) {
            std::memcpy(&msg[4 * i], &x, 4);
          } else {
            const uint16_t h = dt == DType::kBF16 ? f32_to_bf16(x) : f32_to_f16(x);
            std::memcpy(&msg[2 * i], &h, 2);
          }
        }
        if (dt == DType::kF32) {
          // Row 0 keeps a NaN (such rows go as sign), row 1 an inf; denormals and -0 in both.
          const uint32_t specials[][2] = {
              {17, 0x7FC01234u}, {2100, 0xFF800000u}, {5, 0x00000007u}, {2999, 0x80000000u}};
          for (const auto& s : specials) std::memcpy(&msg[4 * s[0]], &s[1], 4);
        }
        CodecConfig cfg;
        cfg.scheme = scheme;
        cfg.row_elems = 2048;
        cfg.head_bits = head_bits;
        Layout layout = Layout::make(cfg, dt, scheme, msg.size()).value();
        std::vector<std::vector<uint8_t>> packets[2];
        for (int path = 0; path < 2; ++path) {
          kernels_force_scalar(path == 1);
          Encoder enc(cfg);
          packets[path] = enc.encode_message(layout, MessageId{5, 6, true}, msg.data()).value();
        }
        kernels_force_scalar(false);
        ASSERT_EQ(packets[0].size(), packets[1].size());
        const bool random_heads_may_differ = scheme == Scheme::kSq || scheme == Scheme::kSd;
        for (size_t k = 0; k < packets[0].size(); ++k) {
          ASSERT_EQ(packets[0][k].size(), packets[1][k].size());
          // Headers (scale, CRC) always; payloads where no random head is compared in fp32.
          EXPECT_TRUE(std::equal(packets[0][k].begin(), packets[0][k].begin() + kHeaderBytes, packets[1][k].begin()))
              << scheme_name(scheme) << " " << dtype_name(dt) << " header of packet " << k;
          if (!random_heads_may_differ) {
            EXPECT_TRUE(std::equal(packets[0][k].begin() + kHeaderBytes, packets[0][k].end(),
                                   packets[1][k].begin() + kHeaderBytes))
                << scheme_name(scheme) << " " << dtype_name(dt) << " packet " << k;
          }
        }
        // Decode the vector path's packets, half of them trimmed, on both paths.
        std::vector<uint8_t> out[2];
        for (int path = 0; path < 2; ++path) {
          kernels_force_scalar(path == 1);
          Decoder dec(cfg);
          out[path].assign(msg.size(), 0);
          ASSERT_TRUE(dec.begin(layout, MessageId{5, 6, true}, out[path].data()).is_ok());
          for (size_t k = 0; k < packets[0].size(); ++k) {
            ParsedPacket p;
            size_t len = packets[0][k].size();
            ASSERT_EQ(parse_packet(packets[0][k].data(), len, &p), PacketError::kOk);
            if (k % 2 == 1) len = kHeaderBytes + p.hdr.trim_bytes + (k % 4 == 1 ? 7 : 0);
            ASSERT_EQ(parse_packet(packets[0][k].data(), len, &p), PacketError::kOk);
            ASSERT_EQ(dec.add(p), PacketError::kOk);
          }
          dec.finish();
        }
        kernels_force_scalar(false);
        EXPECT_EQ(out[0], out[1]) << scheme_name(scheme) << " " << dtype_name(dt) << " head bits " << int{head_bits};
      }
    }
  }
}

}  // namespace
}  // namespace trim::codec
