// 2-bit heads (NCCL_TRIM_HEAD_BITS=2): a sign and a magnitude bin per element (plane Q, after
// plane 0), |x| > 0.9816 RMS, the 4-level Lloyd-Max quantizer of a Gaussian. A trimmed element
// decodes to its sign times its bin's level; the header carries the levels (scale = outer,
// bin_ratio = inner / outer). Untrimmed packets stay exact (CodecRoundTrip.UntrimmedIsBitExact).
#include <algorithm>
#include <cmath>

#include "codec/rht.h"
#include "codec/rng.h"
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

// The rht row path (Decoder::row_bins, estimate_rht_row) with every packet cut inside plane Q:
// each packet's first elements have their bin, the rest only their sign. In the rotated domain
// (R(y), y the decoded row) an element with its bin decodes to sign(R(x)) times its bin's level,
// one without to sign(R(x)) times the Gaussian mix of the two levels (BinLevels::unknown), and
// the NMSE falls between that of fully trimmed 2-bit and 1-bit heads, where the fraction of
// elements with a bin puts it. Plane Q ignored, every element would decode to the mixed level
// (the 1-bit error); misread, the bins of the wrong elements would be used. Cuts: at the check
// point 3/4 of the way to the trim point (half of plane Q, what parse_packet verifies), and at a
// different byte of plane Q in each packet (trusted cuts: the decoder's own any-prefix property).
TEST(CodecTwoBit, RhtCutInsidePlaneQUsesBinsWhereTheyArrived) {
  constexpr uint32_t kRow = 32768;
  const size_t rows = 4, elems = rows * kRow;
  const std::vector<float> x = gaussian(elems, 46);
  const CodecConfig cfg2 = two_bit(Scheme::kRht, true);
  CodecConfig cfg1 = config(Scheme::kRht, 4096, kRow, 1);
  cfg1.head_scale_mse = true;
  const double norm = sq_norm(x);
  const double nmse1 = sq_err(x, as_floats(round_trip(cfg1, DType::kF32, to_bytes(x), trim_all).bytes)) / norm;
  const double nmse2 = sq_err(x, as_floats(round_trip(cfg2, DType::kF32, to_bytes(x), trim_all).bytes)) / norm;
  ASSERT_LT(nmse2 + 0.2, nmse1) << "0.1175 against 0.363";
  // The plane-0 bytes of packet p, and where its cut falls inside plane Q (bytes past plane 0).
  auto p0_of = [](const ParsedPacket& p) { return static_cast<int64_t>((p.hdr.elem_count + 7) / 8); };
  struct Cut {
    const char* what;
    bool trusted;
    CutFn fn;
  };
  const std::vector<Cut> cuts = {
      {"the check point at 3/4 of the trim point", false,
       [](size_t, const ParsedPacket& p) { return static_cast<int64_t>(p.hdr.trim_bytes - p.hdr.trim_bytes / 4); }},
      {"a different byte of plane Q per packet", true,
       [p0_of](size_t k, const ParsedPacket& p) {
         const int64_t p0 = p0_of(p);  // a row's last packet may hold 8 elements: one byte of bins
         return p0 < 2 ? p0 + static_cast<int64_t>(k % 2) : p0 + 1 + static_cast<int64_t>(k * 37) % (p0 - 1);
       }},
  };
  for (const Cut& c : cuts) {
    SCOPED_TRACE(c.what);
    // Elements of each packet whose bin arrived, by the message's element index.
    std::vector<uint8_t> has_bin(elems, 0);
    size_t inside = 0;  // packets cut strictly inside plane Q
    const CutFn record = [&](size_t k, const ParsedPacket& p) {
      const int64_t keep = c.fn(k, p);
      const int64_t p0 = p0_of(p);
      EXPECT_GE(keep, p0);
      EXPECT_LE(keep, 2 * p0);
      inside += keep > p0 && keep < 2 * p0 ? 1 : 0;
      const size_t first = static_cast<size_t>(p.hdr.row) * kRow + p.hdr.first_elem;
      std::fill_n(has_bin.begin() + static_cast<ptrdiff_t>(first), std::min<int64_t>((keep - p0) * 8, p.hdr.elem_count), 1);
      return keep;
    };
    Decoded d = round_trip(cfg2, DType::kF32, to_bytes(x), record, test_id(), c.trusted);
    ASSERT_EQ(d.stats.head_only, elems) << "every element estimated from its heads";
    EXPECT_GE(inside, d.packets.size() - rows) << "all but each row's last (8 elements) cut inside plane Q";
    const std::vector<float> y = as_floats(d.bytes);
    size_t with_bin = 0;
    for (uint8_t b : has_bin) with_bin += b;
    ASSERT_GT(with_bin, elems / 10);
    ASSERT_LT(with_bin, elems - elems / 10);
    size_t checked[3] = {0, 0, 0};  // inner, outer, unknown
    for (size_t r = 0; r < rows; ++r) {
      const size_t r0 = r * kRow;
      ParsedPacket first;
      const size_t first_packet = r * d.packets.size() / rows;
      ASSERT_EQ(parse_packet(d.packets[first_packet].data(), codec::kHeaderBytes, &first), PacketError::kOk);
      ASSERT_EQ(first.hdr.row, r);
      const BinLevels levels = bin_levels(first.hdr.scale, first.hdr.bin_ratio);
      ASSERT_GT(levels.outer, 2.5f * levels.inner);
      std::vector<uint64_t> signs;
      rht_sign_words(rng_key(cfg2.seed, test_id().msg_seq, static_cast<uint32_t>(r), RngStream::kRhtSigns), kRow, &signs);
      std::vector<float> rx(x.begin() + r0, x.begin() + r0 + kRow), ry(y.begin() + r0, y.begin() + r0 + kRow);
      rht_row_forward(rx.data(), rx.data(), kRow, signs);
      rht_row_forward(ry.data(), ry.data(), kRow, signs);
      const float threshold = kBinThresholdRms * static_cast<float>(std::sqrt(sq_norm(rx) / kRow));
      for (size_t i = 0; i < kRow; ++i) {
        const float a = std::fabs(rx[i]);
        const bool bin = has_bin[r0 + i] != 0;
        if (bin && std::fabs(a - threshold) < 1e-4f * threshold) continue;  // either side of it
        const float level = !bin ? levels.unknown : a > threshold ? levels.outer : levels.inner;
        ++checked[!bin ? 2 : a > threshold ? 1 : 0];
        ASSERT_EQ(std::signbit(ry[i]), std::signbit(rx[i])) << "row " << r << " i=" << i;
        ASSERT_NEAR(std::fabs(ry[i]), level, 1e-3f * levels.outer)
            << "row " << r << " i=" << i << (bin ? " with its bin" : " without its bin") << " R(x)=" << rx[i];
      }
    }
    EXPECT_GT(checked[0], 1000u);
    EXPECT_GT(checked[1], 1000u);
    EXPECT_GT(checked[2], 1000u);
    // Between the two fully trimmed errors, where the fraction with a bin puts it.
    const double nmse = sq_err(x, y) / norm, f = static_cast<double>(with_bin) / elems;
    EXPECT_GT(nmse, nmse2 + 0.02) << "f=" << f;
    EXPECT_LT(nmse, nmse1 - 0.02) << "f=" << f;
    EXPECT_NEAR(nmse, f * nmse2 + (1 - f) * nmse1, 0.01) << "nmse2=" << nmse2 << " nmse1=" << nmse1 << " f=" << f;
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
