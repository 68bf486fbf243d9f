// The GPU codec when nvcc was not found at build time: every probe says so, nothing allocates.
#include "cuda/gpu_codec.h"

namespace trim::gpu {
namespace {
constexpr const char* kWhy = "built without nvcc";
}  // namespace

bool gpu_available(std::string* why) {
  if (why != nullptr) *why = kWhy;
  return false;
}

bool is_device_pointer(const void*, int*) { return false; }
std::string gpu_device_name() { return ""; }

PinnedBuffer::PinnedBuffer(size_t, std::string* err) {
  if (err != nullptr) *err = kWhy;
}
PinnedBuffer::~PinnedBuffer() = default;
PinnedBuffer::PinnedBuffer(PinnedBuffer&&) noexcept {}
PinnedBuffer& PinnedBuffer::operator=(PinnedBuffer&&) noexcept { return *this; }

DeviceBuffer::DeviceBuffer(size_t, std::string* err) {
  if (err != nullptr) *err = kWhy;
}
DeviceBuffer::~DeviceBuffer() = default;
DeviceBuffer::DeviceBuffer(DeviceBuffer&&) noexcept {}
DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&&) noexcept { return *this; }
bool DeviceBuffer::upload(const void*, size_t, size_t) { return false; }
bool DeviceBuffer::download(void*, size_t, size_t) const { return false; }
bool DeviceBuffer::copy_from(const DeviceBuffer&, size_t) { return false; }

struct GpuCodec::Impl {};

std::unique_ptr<GpuCodec> GpuCodec::create(const codec::CodecConfig&, std::string* err, int) {
  if (err != nullptr) *err = kWhy;
  return nullptr;
}
GpuCodec::~GpuCodec() = default;

uint64_t GpuCodec::packets_in_rows(const codec::Layout& layout, uint32_t first_row, uint32_t n_rows) {
  uint64_t n = 0;
  for (uint32_t r = first_row; r < first_row + n_rows && r < layout.rows(); ++r) n += layout.row(r).packets;
  return n;
}

GpuCodec::Ticket GpuCodec::encode_rows_async(const codec::Layout&, const codec::MessageId&, const void*, uint32_t,
                                             uint32_t, uint8_t*, size_t, uint32_t*) {
  return 0;
}
GpuCodec::Ticket GpuCodec::decode_rows_async(const codec::Layout&, const codec::MessageId&, const uint8_t*, size_t,
                                             const uint32_t*, uint32_t, uint32_t, void*) {
  return 0;
}
bool GpuCodec::poll(Ticket) { return true; }
bool GpuCodec::wait(Ticket) { return false; }
bool GpuCodec::synchronize() { return false; }

}  // namespace trim::gpu
