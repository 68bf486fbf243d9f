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

PinnedBuffer::PinnedBuffer(size_t bytes, std::string* err) {
  std::string why;
  if (!gpu_available(&why)) {
    if (err != nullptr) *err = why;
    return;
  }
  void* p = nullptr;
  const cudaError_t e = cudaHostAlloc(&p, bytes, cudaHostAllocPortable);
  if (e != cudaSuccess) {
    if (err != nullptr) *err = cuda_error("cudaHostAlloc", e);
    cudaGetLastError();
    return;
  }
  data_ = static_cast<uint8_t*>(p);
  bytes_ = bytes;
}
PinnedBuffer::~PinnedBuffer() {
  if (data_ != nullptr) cudaFreeHost(data_);
}
PinnedBuffer::PinnedBuffer(PinnedBuffer&& o) noexcept
    : data_(std::exchange(o.data_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
PinnedBuffer& PinnedBuffer::operator=(PinnedBuffer&& o) noexcept {
  if (this != &o) {
    if (data_ != nullptr) cudaFreeHost(data_);
    data_ = std::exchange(o.data_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
  }
  return *this;
}

DeviceBuffer::DeviceBuffer(size_t bytes, std::string* err) {
  std::string why;
  if (!gpu_available(&why)) {
    if (err != nullptr) *err = why;
    return;
  }
  void* p = nullptr;
  const cudaError_t e = cudaMalloc(&p, std::max<size_t>(bytes, 1));
  if (e != cudaSuccess) {
    if (err != nullptr) *err = cuda_error("cudaMalloc", e);
    cudaGetLastError();
    return;
  }
  data_ = static_cast<uint8_t*>(p);
  bytes_ = bytes;
}
DeviceBuffer::~DeviceBuffer() {
  if (data_ != nullptr) cudaFree(data_);
}
DeviceBuffer::DeviceBuffer(DeviceBuffer&& o) noexcept
    : data_(std::exchange(o.data_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    if (data_ != nullptr) cudaFree(data_);
    data_ = std::exchange(o.data_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
  }
  return *this;
}
bool DeviceBuffer::upload(const void* host, size_t bytes, size_t offset) {
  if (data_ == nullptr || offset + bytes > bytes_) return false;
  return cudaMemcpy(data_ + offset, host, bytes, cudaMemcpyHostToDevice) == cudaSuccess;
}
bool DeviceBuffer::download(void* host, size_t bytes, size_t offset) const {
  if (data_ == nullptr || offset + bytes > bytes_) return false;
  return cudaMemcpy(host, data_ + offset, bytes, cudaMemcpyDeviceToHost) == cudaSuccess;
}

bool DeviceBuffer::copy_from(const DeviceBuffer& src, size_t bytes) {
  if (data_ == nullptr || src.data_ == nullptr || bytes > bytes_ || bytes > src.bytes_) return false;
  return cudaMemcpy(data_, src.data_, bytes, cudaMemcpyDeviceToDevice) == cudaSuccess &&
         cudaDeviceSynchronize() == cudaSuccess;
}

// ---- GpuCodec

struct GpuCodec::Impl {
  // Device staging for packets that live in host memory (one kernel write or read of device
  // memory, then one bulk copy), and the per-packet received sizes of a decode.
  DeviceBuffer packets;
  DeviceBuffer received;
  std::vector<uint32_t> host_received;  // pageable copy of the caller's received sizes
  std::deque<std::pair<Ticket, cudaEvent_t>> pending;  // in ticket order
  Ticket next = 1;
  Ticket done = 0;
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
  if (device >= 0) {
    const cudaError_t se = cudaSetDevice(device);
    if (se != cudaSuccess) {
      if (err != nullptr) *err = cuda_error("cudaSetDevice", se);
      return nullptr;
    }
  }
  int dev = 0;
  cudaGetDevice(&dev);
  std::unique_ptr<GpuCodec> c(new GpuCodec(cfg, dev));
  cudaStream_t s = nullptr;
  const cudaError_t e = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  if (e != cudaSuccess) {
    if (err != nullptr) *err = cuda_error("cudaStreamCreateWithFlags", e);
    return nullptr;
  }
  c->stream_ = s;
  return c;
}

GpuCodec::~GpuCodec() {
  if (stream_ != nullptr) {
    cudaStreamSynchronize(static_cast<cudaStream_t>(stream_));
    for (auto& p : impl_->pending) cudaEventDestroy(p.second);
    cudaStreamDestroy(static_cast<cudaStream_t>(stream_));
  }
}

bool GpuCodec::fail(const std::string& what) {
  error_ = what;
  return false;
}

uint64_t GpuCodec::packets_in_rows(const codec::Layout& layout, uint32_t first_row, uint32_t n_rows) {
  uint64_t n = 0;
  for (uint32_t r = first_row; r < first_row + n_rows && r < layout.rows(); ++r) n += layout.row(r).packets;
  return n;
}

GpuCodec::Ticket GpuCodec::record(std::string* err) {
  cudaEvent_t ev = nullptr;
  cudaError_t e = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
  if (e == cudaSuccess) e = cudaEventRecord(ev, static_cast<cudaStream_t>(stream_));
  if (e != cudaSuccess) {
    if (ev != nullptr) cudaEventDestroy(ev);
    *err = cuda_error("cudaEventRecord", e);
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

}  // namespace

GpuCodec::Ticket GpuCodec::encode_rows_async(const codec::Layout& layout, const codec::MessageId& id,
                                             const void* dev_msg, uint32_t first_row, uint32_t n_rows, uint8_t* out,
                                             size_t stride, uint32_t* sizes) {
  if (layout.row_elems() != cfg_.row_elems) return fail("layout built for another config"), 0;
  if (stride < cfg_.packet_bytes) return fail("packet stride below packet_bytes"), 0;
  if (static_cast<uint64_t>(first_row) + n_rows > layout.rows()) return fail("rows past the message"), 0;
  if (n_rows == 0) return fail("no rows"), 0;
  if (layout.bytes() != 0 && !is_device_pointer(dev_msg)) return fail("the message is not in device memory"), 0;
  if (reinterpret_cast<uintptr_t>(dev_msg) % codec::dtype_bytes(layout.dtype()) != 0) {
    return fail("the message is not aligned to its element size"), 0;
  }
  cudaSetDevice(device_);
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
  const bool direct = is_device_pointer(out);
  const size_t span = (n_packets - 1) * stride + sizes[n_packets - 1];
  if (!direct && !ensure(&impl_->packets, span, s, &error_)) return 0;

  EncodeParams p{};
  p.c.geom = g;
  p.c.first_row = first_row;
  p.c.n_rows = n_rows;
  p.c.first_slot = row_first_slot(g, first_row);
  p.c.stride = stride;
  p.c.cookie = id.cookie;
  p.c.seed = cfg_.seed;
  p.c.msg_seq = id.msg_seq;
  p.c.trimmable = id.trimmable;
  p.c.clip_sigmas = cfg_.clip_sigmas;
  std::copy(impl_->fwht_scales, impl_->fwht_scales + 16, p.c.fwht_scale);
  p.msg = static_cast<const uint8_t*>(dev_msg);
  p.out = direct ? out : impl_->packets.data();
  int e = launch_encode(p, stream_);
  if (e != 0) return fail(cuda_error("encode kernel launch", e)), 0;
  if (!direct) {
    e = cudaMemcpyAsync(out, impl_->packets.data(), span, cudaMemcpyDeviceToHost, s);
    if (e != 0) return fail(cuda_error("cudaMemcpyAsync", e)), 0;
  }
  return record(&error_);
}

GpuCodec::Ticket GpuCodec::decode_rows_async(const codec::Layout& layout, const codec::MessageId& id,
                                             const uint8_t* packets, size_t stride, const uint32_t* received_bytes,
                                             uint32_t first_row, uint32_t n_rows, void* dev_out) {
  if (layout.row_elems() != cfg_.row_elems) return fail("layout built for another config"), 0;
  if (static_cast<uint64_t>(first_row) + n_rows > layout.rows()) return fail("rows past the message"), 0;
  if (n_rows == 0) return fail("no rows"), 0;
  if (!is_device_pointer(dev_out)) return fail("the output is not in device memory"), 0;
  cudaSetDevice(device_);
  const RowGeom g = make_geom(cfg_, layout);
  const uint64_t n_packets = packets_in_rows(layout, first_row, n_rows);
  for (uint64_t j = 0; j < n_packets; ++j) {
    if (received_bytes[j] > stride) return fail("a received size exceeds the packet stride"), 0;
  }
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
  const bool direct = is_device_pointer(packets);
  if (!direct) {
    const size_t span = (n_packets - 1) * stride + received_bytes[n_packets - 1];
    if (!ensure(&impl_->packets, span, s, &error_)) return 0;
    e = cudaMemcpyAsync(impl_->packets.data(), packets, span, cudaMemcpyHostToDevice, s);
    if (e != 0) return fail(cuda_error("cudaMemcpyAsync", e)), 0;
  }
  DecodeParams p{};
  p.c.geom = g;
  p.c.first_row = first_row;
  p.c.n_rows = n_rows;
  p.c.first_slot = row_first_slot(g, first_row);
  p.c.stride = stride;
  p.c.cookie = id.cookie;
  p.c.seed = cfg_.seed;
  p.c.msg_seq = id.msg_seq;
  p.c.trimmable = id.trimmable;
  p.c.clip_sigmas = cfg_.clip_sigmas;
  std::copy(impl_->fwht_scales, impl_->fwht_scales + 16, p.c.fwht_scale);
  p.packets = direct ? packets : impl_->packets.data();
  p.received = reinterpret_cast<const uint32_t*>(impl_->received.data());
  p.out = static_cast<uint8_t*>(dev_out);
  e = launch_decode(p, stream_);
  if (e != 0) return fail(cuda_error("decode kernel launch", e)), 0;
  return record(&error_);
}

bool GpuCodec::poll(Ticket t) {
  auto& q = impl_->pending;
  while (!q.empty() && q.front().first <= t) {
    const cudaError_t e = cudaEventQuery(q.front().second);
    if (e == cudaErrorNotReady) return false;
    if (e != cudaSuccess) fail(cuda_error("cudaEventQuery", e));
    cudaEventDestroy(q.front().second);
    impl_->done = q.front().first;
    q.pop_front();
  }
  return true;
}

bool GpuCodec::wait(Ticket t) {
  auto& q = impl_->pending;
  bool ok = true;
  while (!q.empty() && q.front().first <= t) {
    const cudaError_t e = cudaEventSynchronize(q.front().second);
    if (e != cudaSuccess) ok = fail(cuda_error("cudaEventSynchronize", e));
    cudaEventDestroy(q.front().second);
    impl_->done = q.front().first;
    q.pop_front();
  }
  return ok;
}

bool GpuCodec::synchronize() {
  const cudaError_t e = cudaStreamSynchronize(static_cast<cudaStream_t>(stream_));
  const bool ok = wait(impl_->next - 1);
  return e == cudaSuccess ? ok : fail(cuda_error("cudaStreamSynchronize", e));
}

}  // namespace trim::gpu
