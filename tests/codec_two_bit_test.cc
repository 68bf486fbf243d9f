// 2-bit heads (NCCL_TRIM_HEAD_BITS=2): a sign and a magnitude bin per element (plane Q, after
// plane 0), |x| > 0.9816 RMS, the 4-level Lloyd-Max quantizer of a Gaussian. A trimmed element
// decodes to its sign times its bin's level; the header carries the levels (scale = outer,
// bin_ratio = inner / outer). Untrimmed packets stay exact (CodecRoundTrip.UntrimmedIsBitExact).
#include <algorithm>
#include <cmath>

#include "codec/rht.h"
#include "tests/codec_util.h"

namespace trim::codec::testing {
namespace {

CodecConfig two_bit(Scheme scheme, bool mse) {
  CodecConfig cfg = config(scheme, 4096, 32768, 2);
  cfg.head_scale_mse = mse;
  return cfg;
}

// Each bin's mean |x| over the finite values of one row, as the encoder computes them.
struct RowBins {
  float threshold = 0.0f;
  double inner = 0.0, outer = 0.0;
};
RowBins bins_of(const std::vector<float>& x, size_t begin, size_t end) {
  double sum_sq = 0;
  for (size_t i = begin; i < end; ++i) sum_sq += static_cast<double>(x[i]) * x[i];
  RowBins b;
  b.threshold = kBinThresholdRms * static_cast<float>(std::sqrt(sum_sq / static_cast<double>(end - begin)));
  double s_in = 0, s_out = 0;
  size_t n_in = 0, n_out = 0;
  for (size_t i = begin; i < end; ++i) {
    const double a = std::fabs(x[i]);
    if (a > b.threshold) {
      s_out += a;
      ++n_out;
    } else {
      s_in += a;
      ++n_in;
    }
  }
  b.inner = n_in != 0 ? s_in / n_in : 0.0;
  b.outer = n_out != 0 ? s_out / n_out : b.inner;
  return b;
}

std::vector<float> decoded_floats(DType dt, const Decoded& d, size_t elems) {
  std::vector<float> y(elems);
  for (size_t i = 0; i < elems; ++i) y[i] = element_value(dt, d.bytes, i);
  return y;
}

// Every packet trimmed to its trim point: each element decodes to sign(x) times the mean |x| of
// its bin in its row (sign, and rotated with the mse scale), for fp32 and bf16, over rows of
// 2^15 and a short last row. Elements within 1e-5 of the threshold may fall either side.
TEST(CodecTwoBit, TrimmedElementsDecodeToTheirBinsMean) {
  const size_t elems = 2 * 32768 + 1001;
  for (Scheme scheme : {Scheme::kSign, Scheme::kRotated}) {
    for (DType dt : {DType::kF32, DType::kBF16}) {
      std::vector<uint8_t> msg = message_bytes(dt, elems, 0, 41, false);
      std::vector<float> x(elems);
      for (size_t i = 0; i < elems; ++i) x[i] = element_value(dt, msg, i);
      Decoded d = round_trip(two_bit(scheme, true), dt, msg, trim_all);
      ASSERT_EQ(d.stats.head_only, elems);
      const std::vector<float> y = decoded_floats(dt, d, elems);
      const double tol = dt == DType::kF32 ? 1e-4 : 1.0 / 128;  // bin_ratio's 1/65535; bf16's rounding
      for (size_t r0 = 0; r0 < elems; r0 += 32768) {
        const size_t r1 = std::min(elems, r0 + 32768);
        const RowBins b = bins_of(x, r0, r1);
        ASSERT_GT(b.outer, 1.5 * b.inner);  // Gaussian: 1.51 / 0.45
        for (size_t i = r0; i < r1; ++i) {
          const double a = std::fabs(x[i]);
          if (std::fabs(a - b.threshold) < 1e-5 * b.threshold) continue;
          const double want = (a > b.threshold ? b.outer : b.inner) * (std::signbit(x[i]) ? -1 : 1);
          ASSERT_NEAR(y[i], want, tol * b.outer)
              << scheme_name(scheme) << " " << dtype_name(dt) << " i=" << i << " x=" << x[i];
        }
      }
    }
  }
}

// NCCL_TRIM_HEAD_SCALE=unbiased scales both levels so that <estimate, x> = |x|^2, as f does for
// 1-bit heads: per rotated row, and for rht after the inverse rotation (orthonormal) too.
TEST(CodecTwoBit, UnbiasedLevelsKeepTheInnerProduct) {
  const size_t elems = 32768 * 3;
  const std::vector<float> x = gaussian(elems, 43);
  for (Scheme scheme : {Scheme::kRotated, Scheme::kRht}) {
    Decoded d = round_trip(two_bit(scheme, false), DType::kF32, to_bytes(x), trim_all);
    const std::vector<float> y = as_floats(d.bytes);
    for (size_t r0 = 0; r0 < elems; r0 += 32768) {
      double dot = 0, norm = 0;
      for (size_t i = r0; i < r0 + 32768; ++i) {
        dot += static_cast<double>(x[i]) * y[i];
        norm += static_cast<double>(x[i]) * x[i];
      }
      EXPECT_NEAR(dot, norm, 1e-4 * norm) << scheme_name(scheme) << " row " << r0 / 32768;
    }
  }
}

// The point of the second bit: fully trimmed Gaussian rows (rht, 16 rows of 2^15) lose the
// Lloyd-Max quantizer's 0.1175 of their energy with the mse levels and 0.1175 / 0.8825 = 0.133
// unbiased, against 1 - 2/pi = 0.363 and pi/2 - 1 = 0.571 for 1-bit heads. Per-row NMSE varies
// by ~0.002 (sd) at d = 2^15, so each band is over 5 sd of the 16-row mean wide.
TEST(CodecTwoBit, FullyTrimmedErrorIsAThirdOfOneBits) {
  const size_t elems = 32768 * 16;
  const std::vector<float> x = gaussian(elems, 44);
  struct Case {
    uint8_t head_bits;
    bool mse;
    double lo, hi;
  };
  for (const Case& c : {Case{2, true, 0.112, 0.123}, Case{2, false, 0.127, 0.139}, Case{1, true, 0.355, 0.372},
                        Case{1, false, 0.56, 0.58}}) {
    CodecConfig cfg = config(Scheme::kRht, 4096, 32768, c.head_bits);
    cfg.head_scale_mse = c.mse;
    Decoded d = round_trip(cfg, DType::kF32, to_bytes(x), trim_all);
    const double nmse = sq_err(x, as_floats(d.bytes)) / sq_norm(x);
    EXPECT_GE(nmse, c.lo) << int{c.head_bits} << "-bit mse=" << c.mse;
    EXPECT_LE(nmse, c.hi) << int{c.head_bits} << "-bit mse=" << c.mse;
  }
}

// Near the top of fp32's range the unbiased scaling (k > 1) would take the outer level past the
// largest float: the row keeps its unscaled levels, every packet parses, and untrimmed it stays
// exact (found by a review's fuzzing: 3.2e38 and 1.18e38 in a row of 8 gave scale = inf).
TEST(CodecTwoBit, HugeRowsKeepAFiniteScale) {
  std::vector<float> x = {3.2e38f, 1.18e38f, 0, 0, 0, 0, 0, 0, -3.4e38f, 2e38f, 0, 0, 0, 0, 0, 1e30f};
  for (Scheme scheme : {Scheme::kRotated, Scheme::kSign}) {
    CodecConfig cfg = two_bit(scheme, false);
    cfg.row_elems = 8;
    Decoded whole = round_trip(cfg, DType::kF32, to_bytes(x), keep_all);
    EXPECT_EQ(whole.bytes, to_bytes(x)) << scheme_name(scheme);
    Decoded cut = round_trip(cfg, DType::kF32, to_bytes(x), trim_all);
    for (float y : as_floats(cut.bytes)) EXPECT_TRUE(std::isfinite(y)) << scheme_name(scheme);
    for (const std::vector<uint8_t>& pkt : whole.packets) {
      ParsedPacket p;
      ASSERT_EQ(parse_packet(pkt.data(), pkt.size(), &p), PacketError::kOk);
      EXPECT_TRUE(std::isfinite(p.hdr.scale));
    }
  }
}

// A cut inside the heads (a fabric trim to a fixed size that falls there): elements with a sign
// and no bin decode to the Gaussian mix of the two levels (BinLevels::unknown), those with both
// to their bin's level; the check point at the end of plane 0 vouches for such a cut.
TEST(CodecTwoBit, CutBetweenSignsAndBinsUsesTheMixedLevel) {
  const size_t elems = 800;  // one packet
  const std::vector<float> x = gaussian(elems, 45);
  const CodecConfig cfg = two_bit(Scheme::kRotated, true);
  Decoded whole = round_trip(cfg, DType::kF32, to_bytes(x), keep_all);
  ASSERT_EQ(whole.packets.size(), 1u);
  ParsedPacket p;
  ASSERT_EQ(parse_packet(whole.packets[0].data(), whole.packets[0].size(), &p), PacketError::kOk);
  const uint32_t p0 = elems / 8;
  ASSERT_EQ(p.hdr.trim_bytes, 2 * p0);
  const BinLevels levels = bin_levels(p.hdr.scale, p.hdr.bin_ratio);
  EXPECT_NEAR(levels.unknown, 0.3263 * levels.outer + 0.6737 * levels.inner, 1e-6);
  // Two of the check points: the end of plane 0, and 3/4 of the way to the trim point.
  for (int64_t cut : {int64_t{p0}, int64_t{2 * p0 - 2 * p0 / 4}}) {
    const uint32_t with_bins = static_cast<uint32_t>(cut - p0) * 8;  // elements whose bin arrived
    Decoded d = round_trip(cfg, DType::kF32, to_bytes(x), [cut](size_t, const ParsedPacket&) { return cut; });
    ASSERT_EQ(d.stats.head_only, elems) << "the check points verify the cut at " << cut;
    const std::vector<float> y = as_floats(d.bytes);
    for (size_t i = 0; i < elems; ++i) {
      const bool outer = std::fabs(x[i]) > kBinThresholdRms * std::sqrt(static_cast<float>(sq_norm(x) / elems));
      const float level = i < with_bins ? (outer ? levels.outer : levels.inner) : levels.unknown;
      ASSERT_EQ(y[i], x[i] < 0 ? -level : level) << "cut " << cut << " i=" << i;
    }
  }
}

// sq and sd heads are random bits, not signs: 2-bit heads are refused with a reason that names
// both knobs, and a header claiming them is a bad field.
TEST(CodecTwoBit, RandomHeadSchemesAreRefused) {
  for (Scheme s : {Scheme::kSq, Scheme::kSd}) {
    const Status st = config(s, 4096, 32768, 2).validate();
    EXPECT_FALSE(st.is_ok());
    EXPECT_NE(st.to_string().find("NCCL_TRIM_HEAD_BITS=2"), std::string::npos) << st.to_string();
    EXPECT_NE(st.to_string().find("NCCL_TRIM_SCHEME"), std::string::npos) << st.to_string();
  }
  EXPECT_TRUE(config(Scheme::kNone, 4096, 32768, 2).validate().is_ok());  // exact traffic: no heads at all
}

}  // namespace
}  // namespace trim::codec::testing
