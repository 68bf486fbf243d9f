// SpinKernel (cuda/gpu_codec.h): the shape of NCCL's kernel for tests. One block polls a flag
// in host-mapped pinned memory until it reaches a value, so the GPU has a kernel running that
// only the host's progress can end — exactly what makes a waiting CUDA call on the plugin's
// data path hang forever.
#include <chrono>
#include <thread>

#include "cuda/cuda_calls.h"
#include "cuda/gpu_codec.h"

namespace trim::gpu {
namespace {

__global__ void spin_until_kernel(const volatile uint32_t* flag, uint32_t value) {
  while (*flag < value) __nanosleep(2000);
}

std::string cuda_error(const char* what, cudaError_t e) { return std::string(what) + ": " + cu::error_string(e); }

}  // namespace

struct SpinKernel::Impl {
  volatile uint32_t* host_flag = nullptr;
  uint32_t* dev_flag = nullptr;
  cudaStream_t stream = nullptr;
};

SpinKernel::SpinKernel() : impl_(new Impl) {}

std::unique_ptr<SpinKernel> SpinKernel::create(std::string* err) {
  std::string why;
  if (!gpu_available(&why)) {
    if (err != nullptr) *err = why;
    return nullptr;
  }
  std::unique_ptr<SpinKernel> k(new SpinKernel());
  Impl& m = *k->impl_;
  void* host = nullptr;
  cudaError_t e = cu::host_alloc(&host, sizeof(uint32_t), cudaHostAllocMapped | cudaHostAllocPortable);
  if (e != cudaSuccess) {
    if (err != nullptr) *err = cuda_error("cudaHostAlloc(mapped)", e);
    return nullptr;
  }
  m.host_flag = static_cast<volatile uint32_t*>(host);
  *m.host_flag = 0;
  void* dev = nullptr;
  if (e == cudaSuccess) e = cu::host_device_pointer(&dev, host);
  m.dev_flag = static_cast<uint32_t*>(dev);
  if (e == cudaSuccess) e = cu::stream_create(&m.stream);
  // Loaded now, not at the first launch (which would load it lazily, waiting for the device).
  cudaFuncAttributes attrs{};
  if (e == cudaSuccess) e = cu::func_attributes(&attrs, reinterpret_cast<const void*>(spin_until_kernel));
  if (e != cudaSuccess) {
    if (err != nullptr) *err = cuda_error("spin kernel setup", e);
    cu::get_last_error();
    return nullptr;
  }
  return k;
}

SpinKernel::~SpinKernel() {
  // Let any kernel still spinning go, then free on the release thread (frees wait for the device).
  if (impl_->host_flag != nullptr) *impl_->host_flag = UINT32_MAX;
  void* host = const_cast<uint32_t*>(impl_->host_flag);
  cudaStream_t s = impl_->stream;
  defer_release([host, s] {
    if (s != nullptr) {
      cu::stream_synchronize(s);
      cu::stream_destroy(s);
    }
    if (host != nullptr) cu::free_host(host);
  });
}

bool SpinKernel::launch(uint32_t value, std::string* err) {
  spin_until_kernel<<<1, 1, 0, impl_->stream>>>(impl_->dev_flag, value);
  const cudaError_t e = cu::get_last_error();
  if (e != cudaSuccess && err != nullptr) *err = cuda_error("spin kernel launch", e);
  return e == cudaSuccess;
}

void SpinKernel::release(uint32_t value) {
  __atomic_store_n(const_cast<uint32_t*>(impl_->host_flag), value, __ATOMIC_RELEASE);
}

bool SpinKernel::wait_done(int timeout_ms, std::string* err) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    const cudaError_t e = cu::stream_query(impl_->stream);
    if (e == cudaSuccess) return true;
    if (e != cudaErrorNotReady) {
      if (err != nullptr) *err = cuda_error("spin kernel", e);
      return false;
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      if (err != nullptr) *err = "the spin kernel is still running after " + std::to_string(timeout_ms) + " ms";
      return false;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

}  // namespace trim::gpu
