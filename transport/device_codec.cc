#include "transport/device_codec.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <functional>
#include <vector>

#include "codec/decoder.h"
#include "codec/encoder.h"
#include "codec/packet.h"
#include "common/data_path.h"
#include "cuda/gpu_codec.h"

namespace trim::transport {

uint32_t device_rows_per_chunk(const codec::Layout& layout) {
  constexpr uint64_t kChunkBytes = 512 * 1024;
  const uint64_t row_bytes = std::max<uint64_t>(1, static_cast<uint64_t>(layout.row_elems()) * codec::dtype_bytes(layout.dtype()));
  return static_cast<uint32_t>(std::max<uint64_t>(1, kChunkBytes / row_bytes));
}

namespace {

// The largest count(layout) (at least 1) over every kind of message a connection can carry:
// raw bytes, and each dtype both raw and in the connection's scheme; bytes(dtype) sizes it.
template <class Bytes, class Count>
uint64_t most_over_layouts(const codec::CodecConfig& cfg, Bytes bytes, Count count) {
  uint64_t most = 1;
  for (int d = 0; d < codec::kNumDTypes; ++d) {
    const auto dtype = static_cast<codec::DType>(d);
    for (codec::Scheme scheme : {codec::Scheme::kNone, cfg.scheme}) {
      if (dtype == codec::DType::kRaw && scheme != codec::Scheme::kNone) continue;
      Result<codec::Layout> l = codec::Layout::make(cfg, dtype, scheme, bytes(dtype));
      if (l) most = std::max<uint64_t>(most, count(*l));
    }
  }
  return most;
}

}  // namespace

uint32_t device_max_call_packets(const codec::CodecConfig& cfg) {
  // Two whole rows and a raw tail: every kind of row a chunk can hold.
  const auto two_rows = [&](codec::DType d) { return 2 * static_cast<uint64_t>(cfg.row_elems) * codec::dtype_bytes(d) + 1; };
  const auto chunk = [](const codec::Layout& l) {
    return static_cast<uint64_t>(device_rows_per_chunk(l)) * l.max_packets_per_row() + 1;
  };
  return static_cast<uint32_t>(most_over_layouts(cfg, two_rows, chunk));
}

size_t device_staging_bytes(const codec::CodecConfig& cfg, uint64_t region_bytes) {
  const auto region = [&](codec::DType) { return std::max<uint64_t>(region_bytes, 1); };
  uint64_t packets = most_over_layouts(cfg, region, [](const codec::Layout& l) { return l.packets(); });
  // Messages in flight split the region; each may round up by a packet per row (plus its tail):
  // 32 messages' worth of rounding, then a quarter more against fragmentation.
  packets += 32 * 3;
  const uint64_t bytes = packets * (cfg.packet_bytes + sizeof(uint32_t));
  // A huge registration (a user buffer of gigabytes) must not pin as much again: past the cap
  // a message that does not fit fails with an error naming both sizes (DeviceStaging::lease).
  constexpr uint64_t kMaxArenaBytes = uint64_t{1} << 30;
  return static_cast<size_t>(std::min(bytes + bytes / 4, kMaxArenaBytes));
}

namespace {

// ---- kCuda: cuda/gpu_codec.h ----

class PinnedStaging final : public StagingBuffer {
 public:
  explicit PinnedStaging(gpu::PinnedBuffer b) : b_(std::move(b)) {}
  uint8_t* data() override { return b_.data(); }
  size_t size() const override { return b_.size(); }

 private:
  gpu::PinnedBuffer b_;
};

class CudaDeviceCodec final : public DeviceCodec {
 public:
  explicit CudaDeviceCodec(std::unique_ptr<gpu::GpuCodec> g) : g_(std::move(g)) {}
  DeviceMode mode() const override { return DeviceMode::kCuda; }
  Ticket encode_rows(const codec::Layout& layout, const codec::MessageId& id, const void* dev_msg, uint32_t first_row,
                     uint32_t n_rows, uint8_t* out, size_t stride, uint32_t* sizes) override {
    return g_->encode_rows_async(layout, id, dev_msg, first_row, n_rows, out, stride, sizes);
  }
  Ticket decode_rows(const codec::Layout& layout, const codec::MessageId& id, const uint8_t* packets, size_t stride,
                     const uint32_t* received_bytes, uint32_t first_row, uint32_t n_rows, void* dev_out) override {
    return g_->decode_rows_async(layout, id, packets, stride, received_bytes, first_row, n_rows, dev_out);
  }
  // GpuCodec::poll counts faulted work as over (the caller would spin forever otherwise) and
  // records the fault in its sticky failed().
  bool poll(Ticket t) override { return g_->poll(t); }
  bool wait_for(Ticket t, uint64_t timeout_ns) override { return g_->wait_for(t, timeout_ns); }
  Ticket last_ticket() const override { return g_->last_ticket(); }
  bool failed() const override { return g_->failed(); }
  const std::string& last_error() const override { return g_->last_error(); }

 private:
  std::unique_ptr<gpu::GpuCodec> g_;
};

// ---- kEmulated: the CPU codec, deferred ----

class VectorStaging final : public StagingBuffer {
 public:
  explicit VectorStaging(size_t bytes) : v_(bytes) {}
  uint8_t* data() override { return v_.data(); }
  size_t size() const override { return v_.size(); }

 private:
  std::vector<uint8_t> v_;
};

// Work runs in order, each item only after kPollsPerItem polls, as a GPU stream would run it
// some time after the launch. The output of encode is poisoned until then, so a packet sent
// before its ticket completed is caught by the receiver's CRC check (and by the tests). Each
// operation declares the class of the CUDA calls it stands for (common/data_path.h): with
// enforcement on, one that may wait, made on the data path, fails as the real one would hang.
class EmulatedDeviceCodec final : public DeviceCodec {
 public:
  EmulatedDeviceCodec(const codec::CodecConfig& cfg, DeviceMode mode)
      : cfg_(cfg), enc_(cfg), dec_(cfg), mode_(mode), fault_(mode == DeviceMode::kEmulatedFault) {}
  DeviceMode mode() const override { return mode_; }

  Ticket encode_rows(const codec::Layout& layout, const codec::MessageId& id, const void* dev_msg, uint32_t first_row,
                     uint32_t n_rows, uint8_t* out, size_t stride, uint32_t* sizes) override {
    if (!data_path::allow(data_path::CallClass::kNeverWaits, "encode launch + cudaMemcpyAsync (emulated)")) return 0;
    if (first_row + static_cast<uint64_t>(n_rows) > layout.rows() || stride < cfg_.packet_bytes) {
      return fail("encode_rows: rows or stride out of range");
    }
    if (gpu::GpuCodec::packets_in_rows(layout, first_row, n_rows) > max_call_packets_) {
      return fail("encode_rows: more packets in one call than the scratch sized at setup");
    }
    // Encode now into a private buffer (sizes are needed at once), publish on completion.
    const uint64_t total = gpu::GpuCodec::packets_in_rows(layout, first_row, n_rows);
    auto pkts = std::make_shared<std::vector<uint8_t>>(total * stride);
    uint64_t j = 0;
    for (uint32_t r = first_row; r < first_row + n_rows; ++r) {
      Result<uint32_t> n = enc_.encode_row(layout, id, dev_msg, r, pkts->data() + j * stride, stride, sizes + j);
      if (!n) return fail(n.status().message());
      j += *n;
    }
    std::memset(out, 0xA5, total * stride);
    return enqueue([pkts, out] { std::memcpy(out, pkts->data(), pkts->size()); });
  }

  Ticket decode_rows(const codec::Layout& layout, const codec::MessageId& id, const uint8_t* packets, size_t stride,
                     const uint32_t* received_bytes, uint32_t first_row, uint32_t n_rows, void* dev_out) override {
    if (!data_path::allow(data_path::CallClass::kNeverWaits, "cudaMemcpyAsync + decode launch (emulated)")) return 0;
    if (first_row + static_cast<uint64_t>(n_rows) > layout.rows()) return fail("decode_rows: rows out of range");
    const uint64_t total = gpu::GpuCodec::packets_in_rows(layout, first_row, n_rows);
    if (total > max_call_packets_) return fail("decode_rows: more packets in one call than the scratch sized at setup");
    // The GPU reads its inputs when it runs: keep copies, as the caller may reuse them after.
    auto in = std::make_shared<std::vector<uint8_t>>(packets, packets + total * stride);
    auto got = std::make_shared<std::vector<uint32_t>>(received_bytes, received_bytes + total);
    return enqueue([this, layout, id, in, got, stride, first_row, n_rows, dev_out] {
      if (!dec_.begin(layout, id, dev_out).is_ok()) return;
      for (size_t j = 0; j < got->size(); ++j) {
        if ((*got)[j] < codec::kHeaderBytes) continue;
        codec::ParsedPacket p;
        if (codec::parse_packet(in->data() + j * stride, (*got)[j], &p) == codec::PacketError::kOk) (void)dec_.add(p);
      }
      for (uint32_t r = first_row; r < first_row + n_rows; ++r) dec_.finish_row(r);
    });
  }

  bool poll(Ticket t) override {
    (void)data_path::allow(data_path::CallClass::kNeverWaits, "cudaEventQuery (emulated)");
    while (!queue_.empty() && queue_.front().ticket <= t) {
      if (mode_ == DeviceMode::kEmulatedHang) return false;  // a wedged kernel: nothing ever completes
      Item& it = queue_.front();
      if (--it.polls_left > 0) return false;
      if (fault_ && it.ticket >= 2 && !failed_) {
        failed_ = true;  // like a faulted kernel: no output, and the context is gone
        error_ = "emulated device fault (NCCL_TRIM_TEST_GPU=emulate_fault)";
      }
      if (!failed_) it.work();
      queue_.pop_front();
    }
    return true;
  }
  bool wait_for(Ticket t, uint64_t timeout_ns) override {
    // Bounded like the real one: each poll advances the emulated stream.
    for (uint64_t waited = 0; !poll(t); waited += 100'000) {
      if (waited >= timeout_ns) return false;
    }
    return true;
  }
  Ticket last_ticket() const override { return last_; }
  bool failed() const override { return failed_; }
  const std::string& last_error() const override { return error_; }

 private:
  static constexpr int kPollsPerItem = 3;
  struct Item {
    Ticket ticket;
    int polls_left;
    std::function<void()> work;
  };
  Ticket enqueue(std::function<void()> work) {
    queue_.push_back(Item{++last_, kPollsPerItem, std::move(work)});
    return last_;
  }
  Ticket fail(const std::string& why) {
    error_ = why;
    return 0;
  }

  codec::CodecConfig cfg_;
  codec::Encoder enc_;
  codec::Decoder dec_;
  uint64_t max_call_packets_ = device_max_call_packets(cfg_);
  std::deque<Item> queue_;
  Ticket last_ = 0;
  std::string error_;
  DeviceMode mode_;
  bool fault_ = false;
  bool failed_ = false;
};

}  // namespace

bool prepare_gpu(int device, std::string* why) { return gpu::prepare_device(device, why); }
bool gpu_memory_device(const void* p, int* device) { return gpu::is_device_pointer(p, device); }

std::unique_ptr<StagingBuffer> alloc_device_staging(DeviceMode mode, size_t bytes, std::string* err) {
  if (mode == DeviceMode::kCuda) {
    gpu::PinnedBuffer b(bytes, err);
    if (b.data() == nullptr) return nullptr;
    return std::make_unique<PinnedStaging>(std::move(b));
  }
  // The emulated device stands in for cudaHostAlloc: setup only, as the real one.
  if (!data_path::allow(data_path::CallClass::kMayWait, "cudaHostAlloc (emulated staging)")) {
    if (err != nullptr) *err = "staging allocated on the data path: " + data_path::last_violation();
    return nullptr;
  }
  return std::make_unique<VectorStaging>(bytes);
}

Result<std::unique_ptr<DeviceCodec>> make_device_codec(DeviceMode mode, const codec::CodecConfig& cfg,
                                                       int device) {
  switch (mode) {
    case DeviceMode::kNone: return std::unique_ptr<DeviceCodec>();
    case DeviceMode::kEmulated:
    case DeviceMode::kEmulatedFault:
    case DeviceMode::kEmulatedHang:
      // Stands for stream, event and scratch creation and the kernels' module load.
      if (!data_path::allow(data_path::CallClass::kMayWait, "GPU codec creation (emulated)")) {
        return Status(Code::kInternal, "GPU codec created on the data path: " + data_path::last_violation());
      }
      return std::unique_ptr<DeviceCodec>(std::make_unique<EmulatedDeviceCodec>(cfg, mode));
    case DeviceMode::kCuda: {
      std::string err;
      gpu::GpuCodec::Options opt;
      opt.trusted = true;
      opt.max_call_packets = device_max_call_packets(cfg);
      // Tickets in flight per connection: up to 32 messages of a few chunks each.
      opt.events = 512;
      std::unique_ptr<gpu::GpuCodec> g = gpu::GpuCodec::create(cfg, &err, device, opt);
      if (!g) return Status(Code::kUnavailable, fmt::format("GPU codec: {}", err));
      return std::unique_ptr<DeviceCodec>(std::make_unique<CudaDeviceCodec>(std::move(g)));
    }
  }
  return Status(Code::kInternal, "make_device_codec: unknown mode");
}

DeviceMode probe_device_mode(bool gpu_off, int test_gpu, std::string* why) {
  if (test_gpu == 1) return DeviceMode::kEmulated;
  if (test_gpu == 2) return DeviceMode::kEmulatedFault;
  if (test_gpu == 3) return DeviceMode::kEmulatedHang;
  if (gpu_off) {
    if (why != nullptr) *why = "NCCL_TRIM_GPU=off";
    return DeviceMode::kNone;
  }
  std::string reason;
  if (gpu::gpu_available(&reason)) return DeviceMode::kCuda;
  if (why != nullptr) *why = reason;
  return DeviceMode::kNone;
}

}  // namespace trim::transport
