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
#include "cuda/gpu_codec.h"

namespace trim::transport {

uint32_t device_rows_per_chunk(const codec::Layout& layout) {
  constexpr uint64_t kChunkBytes = 512 * 1024;
  const uint64_t row_bytes = std::max<uint64_t>(1, static_cast<uint64_t>(layout.row_elems()) * codec::dtype_bytes(layout.dtype()));
  return static_cast<uint32_t>(std::max<uint64_t>(1, kChunkBytes / row_bytes));
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
  std::unique_ptr<StagingBuffer> alloc_staging(size_t bytes, std::string* err) override {
    gpu::PinnedBuffer b(bytes, err);
    if (b.data() == nullptr) return nullptr;
    return std::make_unique<PinnedStaging>(std::move(b));
  }
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
// before its ticket completed is caught by the receiver's CRC check (and by the tests).
class EmulatedDeviceCodec final : public DeviceCodec {
 public:
  EmulatedDeviceCodec(const codec::CodecConfig& cfg, bool fault) : cfg_(cfg), enc_(cfg), dec_(cfg), fault_(fault) {}
  DeviceMode mode() const override { return fault_ ? DeviceMode::kEmulatedFault : DeviceMode::kEmulated; }
  std::unique_ptr<StagingBuffer> alloc_staging(size_t bytes, std::string*) override {
    return std::make_unique<VectorStaging>(bytes);
  }

  Ticket encode_rows(const codec::Layout& layout, const codec::MessageId& id, const void* dev_msg, uint32_t first_row,
                     uint32_t n_rows, uint8_t* out, size_t stride, uint32_t* sizes) override {
    if (first_row + static_cast<uint64_t>(n_rows) > layout.rows() || stride < cfg_.packet_bytes) {
      return fail("encode_rows: rows or stride out of range");
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
    if (first_row + static_cast<uint64_t>(n_rows) > layout.rows()) return fail("decode_rows: rows out of range");
    const uint64_t total = gpu::GpuCodec::packets_in_rows(layout, first_row, n_rows);
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
    while (!queue_.empty() && queue_.front().ticket <= t) {
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
  std::deque<Item> queue_;
  Ticket last_ = 0;
  std::string error_;
  bool fault_ = false;
  bool failed_ = false;
};

}  // namespace

Result<std::unique_ptr<DeviceCodec>> make_device_codec(DeviceMode mode, const codec::CodecConfig& cfg,
                                                       const void* buffer) {
  switch (mode) {
    case DeviceMode::kNone: return std::unique_ptr<DeviceCodec>();
    case DeviceMode::kEmulated:
    case DeviceMode::kEmulatedFault:
      return std::unique_ptr<DeviceCodec>(std::make_unique<EmulatedDeviceCodec>(cfg, mode == DeviceMode::kEmulatedFault));
    case DeviceMode::kCuda: {
      std::string err;
      int device = -1;
      if (buffer != nullptr && !gpu::is_device_pointer(buffer, &device)) device = -1;
      std::unique_ptr<gpu::GpuCodec> g = gpu::GpuCodec::create(cfg, &err, device);
      if (!g) return Status(Code::kUnavailable, fmt::format("GPU codec: {}", err));
      return std::unique_ptr<DeviceCodec>(std::make_unique<CudaDeviceCodec>(std::move(g)));
    }
  }
  return Status(Code::kInternal, "make_device_codec: unknown mode");
}

DeviceMode probe_device_mode(bool gpu_off, int test_gpu, std::string* why) {
  if (test_gpu == 1) return DeviceMode::kEmulated;
  if (test_gpu == 2) return DeviceMode::kEmulatedFault;
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
