// Host side of the GPU codec (built when nvcc is found): device probing and preparation, pinned,
// managed and device buffers, the release thread, and GpuCodec, which validates a call, fills
// packet sizes, stages host buffers through device memory and launches cuda/encode.cu /
// cuda/decode.cu on its stream. Every runtime call goes through cuda/cuda_calls.h.
#include "cuda/gpu_codec.h"

#include <time.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "codec/fwht.h"
#include "cuda/cuda_calls.h"
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
    const cudaError_t e = cu::get_device_count(&n);
    if (e == cudaErrorInsufficientDriver) {
      r.why = "CUDA driver not found (or older than the runtime)";
    } else if (e == cudaErrorNoDevice || (e == cudaSuccess && n == 0)) {
      r.why = "no CUDA device";
    } else if (e != cudaSuccess) {
      r.why = std::string("CUDA unavailable: ") + cu::error_string(e);
    } else {
      // The kernels are built for sm_80 and sm_90 (+ PTX for later GPUs), not for older ones.
      int dev = 0, major = 0, minor = 0;
      cu::get_device(&dev);
      cu::device_attribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
      cu::device_attribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
      if (major < 8) {
        r.why = "GPU sm_" + std::to_string(major) + std::to_string(minor) + " is older than sm_80";
      } else {
        r.ok = true;
      }
    }
    cu::get_last_error();  // a failed probe must not leave a sticky error for later calls
    return r;
  }();
  return p;
}

std::string cuda_error(const char* what, int e) {
  return std::string(what) + ": " + cu::error_string(static_cast<cudaError_t>(e));
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
  if (!gpu_available() || cu::get_device(&dev) != cudaSuccess || cu::device_properties(&prop, dev) != cudaSuccess) {
    return "";
  }
  return std::string(prop.name) + " (sm_" + std::to_string(prop.major) + std::to_string(prop.minor) + ")";
}

bool is_device_pointer(const void* p, int* device) {
  if (p == nullptr || !gpu_available()) return false;
  cudaPointerAttributes a{};
  if (cu::pointer_attributes(&a, p) != cudaSuccess) {
    cu::get_last_error();
    return false;
  }
  if (a.type != cudaMemoryTypeDevice && a.type != cudaMemoryTypeManaged) return false;
  if (device != nullptr) *device = a.device;
  return true;
}

// ---- the release thread

namespace {

class Releaser {
 public:
  void post(std::function<void()> fn) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!started_) {
      started_ = true;
      std::thread([this] { run(); }).detach();  // lives for the process: a free may never return
    }
    q_.push_back(std::move(fn));
    ++posted_;
    cv_.notify_all();
  }
  bool idle(int timeout_ms) {
    std::unique_lock<std::mutex> lock(mu_);
    const uint64_t target = posted_;
    return cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms), [&] { return done_ >= target; });
  }

 private:
  void run() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      cv_.wait(lock, [&] { return !q_.empty(); });
      std::function<void()> fn = std::move(q_.front());
      q_.pop_front();
      lock.unlock();
      fn();
      lock.lock();
      ++done_;
      cv_.notify_all();
    }
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> q_;
  uint64_t posted_ = 0, done_ = 0;
  bool started_ = false;
};

Releaser& releaser() {
  static Releaser* r = new Releaser();  // never destroyed: its thread may outlive static destructors
  return *r;
}

void free_pinned(void* p) {
  defer_release([p] { cu::free_host(p); });
}
void free_device(void* p) {
  defer_release([p] { cu::free_device(p); });
}

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
    cu::get_last_error();
    return nullptr;
  }
  return static_cast<uint8_t*>(p);
}

}  // namespace

void defer_release(std::function<void()> fn) { releaser().post(std::move(fn)); }
bool release_idle(int timeout_ms) { return releaser().idle(timeout_ms); }

int current_device() {
  int d = 0;
  return cu::get_device(&d) == cudaSuccess ? d : 0;
}

bool prepare_device(int device, std::string* err) {
  std::string why;
  if (!gpu_available(&why)) {
    if (err != nullptr) *err = why;
    return false;
  }
  if (device < 0) device = current_device();
  int prev = -1;
  cu::get_device(&prev);
  if (prev != device && cu::set_device(device) != cudaSuccess) {
    if (err != nullptr) *err = "cudaSetDevice(" + std::to_string(device) + ") failed";
    cu::get_last_error();
    return false;
  }
  int e = prepare_encode(device);
  const char* what = "loading the encode kernel";
  if (e == 0) {
    e = prepare_decode(device);
    what = "loading the decode kernel";
  }
  if (prev >= 0 && prev != device) cu::set_device(prev);
  if (e != 0) {
    if (err != nullptr) *err = cuda_error(what, e);
    return false;
  }
  return true;
}

// ---- buffers

PinnedBuffer::PinnedBuffer(size_t bytes, std::string* err)
    : OwnedMemory(allocate(bytes, [](void** p, size_t n) { return cu::host_alloc(p, n, cudaHostAllocPortable); },
                           "cudaHostAlloc", err),
                  bytes, free_pinned) {
  if (data() == nullptr) *this = PinnedBuffer();
}


DeviceBuffer::DeviceBuffer(size_t bytes, std::string* err)
    : OwnedMemory(allocate(bytes, [](void** p, size_t n) { return cu::malloc_device(p, n); }, "cudaMalloc", err),
                  bytes, free_device) {
  if (data() == nullptr) *this = DeviceBuffer();
}

bool DeviceBuffer::upload(const void* host, size_t bytes, size_t offset) {
  if (data() == nullptr || offset + bytes > size()) return false;
  return cu::memcpy_sync(data() + offset, host, bytes) == cudaSuccess;
}
bool DeviceBuffer::download(void* host, size_t bytes, size_t offset) const {
  if (data() == nullptr || offset + bytes > size()) return false;
  return cu::memcpy_sync(host, data() + offset, bytes) == cudaSuccess;
}

bool DeviceBuffer::copy_from(const DeviceBuffer& src, size_t bytes) {
  if (data() == nullptr || src.data() == nullptr || bytes > size() || bytes > src.size()) return false;
  return cu::memcpy_sync(data(), src.data(), bytes) == cudaSuccess && cu::device_synchronize() == cudaSuccess;
}

// ---- GpuCodec

namespace {

// Makes `device` current for one call and gives the caller's current device back after: the
// engine thread may drive comms of several GPUs, and the device is per thread state.
class DeviceScope {
 public:
  explicit DeviceScope(int device) {
    if (cu::get_device(&prev_) == cudaSuccess && prev_ == device) return;
    err_ = cu::set_device(device);
    switched_ = err_ == cudaSuccess && prev_ >= 0;
    if (err_ != cudaSuccess) cu::get_last_error();
  }
  ~DeviceScope() {
    if (switched_) cu::set_device(prev_);
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
// or plain device memory of another GPU. Setup only (untrusted codecs: tools, tests).
std::string device_memory_problem(const void* p, int device) {
  cudaPointerAttributes a{};
  if (p == nullptr || cu::pointer_attributes(&a, p) != cudaSuccess) {
    cu::get_last_error();
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
  // memory, then one bulk copy), and the per-packet received sizes of a decode. One stream
  // runs the calls in order, so one scratch serves every call in flight.
  DeviceBuffer packets;
  DeviceBuffer received;
  std::vector<uint32_t> host_received;  // untrusted: pageable copy of the caller's received sizes
  std::vector<cudaEvent_t> free_events;  // created at create (setup), reused
  std::deque<std::pair<Ticket, cudaEvent_t>> pending;  // in ticket order
  Ticket next = 1;
  float fwht_scales[16];
};

GpuCodec::GpuCodec(const codec::CodecConfig& cfg, int device, const Options& opt)
    : cfg_(cfg), device_(device), opt_(opt), impl_(new Impl) {
  for (int i = 0; i < 16; ++i) impl_->fwht_scales[i] = codec::fwht_scale(i);
}

std::unique_ptr<GpuCodec> GpuCodec::create(const codec::CodecConfig& cfg, std::string* err, int device,
                                           const Options& opt) {
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
  const int dev = device >= 0 ? device : current_device();
  if (!prepare_device(dev, err)) return nullptr;
  const DeviceScope scope(dev);
  if (scope.error() != cudaSuccess) {
    if (err != nullptr) *err = cuda_error("cudaSetDevice", scope.error());
    return nullptr;
  }
  std::unique_ptr<GpuCodec> c(new GpuCodec(cfg, dev, opt));
  cudaStream_t s = nullptr;
  cudaError_t e = cu::stream_create(&s);
  if (e != cudaSuccess) {
    if (err != nullptr) *err = cuda_error("cudaStreamCreateWithFlags", e);
    cu::get_last_error();
    return nullptr;
  }
  c->stream_ = s;
  for (uint32_t i = 0; i < opt.events; ++i) {
    cudaEvent_t ev = nullptr;
    e = cu::event_create(&ev);
    if (e != cudaSuccess) {
      if (err != nullptr) *err = cuda_error("cudaEventCreateWithFlags", e);
      cu::get_last_error();
      return nullptr;
    }
    c->impl_->free_events.push_back(ev);
  }
  if (opt.max_call_packets > 0) {
    const size_t n = opt.max_call_packets;
    c->impl_->packets = DeviceBuffer(n * cfg.packet_bytes, err);
    if (c->impl_->packets.data() == nullptr) return nullptr;
    c->impl_->received = DeviceBuffer(n * sizeof(uint32_t), err);
    if (c->impl_->received.data() == nullptr) return nullptr;
  }
  return c;
}

GpuCodec::~GpuCodec() {
  // Nothing here may wait: the stream and events are torn down on the release thread, after
  // the stream drained (its scratch buffers' frees, queued with them, wait for the device too).
  std::vector<cudaEvent_t> events = std::move(impl_->free_events);
  for (auto& p : impl_->pending) events.push_back(p.second);
  cudaStream_t s = static_cast<cudaStream_t>(stream_);
  const int dev = device_;
  defer_release([s, events, dev] {
    const DeviceScope scope(dev);
    if (s != nullptr) cu::stream_synchronize(s);
    for (cudaEvent_t ev : events) cu::event_destroy(ev);
    if (s != nullptr) cu::stream_destroy(s);
  });
  impl_.reset();  // the scratch: frees deferred after the teardown above
}

bool GpuCodec::fail(const std::string& what) {
  error_ = what;
  return false;
}

GpuCodec::Ticket GpuCodec::record(std::string* err) {
  if (impl_->free_events.empty()) {
    // More calls in flight than events created at setup: a trusted codec must not create one
    // here (cudaEventCreate is setup-only); an untrusted one may.
    cudaEvent_t ev = nullptr;
    const cudaError_t e = opt_.trusted ? cudaErrorNotPermitted : cu::event_create(&ev);
    if (e != cudaSuccess) {
      *err = opt_.trusted ? "more device calls in flight than completion events (" + std::to_string(opt_.events) + ")"
                          : cuda_error("cudaEventCreateWithFlags", e);
      cu::get_last_error();
      return 0;
    }
    impl_->free_events.push_back(ev);
  }
  cudaEvent_t ev = impl_->free_events.back();
  const cudaError_t e = cu::event_record(ev, static_cast<cudaStream_t>(stream_));
  if (e != cudaSuccess) {
    *err = cuda_error("cudaEventRecord", e);
    cu::get_last_error();
    return 0;
  }
  impl_->free_events.pop_back();
  const Ticket t = impl_->next++;
  impl_->pending.emplace_back(t, ev);
  return t;
}

GpuCodec::Ticket GpuCodec::last_ticket() const { return impl_->next - 1; }

namespace {

// Grows a device buffer (untrusted codecs only: tools and tests, off the data path); waits for
// the stream first, since queued work may still use it.
bool ensure(DeviceBuffer* b, size_t bytes, cudaStream_t s, bool trusted, std::string* err) {
  if (b->size() >= bytes && b->data() != nullptr) return true;
  if (trusted) {
    *err = "a call of " + std::to_string(bytes) + " bytes exceeds the scratch sized at setup (" +
           std::to_string(b->size()) + " bytes)";
    return false;
  }
  cu::stream_synchronize(s);
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
  if (dev_msg == nullptr) return fail(std::string(what) + " is null");
  if (!opt_.trusted) {  // trusted: checked once, at regMr
    const std::string problem = device_memory_problem(dev_msg, device_);
    if (!problem.empty()) return fail(std::string(what) + " is " + problem);
  }
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
  // Packets for host memory are written to device staging, then copied in one DMA. A trusted
  // codec's output is always host staging.
  const bool direct = !opt_.trusted && device_memory_problem(out, device_).empty();
  const size_t span = (n_packets - 1) * stride + sizes[n_packets - 1];
  if (!direct && !ensure(&impl_->packets, span, s, opt_.trusted, &error_)) return 0;

  EncodeParams p{};
  p.c = kernel_common(cfg_, g, id, first_row, n_rows, stride, impl_->fwht_scales);
  p.msg = static_cast<const uint8_t*>(dev_msg);
  p.out = direct ? out : impl_->packets.data();
  int e = launch_encode(p, stream_, device_);
  if (e != 0) return fail(cuda_error("encode kernel launch", e)), 0;
  if (!direct) {
    e = cu::memcpy_async(out, impl_->packets.data(), span, s);
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
  if (!ensure(&impl_->received, n_packets * sizeof(uint32_t), s, opt_.trusted, &error_)) return 0;
  // Trusted: the caller's array is pinned and stays unchanged until the ticket is done, so the
  // copy reads it on the stream. Untrusted: the caller may reuse it at once; copied into
  // pageable memory of our own first, which cudaMemcpyAsync stages before returning.
  const uint32_t* sizes_src = received_bytes;
  if (!opt_.trusted) {
    impl_->host_received.assign(received_bytes, received_bytes + n_packets);
    sizes_src = impl_->host_received.data();
  }
  int e = cu::memcpy_async(impl_->received.data(), sizes_src, n_packets * sizeof(uint32_t), s);
  if (e != 0) return fail(cuda_error("received sizes upload", e)), 0;
  const bool direct = !opt_.trusted && device_memory_problem(packets, device_).empty();
  if (!direct) {
    const size_t span = (n_packets - 1) * stride + received_bytes[n_packets - 1];
    if (!ensure(&impl_->packets, span, s, opt_.trusted, &error_)) return 0;
    e = cu::memcpy_async(impl_->packets.data(), packets, span, s);
    if (e != 0) return fail(cuda_error("cudaMemcpyAsync", e)), 0;
  }
  DecodeParams p{};
  p.c = kernel_common(cfg_, g, id, first_row, n_rows, stride, impl_->fwht_scales);
  p.packets = direct ? packets : impl_->packets.data();
  p.received = reinterpret_cast<const uint32_t*>(impl_->received.data());
  p.out = static_cast<uint8_t*>(dev_out);
  e = launch_decode(p, stream_, device_);
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
    const cudaError_t e = cu::event_query(q.front().second);
    if (e == cudaErrorNotReady) return false;
    if (e != cudaSuccess) {
      failed_ = true;
      fail(cuda_error("cudaEventQuery", e));
      cu::get_last_error();
    }
    impl_->free_events.push_back(q.front().second);
    q.pop_front();
  }
  return true;
}

bool GpuCodec::wait_for(Ticket t, uint64_t timeout_ns) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::nanoseconds(timeout_ns);
  while (!poll(t)) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  return true;
}

bool GpuCodec::wait(Ticket t) {
  auto& q = impl_->pending;
  bool ok = true;
  while (!q.empty() && q.front().first <= t) {
    const cudaError_t e = cu::event_synchronize(q.front().second);
    if (e != cudaSuccess) {
      failed_ = true;
      ok = fail(cuda_error("cudaEventSynchronize", e));
    }
    impl_->free_events.push_back(q.front().second);
    q.pop_front();
  }
  return ok;
}

bool GpuCodec::synchronize() {
  const cudaError_t e = cu::stream_synchronize(static_cast<cudaStream_t>(stream_));
  const bool ok = wait(impl_->next - 1);
  if (e == cudaSuccess) return ok;
  failed_ = true;
  return fail(cuda_error("cudaStreamSynchronize", e));
}

}  // namespace trim::gpu
