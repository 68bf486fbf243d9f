// Device building blocks shared by the encode and decode kernels: one thread block owns one
// row, held as fp32 in shared memory at smem_index(i) (cuda/codec_index.h).
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

#include "cuda/codec_index.h"
#include "cuda/cuda_calls.h"
#include "cuda/kernels.h"

namespace trim::gpu {

constexpr uint32_t kFullMask = 0xFFFFFFFFu;

// One FWHT pass: stages [st, st + K) of the block of 2^log2n elements at row offset `off`,
// each thread taking whole groups (fwht_group in cuda/codec_index.h).
template <int K>
__device__ void fwht_pass(float* s, uint32_t off, int log2n, int st, bool last, float scale,
                          const uint64_t* inverse_signs) {
  const uint32_t groups = (1u << log2n) >> K;
  for (uint32_t g = threadIdx.x; g < groups; g += blockDim.x) fwht_group<K>(s, off, st, g, last, scale, inverse_signs);
}

// Normalized FWHT of one block, in place in shared memory; passes of up to 5 stages.
// Starts and ends with a barrier-complete state (the caller synchronized before).
__device__ inline void fwht_block(float* s, uint32_t off, int log2n, float scale, const uint64_t* inverse_signs) {
  int st = 0;
  do {
    const int k = fwht_pass_stages(log2n, st);
    const bool last = st + k >= log2n;
    switch (k) {
      case 0: fwht_pass<0>(s, off, log2n, st, last, scale, inverse_signs); break;
      case 1: fwht_pass<1>(s, off, log2n, st, last, scale, inverse_signs); break;
      case 2: fwht_pass<2>(s, off, log2n, st, last, scale, inverse_signs); break;
      case 3: fwht_pass<3>(s, off, log2n, st, last, scale, inverse_signs); break;
      case 4: fwht_pass<4>(s, off, log2n, st, last, scale, inverse_signs); break;
      default: fwht_pass<5>(s, off, log2n, st, last, scale, inverse_signs); break;
    }
    __syncthreads();
    st += k;
  } while (st < log2n);
}

// The RHT of a whole row (rht_row_forward without the sign flip, which the loader applies,
// or rht_row_inverse): each block of its binary decomposition in turn.
__device__ inline void fwht_row(float* s, uint32_t elems, const float* scales, const uint64_t* inverse_signs) {
  uint32_t off = 0;
  for (int b = 31; b >= 0; --b) {
    if (elems & (1u << b)) {
      fwht_block(s, off, b, scales[b], inverse_signs);
      off += 1u << b;
    }
  }
}

// The row's kRhtSigns words into shared memory (followed by a barrier).
__device__ inline void load_sign_words(uint64_t* words, uint64_t key, uint32_t elems) {
  for (uint32_t w = threadIdx.x; w < (elems + 63) / 64; w += blockDim.x) words[w] = codec::rng_word(key, w);
  __syncthreads();
}

struct LaneNorms {
  double sum_sq, sum_abs;
  bool finite;
};

// Norms of s[first + i], i in [0, n), in codec::scalar::sum_squares / sum_abs order: lane
// j = i % 8 sums sequentially (non-finite values add 0 to the squares and clear `finite`),
// then the 8 lanes combine as ((0+1)+(2+3))+((4+5)+(6+7)). Called by all 32 lanes of a warp;
// lanes 8q..8q+7 form one group (lane j = lane % 8) and must pass the same first and n. The
// result is valid in every lane of the group.
__device__ inline LaneNorms group_norms(const float* s, uint32_t first, uint32_t n) {
  const uint32_t j = threadIdx.x & 7u;
  double sq = 0.0, ab = 0.0;
  bool finite = true;
#pragma unroll 8
  for (uint32_t i = j; i < n; i += 8) {
    const float x = s[smem_index(first + i)];
    const bool ok = isfinite(x);
    finite = finite && ok;
    const double xd = static_cast<double>(x);
    sq += ok ? xd * xd : 0.0;
    ab += fabs(xd);
  }
  int fin = finite ? 1 : 0;
#pragma unroll
  for (int m = 1; m <= 4; m <<= 1) {
    sq += __shfl_xor_sync(kFullMask, sq, m);
    ab += __shfl_xor_sync(kFullMask, ab, m);
    fin &= __shfl_xor_sync(kFullMask, fin, m);
  }
  return LaneNorms{sq, ab, fin != 0};
}

// Whole-row norms (sum_squares(v, d) / sum_abs(v, d) over the row): warp 0's first group.
// Every thread of the block must call it; the result is broadcast through *out.
__device__ inline void row_norms(const float* s, uint32_t elems, LaneNorms* out) {
  if (threadIdx.x < 32) {
    const LaneNorms n = group_norms(s, 0, threadIdx.x < 8 ? elems : 0);
    if (threadIdx.x == 0) *out = n;
  }
  __syncthreads();
}

// The row a block works on (block x of the call's rows), and the slot of its packet 0.
__device__ inline RowDesc block_row(const KernelCommon& c, uint64_t* slot0) {
  const uint32_t row = c.first_row + blockIdx.x;
  *slot0 = row_first_slot(c.geom, row);
  return row_desc(c.geom, row);
}

// Loads `kernel`'s module on the current device `device` and opts it in to the device's largest
// dynamic shared memory, once, at setup: both calls may wait for the device (module loading),
// so neither may happen on the data path. Returns a cudaError_t as int.
template <class Params>
inline int prepare_rows_kernel(void (*kernel)(Params), int device) {
  const void* fn = reinterpret_cast<const void*>(kernel);
  if (cu::kernel_loaded(fn, device)) return 0;
  cudaFuncAttributes attrs{};
  cudaError_t e = cu::func_attributes(&attrs, fn);
  int optin = 0;
  if (e == cudaSuccess) e = cu::device_attribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
  // The static shared memory counts against the same budget.
  const int dynamic_max = optin - static_cast<int>(attrs.sharedSizeBytes);
  if (e == cudaSuccess) e = cu::func_set_attribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, dynamic_max);
  if (e != cudaSuccess) {
    (void)cu::get_last_error();  // not sticky: the caller reports e
    return static_cast<int>(e);
  }
  cu::mark_kernel_loaded(fn, device, dynamic_max);
  return 0;
}

// Launches `kernel` with one block per row of p.c and `smem` bytes of dynamic shared memory on
// `device` (current). The kernel must have been prepared (prepare_rows_kernel) on that device:
// off the data path an unprepared one is prepared here (tools, tests); on it, that would be a
// module load and is refused. Returns a cudaError_t as int: 0 = launched.
template <class Params>
inline int launch_rows(void (*kernel)(Params), const Params& p, const KernelCommon& c, size_t smem, void* stream,
                       int device) {
  if (c.n_rows == 0) return 0;
  const void* fn = reinterpret_cast<const void*>(kernel);
  if (!cu::kernel_loaded(fn, device)) {
    cudaError_t e = cu::launch_check(fn, device);
    if (e != cudaSuccess) return static_cast<int>(e);
    const int pe = prepare_rows_kernel(kernel, device);
    if (pe != 0) return pe;
  }
  // Checked here, not by a failing launch: a row too large for this GPU is a clear error.
  if (smem > static_cast<size_t>(cu::kernel_smem_limit(fn, device))) return static_cast<int>(cudaErrorInvalidValue);
  // A stale error of an earlier, already reported runtime call would otherwise read as this
  // launch's failure below.
  (void)cu::get_last_error();
  kernel<<<c.n_rows, row_block_threads(c.geom.row_elems), smem, static_cast<cudaStream_t>(stream)>>>(p);
  return static_cast<int>(cu::get_last_error());
}

}  // namespace trim::gpu
