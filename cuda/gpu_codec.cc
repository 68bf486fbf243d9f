// Host side of the GPU codec (built when nvcc is found): device probing, pinned and device
// buffers, and GpuCodec, which validates a call, fills packet sizes, stages host buffers
// through device memory and launches cuda/encode.cu / cuda/decode.cu on its stream.
#include "cuda/gpu_codec.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <deque>
#include <mutex>
#include <utility>
#include <vector>

#include "codec/fwht.h"
#include "cuda/geom_host.h"
#include "cuda/kernels.h"

namespace trim::gpu {
namespace {

struct Probe {
  bool ok = false;
  std::string why;
};

const Probe& probe() {
  static const Probe p = [] {
    Probe r;
    int n = 0;
    const cudaError_t e = cudaGetDeviceCount(&n);
    if (e == cudaErrorInsufficientDriver) {
      r.why = "CUDA driver not found (or older than the runtime)";
    } else if (e == cudaErrorNoDevice || (e == cudaSuccess && n == 0)) {
      r.why = "no CUDA device";
    } else if (e != cudaSuccess) {
      r.why = std::string("CUDA unavailable: ") + cudaGetErrorString(e);
    } else {
      // The kernels are built for sm_80 and sm_90 (+ PTX for later GPUs), not for older ones.
      int dev = 0, major = 0, minor = 0;
      cudaGetDevice(&dev);
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
      if (major < 8) {
        r.why = "GPU sm_" + std::to_string(major) + std::to_string(minor) + " is older than sm_80";
      } else {
        r.ok = true;
      }
    }
    cudaGetLastError();  // a failed probe must not leave a sticky error for later calls
    return r;
  }();
  return p;
}

std::string cuda_error(const char* what, int e) {
  return std::string(what) + ": " + cudaGetErrorString(static_cast<cudaError_t>(e));
}

}  // namespace

bool gpu_available(std::string* why) {
  const Probe& p = probe();
  if (!p.ok && why != nullptr) *why = p.why;
  return p.ok;
}

std::string gpu_device_name() {
  int dev = 0;
  cudaDeviceProp prop{};
  if (!gpu_available() || cudaGetDevice(&dev) != cudaSuccess || cudaGetDeviceProperties(&prop, dev) != cudaSuccess) {
    return "";
  }
  return std::string(prop.name) + " (sm_" + std::to_string(prop.major) + std::to_string(prop.minor) + ")";
}

bool is_device_pointer(const void* p, int* device) {
  if (p == nullptr || !gpu_available()) return false;
  cudaPointerAttributes a{};
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  if (a.type != cudaMemoryTypeDevice && a.type != cudaMemoryTypeManaged) return false;
  if (device != nullptr) *device = a.device;
  return true;
}

// ---- buffers

namespace {

void free_pinned(void* p) { cudaFreeHost(p); }
void free_device(void* p) { cudaFree(p); }

// bytes (at least 1) from alloc, or nullptr with *err saying why.
template <class Alloc>
uint8_t* allocate(size_t bytes, Alloc alloc, const char* what, std::string* err) {
  std::string why;
  if (!gpu_available(&why)) {
    if (err != nullptr) *err = why;
    return nullptr;
  }
  void* p = nullptr;
  const cudaError_t e = alloc(&p, std::max<size_t>(bytes, 1));
  if (e != cudaSuccess) {
    if (err != nullptr) *err = cuda_error(what, e);
    cudaGetLastError();
    return nullptr;
  }
  return static_cast<uint8_t*>(p);
}

}  // namespace

PinnedBuffer::PinnedBuffer(size_t bytes, std::string* err)
    : OwnedMemory(allocate(bytes, [](void** p, size_t n) { return cudaHostAlloc(p, n, cudaHostAllocPortable); },
                           "cudaHostAlloc", err),
                  bytes, free_pinned) {
  if (data() == nullptr) *this = PinnedBuffer();
}

DeviceBuffer::DeviceBuffer(size_t bytes, std::string* err)
    : OwnedMemory(allocate(bytes, [](void** p, size_t n) { return cudaMalloc(p, n); }, "cudaMalloc", err), bytes,
                  free_device) {
  if (data() == nullptr) *this = DeviceBuffer();
}

bool DeviceBuffer::upload(const void* host, size_t bytes, size_t offset) {
  if (data() == nullptr || offset + bytes > size()) return false;
  return cudaMemcpy(data() + offset, host, bytes, cudaMemcpyHostToDevice) == cudaSuccess;
}
bool DeviceBuffer::download(void* host, size_t bytes, size_t offset) const {
  if (data() == nullptr || offset + bytes > size()) return false;
  return cudaMemcpy(host, data() + offset, bytes, cudaMemcpyDeviceToHost) == cudaSuccess;
}

bool DeviceBuffer::copy_from(const DeviceBuffer& src, size_t bytes) {
  if (data() == nullptr || src.data() == nullptr || bytes > size() || bytes > src.size()) return false;
  return cudaMemcpy(data(), src.data(), bytes, cudaMemcpyDeviceToDevice) == cudaSuccess &&
         cudaDeviceSynchronize() == cudaSuccess;
}

// ---- GpuCodec

namespace {

// Makes `device` current for one call and gives the caller's current device back after: the
// engine thread may drive comms of several GPUs, and the device is per thread state.
class DeviceScope {
 public:
  explicit DeviceScope(int device) {
    if (cudaGetDevice(&prev_) == cudaSuccess && prev_ == device) return;
    err_ = cudaSetDevice(device);
    switched_ = err_ == cudaSuccess && prev_ >= 0;
    if (err_ != cudaSuccess) cudaGetLastError();
  }
  ~DeviceScope() {
    if (switched_) cudaSetDevice(prev_);
  }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;
  cudaError_t error() const { return err_; }

 private:
  int prev_ = -1;
  bool switched_ = false;
  cudaError_t err_ = cudaSuccess;
};

// Why the kernels on `device` cannot use p (empty: they can): not device (or managed) memory,
// or plain device memory of another GPU.
std::string device_memory_problem(const void* p, int device) {
  cudaPointerAttributes a{};
  if (p == nullptr || cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    cudaGetLastError();
    return "not in device memory";
  }
  if (a.type == cudaMemoryTypeManaged) return "";
  if (a.type != cudaMemoryTypeDevice) return "not in device memory";
  if (a.device != device) {
    return "on GPU " + std::to_string(a.device) + ", the codec on GPU " + std::to_string(device);
  }
  return "";
}

}  // namespace

struct GpuCodec::Impl {
  // Device staging for packets that live in host memory (one kernel write or read of device
  // memory, then one bulk copy), and the per-packet received sizes of a decode.
  DeviceBuffer packets;
  DeviceBuffer received;
  std::vector<uint32_t> host_received;  // pageable copy of the caller's received sizes
  std::deque<std::pair<Ticket, cudaEvent_t>> pending;  // in ticket order
  Ticket next = 1;
  float fwht_scales[16];
};

GpuCodec::GpuCodec(const codec::CodecConfig& cfg, int device) : cfg_(cfg), device_(device), impl_(new Impl) {
  for (int i = 0; i < 16; ++i) impl_->fwht_scales[i] = codec::fwht_scale(i);
}

std::unique_ptr<GpuCodec> GpuCodec::create(const codec::CodecConfig& cfg, std::string* err, int device) {
  std::string why;
  if (!gpu_available(&why)) {
    if (err != nullptr) *err = why;
    return nullptr;
  }
  const Status st = cfg.validate();
  if (!st.is_ok()) {
    if (err != nullptr) *err = st.to_string();
    return nullptr;
  }
  int dev = device;
  if (dev < 0 && cudaGetDevice(&dev) != cudaSuccess) dev = 0;
  const DeviceScope scope(dev);
  if (scope.error() != cudaSuccess) {
    if (err != nullptr) *err = cuda_error("cudaSetDevice", scope.error());
    return nullptr;
  }
  std::unique_ptr<GpuCodec> c(new GpuCodec(cfg, dev));
  cudaStream_t s = nullptr;
  const cudaError_t e = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  if (e != cudaSuccess) {
    if (err != nullptr) *err = cuda_error("cudaStreamCreateWithFlags", e);
    cudaGetLastError();
    return nullptr;
  }
  c->stream_ = s;
  return c;
}

GpuCodec::~GpuCodec() {
  // The staging buffers (impl_) are freed after this body; the stream must be idle by then.
  const DeviceScope scope(device_);
  if (stream_ != nullptr) {
    cudaStreamSynchronize(static_cast<cudaStream_t>(stream_));
    for (auto& p : impl_->pending) cudaEventDestroy(p.second);
    cudaStreamDestroy(static_cast<cudaStream_t>(stream_));
  }
  impl_.reset();
}

bool GpuCodec::fail(const std::string& what) {
  error_ = what;
  return false;
}

GpuCodec::Ticket GpuCodec::record(std::string* err) {
  cudaEvent_t ev = nullptr;
  cudaError_t e = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
  if (e == cudaSuccess) e = cudaEventRecord(ev, static_cast<cudaStream_t>(stream_));
  if (e != cudaSuccess) {
    if (ev != nullptr) cudaEventDestroy(ev);
    *err = cuda_error("cudaEventRecord", e);
    cudaGetLastError();
    return 0;
  }
  const Ticket t = impl_->next++;
  impl_->pending.emplace_back(t, ev);
  return t;
}

namespace {

// Grows a device buffer; waits for the stream first, since queued work may still use it.
bool ensure(DeviceBuffer* b, size_t bytes, cudaStream_t s, std::string* err) {
  if (b->size() >= bytes && b->data() != nullptr) return true;
  cudaStreamSynchronize(s);
  const size_t grown = std::max(bytes, b->size() * 2);
  *b = DeviceBuffer();
  *b = DeviceBuffer(grown, err);
  return b->data() != nullptr;
}

// The launch parameters both kernels share.
KernelCommon kernel_common(const codec::CodecConfig& cfg, const RowGeom& g, const codec::MessageId& id,
                           uint32_t first_row, uint32_t n_rows, size_t stride, const float (&fwht_scales)[16]) {
  KernelCommon c{};
  c.geom = g;
  c.first_row = first_row;
  c.n_rows = n_rows;
  c.first_slot = row_first_slot(g, first_row);
  c.stride = stride;
  c.cookie = id.cookie;
  c.seed = cfg.seed;
  c.msg_seq = id.msg_seq;
  c.trimmable = id.trimmable;
  c.clip_sigmas = cfg.clip_sigmas;
  std::copy(fwht_scales, fwht_scales + 16, c.fwht_scale);
  return c;
}

}  // namespace

// Checks shared by encode and decode: the rows and the device buffer (the message).
bool GpuCodec::check_call(const codec::Layout& layout, uint32_t first_row, uint32_t n_rows, const void* dev_msg,
                          const char* what) {
  if (layout.row_elems() != cfg_.row_elems) return fail("layout built for another config");
  if (static_cast<uint64_t>(first_row) + n_rows > layout.rows()) return fail("rows past the message");
  if (n_rows == 0) return fail("no rows");
  const std::string problem = device_memory_problem(dev_msg, device_);
  if (!problem.empty()) return fail(std::string(what) + " is " + problem);
  // The kernels read and write elements with loads and stores of the element's size.
  if (reinterpret_cast<uintptr_t>(dev_msg) % codec::dtype_bytes(layout.dtype()) != 0) {
    return fail(std::string(what) + " is not aligned to its element size");
  }
  return true;
}

GpuCodec::Ticket GpuCodec::encode_rows_async(const codec::Layout& layout, const codec::MessageId& id,
                                             const void* dev_msg, uint32_t first_row, uint32_t n_rows, uint8_t* out,
                                             size_t stride, uint32_t* sizes) {
  if (stride < cfg_.packet_bytes) return fail("packet stride below packet_bytes"), 0;
  if (!check_call(layout, first_row, n_rows, dev_msg, "the message")) return 0;
  const DeviceScope scope(device_);
  if (scope.error() != cudaSuccess) return fail(cuda_error("cudaSetDevice", scope.error())), 0;
  const RowGeom g = make_geom(cfg_, layout);
  // Sizes are the layout's: the rht -> sign fallback keeps every plane's size.
  uint64_t n_packets = 0;
  for (uint32_t r = first_row; r < first_row + n_rows; ++r) {
    const RowDesc d = row_desc(g, r);
    for (uint32_t k = 0; k < d.packets; ++k, ++n_packets) {
      const uint32_t first = k * d.epp;
      sizes[n_packets] = kHeaderBytes + packet_planes(d.scheme, static_cast<DType>(g.dtype), d.tail,
                                                      min_u32(d.epp, d.elems - first)).total();
    }
  }
  cudaStream_t s = static_cast<cudaStream_t>(stream_);
  // Packets for host memory are written to device staging, then copied in one DMA.
  const bool direct = device_memory_problem(out, device_).empty();
  const size_t span = (n_packets - 1) * stride + sizes[n_packets - 1];
  if (!direct && !ensure(&impl_->packets, span, s, &error_)) return 0;

  EncodeParams p{};
  p.c = kernel_common(cfg_, g, id, first_row, n_rows, stride, impl_->fwht_scales);
  p.msg = static_cast<const uint8_t*>(dev_msg);
  p.out = direct ? out : impl_->packets.data();
  int e = launch_encode(p, stream_);
  if (e != 0) return fail(cuda_error("encode kernel launch", e)), 0;
  if (!direct) {
    e = cudaMemcpyAsync(out, impl_->packets.data(), span, cudaMemcpyDefault, s);
    if (e != 0) return fail(cuda_error("cudaMemcpyAsync", e)), 0;
  }
  return record(&error_);
}

GpuCodec::Ticket GpuCodec::decode_rows_async(const codec::Layout& layout, const codec::MessageId& id,
                                             const uint8_t* packets, size_t stride, const uint32_t* received_bytes,
                                             uint32_t first_row, uint32_t n_rows, void* dev_out) {
  if (!check_call(layout, first_row, n_rows, dev_out, "the output")) return 0;
  const uint64_t n_packets = packets_in_rows(layout, first_row, n_rows);
  for (uint64_t j = 0; j < n_packets; ++j) {
    if (received_bytes[j] > stride) return fail("a received size exceeds the packet stride"), 0;
  }
  const DeviceScope scope(device_);
  if (scope.error() != cudaSuccess) return fail(cuda_error("cudaSetDevice", scope.error())), 0;
  const RowGeom g = make_geom(cfg_, layout);
  cudaStream_t s = static_cast<cudaStream_t>(stream_);
  if (!ensure(&impl_->received, n_packets * sizeof(uint32_t), s, &error_)) return 0;
  // The caller may reuse received_bytes once this returns. Copied into pageable memory of our
  // own first: an asynchronous copy from pageable memory is staged before cudaMemcpyAsync
  // returns (CUDA's documented behaviour), whereas one from the caller's array, if that is
  // pinned, would read it later.
  impl_->host_received.assign(received_bytes, received_bytes + n_packets);
  int e = cudaMemcpyAsync(impl_->received.data(), impl_->host_received.data(), n_packets * sizeof(uint32_t),
                          cudaMemcpyHostToDevice, s);
  if (e != 0) return fail(cuda_error("received sizes upload", e)), 0;
  const bool direct = device_memory_problem(packets, device_).empty();
  if (!direct) {
    const size_t span = (n_packets - 1) * stride + received_bytes[n_packets - 1];
    if (!ensure(&impl_->packets, span, s, &error_)) return 0;
    e = cudaMemcpyAsync(impl_->packets.data(), packets, span, cudaMemcpyDefault, s);
    if (e != 0) return fail(cuda_error("cudaMemcpyAsync", e)), 0;
  }
  DecodeParams p{};
  p.c = kernel_common(cfg_, g, id, first_row, n_rows, stride, impl_->fwht_scales);
  p.packets = direct ? packets : impl_->packets.data();
  p.received = reinterpret_cast<const uint32_t*>(impl_->received.data());
  p.out = static_cast<uint8_t*>(dev_out);
  e = launch_decode(p, stream_);
  if (e != 0) return fail(cuda_error("decode kernel launch", e)), 0;
  return record(&error_);
}

// Tickets complete in order (one stream): popping every ticket up to t, oldest first, and
// stopping at the first one still running, gives "t and everything before it finished". A
// ticket whose work failed counts as finished, with the error in last_error() and failed()
// set: callers spin on poll, so it must never stay false.
bool GpuCodec::poll(Ticket t) {
  auto& q = impl_->pending;
  while (!q.empty() && q.front().first <= t) {
    const cudaError_t e = cudaEventQuery(q.front().second);
    if (e == cudaErrorNotReady) return false;
    if (e != cudaSuccess) {
      failed_ = true;
      fail(cuda_error("cudaEventQuery", e));
    }
    cudaEventDestroy(q.front().second);
    q.pop_front();
  }
  return true;
}

bool GpuCodec::wait(Ticket t) {
  auto& q = impl_->pending;
  bool ok = true;
  while (!q.empty() && q.front().first <= t) {
    const cudaError_t e = cudaEventSynchronize(q.front().second);
    if (e != cudaSuccess) {
      failed_ = true;
      ok = fail(cuda_error("cudaEventSynchronize", e));
    }
    cudaEventDestroy(q.front().second);
    q.pop_front();
  }
  return ok;
}

bool GpuCodec::synchronize() {
  const cudaError_t e = cudaStreamSynchronize(static_cast<cudaStream_t>(stream_));
  const bool ok = wait(impl_->next - 1);
  if (e == cudaSuccess) return ok;
  failed_ = true;
  return fail(cuda_error("cudaStreamSynchronize", e));
}

}  // namespace trim::gpu
