// The GPU rotation kernel (cuda/rotate.cu, rotate_tiles) replayed on the host: the kernel's
// phases between barriers, every thread of a block in a shuffled order, each calling the very
// same TRIM_HD functions (cuda/rotate_index.h). The result must be the host twin's bits
// (trim_rht_forward_host / trim_rht_inverse_host), NaN payloads aside. Needs no GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "codec/fwht.h"
#include "cuda/rht_geom.h"
#include "cuda/rotate_index.h"
#include "cuda/trim_rht.h"
#include "tests/rotate_cases.h"

namespace trim::rht {
namespace {

namespace tt = trim::testing;

constexpr uint64_t kSeed = 0x5eed0f7e57ull;

// rotate_tiles<DT, kInverse> over a whole bucket, tile by tile (a block's shared memory is
// poisoned first, so a slot read before it is written shows up as a NaN).
template <int DT, bool kInverse>
void emulate(uint8_t* data, const tt::RotateCase& c, uint64_t seed, uint32_t order_seed) {
  const TileGeom g = tile_geom(c.n, c.segment_elems, c.row_log2);
  const uint32_t threads = tile_threads(c.row_log2);
  std::vector<float> s(smem_data_floats(g.tile_log2));
  std::vector<uint64_t> words(tile_sign_words(c.row_log2));
  std::vector<uint32_t> order(threads);
  std::iota(order.begin(), order.end(), 0u);
  std::mt19937 rng(order_seed);
  for (uint64_t ti = 0; ti < g.tiles; ++ti) {
    std::fill(s.begin(), s.end(), codec::bits_f32(0x7FBADBADu));
    for (uint64_t& w : words) w = (static_cast<uint64_t>(rng()) << 32) | rng();
    const TileRef t = tile_ref(g, ti);
    uint8_t* tile = data + t.offset * kElemBytes<DT>;
    std::shuffle(order.begin(), order.end(), rng);
    for (uint32_t tid : order) {
      compute_sign_words(g, t, seed, words.data(), tid, threads);
      load_tile<DT>(tile, t.elems, s.data(), tid, threads);
    }
    // __syncthreads(). Then the passes: those up to the next barrier form one phase, which each
    // thread runs in turn (a run's last pass has no barrier after it).
    PassCtx ctx{s.data(), words.data(), tile, 0.0f, sign_word_log2(c.row_log2)};
    std::vector<TileStep> phase;
    auto run_phase = [&] {
      std::shuffle(order.begin(), order.end(), rng);
      for (uint32_t tid : order) {
        for (const TileStep& st : phase) {
          ctx.scale = codec::fwht_scale(static_cast<int>(st.log2));
          run_pass<DT, kInverse>(ctx, st, tid, threads);
        }
      }
      phase.clear();
    };
    TileStep step = first_step(t, c.row_log2);
    do {
      phase.push_back(step);
      if (!step.last) run_phase();
    } while (next_step(&step));
    run_phase();
  }
}

// Every case, plain and with specials, at `shift` elements past an aligned start (a nonzero
// shift takes the load's one-by-one path).
template <int DT, bool kInverse>
void expect_matches_host_twin(uint64_t shift = 0, size_t max_cases = SIZE_MAX) {
  const std::vector<tt::RotateCase> cases = tt::rotate_cases();
  for (size_t k = 0; k < cases.size() && k < max_cases; ++k) {
    const tt::RotateCase& c = cases[k];
    for (bool specials : {false, true}) {
      SCOPED_TRACE(c.name() + (specials ? " specials" : "") + " " + tt::dtype_label(DT) +
                   (kInverse ? " inverse" : " forward") + " shift " + std::to_string(shift));
      const std::vector<uint8_t> in = tt::rotate_input(c.n, DT, static_cast<uint32_t>(k) * 7 + 1, specials);
      std::string err;
      const std::vector<uint8_t> want = tt::host_twin(in, c, DT, kSeed, kInverse, &err);
      ASSERT_EQ(err, "");
      std::vector<uint8_t> buf(in.size() + 16);
      std::copy(in.begin(), in.end(), buf.begin() + shift * kElemBytes<DT>);
      emulate<DT, kInverse>(buf.data() + shift * kElemBytes<DT>, c, kSeed, static_cast<uint32_t>(k));
      const std::vector<uint8_t> got(buf.begin() + shift * kElemBytes<DT>,
                                     buf.begin() + shift * kElemBytes<DT> + in.size());
      ASSERT_EQ(tt::compare_bits(got, want, DT), "");
    }
  }
}

TEST(RotateEmu, ForwardF32MatchesHostTwin) { expect_matches_host_twin<TRIM_RHT_F32, false>(); }
TEST(RotateEmu, InverseF32MatchesHostTwin) { expect_matches_host_twin<TRIM_RHT_F32, true>(); }
TEST(RotateEmu, ForwardBf16MatchesHostTwin) { expect_matches_host_twin<TRIM_RHT_BF16, false>(); }
TEST(RotateEmu, InverseBf16MatchesHostTwin) { expect_matches_host_twin<TRIM_RHT_BF16, true>(); }
TEST(RotateEmu, ForwardF16MatchesHostTwin) { expect_matches_host_twin<TRIM_RHT_F16, false>(); }
TEST(RotateEmu, InverseF16MatchesHostTwin) { expect_matches_host_twin<TRIM_RHT_F16, true>(); }

TEST(RotateEmu, UnalignedBucketMatchesHostTwin) {
  expect_matches_host_twin<TRIM_RHT_F32, false>(1, 48);
  expect_matches_host_twin<TRIM_RHT_F32, true>(3, 48);
  expect_matches_host_twin<TRIM_RHT_BF16, false>(1, 48);
  expect_matches_host_twin<TRIM_RHT_F16, true>(5, 48);
}

// The tiles hold every row of rht_geom.h once, in order, whole: the kernel and the host twin cut
// a bucket alike (and sign each row with the same key).
TEST(RotateEmu, TilesCoverEveryRowOnce) {
  std::vector<tt::RotateCase> cases = tt::rotate_cases();
  cases.push_back(tt::RotateCase{(1ull << 20) + 5, 15, 70000});
  cases.push_back(tt::RotateCase{12345, 11, 0});
  cases.push_back(tt::RotateCase{12345, 12, 4096});
  cases.push_back(tt::RotateCase{12345, 13, 5000});
  for (const tt::RotateCase& c : cases) {
    SCOPED_TRACE(c.name());
    const BucketGeom bg = make_geom(c.n, c.segment_elems, c.row_log2);
    const TileGeom g = tile_geom(c.n, c.segment_elems, c.row_log2);
    uint64_t row = 0, covered = 0;
    for (uint64_t ti = 0; ti < g.tiles; ++ti) {
      const TileRef t = tile_ref(g, ti);
      ASSERT_EQ(t.offset, covered);
      ASSERT_GT(t.elems, 0u);
      ASSERT_LE(t.elems, 1u << g.tile_log2);
      ASSERT_EQ(t.elems, (t.full_rows << c.row_log2) + t.partial);
      const uint32_t rows = t.full_rows + (t.partial ? 1u : 0u);
      for (uint32_t q = 0; q < rows; ++q, ++row) {
        ASSERT_LT(row, bg.rows());
        const RowRef r = row_ref(bg, row);
        EXPECT_EQ(r.offset, t.offset + (static_cast<uint64_t>(q) << c.row_log2));
        EXPECT_EQ(r.elems, q < t.full_rows ? 1u << c.row_log2 : t.partial);
        EXPECT_EQ(r.segment, t.segment);
        EXPECT_EQ(r.row, static_cast<uint32_t>(t.first_row + q));
      }
      covered += t.elems;
    }
    EXPECT_EQ(row, bg.rows());
    EXPECT_EQ(covered, c.n);
  }
}

// The design's claim (cuda/README.md): with smem_index's padding, no shared-memory access of the
// load phase or of a pass makes two lanes of a warp wait for the same bank. Scalar accesses: 32
// lanes, 32 banks. 16-byte accesses run per quarter warp: 8 lanes, 8 groups of 4 banks. (Each
// pass writes back where it read; the last pass reads like the others.)
TEST(RotateEmu, SharedMemoryAccessesAreBankConflictFree) {
  auto distinct_banks = [](const std::vector<uint32_t>& slots, uint32_t lanes_per_wave, uint32_t width) {
    for (size_t w0 = 0; w0 < slots.size(); w0 += lanes_per_wave) {
      std::set<uint32_t> banks;
      for (size_t l = w0; l < w0 + lanes_per_wave && l < slots.size(); ++l) {
        for (uint32_t j = 0; j < width; ++j) banks.insert((slots[l] + j) % 32);
      }
      if (banks.size() != std::min<size_t>(lanes_per_wave, slots.size() - w0) * width) return false;
    }
    return true;
  };
  for (uint32_t row_log2 : {10u, 12u, 13u, 15u}) {
    const uint32_t threads = tile_threads(row_log2);
    TileRef t;
    t.elems = 1u << tile_log2_for(row_log2);
    t.full_rows = t.elems >> row_log2;
    TileStep step = first_step(t, row_log2);
    do {
      for (uint32_t warp = 0; warp < threads / 32; ++warp) {
        const bool vec = step.st == 0 && step.k >= 2;
        for (uint32_t r = 0; r < (1u << step.k); r += vec ? 4 : 1) {
          std::vector<uint32_t> slots;
          for (uint32_t lane = 0; lane < 32; ++lane) {
            const uint32_t base = step.off + pass_base(warp * 32 + lane, step.st, step.k);
            slots.push_back(smem_index(base + (vec ? r : r << step.st)));
          }
          EXPECT_TRUE(vec ? distinct_banks(slots, 8, 4) : distinct_banks(slots, 32, 1))
              << "row_log2 " << row_log2 << " pass st " << step.st << " warp " << warp << " r " << r;
        }
      }
    } while (next_step(&step));
    for (uint32_t vec_elems : {4u, 8u}) {  // the load phase: fp32 and 16-bit chunks
      for (uint32_t j = 0; j < vec_elems; j += 4) {
        std::vector<uint32_t> slots;
        for (uint32_t lane = 0; lane < 32; ++lane) slots.push_back(smem_index(lane * vec_elems + j));
        EXPECT_TRUE(distinct_banks(slots, 8, 4)) << "load of " << vec_elems << "-element chunks";
      }
    }
  }
}

// What every shape needs fits a GPU: 2^15 rows take at most sm_80's 163 KiB opt-in.
TEST(RotateEmu, SharedMemoryFitsSm80) {
  for (uint32_t l = 0; l <= TRIM_RHT_MAX_ROW_LOG2; ++l) {
    EXPECT_LE(tile_smem_bytes(l), 163u * 1024u) << "row_log2 " << l;
    EXPECT_LE(tile_threads(l), kMaxThreads);
    EXPECT_GE(tile_threads(l), 32u);
  }
  EXPECT_EQ(tile_smem_bytes(15), 147456u + 4096u);
}

}  // namespace
}  // namespace trim::rht
