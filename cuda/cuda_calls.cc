// The kernel registry behind cu::kernel_loaded: which kernels had their modules loaded (and
// their shared memory limit set) on which device, at setup.
#include "cuda/cuda_calls.h"

#include <atomic>
#include <mutex>

namespace trim::gpu::cu {
namespace {

constexpr int kMaxKernels = 16;
constexpr int kMaxDevices = 64;

struct Entry {
  std::atomic<const void*> fn{nullptr};
  std::atomic<int> smem_limit[kMaxDevices];
  Entry() {
    for (auto& l : smem_limit) l.store(-1, std::memory_order_relaxed);
  }
};

Entry g_entries[kMaxKernels];
std::mutex g_mu;  // writers only; readers go lock-free (launches on the data path)

Entry* find(const void* fn) {
  for (Entry& e : g_entries) {
    if (e.fn.load(std::memory_order_acquire) == fn) return &e;
  }
  return nullptr;
}

}  // namespace

bool kernel_loaded(const void* fn, int device) { return kernel_smem_limit(fn, device) >= 0; }

int kernel_smem_limit(const void* fn, int device) {
  if (device < 0 || device >= kMaxDevices) return -1;
  const Entry* e = find(fn);
  return e == nullptr ? -1 : e->smem_limit[device].load(std::memory_order_acquire);
}

void mark_kernel_loaded(const void* fn, int device, int smem_limit) {
  if (device < 0 || device >= kMaxDevices) return;
  std::lock_guard<std::mutex> lock(g_mu);
  Entry* e = find(fn);
  for (int i = 0; e == nullptr && i < kMaxKernels; ++i) {
    if (g_entries[i].fn.load(std::memory_order_relaxed) == nullptr) {
      e = &g_entries[i];
      e->fn.store(fn, std::memory_order_release);
    }
  }
  if (e != nullptr) e->smem_limit[device].store(smem_limit, std::memory_order_release);
}

}  // namespace trim::gpu::cu
