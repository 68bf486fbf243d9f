// trim::net memory registration: host memory needs nothing (sockets read it as it is); GPU
// memory gets its device side at regMr — the connection's codec and a pinned staging arena per
// region, made here, off the data path — and deregMr takes it back after a bounded wait for
// the device work that may still use it.
#include <fmt/format.h>

#include "common/log.h"
#include "transport/net_internal.h"
#include "transport/staging_arena.h"

namespace trim::net {

namespace {

using detail::core_of;
using detail::wait_for_device;
using detail::null_argument;

// The device side of a CUDA region, made here on the registering thread (setup: kernels
// loaded, stream, events, scratch and pinned staging allocated, all of which may wait for the
// device) and handed to the engine, so the data path never makes any of it.
Status attach_device_region(Comm* comm, CommCore* core, const MemRegion& region, int device) {
  const transport::DeviceMode mode = comm->ctx()->device_mode;
  if (core->device_attached && device != core->device) {
    return Status(Code::kInvalidArgument,
                  fmt::format("reg_mr: GPU memory on device {}, but this connection's is on device {}", device,
                              core->device));
  }
  const transport::ConnParams& cp = core->conn->send ? core->conn->send->params() : core->conn->recv->params();
  std::unique_ptr<transport::DeviceCodec> codec;
  if (!core->device_attached) {
    Result<std::unique_ptr<transport::DeviceCodec>> d = transport::make_device_codec(mode, cp.codec, device);
    if (!d) return d.status();
    codec = std::move(d).value();
  }
  const size_t bytes = transport::device_staging_bytes(cp.codec, region.bytes);
  std::string err;
  std::unique_ptr<transport::StagingBuffer> mem = transport::alloc_device_staging(mode, bytes, &err);
  if (!mem) return Status(Code::kSystem, fmt::format("reg_mr: {} bytes of staging: {}", bytes, err));
  const uintptr_t lo = reinterpret_cast<uintptr_t>(region.data);
  core->engine->attach_device(core->conn.get(), std::move(codec), lo, lo + region.bytes,
                              std::make_unique<transport::StagingArena>(std::move(mem)));
  core->device_attached = true;
  core->device = device;
  TRIM_DEBUG("NET/Trim: GPU region of {} bytes on device {}: {} bytes of staging", region.bytes, device, bytes);
  return Status::ok();
}

}  // namespace

// ---- Memory registration: host memory needs no pinning for sockets ----

Result<MemHandle*> reg_mr(Comm* comm, const MemRegion& region) {
  if (comm == nullptr) return null_argument("reg_mr", "comm");
  if (region.data == nullptr && region.bytes != 0) return null_argument("reg_mr", "data");
  int device = -1;
  if (region.type == MemType::kCuda) {
    const transport::DeviceMode mode = comm->ctx()->device_mode;
    if (mode == transport::DeviceMode::kNone) {
      return Status(Code::kInvalidArgument,
                    "reg_mr: NCCL_PTR_CUDA memory, but the GPU path is off (ptrSupport = NCCL_PTR_HOST)");
    }
    if (mode == transport::DeviceMode::kCuda && region.bytes != 0 && !transport::gpu_memory_device(region.data, &device)) {
      return Status(Code::kInvalidArgument, "reg_mr: NCCL_PTR_CUDA memory the CUDA runtime does not know as device memory");
    }
    CommCore* core = core_of(comm);
    if (core != nullptr && region.bytes != 0) TRIM_RETURN_IF_ERROR(attach_device_region(comm, core, region, device));
  } else if (region.type != MemType::kHost) {
    return Status(Code::kInvalidArgument, "reg_mr: unknown memory type");
  }
  auto m = std::make_unique<MemHandle>();
  m->region = region;
  return m.release();
}

Status dereg_mr(Comm* comm, MemHandle* mem) {
  if (comm == nullptr) return null_argument("dereg_mr", "comm");
  if (mem == nullptr) return null_argument("dereg_mr", "memory handle");
  std::unique_ptr<MemHandle> owned(mem);
  // NCCL frees the buffer right after this call, even with operations on it still posted (abort):
  // make sure the engine is done with it first. For GPU memory that includes our kernels: wait
  // for them, bounded, and take the region's staging back.
  CommCore* core = core_of(comm);
  if (core == nullptr || mem->region.bytes == 0) return Status::ok();
  const uintptr_t lo = reinterpret_cast<uintptr_t>(mem->region.data);
  const bool device = mem->region.type == MemType::kCuda && core->device_attached;
  const bool released = wait_for_device(*comm->ctx(), [&] {
    bool busy = false;
    std::unique_ptr<transport::StagingArena> arena;  // if handed back, freed here (setup thread)
    core->engine->release_memory(core->conn.get(), lo, lo + mem->region.bytes, &busy, &arena);
    return !device || !busy;
  });
  if (released) return Status::ok();
  return Status(Code::kSystem, fmt::format("dereg_mr: GPU work on this region still running after {} ms "
                                           "(NCCL_TRIM_TIMEOUT_MS); its staging stays allocated",
                                           comm->ctx()->params.timeout_ms));
}

}  // namespace trim::net
