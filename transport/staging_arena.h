// Host staging for device-memory messages, allocated at regMr and never on the data path.
// Each registered CUDA region of a connection gets one arena of pinned memory sized for the
// messages that can be in flight on it (device_staging_bytes); a message leases a span of
// its region's arena when it starts and gives it back when it completes. A message whose
// device work may still be running when it ends (a failure, an abort) retires its lease with
// the ticket of that work: the span is reused only once the ticket is done, so the GPU never
// writes into memory handed to another message. Engine thread only (after hand-over).
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <utility>
#include <vector>

#include "common/status.h"
#include "transport/device_codec.h"

namespace trim::transport {

class StagingArena {
 public:
  explicit StagingArena(std::unique_ptr<StagingBuffer> mem);
  StagingArena(const StagingArena&) = delete;
  StagingArena& operator=(const StagingArena&) = delete;

  // A span of at least `bytes` (64-byte aligned), or nullptr when no free span is that large now.
  uint8_t* alloc(size_t bytes);
  void free(uint8_t* p);
  size_t capacity() const { return mem_->size(); }
  size_t in_use() const { return in_use_; }
  size_t spans_in_use() const { return used_.size(); }

 private:
  struct Span {
    size_t offset, bytes;
  };
  std::unique_ptr<StagingBuffer> mem_;
  std::vector<Span> free_;  // sorted by offset, coalesced
  std::vector<Span> used_;
  size_t in_use_ = 0;
};

// A span of an arena, returned on destruction (move-only).
class StagingLease {
 public:
  StagingLease() = default;
  StagingLease(StagingArena* arena, uint8_t* p, size_t bytes) : arena_(arena), p_(p), bytes_(bytes) {}
  ~StagingLease() { reset(); }
  StagingLease(StagingLease&& o) noexcept : arena_(o.arena_), p_(o.p_), bytes_(o.bytes_) { o.arena_ = nullptr; }
  StagingLease& operator=(StagingLease&& o) noexcept {
    if (this != &o) {
      reset();
      arena_ = o.arena_;
      p_ = o.p_;
      bytes_ = o.bytes_;
      o.arena_ = nullptr;
    }
    return *this;
  }
  StagingLease(const StagingLease&) = delete;
  StagingLease& operator=(const StagingLease&) = delete;

  explicit operator bool() const { return arena_ != nullptr; }
  uint8_t* data() const { return p_; }
  size_t size() const { return bytes_; }
  const StagingArena* arena() const { return arena_; }
  void reset() {
    if (arena_ != nullptr) arena_->free(p_);
    arena_ = nullptr;
  }

 private:
  StagingArena* arena_ = nullptr;
  uint8_t* p_ = nullptr;
  size_t bytes_ = 0;
};

// The device side of one connection half: its codec and its regions' arenas.
class DeviceStaging {
 public:
  ~DeviceStaging();
  DeviceCodec* codec() const { return codec_.get(); }
  void set_codec(std::unique_ptr<DeviceCodec> c) { codec_ = std::move(c); }
  // The staging of registered region [lo, hi).
  void add_region(uintptr_t lo, uintptr_t hi, std::unique_ptr<StagingArena> arena);
  // Takes region [lo, hi)'s arena back (deregMr), unless a lease on it is still out or
  // retired with work running: then null and *busy.
  std::unique_ptr<StagingArena> take_region(uintptr_t lo, uintptr_t hi, bool* busy);

  // A lease of `bytes` in the arena of the region that holds `data`: empty (not an error) when
  // that arena has no free span of the size now (retry later); an error when it never can.
  Result<StagingLease> lease(const void* data, size_t bytes);
  // Keeps `lease` until ticket `t` of the codec is done (t == 0: frees now).
  void retire(StagingLease lease, DeviceCodec::Ticket t);
  // Frees retired leases whose work is done; true when none is left.
  bool poll_retired();
  bool has_retired() const { return !retired_.empty(); }
  // Whether everything queued on the device has finished (no codec: yes). Never waits.
  bool device_idle();

 private:
  struct Region {
    uintptr_t lo, hi;
    std::unique_ptr<StagingArena> arena;
  };
  Region* find(const void* data);
  std::unique_ptr<DeviceCodec> codec_;
  std::vector<Region> regions_;
  std::deque<std::pair<DeviceCodec::Ticket, StagingLease>> retired_;
};

}  // namespace trim::transport
