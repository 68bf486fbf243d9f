// libtrim-rht's GPU side: the forward and inverse RHT kernels (fp32, bf16, fp16) and the ABI's
// trim_rht_*_cuda functions that enqueue them on the caller's stream. All the index math and
// per-thread work is in cuda/rotate_index.h (shared with the host emulator test); this file
// holds only its sequence between barriers and the launch. cuda/README.md explains the design.
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>

#include "codec/fwht.h"
#include "cuda/rht_common.h"
#include "cuda/rotate_index.h"
#include "cuda/trim_rht.h"

namespace trim::rht {
namespace {

// One thread block per tile (see rotate_index.h). Dynamic shared memory: the tile's fp32 slots
// (smem_index), then its sign words at words_at.
template <int DT, bool kInverse>
__global__ void __launch_bounds__(kMaxThreads) rotate_tiles(const RotateParams p) {
  extern __shared__ float4 smem_dyn[];
  float* s = reinterpret_cast<float*>(smem_dyn);
  uint64_t* words = reinterpret_cast<uint64_t*>(s + p.words_at);
  const uint32_t tid = threadIdx.x, threads = blockDim.x;
  const TileRef t = tile_ref(p.geom, p.first_tile + blockIdx.x);
  uint8_t* tile = p.data + t.offset * kElemBytes<DT>;

  // Phase 1: sign words and the tile into shared memory (neither reads the other).
  compute_sign_words(p.geom, t, p.seed, words, tid, threads);
  load_tile<DT>(tile, t.elems, s, tid, threads);
  __syncthreads();

  // The passes; a run's last one stores to global memory and needs no barrier after it (the
  // next run works on other elements).
  PassCtx c{s, words, tile, 0.0f, sign_word_log2(p.geom.row_log2)};
  TileStep step = first_step(t, p.geom.row_log2);
  do {
    c.scale = p.scale[step.log2];
    run_pass<DT, kInverse>(c, step, tid, threads);
    if (!step.last) __syncthreads();
  } while (next_step(&step));
}

using KernelFn = void (*)(RotateParams);

// [dtype - 1][inverse]
const KernelFn kKernels[3][2] = {
    {rotate_tiles<TRIM_RHT_F32, false>, rotate_tiles<TRIM_RHT_F32, true>},
    {rotate_tiles<TRIM_RHT_BF16, false>, rotate_tiles<TRIM_RHT_BF16, true>},
    {rotate_tiles<TRIM_RHT_F16, false>, rotate_tiles<TRIM_RHT_F16, true>},
};

// Blocks per launch: grids are split well below the 2^31 - 1 limit.
constexpr uint64_t kMaxGridTiles = 1ull << 30;
constexpr int kMaxDevices = 64;

std::string cuda_text(const std::string& what, cudaError_t e) {
  return what + ": " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")";
}

// Fails with `what` and e, clearing e so it cannot read as a later call's failure.
int fail_cuda(const std::string& what, cudaError_t e) {
  (void)cudaGetLastError();
  return fail(cuda_text(what, e));
}

// Per device: prepared once (the kernels loaded and opted in to the shared memory rows of 2^15
// need), and the dynamic shared memory then allowed per block.
std::mutex g_prepare_mu;
std::atomic<bool> g_prepared[kMaxDevices];
std::atomic<uint32_t> g_smem_limit[kMaxDevices];

// cudaFuncGetAttributes / cudaFuncSetAttribute load the module (lazy loading) and may wait for
// the device, so they run once per device: at trim_rht_cuda_available(), or at the first call.
int prepare_device(int device) {
  if (device < 0 || device >= kMaxDevices) return fail("device " + std::to_string(device) + " is beyond the 64 supported");
  if (g_prepared[device].load(std::memory_order_acquire)) return 0;
  std::lock_guard<std::mutex> lock(g_prepare_mu);
  if (g_prepared[device].load(std::memory_order_relaxed)) return 0;
  int major = 0, optin = 0;
  cudaError_t e = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
  if (e == cudaSuccess) e = cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
  if (e != cudaSuccess) return fail_cuda("device " + std::to_string(device) + " attributes", e);
  if (major < 8) {
    return fail("device " + std::to_string(device) + " has compute capability " + std::to_string(major) +
                ".x; the kernels need 8.0 or newer");
  }
  const uint32_t want = min_u32(static_cast<uint32_t>(optin), tile_smem_bytes(TRIM_RHT_MAX_ROW_LOG2));
  for (const auto& per_dtype : kKernels) {
    for (KernelFn fn : per_dtype) {
      cudaFuncAttributes attrs{};
      e = cudaFuncGetAttributes(&attrs, reinterpret_cast<const void*>(fn));
      if (e == cudaSuccess) {
        e = cudaFuncSetAttribute(reinterpret_cast<const void*>(fn), cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 static_cast<int>(want));
      }
      if (e != cudaSuccess) return fail_cuda("loading the rotation kernels on device " + std::to_string(device), e);
    }
  }
  g_smem_limit[device].store(want, std::memory_order_relaxed);
  g_prepared[device].store(true, std::memory_order_release);
  return 0;
}

int current_device(int* device) {
  const cudaError_t e = cudaGetDevice(device);
  return e == cudaSuccess ? 0 : fail_cuda("no usable CUDA device", e);
}

// `data` must be device memory of `device` (managed memory too): a host pointer would fault the
// kernel and poison the application's context, so it is refused here.
int check_pointer(const void* data, int device) {
  cudaPointerAttributes a{};
  const cudaError_t e = cudaPointerGetAttributes(&a, data);
  if (e != cudaSuccess) return fail_cuda("data is not a CUDA pointer", e);
  if (a.type == cudaMemoryTypeUnregistered || a.type == cudaMemoryTypeHost) {
    return fail("data is host memory; the GPU rotation needs device memory (the host twin rotates host memory)");
  }
  if (a.type == cudaMemoryTypeDevice && a.device != device) {
    return fail("data is on device " + std::to_string(a.device) + ", the current device is " + std::to_string(device));
  }
  return 0;
}

int rotate_cuda(void* data, uint64_t n, int dtype, uint32_t row_log2, uint64_t segment_elems, uint64_t seed,
                void* stream, bool inverse) {
  const std::string bad = check_args(data, n, dtype, row_log2, segment_elems);
  if (!bad.empty()) return fail(bad);
  if (n == 0) return 0;
  if (reinterpret_cast<uintptr_t>(data) % elem_bytes(dtype) != 0) return fail("data is not aligned to its element size");
  int device = -1;
  if (current_device(&device) != 0 || prepare_device(device) != 0 || check_pointer(data, device) != 0) return -1;
  const uint32_t smem_bytes = tile_smem_bytes(row_log2);
  const uint32_t limit = g_smem_limit[device].load(std::memory_order_relaxed);
  if (smem_bytes > limit) {
    return fail("rows of 2^" + std::to_string(row_log2) + " need " + std::to_string(smem_bytes) +
                " bytes of shared memory per block; device " + std::to_string(device) + " allows " +
                std::to_string(limit) + ": use shorter rows");
  }
  RotateParams p{};
  p.data = static_cast<uint8_t*>(data);
  p.geom = tile_geom(n, segment_elems, row_log2);
  p.seed = seed;
  p.words_at = smem_data_floats(p.geom.tile_log2);
  for (int b = 0; b <= TRIM_RHT_MAX_ROW_LOG2; ++b) p.scale[b] = codec::fwht_scale(b);
  const KernelFn fn = kKernels[dtype - 1][inverse ? 1 : 0];
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  // A stale error left by an earlier runtime call would otherwise read as this launch's failure.
  (void)cudaGetLastError();
  for (uint64_t first = 0; first < p.geom.tiles; first += kMaxGridTiles) {
    p.first_tile = first;
    const auto blocks = static_cast<unsigned>(min_u64(kMaxGridTiles, p.geom.tiles - first));
    void* args[] = {&p};
    const cudaError_t e = cudaLaunchKernel(reinterpret_cast<const void*>(fn), dim3(blocks),
                                           dim3(tile_threads(row_log2)), args, smem_bytes, s);
    if (e != cudaSuccess) return fail_cuda(inverse ? "inverse rotation launch" : "forward rotation launch", e);
  }
  return 0;
}

}  // namespace
}  // namespace trim::rht

extern "C" {

int trim_rht_forward_cuda(void* data, uint64_t n, int dtype, uint32_t row_log2, uint64_t segment_elems,
                          uint64_t seed, void* stream) {
  return trim::rht::rotate_cuda(data, n, dtype, row_log2, segment_elems, seed, stream, false);
}

int trim_rht_inverse_cuda(void* data, uint64_t n, int dtype, uint32_t row_log2, uint64_t segment_elems,
                          uint64_t seed, void* stream) {
  return trim::rht::rotate_cuda(data, n, dtype, row_log2, segment_elems, seed, stream, true);
}

int trim_rht_cuda_available(void) {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    trim::rht::fail_cuda("no usable CUDA device", e);
    return 0;
  }
  if (count == 0) {
    trim::rht::fail("no CUDA device");
    return 0;
  }
  int device = -1;
  if (trim::rht::current_device(&device) != 0 || trim::rht::prepare_device(device) != 0) return 0;
  return 1;
}

}  // extern "C"
