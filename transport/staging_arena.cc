#include "transport/staging_arena.h"

#include <fmt/format.h>

#include <algorithm>

namespace trim::transport {

namespace {
constexpr size_t kAlign = 64;  // a packet slot starts on a cache line: the DMA engine likes it
size_t round_up(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }
}  // namespace

StagingArena::StagingArena(std::unique_ptr<StagingBuffer> mem) : mem_(std::move(mem)) {
  const uintptr_t base = reinterpret_cast<uintptr_t>(mem_->data());
  const size_t skip = (kAlign - base % kAlign) % kAlign;
  if (mem_->size() > skip) free_.push_back(Span{skip, (mem_->size() - skip) / kAlign * kAlign});
}

uint8_t* StagingArena::alloc(size_t bytes) {
  const size_t need = round_up(std::max<size_t>(bytes, 1));
  for (auto it = free_.begin(); it != free_.end(); ++it) {  // first fit: few spans, in offset order
    if (it->bytes < need) continue;
    const Span got{it->offset, need};
    it->offset += need;
    it->bytes -= need;
    if (it->bytes == 0) free_.erase(it);
    used_.push_back(got);
    in_use_ += need;
    return mem_->data() + got.offset;
  }
  return nullptr;
}

void StagingArena::free(uint8_t* p) {
  const size_t offset = static_cast<size_t>(p - mem_->data());
  auto u = std::find_if(used_.begin(), used_.end(), [&](const Span& s) { return s.offset == offset; });
  if (u == used_.end()) return;
  Span s = *u;
  used_.erase(u);
  in_use_ -= s.bytes;
  auto it = std::lower_bound(free_.begin(), free_.end(), s.offset,
                             [](const Span& a, size_t off) { return a.offset < off; });
  it = free_.insert(it, s);
  // Coalesce with the neighbours.
  if (it + 1 != free_.end() && it->offset + it->bytes == (it + 1)->offset) {
    it->bytes += (it + 1)->bytes;
    free_.erase(it + 1);
  }
  if (it != free_.begin() && (it - 1)->offset + (it - 1)->bytes == it->offset) {
    (it - 1)->bytes += it->bytes;
    free_.erase(it);
  }
}

DeviceStaging::~DeviceStaging() {
  // Leases go back to their arenas before the arenas go.
  retired_.clear();
}

void DeviceStaging::add_region(uintptr_t lo, uintptr_t hi, std::unique_ptr<StagingArena> arena) {
  regions_.push_back(Region{lo, hi, std::move(arena)});
}

DeviceStaging::Region* DeviceStaging::find(const void* data) {
  const uintptr_t p = reinterpret_cast<uintptr_t>(data);
  for (Region& r : regions_) {
    if (p >= r.lo && p < r.hi) return &r;
  }
  return nullptr;
}

std::unique_ptr<StagingArena> DeviceStaging::take_region(uintptr_t lo, uintptr_t hi, bool* busy) {
  *busy = false;
  poll_retired();
  for (auto it = regions_.begin(); it != regions_.end(); ++it) {
    if (it->lo != lo || it->hi != hi) continue;
    if (it->arena->spans_in_use() > 0) {
      *busy = true;
      return nullptr;
    }
    std::unique_ptr<StagingArena> a = std::move(it->arena);
    regions_.erase(it);
    return a;
  }
  return nullptr;
}

Result<StagingLease> DeviceStaging::lease(const void* data, size_t bytes) {
  Region* r = find(data);
  if (r == nullptr) {
    return Status(Code::kInvalidArgument, "GPU memory outside every region registered on this connection");
  }
  if (bytes > r->arena->capacity()) {
    return Status(Code::kInvalidArgument,
                  fmt::format("a message needs {} bytes of staging; its region's arena has {}", bytes,
                              r->arena->capacity()));
  }
  uint8_t* p = r->arena->alloc(bytes);
  if (p == nullptr) {
    poll_retired();  // retired spans whose work is done may be what is missing
    p = r->arena->alloc(bytes);
  }
  if (p == nullptr) return StagingLease();
  return StagingLease(r->arena.get(), p, bytes);
}

void DeviceStaging::retire(StagingLease lease, DeviceCodec::Ticket t) {
  if (!lease) return;
  if (t == 0 || codec_ == nullptr || codec_->poll(t)) return;  // done: the lease frees here
  retired_.emplace_back(t, std::move(lease));
}

bool DeviceStaging::poll_retired() {
  while (!retired_.empty() && codec_->poll(retired_.front().first)) retired_.pop_front();
  return retired_.empty();
}

bool DeviceStaging::device_idle() {
  if (codec_ == nullptr) return true;
  return codec_->poll(codec_->last_ticket()) && poll_retired();
}

}  // namespace trim::transport
