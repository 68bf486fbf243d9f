// Where the rows of a rotated bucket lie (cuda/trim_rht.h): shared by the host twin and the
// GPU kernels, so both cut a bucket alike. TRIM_HD: nvcc and g++ compile the same code.
#pragma once

#include <cstdint>

#include "codec/rng.h"
#include "codec/types.h"

namespace trim::rht {

struct BucketGeom {
  uint64_t n = 0;             // elements
  uint64_t segment = 0;       // elements per segment (== n when there is one)
  uint32_t row_log2 = 0;
  uint64_t rows_per_full_segment = 0;  // ceil(segment / 2^row_log2)
  uint64_t segments = 0;

  TRIM_HD uint64_t rows() const {
    if (n == 0) return 0;
    const uint64_t last = n - (segments - 1) * segment;  // elements of the last segment
    return (segments - 1) * rows_per_full_segment + ((last + (1ull << row_log2) - 1) >> row_log2);
  }
};

TRIM_HD BucketGeom make_geom(uint64_t n, uint64_t segment_elems, uint32_t row_log2) {
  BucketGeom g;
  g.n = n;
  g.segment = segment_elems == 0 || segment_elems > n ? n : segment_elems;
  g.row_log2 = row_log2;
  if (n == 0) return g;
  g.rows_per_full_segment = (g.segment + (1ull << row_log2) - 1) >> row_log2;
  g.segments = (n + g.segment - 1) / g.segment;
  return g;
}

// One row: its segment, its index within the segment, where it starts and how many elements.
struct RowRef {
  uint64_t segment = 0;
  uint32_t row = 0;
  uint64_t offset = 0;
  uint32_t elems = 0;
};

// The i-th row of the bucket (0 <= i < g.rows()).
TRIM_HD RowRef row_ref(const BucketGeom& g, uint64_t i) {
  RowRef r;
  r.segment = i / g.rows_per_full_segment;
  r.row = static_cast<uint32_t>(i % g.rows_per_full_segment);
  const uint64_t seg_start = r.segment * g.segment;
  const uint64_t seg_end = seg_start + g.segment < g.n ? seg_start + g.segment : g.n;
  r.offset = seg_start + (static_cast<uint64_t>(r.row) << g.row_log2);
  const uint64_t left = seg_end - r.offset;
  r.elems = static_cast<uint32_t>(left < (1ull << g.row_log2) ? left : (1ull << g.row_log2));
  return r;
}

// The key of a row's sign stream: the codec's rht stream, with the segment in the message slot.
TRIM_HD uint64_t row_sign_key(uint64_t seed, const RowRef& r) {
  return codec::rng_key(seed, static_cast<uint32_t>(r.segment), r.row, codec::RngStream::kRhtSigns);
}

// A bucket's seed at a step: every argument changes every bit.
TRIM_HD uint64_t bucket_seed(uint64_t job_seed, uint32_t bucket, uint64_t step) {
  uint64_t k = codec::mix64(job_seed ^ 0x6e63636c2d747269ull);
  k = codec::mix64(k + (static_cast<uint64_t>(bucket) + 1) * 0x9E3779B97F4A7C15ull);
  return codec::mix64(k ^ (step * 0xD1B54A32D192ED03ull + 0x632be59bd9b4e019ull));
}

}  // namespace trim::rht
