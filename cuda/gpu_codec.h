// GPU codec: encodes rows of a message held in GPU memory into the exact packets
// codec::Encoder writes, and decodes (possibly trimmed or missing) packets into GPU memory
// exactly as codec::Decoder does. Plain C++: no CUDA header, so g++ code (transport/) can
// include it. Built from cuda/gpu_codec.cc + cuda/*.cu when nvcc is found, else from
// cuda/gpu_stub.cc, where gpu_available() says "built without nvcc".
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "codec/layout.h"

namespace trim::gpu {

// Whether a CUDA device can run the kernels. Probed once (cudaGetDeviceCount), then cached;
// when false, *why says why ("CUDA driver not found", "no CUDA device", "built without nvcc", ...).
bool gpu_available(std::string* why = nullptr);

// "NVIDIA H100 80GB HBM3 (sm_90)" for the current device; empty without one.
std::string gpu_device_name();

// True when p is device (or managed) memory; *device gets its device ordinal. False for host
// memory, unregistered pointers, or no GPU; never aborts. Setup only (init, regMr).
bool is_device_pointer(const void* p, int* device = nullptr);

// Setup only (may wait for the device): loads every kernel's module on `device` (< 0: the
// calling thread's current device) and sets its shared memory limit, so that no launch on the
// data path loads a module (lazy loading, CUDA 12's default, waits for the device). Idempotent.
bool prepare_device(int device, std::string* err);

// The calling thread's current device (0 when it cannot be read).
int current_device();

// Runs fn on the release thread: frees of device and pinned memory and stream teardown wait for
// the device (cudaFree, cudaFreeHost, cudaStreamSynchronize), so no plugin thread makes them.
// FIFO; the thread lives for the process.
void defer_release(std::function<void()> fn);
// Waits up to timeout_ms for everything deferred so far to have run (tests, tools); true when it has.
bool release_idle(int timeout_ms);

namespace detail {

// What PinnedBuffer and DeviceBuffer share: one owned allocation, released with the free
// function its allocator gave; move-only.
class OwnedMemory {
 public:
  uint8_t* data() const { return data_; }
  size_t size() const { return bytes_; }

  OwnedMemory(const OwnedMemory&) = delete;
  OwnedMemory& operator=(const OwnedMemory&) = delete;

 protected:
  using FreeFn = void (*)(void*);
  OwnedMemory() = default;
  OwnedMemory(uint8_t* data, size_t bytes, FreeFn free) : data_(data), bytes_(bytes), free_(free) {}
  ~OwnedMemory() { release(); }
  OwnedMemory(OwnedMemory&& o) noexcept : data_(o.data_), bytes_(o.bytes_), free_(o.free_) { o.forget(); }
  OwnedMemory& operator=(OwnedMemory&& o) noexcept {
    if (this != &o) {
      release();
      data_ = o.data_;
      bytes_ = o.bytes_;
      free_ = o.free_;
      o.forget();
    }
    return *this;
  }

 private:
  void release() {
    if (data_ != nullptr && free_ != nullptr) free_(data_);
    forget();
  }
  void forget() {
    data_ = nullptr;
    bytes_ = 0;
    free_ = nullptr;
  }

  uint8_t* data_ = nullptr;
  size_t bytes_ = 0;
  FreeFn free_ = nullptr;
};

}  // namespace detail

// Page-locked host memory (cudaHostAlloc, portable to every device): the GPU codec's copies
// to and from it are truly asynchronous DMA. The kernels never touch it themselves.
class PinnedBuffer : public detail::OwnedMemory {
 public:
  PinnedBuffer() = default;
  // Empty (data() == nullptr) when the allocation fails; *err says why.
  explicit PinnedBuffer(size_t bytes, std::string* err = nullptr);
};

// Device memory (cudaMalloc) with RAII; for tests, benchmarks and device-side staging.
class DeviceBuffer : public detail::OwnedMemory {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes, std::string* err = nullptr);

  // Synchronous copies (tests, tools).
  bool upload(const void* host, size_t bytes, size_t offset = 0);
  bool download(void* host, size_t bytes, size_t offset = 0) const;
  // Synchronous device-to-device copy of `bytes` from src (benchmarks' baseline).
  bool copy_from(const DeviceBuffer& src, size_t bytes);
};

// What a codec is created for. The transport's codec is `trusted`: its callers pass
// messages in device memory validated at regMr and packets in pinned host staging, never
// more than max_call_packets a call, so no call on the data path inspects a pointer
// (cudaPointerGetAttributes) or grows a buffer (cudaMalloc). Tools and tests leave it
// untrusted: pointers are inspected, buffers grow as needed.
struct GpuCodecOptions {
  uint32_t max_call_packets = 0;  // device scratch sized for this many packets at create
  bool trusted = false;
  uint32_t events = 16;           // completion events created at create (more: setup only)
};

// One per engine thread: owns a non-blocking CUDA stream, its events and the device scratch.
// Calls are asynchronous on that stream and run in order; a ticket names the work queued by
// one call, and poll()/wait() tell when it (and all earlier work) has finished. Not thread-safe.
class GpuCodec {
 public:
  using Ticket = uint64_t;  // 0 = the call failed (last_error() says why)

  using Options = GpuCodecOptions;

  // Setup only. On `device` (>= 0), else the calling thread's current device. NCCL may drive
  // comms of several GPUs from one engine thread, so callers pass the device their buffers
  // live on. Loads the kernels there (prepare_device), creates the non-blocking stream, the
  // events and the scratch.
  static std::unique_ptr<GpuCodec> create(const codec::CodecConfig& cfg, std::string* err, int device = -1,
                                          const Options& opt = Options{});
  ~GpuCodec();
  GpuCodec(const GpuCodec&) = delete;
  GpuCodec& operator=(const GpuCodec&) = delete;

  const codec::CodecConfig& config() const { return cfg_; }
  int device() const { return device_; }

  // Encodes rows [first_row, first_row + n_rows) of the message at dev_msg (device memory of
  // device(), or managed memory; layout.bytes() bytes, aligned to the element size). Packet j
  // of the range (rows in order, each row's packets in order) goes to out + j * stride
  // (stride >= config().packet_bytes; out is pinned host memory or device memory) and is byte
  // for byte what codec::Encoder::encode_row writes (psn/dst fields 0). sizes[j] gets packet
  // j's size before this returns (known from the layout). The bytes are valid once poll/wait
  // says the ticket is done.
  Ticket encode_rows_async(const codec::Layout& layout, const codec::MessageId& id, const void* dev_msg,
                           uint32_t first_row, uint32_t n_rows, uint8_t* out, size_t stride, uint32_t* sizes);

  // Decodes rows [first_row, first_row + n_rows) from their packets, laid out as encode lays
  // them (packet j of the range at packets + j * stride, pinned host or device memory).
  // received_bytes[j] (host memory, read before this returns) is how many bytes of packet j
  // arrived, header included: 0 (or fewer than the 56 header bytes) = missing. Every packet
  // passed must already have been validated (codec::parse_packet, and the Decoder's checks
  // that it belongs to this message and row). Output: the rows' bytes of the message at
  // dev_out (device memory of device(), or managed; aligned to the element size), exactly as
  // codec::Decoder writes them after finish_row. Raw rows (scheme none) are written with one
  // 8-byte store per 8-byte-aligned 8 bytes of dev_out (NCCL's LL lines).
  // Packets in host memory are copied to the device on the stream: keep them unchanged until
  // the ticket is done. A trusted codec reads received_bytes on the stream too (it must be
  // pinned, and unchanged until the ticket is done); an untrusted one copies it first.
  Ticket decode_rows_async(const codec::Layout& layout, const codec::MessageId& id, const uint8_t* packets,
                           size_t stride, const uint32_t* received_bytes, uint32_t first_row, uint32_t n_rows,
                           void* dev_out);

  // Packets of rows [first_row, first_row + n_rows): the size of the sizes[] / received_bytes[] arrays.
  static uint64_t packets_in_rows(const codec::Layout& layout, uint32_t first_row, uint32_t n_rows) {
    const uint64_t end = std::min<uint64_t>(static_cast<uint64_t>(first_row) + n_rows, layout.rows());
    uint64_t n = 0;
    for (uint64_t r = first_row; r < end; ++r) n += layout.row(static_cast<uint32_t>(r)).packets;
    return n;
  }

  // True once t's work and all work queued before it has finished (or t is 0 / unknown and
  // old). Work that failed counts as finished: last_error() then says why.
  bool poll(Ticket t);
  // Polls until t is done or timeout_ns passed (sleeping between polls): the bounded wait of
  // close and deregMr. False on timeout.
  bool wait_for(Ticket t, uint64_t timeout_ns);
  bool wait(Ticket t);  // setup only: blocks; false when the stream reported an error
  bool synchronize();   // setup only: waits for everything queued
  Ticket last_ticket() const;
  const std::string& last_error() const { return error_; }
  // True once poll/wait/synchronize saw queued work fail (a kernel fault, a failed copy): the
  // outputs of the tickets that completed with it are not valid. Sticky, as CUDA's context
  // errors are.
  bool failed() const { return failed_; }

  // The CUDA stream (a cudaStream_t), for callers that want to order their own copies after it.
  void* stream() const { return stream_; }

 private:
  struct Impl;
  GpuCodec(const codec::CodecConfig& cfg, int device, const Options& opt);
  Ticket record(std::string* err);
  bool fail(const std::string& what);
  bool check_call(const codec::Layout& layout, uint32_t first_row, uint32_t n_rows, const void* dev_msg,
                  const char* what);

  codec::CodecConfig cfg_;
  int device_ = 0;
  Options opt_;
  void* stream_ = nullptr;
  std::unique_ptr<Impl> impl_;
  std::string error_;
  bool failed_ = false;
};

}  // namespace trim::gpu
