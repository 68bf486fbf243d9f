// What a trim leaves: the estimators' statistics, the precision ladder, and partial packets.
#include <algorithm>
#include <cmath>

#include "codec/fwht.h"
#include "codec/rht.h"
#include "codec/rng.h"
#include "tests/codec_util.h"

namespace trim::codec::testing {
namespace {

// One Gaussian row of 2^15, every packet trimmed to its heads: the row x, its estimate y, and
// the l1 norm of the row the heads are the signs of (R(x) for rht, x itself for rotated rows).
struct FullTrim {
  std::vector<float> x, y;
  double l1 = 0;
  double nmse() const { return sq_err(x, y) / sq_norm(x); }
};
FullTrim full_trim(const CodecConfig& cfg, uint64_t seed, uint32_t msg_seq) {
  const uint32_t d = 32768;
  FullTrim t;
  t.x = gaussian(d, seed);
  MessageId id = test_id(msg_seq);
  Decoded dec = round_trip(cfg, DType::kF32, to_bytes(t.x), trim_all, id);
  EXPECT_EQ(dec.stats.head_only, d);
  t.y = as_floats(dec.bytes);
  std::vector<float> rotated = t.x;
  if (cfg.scheme == Scheme::kRht) {
    std::vector<uint64_t> words;
    rht_sign_words(rng_key(cfg.seed, id.msg_seq, 0, RngStream::kRhtSigns), d, &words);
    rht_row_forward(t.x.data(), rotated.data(), d, words);
  }
  for (float v : rotated) t.l1 += std::fabs(static_cast<double>(v));
  return t;
}

// DRIVE's identity: with every packet trimmed to its heads, x' = R^-1(f sign(R x)) with
// f = |x|^2/|Rx|_1, so <x, x'> = |x|^2 and NMSE = d |x|^2 / |Rx|_1^2 - 1 exactly (up to fp32
// rounding). For Gaussian rows it concentrates at pi/2 - 1 = 0.5708; its standard deviation
// per 2^15 row is about 0.005, so the mean of 200 rows has sd ~0.0004 and the bound
// [0.55, 0.59] is > 40 sd wide: a failure means a bug, not bad luck.
TEST(CodecTrim, RhtFullyTrimmedNmseMatchesDriveFormula) {
  const CodecConfig cfg = config(Scheme::kRht);
  double mean = 0;
  const int rows = 200;
  for (int r = 0; r < rows; ++r) {
    const FullTrim t = full_trim(cfg, 1000 + r, static_cast<uint32_t>(r));
    const double formula = t.x.size() * sq_norm(t.x) / (t.l1 * t.l1) - 1;
    ASSERT_NEAR(t.nmse(), formula, 2e-4 * formula) << "row " << r;
    mean += t.nmse() / rows;
  }
  EXPECT_GE(mean, 0.55);
  EXPECT_LE(mean, 0.59);
}

// NCCL_TRIM_HEAD_SCALE=mse: heads scaled by c = |Rx|_1 / d, the least-squares scale of the
// signs, so with every packet trimmed x' = R^-1(c sign(Rx)) and, the rotation being orthonormal,
// NMSE = 1 - |Rx|_1^2 / (d |x|^2) exactly (1 - 2/pi = 0.3634 for Gaussian rows; sd per 2^15 row
// ~0.003, so over 50 rows the band [0.35, 0.38] is > 20 sd wide), and <x, x'> / |x|^2 = 1 - NMSE
// (a shrink by ~2/pi, where the unbiased scale gives exactly 1). The hook's rotated rows (the
// row is R(x) already) obey the same identity with |x|_1 in place of |Rx|_1.
TEST(CodecTrim, MseHeadScaleMinimisesTheSquaredError) {
  for (Scheme scheme : {Scheme::kRht, Scheme::kRotated}) {
    CodecConfig cfg = config(scheme);
    cfg.head_scale_mse = true;
    double mean = 0;
    const int rows = 50;
    for (int r = 0; r < rows; ++r) {
      const FullTrim t = full_trim(cfg, 3000 + r, static_cast<uint32_t>(r));
      double dot = 0;
      for (size_t i = 0; i < t.x.size(); ++i) dot += static_cast<double>(t.x[i]) * t.y[i];
      const double formula = 1 - t.l1 * t.l1 / (t.x.size() * sq_norm(t.x));
      ASSERT_NEAR(t.nmse(), formula, 2e-4 * formula) << scheme_name(scheme) << " row " << r;
      ASSERT_NEAR(dot / sq_norm(t.x), 1 - formula, 2e-4) << scheme_name(scheme) << " row " << r;
      mean += t.nmse() / rows;
    }
    EXPECT_GE(mean, 0.35) << scheme_name(scheme);
    EXPECT_LE(mean, 0.38) << scheme_name(scheme);
  }
}

// Partial trimming: the coordinates of untrimmed packets stay bit exact, and each trimmed one
// is estimated from R^-1(f sign(Rx)), whose error per coordinate has the same mean square as
// under a full trim (the random rotation treats every coordinate alike). So with a fraction u
// of the elements trimmed, NMSE ~ u (pi/2 - 1). The trimmed coordinates' errors are nearly
// Gaussian: over m of them the mean square has relative sd ~ sqrt(2/m) (1% at u = 0.1 over
// 8 rows, m ~ 26000), so the 6% band around u (pi/2 - 1) is over 5 sd wide. bf16 rows behave
// the same (the estimate's rounding to bf16 adds ~2^-18 relative error, far inside the band).
TEST(CodecTrim, RhtPartialTrimScalesWithFraction) {
  for (DType dt : {DType::kF32, DType::kBF16}) {
    const size_t elems = 32768 * 8;
    const std::vector<uint8_t> msg = message_bytes(dt, elems, 0, 9, false);
    std::vector<float> x(elems);
    for (size_t i = 0; i < elems; ++i) x[i] = element_value(dt, msg, i);
    expect_nmse_tracks_trimmed_fraction(Scheme::kRht, dt, msg, x);
  }
}

// sq is unbiased inside the clip range. Over T independent dithers each in-range element
// decodes to +-L with mean x and variance L^2 - x^2; z_i = (mean_i - x_i) / sqrt((L^2 - x_i^2)/T)
// is ~N(0,1) and independent across elements, so Z = sum w_i z_i / sqrt(m) ~ N(0,1) for any
// fixed weights w_i = +-1: |Z| < 5 holds with probability 1 - 6e-7 when unbiased. Two
// weightings catch both shapes of bias: w = 1 (even in x) and w = sign(x) (odd in x, such as
// shrinking or inflating magnitudes). sign gives an odd |Z| in the hundreds on the same data.
struct BiasZ {
  double even, odd;
};
BiasZ bias_z(Scheme scheme, const std::vector<float>& x, int trials, double* clip_out) {
  CodecConfig cfg = config(scheme, 4096, 4096);
  std::vector<double> mean(x.size(), 0.0);
  float clip = 0;
  for (int t = 0; t < trials; ++t) {
    Decoded dec = round_trip(cfg, DType::kF32, to_bytes(x), trim_all, test_id(static_cast<uint32_t>(t)));
    ParsedPacket p;
    EXPECT_EQ(parse_packet(dec.packets[0].data(), dec.packets[0].size(), &p), PacketError::kOk);
    clip = p.hdr.scale;
    std::vector<float> y = as_floats(dec.bytes);
    for (size_t i = 0; i < x.size(); ++i) mean[i] += y[i] / trials;
  }
  *clip_out = clip;
  BiasZ z{0, 0};
  size_t m = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double var = (static_cast<double>(clip) * clip - static_cast<double>(x[i]) * x[i]) / trials;
    if (std::fabs(x[i]) >= 0.95 * clip || var <= 0) continue;
    const double zi = (mean[i] - x[i]) / std::sqrt(var);
    z.even += zi;
    z.odd += x[i] < 0 ? -zi : zi;
    ++m;
  }
  z.even /= std::sqrt(static_cast<double>(m));
  z.odd /= std::sqrt(static_cast<double>(m));
  return z;
}

TEST(CodecTrim, SqIsUnbiasedInsideClipRange) {
  std::vector<float> x = gaussian(4096, 21);
  double clip = 0;
  const BiasZ z = bias_z(Scheme::kSq, x, 200, &clip);
  EXPECT_LT(std::fabs(z.even), 5.0);
  EXPECT_LT(std::fabs(z.odd), 5.0);
  // Clip L = 2.5 x RMS as configured.
  EXPECT_NEAR(clip, 2.5 * std::sqrt(sq_norm(x) / x.size()), 1e-5 * clip);
}

// sign decodes to +-sigma whatever the magnitude: small values are overestimated and large
// ones underestimated, deterministically.
TEST(CodecTrim, SignIsBiased) {
  std::vector<float> x = gaussian(4096, 22);
  Decoded dec = round_trip(config(Scheme::kSign, 4096, 4096), DType::kF32, to_bytes(x), trim_all);
  std::vector<float> y = as_floats(dec.bytes);
  const double sigma = std::sqrt(sq_norm(x) / x.size());
  double small_bias = 0, large_bias = 0;
  int small = 0, large = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    if (x[i] > 0 && x[i] < 0.5 * sigma) {
      small_bias += y[i] - x[i];
      ++small;
    } else if (x[i] > 2 * sigma) {
      large_bias += y[i] - x[i];
      ++large;
    }
  }
  ASSERT_GT(small, 100);
  ASSERT_GT(large, 20);
  EXPECT_GT(small_bias / small, 0.5 * sigma);
  EXPECT_LT(large_bias / large, -0.9 * sigma);
  double clip = 0;
  EXPECT_GT(std::fabs(bias_z(Scheme::kSign, x, 4, &clip).odd), 50.0);
}

// sd: the error e = x' - x of an in-range x is U(-L, L) whatever x is. In each quartile of
// |x| the error mean is 0 and its second moment L^2/3; with ~200k samples per bin the
// standard errors are 0.0013 L (mean) and 0.0007 L^2 (moment): 6-sigma bounds are used.
// sq's error second moment is L^2 - x^2 and visibly depends on the bin.
TEST(CodecTrim, SdErrorIsIndependentOfInput) {
  const int trials = 200;
  std::vector<float> x = gaussian(4096, 23);
  const int bins = 4;
  for (Scheme scheme : {Scheme::kSd, Scheme::kSq}) {
    CodecConfig cfg = config(scheme, 4096, 4096);
    double mean[bins] = {}, m2[bins] = {};
    double count[bins] = {};
    double clip = 0;
    for (int t = 0; t < trials; ++t) {
      Decoded dec = round_trip(cfg, DType::kF32, to_bytes(x), trim_all, test_id(static_cast<uint32_t>(1000 + t)));
      ParsedPacket p;
      ASSERT_EQ(parse_packet(dec.packets[0].data(), dec.packets[0].size(), &p), PacketError::kOk);
      clip = p.hdr.scale;
      std::vector<float> y = as_floats(dec.bytes);
      for (size_t i = 0; i < x.size(); ++i) {
        const double a = std::fabs(x[i]) / clip;
        if (a >= 1.0) continue;
        const int b = std::min(bins - 1, static_cast<int>(a * bins * 2));  // |x| in [0, L/2) split in 4
        const double e = y[i] - x[i];
        if (scheme == Scheme::kSd) {
          ASSERT_LE(std::fabs(e), clip * (1 + 1e-5));
        }
        mean[b] += e;
        m2[b] += e * e;
        count[b] += 1;
      }
    }
    const double l2 = clip * clip;
    for (int b = 0; b < bins; ++b) {
      ASSERT_GT(count[b], 50000) << b;
      mean[b] /= count[b];
      m2[b] /= count[b];
      if (scheme == Scheme::kSd) {
        EXPECT_NEAR(mean[b], 0.0, 6 * clip / std::sqrt(3 * count[b])) << "bin " << b;
        EXPECT_NEAR(m2[b], l2 / 3, 6 * l2 * std::sqrt(4.0 / 45 / count[b])) << "bin " << b;
      }
    }
    if (scheme == Scheme::kSq) {
      // E[e^2] = L^2 - x^2: the outer bin's moment is clearly below the inner one's.
      EXPECT_LT(m2[bins - 1], m2[0] - 0.1 * l2);
    }
  }
}

// 16-bit heads (planes 0+1) give fp32 the bf16 prefix; filling the lost low bits with the
// middle of the interval bounds the relative error by 2^-8 for every normal number.
TEST(CodecTrim, Plane1OfFp32HasRelativeErrorAtMost2ToMinus8) {
  for (Scheme scheme : {Scheme::kSign, Scheme::kSq, Scheme::kSd, Scheme::kRht}) {
    std::vector<float> x = gaussian(20000, 24);
    x[5] = 1e-30f;
    x[6] = -3e20f;
    CodecConfig cfg = config(scheme, 9000, 32768, 16);
    Decoded dec = round_trip(cfg, DType::kF32, to_bytes(x), trim_all);
    EXPECT_EQ(dec.stats.plane1, x.size());
    std::vector<float> y = as_floats(dec.bytes);
    for (size_t i = 0; i < x.size(); ++i) {
      ASSERT_LE(std::fabs(static_cast<double>(y[i]) - x[i]), std::ldexp(std::fabs(static_cast<double>(x[i])), -8))
          << scheme_name(scheme) << " i=" << i << " x=" << x[i];
    }
  }
  // rht's plane 1 is the input's own top 16 bits, so the bound holds per element there too.
}

// Cut one packet at every byte offset (the decoder's view of a prefix the check points vouch
// for: CheckPoints.* test those). Cuts inside plane 0 (and plane Q of 2-bit heads) keep a
// prefix of heads; from the trim point on, each element uses the best level whose bits
// survived, so the error never grows as more bytes survive, and the whole packet is exact.
TEST(CodecTrim, EveryCutOffsetDecodesAndErrorNeverGrows) {
  for (Scheme scheme : {Scheme::kSign, Scheme::kRht, Scheme::kSq, Scheme::kSd}) {
    for (DType dt : {DType::kF32, DType::kBF16}) {
      for (uint8_t head_bits : {uint8_t{1}, uint8_t{2}}) {
        if (head_bits == 2 && !sign_head(scheme)) continue;
        const size_t elems = 61;  // one packet, a partial byte in every plane
        std::vector<uint8_t> msg = message_bytes(dt, elems, 0, 26, false);
        CodecConfig cfg = config(scheme, 4096, 32768, head_bits);
        Decoded whole = round_trip(cfg, dt, msg, keep_all);
        ASSERT_EQ(whole.packets.size(), 1u);
        ParsedPacket p;
        ASSERT_EQ(parse_packet(whole.packets[0].data(), whole.packets[0].size(), &p), PacketError::kOk);
        const int64_t trim_point = p.hdr.trim_bytes;
        EXPECT_EQ(trim_point, static_cast<int64_t>(head_bits * ((elems + 7) / 8)));
        double prev = INFINITY;
        for (int64_t cut = 0; cut <= p.hdr.payload_bytes; ++cut) {
          Decoded d = round_trip(cfg, dt, msg, [cut](size_t, const ParsedPacket&) { return cut; }, test_id(), true);
          double err = 0;
          for (size_t i = 0; i < elems; ++i) {
            double a, b;
            if (dt == DType::kF32) {
              float fa, fb;
              std::memcpy(&fa, &msg[4 * i], 4);
              std::memcpy(&fb, &d.bytes[4 * i], 4);
              a = fa, b = fb;
            } else {
              uint16_t ha, hb;
              std::memcpy(&ha, &msg[2 * i], 2);
              std::memcpy(&hb, &d.bytes[2 * i], 2);
              a = bf16_to_f32(ha), b = bf16_to_f32(hb);
            }
            ASSERT_TRUE(std::isfinite(b));
            err += (a - b) * (a - b);
          }
          EXPECT_EQ(d.stats.missing,
                    static_cast<uint64_t>(std::max<int64_t>(0, static_cast<int64_t>(elems) - 8 * cut)));
          if (cut >= trim_point) {
            EXPECT_LE(err, prev * (1 + 1e-6) + 1e-12)
                << scheme_name(scheme) << " " << dtype_name(dt) << " head bits " << int{head_bits} << " cut=" << cut;
            prev = err;
          }
          if (cut == p.hdr.payload_bytes) {
            EXPECT_EQ(d.bytes, msg) << scheme_name(scheme) << " " << dtype_name(dt) << " head bits " << int{head_bits};
          }
        }
      }
    }
  }
}

// Packets that never arrive: the decoder estimates their elements (sign: 0; rht: from the
// heads of the rest of the row) and reports exactly which outputs are estimates. The other
// elements stay exact for rht too (its planes 1+2 are the input's bits).
TEST(CodecTrim, MissingPacketsAreReported) {
  std::vector<float> x = gaussian(32768 + 1000, 27);
  for (Scheme scheme : {Scheme::kSign, Scheme::kRht}) {
    Result<Layout> layout = Layout::make(config(scheme, 4096), DType::kF32, scheme, x.size() * 4);
    ASSERT_TRUE(layout.is_ok());
    const uint32_t epp = layout->row(0).elems_per_packet;  // 1000 (sign), 968 (rht)
    // Packet 3 of row 0 and row 1's only packet never arrive.
    Decoded d = round_trip(config(scheme, 4096), DType::kF32, to_bytes(x), [epp](size_t, const ParsedPacket& p) {
      return (p.hdr.row == 0 && p.hdr.first_elem == 3 * epp) || p.hdr.row == 1 ? -1 : int64_t{p.hdr.payload_bytes};
    });
    EXPECT_EQ(d.stats.missing, epp + 1000u);
    std::vector<float> y = as_floats(d.bytes);
    size_t estimated = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      estimated += d.estimated[i];
      const bool lost = (i >= 3 * epp && i < 4 * epp) || i >= 32768;
      EXPECT_EQ(d.estimated[i], lost ? 1 : 0) << i;
      if (!lost) {
        ASSERT_EQ(y[i], x[i]) << i;
      } else if (scheme == Scheme::kSign || i >= 32768) {
        ASSERT_EQ(y[i], 0.0f) << i;  // rht row 1: no head arrived, R^-1(0) = 0
      } else {
        ASSERT_TRUE(std::isfinite(y[i])) << i;
      }
    }
    EXPECT_EQ(estimated, d.stats.estimated);
    EXPECT_EQ(estimated, epp + 1000u);
  }
}

// A trimmed packet followed by its full retransmission decodes exactly; repeats are ignored.
TEST(CodecTrim, RetransmissionUpgradesAndDuplicatesAreIgnored) {
  std::vector<float> x = gaussian(3000, 28);
  std::vector<uint8_t> msg = to_bytes(x);
  CodecConfig cfg = config(Scheme::kRht);
  const Encoded e = encode(cfg, DType::kF32, msg);
  ASSERT_TRUE(e.ok);
  Decoder dec(cfg);
  std::vector<uint8_t> out(msg.size());
  ASSERT_TRUE(dec.begin(*e.layout, test_id(), out.data()).is_ok());
  for (auto& pkt : e.packets) {
    ParsedPacket trimmed, full;
    ASSERT_EQ(parse_packet(pkt.data(), kHeaderBytes + 10, &trimmed), PacketError::kOk);
    ASSERT_EQ(parse_packet(pkt.data(), pkt.size(), &full), PacketError::kOk);
    EXPECT_EQ(dec.add(trimmed), PacketError::kOk);
    EXPECT_EQ(dec.add(full), PacketError::kOk);
    EXPECT_EQ(dec.add(full), PacketError::kOk);
    EXPECT_EQ(dec.add(trimmed), PacketError::kOk);
  }
  EXPECT_TRUE(dec.row_complete(0));
  DecodeStats s = dec.finish();
  EXPECT_EQ(s.duplicate_packets, 2 * e.packets.size());
  EXPECT_EQ(s.full, x.size());
  EXPECT_LE(std::sqrt(sq_err(x, as_floats(out)) / sq_norm(x)), 34 * std::ldexp(1.0, -24));
}

// The shared randomness is a pure function of its key and counter, and the key depends on
// every component.
TEST(CodecRng, CounterBasedAndKeyed) {
  const uint64_t k = rng_key(1, 2, 3, RngStream::kDither);
  EXPECT_EQ(rng_word(k, 10), rng_word(rng_key(1, 2, 3, RngStream::kDither), 10));
  EXPECT_NE(k, rng_key(2, 2, 3, RngStream::kDither));
  EXPECT_NE(k, rng_key(1, 3, 3, RngStream::kDither));
  EXPECT_NE(k, rng_key(1, 2, 4, RngStream::kDither));
  EXPECT_NE(k, rng_key(1, 2, 3, RngStream::kRhtSigns));
  // Bits are balanced: over 2^20 bits the count of ones has sd 512; allow 6 sd.
  int64_t ones = 0;
  for (uint64_t i = 0; i < (1u << 14); ++i) ones += __builtin_popcountll(rng_word(k, i));
  EXPECT_NEAR(static_cast<double>(ones), 1 << 19, 6 * 512);
  double mean = 0;
  for (uint64_t i = 0; i < 100000; ++i) {
    const float u = rng_uniform(k, i);
    ASSERT_GE(u, 0.0f);
    ASSERT_LT(u, 1.0f);
    mean += u / 100000;
  }
  EXPECT_NEAR(mean, 0.5, 6 * std::sqrt(1.0 / 12 / 100000));
}

}  // namespace
}  // namespace trim::codec::testing
