// The `rotated` scheme: rht for data the application rotated already (the nccl_trim comm hook
// rotates each gradient bucket on the GPU before NCCL sums it). No transform in the codec; the
// sign layout with rht's scale |x|^2/|x|_1; trimmed values estimated in the rotated domain. The
// bounds are those of the rht tests (codec_trim_test.cc), measured on data rotated the way the
// hook rotates it (cuda/rht_geom.h keys, codec/rht.h arithmetic: libtrim-rht's host twin).
#include <algorithm>
#include <cmath>

#include "codec/rht.h"
#include "cuda/rht_geom.h"
#include "tests/codec_util.h"

namespace trim::codec::testing {
namespace {

// The hook's rotation of a bucket of `x.size()` fp32 values, rows of 2^15 (in place).
void hook_rotate(std::vector<float>* x, uint64_t seed, bool forward) {
  const rht::BucketGeom g = rht::make_geom(x->size(), 0, 15);
  std::vector<uint64_t> words;
  for (uint64_t i = 0; i < g.rows(); ++i) {
    const rht::RowRef r = rht::row_ref(g, i);
    rht_sign_words(rht::row_sign_key(seed, r), r.elems, &words);
    float* v = x->data() + r.offset;
    if (forward) {
      rht_row_forward(v, v, r.elems, words);
    } else {
      rht_row_inverse(v, r.elems, words);
    }
  }
}

TEST(CodecRotated, WireNameAndSignLayout) {
  EXPECT_STREQ(scheme_name(Scheme::kRotated), "rotated");
  Scheme s = Scheme::kNone;
  ASSERT_TRUE(parse_scheme("rotated", &s));
  EXPECT_EQ(s, Scheme::kRotated);
  EXPECT_EQ(static_cast<int>(Scheme::kRotated), 5);
  for (DType dt : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (uint32_t pb : {1472u, 4068u, 8972u}) {
      EXPECT_EQ(Layout::elems_per_packet(Scheme::kRotated, dt, false, pb, 32768),
                Layout::elems_per_packet(Scheme::kSign, dt, false, pb, 32768))
          << dtype_name(dt) << " " << pb;
    }
  }
}

// Untrimmed, every dtype and odd size decodes to the original bits (special values included:
// their rows travel as sign, whose untrimmed decode is exact too).
TEST(CodecRotated, UntrimmedIsBitExact) {
  for (DType dt : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (size_t elems : {size_t{1}, size_t{3}, size_t{1000}, size_t{32769}, size_t{70001}}) {
      for (bool specials : {false, true}) {
        const std::vector<uint8_t> msg = message_bytes(dt, elems, 0, elems + 17, specials);
        Decoded dec = round_trip(config(Scheme::kRotated), dt, msg, keep_all);
        ASSERT_EQ(dec.bytes, msg) << dtype_name(dt) << " elems " << elems << " specials " << specials;
        EXPECT_EQ(dec.stats.head_only, 0u);
      }
    }
  }
}

// Header: finite rows say rotated with scale |x|^2/|x|_1; a row holding a NaN says sign and is
// scaled by the RMS of its finite values, as every scheme's fallback is.
TEST(CodecRotated, HeaderScaleAndNanFallback) {
  std::vector<float> x = gaussian(2 * 32768, 5);
  x[32768 + 11] = std::nanf("");
  Decoded dec = round_trip(config(Scheme::kRotated), DType::kF32, to_bytes(x), keep_all);
  double sq = 0, l1 = 0;
  for (int i = 0; i < 32768; ++i) {
    sq += static_cast<double>(x[i]) * x[i];
    l1 += std::fabs(static_cast<double>(x[i]));
  }
  bool saw_row0 = false, saw_row1 = false;
  for (const auto& pkt : dec.packets) {
    ParsedPacket p;
    ASSERT_EQ(parse_packet(pkt.data(), pkt.size(), &p), PacketError::kOk);
    if (p.hdr.row == 0) {
      saw_row0 = true;
      EXPECT_EQ(p.hdr.scheme, Scheme::kRotated);
      EXPECT_FLOAT_EQ(p.hdr.scale, static_cast<float>(sq / l1));
    } else {
      saw_row1 = true;
      EXPECT_EQ(p.hdr.scheme, Scheme::kSign);
    }
  }
  EXPECT_TRUE(saw_row0 && saw_row1);
}

// DRIVE's identity, as for rht (CodecTrim.RhtFullyTrimmedNmseMatchesDriveFormula): with every
// packet trimmed, the estimate of the rotated row r is f sign(r) with f = |r|^2/|r|_1, so
// NMSE = d |r|^2 / |r|_1^2 - 1 exactly up to rounding, in the rotated domain and (the rotation
// being orthonormal) after the hook undoes it. Mean over 200 Gaussian rows: 0.5708, sd ~0.0004;
// the band [0.55, 0.59] is > 40 sd wide.
TEST(CodecRotated, FullyTrimmedNmseMatchesDriveFormula) {
  const uint32_t d = 32768;
  const int rows = 200;
  double mean = 0;
  for (int row = 0; row < rows; ++row) {
    std::vector<float> x = gaussian(d, 2000 + row);
    std::vector<float> r = x;
    const uint64_t seed = rht::bucket_seed(1, 0, static_cast<uint64_t>(row));
    hook_rotate(&r, seed, true);
    Decoded dec = round_trip(config(Scheme::kRotated), DType::kF32, to_bytes(r), trim_all);
    ASSERT_EQ(dec.stats.head_only, d);
    std::vector<float> y = as_floats(dec.bytes);
    hook_rotate(&y, seed, false);
    double l1 = 0;
    for (float v : r) l1 += std::fabs(static_cast<double>(v));
    const double formula = d * sq_norm(r) / (l1 * l1) - 1;
    const double nmse = sq_err(x, y) / sq_norm(x);
    ASSERT_NEAR(nmse, formula, 2e-4 * formula) << "row " << row;
    mean += nmse / rows;
  }
  EXPECT_GE(mean, 0.55);
  EXPECT_LE(mean, 0.59);
}

// Partial trimming, as CodecTrim.RhtPartialTrimScalesWithFraction: untrimmed coordinates stay
// bit exact (in the rotated domain the hook sums in), each trimmed one has mean square error
// (pi/2 - 1) of its share of the energy, so NMSE ~ u (pi/2 - 1) for a trimmed fraction u; the
// 6% band is over 5 sd wide (m ~ 26000 trimmed coordinates at u = 0.1). bf16: the hook rotates
// in fp32 and rounds once to bf16; the codec sees those bf16 values.
TEST(CodecRotated, PartialTrimScalesWithFraction) {
  for (DType dt : {DType::kF32, DType::kBF16}) {
    const size_t elems = 32768 * 8;
    std::vector<float> r = gaussian(elems, 9);
    hook_rotate(&r, rht::bucket_seed(3, 1, 2), true);
    const size_t esize = dtype_bytes(dt);
    std::vector<uint8_t> msg(elems * esize);
    for (size_t i = 0; i < elems; ++i) {
      if (dt == DType::kF32) {
        std::memcpy(&msg[4 * i], &r[i], 4);
      } else {
        const uint16_t h = f32_to_bf16(r[i]);
        std::memcpy(&msg[2 * i], &h, 2);
        r[i] = bf16_to_f32(h);
      }
    }
    expect_nmse_tracks_trimmed_fraction(Scheme::kRotated, dt, msg, r);
  }
}

}  // namespace
}  // namespace trim::codec::testing
