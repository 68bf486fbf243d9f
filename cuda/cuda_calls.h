// The one door to the CUDA runtime inside cuda/: every call the GPU codec makes goes through a
// wrapper here, labelled with whether it may wait for other work on the device. cuda/ is no
// longer part of the plugin (which makes no CUDA call at all: docs/ARCHITECTURE.md); the labels
// document which calls are safe on an application's stream.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

namespace trim::gpu::cu {

enum class CallClass { kNeverWaits, kMayWait };

inline cudaError_t guard(CallClass, const char*) { return cudaSuccess; }

#define TRIM_CU_CALL(cls, name, call)                                   \
  do {                                                                  \
    const cudaError_t trim_cu_e = guard(CallClass::cls, name);          \
    if (trim_cu_e != cudaSuccess) return trim_cu_e;                     \
    return call;                                                        \
  } while (0)

// ---- Allowed on the data path ----
inline cudaError_t get_last_error() { return cudaGetLastError(); }  // host-side state only
inline const char* error_string(cudaError_t e) { return cudaGetErrorString(e); }
inline cudaError_t get_device(int* d) { return cudaGetDevice(d); }
// The device's context already exists (created at setup): switching is a host-side change.
inline cudaError_t set_device(int d) { TRIM_CU_CALL(kNeverWaits, "cudaSetDevice", cudaSetDevice(d)); }
// Only between pinned host memory (ours) and device memory, on our non-blocking stream: a pure
// DMA enqueue. (Pageable memory would stage or wait: never passed here.)
inline cudaError_t memcpy_async(void* dst, const void* src, size_t n, cudaStream_t s) {
  TRIM_CU_CALL(kNeverWaits, "cudaMemcpyAsync", cudaMemcpyAsync(dst, src, n, cudaMemcpyDefault, s));
}
inline cudaError_t event_record(cudaEvent_t e, cudaStream_t s) {
  TRIM_CU_CALL(kNeverWaits, "cudaEventRecord", cudaEventRecord(e, s));
}
inline cudaError_t event_query(cudaEvent_t e) { TRIM_CU_CALL(kNeverWaits, "cudaEventQuery", cudaEventQuery(e)); }
inline cudaError_t stream_query(cudaStream_t s) { TRIM_CU_CALL(kNeverWaits, "cudaStreamQuery", cudaStreamQuery(s)); }

// A kernel launch is data-path safe only when its module was loaded at setup (prepare_kernel):
// the first launch of a lazily loaded module loads it, and loading waits for the device.
bool kernel_loaded(const void* fn, int device);
// Records that fn's module is loaded on `device` with `smem_limit` bytes of dynamic shared memory allowed.
void mark_kernel_loaded(const void* fn, int device, int smem_limit);
// The limit recorded for fn on device; -1 when not loaded there.
int kernel_smem_limit(const void* fn, int device);
inline cudaError_t launch_check(const void* fn, int device) {
  if (kernel_loaded(fn, device)) return cudaSuccess;
  return guard(CallClass::kMayWait, "first launch of a kernel not loaded at setup (lazy module load)");
}

// ---- Setup only: init, regMr, connect/accept, close/deregMr, tools and tests ----
inline cudaError_t get_device_count(int* n) {
  TRIM_CU_CALL(kMayWait, "cudaGetDeviceCount", cudaGetDeviceCount(n));
}
inline cudaError_t device_attribute(int* v, cudaDeviceAttr a, int d) {
  TRIM_CU_CALL(kMayWait, "cudaDeviceGetAttribute", cudaDeviceGetAttribute(v, a, d));
}
inline cudaError_t device_properties(cudaDeviceProp* p, int d) {
  TRIM_CU_CALL(kMayWait, "cudaGetDeviceProperties", cudaGetDeviceProperties(p, d));
}
inline cudaError_t pointer_attributes(cudaPointerAttributes* a, const void* p) {
  TRIM_CU_CALL(kMayWait, "cudaPointerGetAttributes", cudaPointerGetAttributes(a, p));
}
// Loads the function's module (lazy loading defers it to here) and reads its attributes.
inline cudaError_t func_attributes(cudaFuncAttributes* a, const void* fn) {
  TRIM_CU_CALL(kMayWait, "cudaFuncGetAttributes", cudaFuncGetAttributes(a, fn));
}
inline cudaError_t func_set_attribute(const void* fn, cudaFuncAttribute attr, int v) {
  TRIM_CU_CALL(kMayWait, "cudaFuncSetAttribute", cudaFuncSetAttribute(fn, attr, v));
}
inline cudaError_t malloc_device(void** p, size_t n) { TRIM_CU_CALL(kMayWait, "cudaMalloc", cudaMalloc(p, n)); }
inline cudaError_t malloc_managed(void** p, size_t n) {
  TRIM_CU_CALL(kMayWait, "cudaMallocManaged", cudaMallocManaged(p, n, cudaMemAttachGlobal));
}
inline cudaError_t free_device(void* p) { TRIM_CU_CALL(kMayWait, "cudaFree", cudaFree(p)); }
inline cudaError_t host_alloc(void** p, size_t n, unsigned flags) {
  TRIM_CU_CALL(kMayWait, "cudaHostAlloc", cudaHostAlloc(p, n, flags));
}
inline cudaError_t host_device_pointer(void** d, void* h) {
  TRIM_CU_CALL(kMayWait, "cudaHostGetDevicePointer", cudaHostGetDevicePointer(d, h, 0));
}
inline cudaError_t free_host(void* p) { TRIM_CU_CALL(kMayWait, "cudaFreeHost", cudaFreeHost(p)); }
inline cudaError_t memcpy_sync(void* dst, const void* src, size_t n) {
  TRIM_CU_CALL(kMayWait, "cudaMemcpy", cudaMemcpy(dst, src, n, cudaMemcpyDefault));
}
inline cudaError_t stream_create(cudaStream_t* s) {
  TRIM_CU_CALL(kMayWait, "cudaStreamCreateWithFlags", cudaStreamCreateWithFlags(s, cudaStreamNonBlocking));
}
inline cudaError_t stream_destroy(cudaStream_t s) { TRIM_CU_CALL(kMayWait, "cudaStreamDestroy", cudaStreamDestroy(s)); }
inline cudaError_t stream_synchronize(cudaStream_t s) {
  TRIM_CU_CALL(kMayWait, "cudaStreamSynchronize", cudaStreamSynchronize(s));
}
inline cudaError_t event_create(cudaEvent_t* e) {
  TRIM_CU_CALL(kMayWait, "cudaEventCreateWithFlags", cudaEventCreateWithFlags(e, cudaEventDisableTiming));
}
inline cudaError_t event_destroy(cudaEvent_t e) { TRIM_CU_CALL(kMayWait, "cudaEventDestroy", cudaEventDestroy(e)); }
inline cudaError_t event_synchronize(cudaEvent_t e) {
  TRIM_CU_CALL(kMayWait, "cudaEventSynchronize", cudaEventSynchronize(e));
}
inline cudaError_t device_synchronize() { TRIM_CU_CALL(kMayWait, "cudaDeviceSynchronize", cudaDeviceSynchronize()); }

#undef TRIM_CU_CALL

}  // namespace trim::gpu::cu
