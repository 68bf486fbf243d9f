// Not part of NCCL's ABI: what the nccl_trim PyTorch comm hook (python/nccl_trim) reaches through
// ctypes in the copy of this library NCCL loaded (dlopen of the same file returns the same
// object): it declares the traffic class whose data it rotates itself, and checks that NCCL really
// carries the hook's communicator through this plugin and that its connections pack pre-rotated
// data. Plain C types only; plugin/exports.map lists them.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>

#include "common/params.h"
#include "transport/net_api.h"

#define TRIM_HOOK_EXPORT extern "C" __attribute__((visibility("default")))

// Bumped when a function below changes meaning. 2: nccl_trim_hook_declare; no class is sent
// rotated without it.
TRIM_HOOK_EXPORT int nccl_trim_hook_abi(void) { return 2; }

// NCCL_TRIM_HOOK_TRAFFIC_CLASS as this process reads it; -1 when the NCCL_TRIM_* environment is
// invalid (the plugin's init then fails with the reason).
TRIM_HOOK_EXPORT int nccl_trim_hook_traffic_class(void) {
  trim::Result<trim::Params> p = trim::process_params();
  return p ? static_cast<int>(p.value().hook_traffic_class) : -1;
}

// The hook declares, before it creates its communicator, that it rotates the data of
// `traffic_class` itself, in rows of 2^row_log2 elements: only then are that class's
// connections sent as scheme rotated. 0 on success; else the reason (naming both values of a
// mismatch) in `error`, NUL-terminated and cut to `error_bytes`, and -2 when the rows differ from
// NCCL_TRIM_ROW_ELEMS, -1 otherwise (the class is not NCCL_TRIM_HOOK_TRAFFIC_CLASS, or the
// NCCL_TRIM_* environment is invalid).
TRIM_HOOK_EXPORT int nccl_trim_hook_declare(int traffic_class, int row_log2, char* error, int error_bytes) {
  const trim::Status st = trim::net::declare_rotated(traffic_class, row_log2);
  if (st.is_ok()) return 0;
  const int rc = st.code() == trim::Code::kInvalidArgument ? -2 : -1;
  if (error != nullptr && error_bytes > 0) {
    const std::string& msg = st.message();
    const size_t n = std::min(msg.size(), static_cast<size_t>(error_bytes) - 1);
    std::memcpy(error, msg.data(), n);
    error[n] = '\0';
  }
  return rc;
}

// NCCL communicators initialised with that class so far (net v11 init, one per communicator).
TRIM_HOOK_EXPORT uint64_t nccl_trim_hook_comms(void) { return trim::net::hook_counters().comms; }

// Send connections that pack pre-rotated data (wire scheme rotated).
TRIM_HOOK_EXPORT uint64_t nccl_trim_hook_send_conns(void) { return trim::net::hook_counters().send_conns; }

// Send connections of the hook's class sent as per-hop rht, since no hook declared the class.
TRIM_HOOK_EXPORT uint64_t nccl_trim_hook_undeclared_conns(void) {
  return trim::net::hook_counters().undeclared_conns;
}

// Trimmable messages sent by those connections.
TRIM_HOOK_EXPORT uint64_t nccl_trim_rotated_messages(void) { return trim::net::hook_counters().rotated_messages; }
