// trim::net memory registration. The plugin advertises host memory only (NCCL stages GPU data
// through pinned host buffers with its own kernel), and sockets read host memory as it is, so
// registration records the region; deregMr makes sure the engine no longer uses it.
#include "common/log.h"
#include "transport/net_internal.h"

namespace trim::net {

using detail::core_of;
using detail::null_argument;

Result<MemHandle*> reg_mr(Comm* comm, const MemRegion& region) {
  if (comm == nullptr) return null_argument("reg_mr", "comm");
  if (region.data == nullptr && region.bytes != 0) return null_argument("reg_mr", "data");
  if (region.type == MemType::kCuda) {
    return Status(Code::kInvalidArgument,
                  "reg_mr: NCCL_PTR_CUDA memory, but this plugin advertises NCCL_PTR_HOST only (NCCL stages GPU "
                  "data through host memory)");
  }
  if (region.type != MemType::kHost) return Status(Code::kInvalidArgument, "reg_mr: unknown memory type");
  auto m = std::make_unique<MemHandle>();
  m->region = region;
  return m.release();
}

Status dereg_mr(Comm* comm, MemHandle* mem) {
  if (comm == nullptr) return null_argument("dereg_mr", "comm");
  if (mem == nullptr) return null_argument("dereg_mr", "memory handle");
  std::unique_ptr<MemHandle> owned(mem);
  // NCCL frees the buffer right after this call, even with operations on it still posted
  // (abort): make sure the engine is done with it first.
  CommCore* core = core_of(comm);
  if (core == nullptr || mem->region.bytes == 0) return Status::ok();
  const uintptr_t lo = reinterpret_cast<uintptr_t>(mem->region.data);
  const uint32_t found = detail::codec_tasks_in_flight(*core->conn);
  core->engine->release_memory(core->conn.get(), lo, lo + mem->region.bytes);
  // A codec task of an operation on the region may still be running (release_memory failed
  // such operations, cancelling their tasks): NCCL frees the region next.
  detail::wait_for_codec(*comm->ctx(), *core->conn, "dereg_mr", found);
  return Status::ok();
}

}  // namespace trim::net
