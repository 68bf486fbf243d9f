// Which traffic classes carry data that the nccl_trim comm hook rotated itself. The hook
// declares its class (plugin/hook_api.cc, nccl_trim_hook_declare) before it creates its process
// group; only then does a communicator tagged with NCCL_TRIM_HOOK_TRAFFIC_CLASS send as scheme
// `rotated` (sign heads, no transform here). A tag alone proves nothing: a user's own collective
// on that class, or another program that uses the class for its QoS, would send data that is
// not rotated, and `rotated` on such data loses its accuracy under trimming without any error.
// Undeclared, the data goes as per-hop rht: accurate whatever it is (rotating rotated data again
// costs time, never accuracy).
#include <fmt/format.h>

#include <array>
#include <atomic>

#include "common/log.h"
#include "transport/net_internal.h"

namespace trim::net {

namespace {

// Per traffic class, the declared rows' log2, or -1. Written by declare (any thread, rarely),
// read at each connect.
struct Declarations {
  std::array<std::atomic<int>, 256> row_log2;
  std::atomic<bool> warned{false};
  Declarations() {
    for (auto& r : row_log2) r.store(-1, std::memory_order_relaxed);
  }
};

Declarations& declarations() {
  static Declarations* d = new Declarations();  // never destroyed: engine threads may outlive statics
  return *d;
}

}  // namespace

Status declare_rotated(int traffic_class, int row_log2) {
  Result<Params> p = process_params();
  if (!p) return p.status();
  const int ours = static_cast<int>(p.value().hook_traffic_class);
  if (traffic_class != ours) {
    return Status(Code::kBadConfig,
                  fmt::format("the hook declares traffic class {} rotated, but the plugin's "
                              "NCCL_TRIM_HOOK_TRAFFIC_CLASS is {}: set the variable once, before NCCL loads the plugin, "
                              "the same for the hook and the plugin",
                              traffic_class, ours));
  }
  const uint64_t rows = p.value().row_elems;
  if (row_log2 < 0 || row_log2 > 30 || (uint64_t{1} << row_log2) != rows) {
    return Status(Code::kInvalidArgument,
                  fmt::format("the hook rotates rows of 2^{} elements (row_log2={}), but the plugin's "
                              "NCCL_TRIM_ROW_ELEMS is {}: its sign heads would be scaled over rows the rotation did "
                              "not spread, and trimmed values estimated badly; pass row_log2 such that 2^row_log2 == "
                              "NCCL_TRIM_ROW_ELEMS (or set NCCL_TRIM_ROW_ELEMS={})",
                              row_log2, row_log2, rows, row_log2 >= 3 && row_log2 <= 15 ? (1 << row_log2) : 32768));
  }
  declarations().row_log2[static_cast<size_t>(traffic_class)].store(row_log2, std::memory_order_release);
  TRIM_INFO("NET/Trim: the nccl_trim comm hook declared traffic class {} rotated (rows of {} elements): its "
            "communicators send as scheme rotated from now on",
            traffic_class, rows);
  return Status::ok();
}

int detail::declared_row_log2(int traffic_class) {
  if (traffic_class < 0 || traffic_class > 255) return -1;
  return declarations().row_log2[static_cast<size_t>(traffic_class)].load(std::memory_order_acquire);
}

void detail::note_undeclared(const Context& ctx, int traffic_class, int declared_log2) {
  transport::global_stats().hook_undeclared_conns.fetch_add(1, std::memory_order_relaxed);
  if (declarations().warned.exchange(true, std::memory_order_relaxed)) return;
  TRIM_WARN("NET/Trim: comm {:#x} is tagged with the comm hook's traffic class {} (NCCL_TRIM_HOOK_TRAFFIC_CLASS), {}: "
            "its data goes as per-hop rht (accurate, whatever it is), not as rotated. Said once; counted in "
            "hook_undeclared_conns",
            ctx.comm_id, traffic_class,
            declared_log2 < 0 ? std::string("but no nccl_trim hook in this process declared that class rotated "
                                            "(the hook does so before it creates its group)")
                              : fmt::format("but the hook declared rows of 2^{} elements and this communicator "
                                            "encodes rows of {}",
                                            declared_log2, ctx.codec.row_elems));
}

void forget_rotated_declarations_for_tests() {
  for (auto& r : declarations().row_log2) r.store(-1, std::memory_order_relaxed);
  declarations().warned.store(false, std::memory_order_relaxed);
}

}  // namespace trim::net
