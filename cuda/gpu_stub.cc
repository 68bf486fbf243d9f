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
bool prepare_device(int, std::string* err) {
  if (err != nullptr) *err = kWhy;
  return false;
}
int current_device() { return 0; }
// Nothing allocates without nvcc; run the release now.
void defer_release(std::function<void()> fn) { fn(); }
bool release_idle(int) { return true; }



PinnedBuffer::PinnedBuffer(size_t, std::string* err) {
  if (err != nullptr) *err = kWhy;
}

DeviceBuffer::DeviceBuffer(size_t, std::string* err) {
  if (err != nullptr) *err = kWhy;
}
bool DeviceBuffer::upload(const void*, size_t, size_t) { return false; }
bool DeviceBuffer::download(void*, size_t, size_t) const { return false; }
bool DeviceBuffer::copy_from(const DeviceBuffer&, size_t) { return false; }

struct GpuCodec::Impl {};

std::unique_ptr<GpuCodec> GpuCodec::create(const codec::CodecConfig&, std::string* err, int, const Options&) {
  if (err != nullptr) *err = kWhy;
  return nullptr;
}
GpuCodec::~GpuCodec() = default;

GpuCodec::Ticket GpuCodec::encode_rows_async(const codec::Layout&, const codec::MessageId&, const void*, uint32_t,
                                             uint32_t, uint8_t*, size_t, uint32_t*) {
  return 0;
}
GpuCodec::Ticket GpuCodec::decode_rows_async(const codec::Layout&, const codec::MessageId&, const uint8_t*, size_t,
                                             const uint32_t*, uint32_t, uint32_t, void*) {
  return 0;
}
bool GpuCodec::poll(Ticket) { return true; }
bool GpuCodec::wait_for(Ticket, uint64_t) { return true; }
GpuCodec::Ticket GpuCodec::last_ticket() const { return 0; }
bool GpuCodec::wait(Ticket) { return false; }
bool GpuCodec::synchronize() { return false; }

}  // namespace trim::gpu
