// FWHT / RHT: every path (scalar, avx2, avx512 where the CPU has them) must return exactly the
// reference's bits; the reference itself must be an orthonormal Walsh–Hadamard transform.
#include "codec/fwht.h"

#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstdio>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "codec/fwht_internal.h"

namespace trim::codec {
namespace {

using detail::fwht_force_isa;
using detail::fwht_isa_supported;

const char* const kAllIsas[] = {"scalar", "avx2", "avx512"};

std::vector<std::string> supported_isas() {
  std::vector<std::string> out;
  for (const char* isa : kAllIsas)
    if (fwht_isa_supported(isa)) out.emplace_back(isa);
  return out;
}

uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

// Bitwise equality, except that any NaN matches any NaN (payloads may differ by path).
bool same_bits(float a, float b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  return bits_of(a) == bits_of(b);
}

// Index of the first element that differs, or -1.
long first_mismatch(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return 0;
  for (size_t i = 0; i < a.size(); ++i)
    if (!same_bits(a[i], b[i])) return static_cast<long>(i);
  return -1;
}

std::vector<float> gaussian(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

// Awkward values of one family; any inf/NaN input makes every output non-finite, so the
// families keep finite data (subnormals, signed zeros, values whose scaled results are
// subnormal) apart from data that overflows midway and from inf/NaN inputs.
enum class Family { kFinite, kOverflow, kNonFinite };

std::vector<float> special_values(size_t n, Family family, uint32_t seed) {
  const float inf = std::numeric_limits<float>::infinity();
  const float finite[] = {0.0f, -0.0f, FLT_TRUE_MIN, -FLT_TRUE_MIN, FLT_MIN / 3, -FLT_MIN,
                          FLT_MIN, 1e30f, -3e29f, 1.0f, -1.0f, 1e-30f, 0.1f};
  const float big[] = {FLT_MAX, -FLT_MAX, 1e38f, -3e37f};
  const float nonfinite[] = {inf, -inf, std::numeric_limits<float>::quiet_NaN()};
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) {
    const uint32_t r = rng();
    if (r % 4 == 0) {
      v[i] = dist(rng);
    } else if (r % 4 == 1) {  // small multiples of the smallest subnormal
      v[i] = (r & 0x100 ? -FLT_TRUE_MIN : FLT_TRUE_MIN) * static_cast<float>((r >> 9) % 1000);
    } else {
      v[i] = finite[(r >> 8) % (sizeof finite / sizeof finite[0])];
    }
  }
  if (family == Family::kFinite) return v;
  for (int k = 0; k < 4; ++k) {
    const uint32_t r = rng();
    v[r % n] = family == Family::kOverflow ? big[k % 4] : nonfinite[k % 3];
  }
  return v;
}

std::vector<uint64_t> random_signs(int log2n, uint32_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint64_t> s(((size_t{1} << log2n) + 63) / 64 + 1);  // +1: a tail nobody reads
  for (auto& w : s) w = rng();
  return s;
}

double l2(const std::vector<float>& v) {
  double s = 0;
  for (float x : v) s += static_cast<double>(x) * x;
  return std::sqrt(s);
}

double rel_l2_err(const std::vector<float>& got, const std::vector<float>& want) {
  double e = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double d = static_cast<double>(got[i]) - want[i];
    e += d * d;
  }
  const double w = l2(want);
  return w == 0 ? std::sqrt(e) : std::sqrt(e) / w;
}

double error_bound(int log2n) { return (2.0 * log2n + 4) * std::ldexp(1.0, -24); }

// Forces an ISA for one scope and always restores the automatic choice.
class ForcedIsa {
 public:
  explicit ForcedIsa(const std::string& isa) { ok_ = fwht_force_isa(isa.c_str()); }
  ~ForcedIsa() { (void)fwht_force_isa(nullptr); }
  bool ok() const { return ok_; }

 private:
  bool ok_;
};

// All public entry points under `isa` against the reference, for one input.
void expect_matches_reference(const std::string& isa, const std::vector<float>& x, int log2n,
                              uint32_t seed) {
  SCOPED_TRACE("isa=" + isa + " log2n=" + std::to_string(log2n));
  ForcedIsa forced(isa);
  ASSERT_TRUE(forced.ok());
  ASSERT_STREQ(fwht_isa(), isa.c_str());
  const auto signs = random_signs(log2n, seed);
  const size_t n = x.size();

  std::vector<float> want = x, got = x;
  fwht_reference(want.data(), log2n);
  fwht(got.data(), log2n);
  EXPECT_EQ(first_mismatch(got, want), -1) << "fwht";

  want.assign(n, 0.0f);
  rht_forward_reference(x.data(), want.data(), log2n, signs.data());
  // Out of place, from an odd (unaligned) offset into a larger buffer.
  std::vector<float> in_buf(n + 1), out_buf(n + 1, 7.0f);
  std::copy(x.begin(), x.end(), in_buf.begin() + 1);
  rht_forward(in_buf.data() + 1, out_buf.data() + 1, log2n, signs.data());
  got.assign(out_buf.begin() + 1, out_buf.end());
  EXPECT_EQ(first_mismatch(got, want), -1) << "rht_forward out of place";
  EXPECT_EQ(out_buf[0], 7.0f) << "wrote before out";
  EXPECT_EQ(first_mismatch(std::vector<float>(in_buf.begin() + 1, in_buf.end()), x), -1)
      << "modified in";
  got = x;
  rht_forward(got.data(), got.data(), log2n, signs.data());
  EXPECT_EQ(first_mismatch(got, want), -1) << "rht_forward in place";
  got = x;
  rht_forward(got.data(), got.data(), log2n, nullptr);
  want = x;
  fwht_reference(want.data(), log2n);
  EXPECT_EQ(first_mismatch(got, want), -1) << "rht_forward without signs";

  want = x;
  rht_inverse_reference(want.data(), log2n, signs.data());
  got = x;
  rht_inverse(got.data(), log2n, signs.data());
  EXPECT_EQ(first_mismatch(got, want), -1) << "rht_inverse";
}

TEST(FwhtDispatch, ReportsASupportedIsa) {
  EXPECT_TRUE(fwht_isa_supported(fwht_isa())) << fwht_isa();
  EXPECT_TRUE(fwht_isa_supported("scalar"));
  EXPECT_FALSE(fwht_isa_supported("sse9"));
  EXPECT_FALSE(fwht_force_isa("sse9"));
  EXPECT_FALSE(fwht_isa_supported(nullptr));
#if defined(__x86_64__)
  // Tells CI logs which paths this machine really exercised.
  std::printf("fwht: auto=%s avx2=%d avx512=%d\n", fwht_isa(), fwht_isa_supported("avx2"),
              fwht_isa_supported("avx512"));
#endif
}

TEST(FwhtScale, IsCorrectlyRoundedInverseSqrt) {
  for (int k = 0; k <= kFwhtMaxLog2n; ++k) {
    const float c = fwht_scale(k);
    if (k % 2 == 0) {
      EXPECT_EQ(c, std::ldexp(1.0f, -k / 2)) << k;
      continue;
    }
    // c rounds 2^(-k/2) correctly iff the target lies between the midpoints to c's neighbours,
    // i.e. lo^2 < 2^-k < hi^2; both squares are exact in double (25-bit midpoints).
    const double ulp = std::nextafter(c, 1.0f) - c;
    const double lo = c - ulp / 2, hi = c + ulp / 2, t = std::ldexp(1.0, -k);
    EXPECT_LT(lo * lo, t) << k;
    EXPECT_GT(hi * hi, t) << k;
  }
}

TEST(FwhtReference, KnownN4) {
  std::vector<float> x = {1, 2, 3, 4};
  fwht_reference(x.data(), 2);  // H4 rows: ++++, +-+-, ++--, +--+; scale 1/2
  EXPECT_EQ(x, (std::vector<float>{5, -1, -2, 0}));
  const uint64_t sign = 0b0010;  // negate x1: D x = {1, -2, 3, 4}
  const std::vector<float> in = {1, 2, 3, 4};
  for (const auto& isa : supported_isas()) {
    ForcedIsa forced(isa);
    std::vector<float> y(4);
    rht_forward(in.data(), y.data(), 2, &sign);
    EXPECT_EQ(y, (std::vector<float>{3, 1, -4, 2})) << isa;
    rht_inverse(y.data(), 2, &sign);
    EXPECT_EQ(y, in) << isa;
  }
}

TEST(FwhtReference, SizeOneIsIdentityAndSignsApply) {
  float x = 3.5f;
  fwht_reference(&x, 0);
  EXPECT_EQ(x, 3.5f);
  const uint64_t sign = 1;
  float y = 0;
  rht_forward_reference(&x, &y, 0, &sign);
  EXPECT_EQ(y, -3.5f);
}

TEST(FwhtBitExact, GaussianEverySizeEveryIsa) {
  for (const auto& isa : supported_isas()) {
    for (int log2n = 0; log2n <= kFwhtMaxLog2n; ++log2n) {
      const auto x = gaussian(size_t{1} << log2n, 1000 + log2n);
      expect_matches_reference(isa, x, log2n, 77 + log2n);
    }
  }
}

TEST(FwhtBitExact, SpecialValuesEverySizeEveryIsa) {
  for (const auto& isa : supported_isas()) {
    for (int log2n = 0; log2n <= kFwhtMaxLog2n; ++log2n) {
      for (Family f : {Family::kFinite, Family::kOverflow, Family::kNonFinite}) {
        const auto x = special_values(size_t{1} << log2n, f, 2000 + log2n);
        if (f == Family::kFinite) {  // the family must really stay finite
          auto y = x;
          fwht_reference(y.data(), log2n);
          for (float v : y) ASSERT_TRUE(std::isfinite(v)) << log2n;
        }
        expect_matches_reference(isa, x, log2n, 99 + log2n);
      }
    }
  }
}

// Zeros around a few awkward values: outputs stay finite and keep signed-zero / subnormal
// results, which the mixed data above mostly turns into inf/NaN at large sizes.
TEST(FwhtBitExact, SparseSubnormalsAndSignedZeros) {
  for (const auto& isa : supported_isas()) {
    for (int log2n = 0; log2n <= kFwhtMaxLog2n; ++log2n) {
      std::vector<float> x(size_t{1} << log2n, -0.0f);
      std::mt19937 rng(3000 + log2n);
      for (int k = 0; k < 8; ++k) {
        const float v[] = {FLT_TRUE_MIN, -FLT_MIN / 2, 0.0f, 1e30f};
        x[rng() % x.size()] = v[k % 4];
      }
      expect_matches_reference(isa, x, log2n, 5 + log2n);
    }
  }
}

// Each path dispatches via the public API above; call the per-ISA entry points directly too.
TEST(FwhtBitExact, DirectEntryPoints) {
  struct Entry {
    const char* isa;
    detail::FwhtRunFn run;
  };
  const Entry entries[] = {{"scalar", detail::fwht_run_scalar},
                           {"avx2", detail::fwht_run_avx2},
                           {"avx512", detail::fwht_run_avx512}};
  for (const auto& e : entries) {
    if (!fwht_isa_supported(e.isa)) continue;
    for (int log2n : {0, 1, 2, 3, 4, 5, 7, 8, 11, 12, 13, 15, 16, 17}) {
      SCOPED_TRACE(std::string(e.isa) + " log2n=" + std::to_string(log2n));
      const auto x = gaussian(size_t{1} << log2n, 4000 + log2n);
      const auto s_in = random_signs(log2n, 1), s_out = random_signs(log2n, 2);
      std::vector<float> want = x, got(x.size());
      // Both sign sets at once is not reachable from the public API but is the general form.
      for (size_t i = 0; i < x.size(); ++i)
        if (s_in[i / 64] >> (i % 64) & 1) want[i] = -want[i];
      rht_inverse_reference(want.data(), log2n, s_out.data());
      e.run(x.data(), got.data(), log2n, s_in.data(), s_out.data(), fwht_scale(log2n));
      EXPECT_EQ(first_mismatch(got, want), -1);
    }
  }
}

TEST(FwhtAccuracy, InvolutionRoundTripAndParseval) {
  for (int log2n = 0; log2n <= kFwhtMaxLog2n; ++log2n) {
    SCOPED_TRACE("log2n=" + std::to_string(log2n));
    const double bound = error_bound(log2n);
    const auto x = gaussian(size_t{1} << log2n, 5000 + log2n);
    const auto signs = random_signs(log2n, 6000 + log2n);

    auto y = x;
    fwht(y.data(), log2n);
    EXPECT_LE(std::abs(l2(y) - l2(x)) / l2(x), bound) << "Parseval";
    fwht(y.data(), log2n);
    EXPECT_LE(rel_l2_err(y, x), bound) << "fwht twice";

    std::vector<float> z(x.size());
    rht_forward(x.data(), z.data(), log2n, signs.data());
    EXPECT_LE(std::abs(l2(z) - l2(x)) / l2(x), bound) << "Parseval (rht)";
    rht_inverse(z.data(), log2n, signs.data());
    EXPECT_LE(rel_l2_err(z, x), bound) << "rht round trip";
  }
}

// rht_forward(e_i) is exactly d_i * c * column i of H: one non-zero input makes every
// butterfly exact, so this checks the ordering and the sign bits bit for bit.
TEST(FwhtSigns, UnitVectorGivesSignedColumn) {
  for (int log2n : {0, 1, 3, 4, 6, 9, 12, 15}) {
    const size_t n = size_t{1} << log2n;
    const auto signs = random_signs(log2n, 7000 + log2n);
    const float c = fwht_scale(log2n);
    for (size_t i : {size_t{0}, n / 3, n - 1}) {
      std::vector<float> e(n, 0.0f), y(n);
      e[i] = 1.0f;
      rht_forward(e.data(), y.data(), log2n, signs.data());
      const float d = (signs[i / 64] >> (i % 64) & 1) ? -1.0f : 1.0f;
      for (size_t j = 0; j < n; ++j) {
        const float h = (__builtin_popcountll(i & j) & 1) ? -c : c;
        ASSERT_EQ(bits_of(y[j]), bits_of(d * h)) << "log2n=" << log2n << " i=" << i << " j=" << j;
      }
    }
  }
}

// Flipping sign bit i changes the output by -2 d_i x_i times column i of H/sqrt(n).
TEST(FwhtSigns, FlippingOneBitMovesOutputAlongItsColumn) {
  for (int log2n : {1, 5, 10, 15}) {
    const size_t n = size_t{1} << log2n;
    const auto x = gaussian(n, 8000 + log2n);
    const double tol = 3 * error_bound(log2n) * l2(x);
    auto signs = random_signs(log2n, 9000 + log2n);
    for (size_t i : {size_t{0}, (n / 2 + 1) % n, n - 1}) {
      std::vector<float> y0(n), y1(n);
      rht_forward(x.data(), y0.data(), log2n, signs.data());
      const double d = (signs[i / 64] >> (i % 64) & 1) ? -1.0 : 1.0;
      signs[i / 64] ^= uint64_t{1} << (i % 64);
      rht_forward(x.data(), y1.data(), log2n, signs.data());
      const double col = 1.0 / std::sqrt(static_cast<double>(n));
      for (size_t j = 0; j < n; ++j) {
        const double h = (__builtin_popcountll(i & j) & 1) ? -col : col;
        const double want = -2.0 * d * x[i] * h;
        ASSERT_NEAR(static_cast<double>(y1[j]) - y0[j], want, tol)
            << "log2n=" << log2n << " i=" << i << " j=" << j;
      }
    }
  }
}

TEST(FwhtDeathTest, RejectsLog2nOutOfRange) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  float x[2] = {};
  EXPECT_DEATH(fwht(x, kFwhtMaxLog2n + 1), "outside");
  EXPECT_DEATH(fwht(x, -1), "outside");
}

}  // namespace
}  // namespace trim::codec
