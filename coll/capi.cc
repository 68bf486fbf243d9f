// The C ABI of coll/trim_coll.h over coll::Comm: argument checks, error codes and the per-thread
// error text. Nothing here knows the ring.
#include <cstring>
#include <memory>
#include <string>

#include "coll/comm.h"
#include "coll/trim_coll.h"

struct trim_coll_comm {
  std::unique_ptr<trim::coll::Comm> comm;
};

namespace {

using trim::Code;
using trim::Status;
using trim::coll::Comm;
using trim::coll::DType;
using trim::coll::Fail;
using trim::coll::Outcome;
using trim::coll::RedOp;

thread_local std::string t_error;

int fail(int code, const std::string& text) {
  t_error = text;
  return code;
}

int report(const Outcome& o) {
  if (o.ok()) return TRIM_COLL_OK;
  return fail(-static_cast<int>(o.fail), o.status.message());
}

int64_t deadline(int64_t timeout_ms) {
  // Negative or zero: no deadline worth the name (a day), as a blocking call with no timeout.
  const int64_t ms = timeout_ms > 0 ? timeout_ms : 86400000;
  return trim::coll::mono_ns() + ms * 1000000;
}

bool check_types(int dtype, int op, const char* call) {
  if (!trim::coll::valid_dtype(dtype)) {
    fail(TRIM_COLL_EINVAL, std::string(call) + ": unknown dtype " + std::to_string(dtype));
    return false;
  }
  if (!trim::coll::valid_op(op)) {
    fail(TRIM_COLL_EINVAL, std::string(call) + ": unknown reduction op " + std::to_string(op));
    return false;
  }
  return true;
}

// Every entry point turns a C++ exception (allocation failure) into an error: nothing may
// unwind into a C caller.
template <typename F>
int guarded(const char* call, F f) {
  try {
    return f();
  } catch (const std::exception& e) {
    return fail(TRIM_COLL_EINVAL, std::string(call) + ": " + e.what());
  }
}

}  // namespace

extern "C" {

int trim_coll_abi_version(void) { return TRIM_COLL_ABI_VERSION; }

const char* trim_coll_last_error(void) { return t_error.c_str(); }

int trim_coll_create(const trim_coll_config* config, trim_coll_comm** comm, void* handle) {
  return guarded("trim_coll_create", [&]() -> int {
    if (config == nullptr || comm == nullptr || handle == nullptr) {
      return fail(TRIM_COLL_EINVAL, "trim_coll_create: null argument");
    }
    *comm = nullptr;
    if (config->abi_version != TRIM_COLL_ABI_VERSION) {
      return fail(TRIM_COLL_EINVAL, "trim_coll_create: the caller speaks ABI " + std::to_string(config->abi_version) +
                                        ", this library " + std::to_string(TRIM_COLL_ABI_VERSION));
    }
    if (config->plugin_path == nullptr || config->plugin_path[0] == '\0') {
      return fail(TRIM_COLL_EINVAL, "trim_coll_create: no plugin path");
    }
    trim::coll::CommConfig c;
    c.plugin_path = config->plugin_path;
    c.rank = config->rank;
    c.nranks = config->nranks;
    c.comm_id = config->comm_id;
    c.traffic_class = config->traffic_class;
    c.direct_recv = true;  // the PyTorch backend: allgather and broadcast receive into the tensor
    switch (config->net_api) {
      case 0:
      case 12: c.api = trim::coll::Api::kV12; break;
      case 11: c.api = trim::coll::Api::kV11; break;
      case 10: c.api = trim::coll::Api::kV10; break;
      case 9: c.api = trim::coll::Api::kV9; break;
      case 8: c.api = trim::coll::Api::kV8; break;
      default: return fail(TRIM_COLL_EINVAL, "trim_coll_create: net_api " + std::to_string(config->net_api) +
                                                 " (allowed: 0 = newest, 8, 9, 10, 11, 12)");
    }
    if (c.traffic_class >= 0 && c.api != trim::coll::Api::kV11 && c.api != trim::coll::Api::kV12) {
      return fail(TRIM_COLL_EINVAL,
                  "trim_coll_create: a traffic class needs net API v11 or v12 (per-communicator init)");
    }
    c.profiler = config->profiler != 0;
    c.check_ops = config->check_ops != 0;
    c.log_level = config->log_level;
    if (config->name != nullptr) c.name = config->name;
    std::unique_ptr<Comm> made;
    Outcome o = Comm::create(c, &made);
    if (!o.ok()) return report(o);
    std::memcpy(handle, made->handle().data(), TRIM_COLL_HANDLE_BYTES);
    *comm = new trim_coll_comm{std::move(made)};
    return TRIM_COLL_OK;
  });
}

int trim_coll_connect(trim_coll_comm* comm, const void* next_handle, int64_t timeout_ms) {
  return guarded("trim_coll_connect", [&]() -> int {
    if (comm == nullptr) return fail(TRIM_COLL_EINVAL, "trim_coll_connect: null communicator");
    if (next_handle == nullptr && comm->comm->config().nranks > 1) {
      return fail(TRIM_COLL_EINVAL, "trim_coll_connect: null handle");
    }
    std::string h = next_handle == nullptr ? std::string(TRIM_COLL_HANDLE_BYTES, '\0')
                                           : std::string(static_cast<const char*>(next_handle), TRIM_COLL_HANDLE_BYTES);
    return report(comm->comm->connect(h, deadline(timeout_ms)));
  });
}

int trim_coll_all_reduce(trim_coll_comm* comm, void* data, uint64_t count, int dtype, int op, int64_t timeout_ms) {
  return guarded("trim_coll_all_reduce", [&]() -> int {
    if (comm == nullptr) return fail(TRIM_COLL_EINVAL, "trim_coll_all_reduce: null communicator");
    if (!check_types(dtype, op, "trim_coll_all_reduce")) return TRIM_COLL_EINVAL;
    return report(comm->comm->all_reduce(data, count, static_cast<DType>(dtype), static_cast<RedOp>(op),
                                         deadline(timeout_ms)));
  });
}

int trim_coll_broadcast(trim_coll_comm* comm, void* data, uint64_t bytes, int root, int64_t timeout_ms) {
  return guarded("trim_coll_broadcast", [&]() -> int {
    if (comm == nullptr) return fail(TRIM_COLL_EINVAL, "trim_coll_broadcast: null communicator");
    return report(comm->comm->broadcast(data, bytes, root, deadline(timeout_ms)));
  });
}

int trim_coll_all_gather(trim_coll_comm* comm, const void* in, void* out, uint64_t bytes_per_rank,
                         int64_t timeout_ms) {
  return guarded("trim_coll_all_gather", [&]() -> int {
    if (comm == nullptr) return fail(TRIM_COLL_EINVAL, "trim_coll_all_gather: null communicator");
    return report(comm->comm->all_gather(in, out, bytes_per_rank, deadline(timeout_ms)));
  });
}

int trim_coll_reduce_scatter(trim_coll_comm* comm, const void* in, void* out, uint64_t count_per_rank, int dtype,
                             int op, int64_t timeout_ms) {
  return guarded("trim_coll_reduce_scatter", [&]() -> int {
    if (comm == nullptr) return fail(TRIM_COLL_EINVAL, "trim_coll_reduce_scatter: null communicator");
    if (!check_types(dtype, op, "trim_coll_reduce_scatter")) return TRIM_COLL_EINVAL;
    return report(comm->comm->reduce_scatter(in, out, count_per_rank, static_cast<DType>(dtype), static_cast<RedOp>(op),
                                             deadline(timeout_ms)));
  });
}

int trim_coll_barrier(trim_coll_comm* comm, int64_t timeout_ms) {
  return guarded("trim_coll_barrier", [&]() -> int {
    if (comm == nullptr) return fail(TRIM_COLL_EINVAL, "trim_coll_barrier: null communicator");
    return report(comm->comm->barrier(deadline(timeout_ms)));
  });
}

int trim_coll_abort(trim_coll_comm* comm) {
  if (comm == nullptr) return fail(TRIM_COLL_EINVAL, "trim_coll_abort: null communicator");
  comm->comm->abort();
  return TRIM_COLL_OK;
}

int trim_coll_destroy(trim_coll_comm* comm) {
  return guarded("trim_coll_destroy", [&]() -> int {
    if (comm == nullptr) return TRIM_COLL_OK;
    std::unique_ptr<trim_coll_comm> owned(comm);
    Status st = owned->comm->close();
    if (!st.is_ok()) return fail(TRIM_COLL_EREMOTE, "trim_coll_destroy: " + st.message());
    return TRIM_COLL_OK;
  });
}

int trim_coll_stats_json(trim_coll_comm* comm, char* buf, size_t cap) {
  if (comm == nullptr || buf == nullptr) return fail(TRIM_COLL_EINVAL, "trim_coll_stats_json: null argument");
  std::string json;
  if (!comm->comm->stats_json(&json)) {
    return fail(TRIM_COLL_EINVAL, "trim_coll_stats_json: the plugin exports no ncclTrimStatsJson");
  }
  if (json.size() + 1 > cap) {
    return fail(TRIM_COLL_EINVAL, "trim_coll_stats_json: " + std::to_string(json.size() + 1) + " bytes needed, " +
                                      std::to_string(cap) + " given");
  }
  std::memcpy(buf, json.c_str(), json.size() + 1);
  return static_cast<int>(json.size());
}

}  // extern "C"
