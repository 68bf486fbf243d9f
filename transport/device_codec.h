// The GPU side of a connection's codec, as the send and receive state machines see it: encode
// rows of a message in device memory into packets in host staging, and decode staged packets
// into device memory, asynchronously, with tickets the engine thread polls. Two backends:
//   kCuda      cuda/gpu_codec.h (the fused kernels), when the CUDA runtime finds a GPU;
//   kEmulated  the CPU codec behind the same interface (NCCL_TRIM_TEST_GPU=emulate, tests only):
//              "device memory" is host memory, and a ticket completes only after a few polls,
//              so the staging, pipelining and deferred-completion paths run on machines with
//              no GPU and are tested there.
// One DeviceCodec per connection half (the codec seed is per connection), created at regMr
// (setup: it loads the kernels, creates the stream, events and scratch, all of which may wait
// for the device) on the registering thread, then used only by the engine thread, where every
// call is one that never waits (common/data_path.h). The emulated backend declares the same
// classes for its stand-ins, so a regression that moves setup work onto the data path fails
// the CPU tests.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "codec/layout.h"
#include "common/status.h"

namespace trim::transport {

enum class DeviceMode : uint8_t { kNone, kCuda, kEmulated, kEmulatedFault, kEmulatedHang };

// Host memory the device writes packets into (pinned for kCuda).
class StagingBuffer {
 public:
  virtual ~StagingBuffer() = default;
  virtual uint8_t* data() = 0;
  virtual size_t size() const = 0;
};

class DeviceCodec {
 public:
  using Ticket = uint64_t;  // 0: the call failed, last_error() says why
  virtual ~DeviceCodec() = default;
  virtual DeviceMode mode() const = 0;
  // Rows [first_row, first_row + n_rows) of dev_msg into out + j * stride (packet j of the
  // range), byte for byte what codec::Encoder::encode_row writes; sizes[j] set before return.
  virtual Ticket encode_rows(const codec::Layout& layout, const codec::MessageId& id, const void* dev_msg,
                             uint32_t first_row, uint32_t n_rows, uint8_t* out, size_t stride, uint32_t* sizes) = 0;
  // The rows' packets (slot j at packets + j * stride, received_bytes[j] of it arrived, header
  // included; 0 = missing), validated by codec::Decoder::admit, decoded into dev_out as
  // codec::Decoder would. packets and received_bytes are staging (alloc_staging) and stay
  // unchanged until the ticket is done. At most device_max_call_packets(cfg) packets a call.
  virtual Ticket decode_rows(const codec::Layout& layout, const codec::MessageId& id, const uint8_t* packets,
                             size_t stride, const uint32_t* received_bytes, uint32_t first_row, uint32_t n_rows,
                             void* dev_out) = 0;
  // True once t's work (and everything queued before it) has finished, or failed: check
  // failed() before trusting what it wrote.
  virtual bool poll(Ticket t) = 0;
  // Polls until t is done or timeout_ns passed (close/deregMr: a bounded wait). False on timeout.
  virtual bool wait_for(Ticket t, uint64_t timeout_ns) = 0;
  // The newest ticket handed out (0: none yet): everything queued is done once it is.
  virtual Ticket last_ticket() const = 0;
  // Sticky: the device reported an error while running queued work (a faulted kernel leaves
  // the CUDA context unusable), so nothing it wrote since can be trusted.
  virtual bool failed() const = 0;
  virtual const std::string& last_error() const = 0;
};

// Setup only. The backend for `mode` (kNone: null), or an error saying why it cannot run
// here. kCuda runs on GPU `device` (the registered buffer's).
Result<std::unique_ptr<DeviceCodec>> make_device_codec(DeviceMode mode, const codec::CodecConfig& cfg,
                                                       int device = -1);

// Which device path this process can use, from NCCL_TRIM_GPU=off (gpu_off), NCCL_TRIM_TEST_GPU
// (test_gpu: 0 off, 1 emulate, 2 emulate_fault, 3 emulate_hang) and what the CUDA runtime finds (probed once);
// *why says why when kNone.
DeviceMode probe_device_mode(bool gpu_off, int test_gpu, std::string* why);

// Setup only: host memory the device of `mode` reads and writes (pinned for kCuda, portable
// to every GPU); null with *err on failure.
std::unique_ptr<StagingBuffer> alloc_device_staging(DeviceMode mode, size_t bytes, std::string* err);

// Setup only: loads the GPU codec's kernels on `device` (< 0: the calling thread's current one),
// so no launch on the data path loads a module. False with *why when it cannot.
bool prepare_gpu(int device, std::string* why);
// Setup only (regMr): whether p is GPU memory the CUDA runtime knows; *device gets its GPU.
bool gpu_memory_device(const void* p, int* device);

// Rows per encode launch: small enough that the first packets leave before a whole message is
// encoded, large enough that each launch fills the GPU (one block per row).
uint32_t device_rows_per_chunk(const codec::Layout& layout);

// The most packets one chunk of rows (device_rows_per_chunk) can have under cfg, over every
// dtype and scheme: the size of the device scratch of one call.
uint32_t device_max_call_packets(const codec::CodecConfig& cfg);

// Staging (packets plus their received sizes) that the messages in flight on a registered
// region of `region_bytes` can need at once, with room for per-message rounding; at most 1 GiB.
size_t device_staging_bytes(const codec::CodecConfig& cfg, uint64_t region_bytes);

}  // namespace trim::transport
