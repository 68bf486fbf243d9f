/* libtrim-rht: the Randomized Hadamard Transform of gradient buckets, for the PyTorch comm hook
 * (python package nccl_trim). Plain C so ctypes and any C++ caller can use it without CUDA or
 * torch headers. It is NOT part of the NCCL plugin, which makes no CUDA call (the hook runs on the
 * application's own stream, where CUDA calls are safe; docs/ARCHITECTURE.md).
 *
 * What is rotated: n elements at `data`, in place, cut into segments of `segment_elems`
 * (0 = one segment of all n; FSDP's per-rank chunks are segments) and each segment into rows of
 * 2^row_log2 elements from its start. A segment's last, shorter row is split into its binary
 * decomposition, largest power-of-two block first (1000 = 512+256+128+64+32+8), each block
 * rotated on its own: no padding, any length works.
 * Row r of segment s takes its random signs from the counter-based stream
 * rng_key(seed, s, r, kRhtSigns) of codec/rng.h, bit i of the row for element i, as the codec's
 * rht rows do: every rank that passes the same seed rotates alike. Forward = (H/sqrt(b)) D x per
 * block of b elements, inverse = D (H/sqrt(b)) y (codec/fwht.h defines the arithmetic bit for bit;
 * the GPU kernels are written to write the host twin's bits, which tests/rotate_emu_test.cc checks
 * by replaying them on the host: not yet run on a GPU). bf16/fp16 are widened exactly to fp32,
 * rotated in fp32 and rounded to nearest even once on the way out.
 *
 * Every function returns 0 on success and -1 on failure; trim_rht_last_error() then says why (the
 * text is per thread and stays until that thread's next failure).
 */
#ifndef TRIM_RHT_H_
#define TRIM_RHT_H_

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define TRIM_RHT_API __attribute__((visibility("default")))
#else
#define TRIM_RHT_API
#endif

#define TRIM_RHT_ABI_VERSION 1
#define TRIM_RHT_MAX_ROW_LOG2 15

/* Element types: the codec's wire numbers (codec::DType). */
enum trim_rht_dtype { TRIM_RHT_F32 = 1, TRIM_RHT_BF16 = 2, TRIM_RHT_F16 = 3 };

TRIM_RHT_API int trim_rht_abi_version(void);
TRIM_RHT_API const char* trim_rht_last_error(void);

/* The seed of one bucket at one training step, from the job's seed: what all ranks pass. */
TRIM_RHT_API uint64_t trim_rht_bucket_seed(uint64_t job_seed, uint32_t bucket, uint64_t step);

/* Host twin: `data` is host memory; runs the CPU reference (codec/fwht, vectorised). */
TRIM_RHT_API int trim_rht_forward_host(void* data, uint64_t n, int dtype, uint32_t row_log2, uint64_t segment_elems,
                          uint64_t seed);
TRIM_RHT_API int trim_rht_inverse_host(void* data, uint64_t n, int dtype, uint32_t row_log2, uint64_t segment_elems,
                          uint64_t seed);

/* GPU: `data` is device memory of the current device, aligned to the element size; the work is
 * enqueued on `stream` (a cudaStream_t; NULL = the legacy default stream) and the call returns
 * without waiting. No allocation, no synchronisation: safe on an application's stream and under
 * no lock. Fails (-1) when built without nvcc or when no usable GPU is present. */
TRIM_RHT_API int trim_rht_forward_cuda(void* data, uint64_t n, int dtype, uint32_t row_log2, uint64_t segment_elems,
                          uint64_t seed, void* stream);
TRIM_RHT_API int trim_rht_inverse_cuda(void* data, uint64_t n, int dtype, uint32_t row_log2, uint64_t segment_elems,
                          uint64_t seed, void* stream);
/* 1 when the GPU functions can run here (built with nvcc, a device present), else 0 and
 * trim_rht_last_error() says why. Loads the kernels' module on the current device, so the first
 * forward/inverse call does not: call it at set-up, from the application's thread. */
TRIM_RHT_API int trim_rht_cuda_available(void);

#ifdef __cplusplus
}
#endif

#endif /* TRIM_RHT_H_ */
