// Not part of NCCL's ABI: what the nccl_trim PyTorch comm hook (python/nccl_trim) reads through
// ctypes from the copy of this library NCCL loaded (dlopen of the same file returns the same
// object), to check that NCCL really carries the hook's communicator through this plugin and
// that its connections pack pre-rotated data. Plain C types only; plugin/exports.map lists them.
#include <cstdint>

#include "common/params.h"
#include "transport/net_api.h"

#define TRIM_HOOK_EXPORT extern "C" __attribute__((visibility("default")))

// Bumped when a function below changes meaning.
TRIM_HOOK_EXPORT int nccl_trim_hook_abi(void) { return 1; }

// NCCL_TRIM_HOOK_TRAFFIC_CLASS as this process reads it; -1 when the NCCL_TRIM_* environment is
// invalid (the plugin's init then fails with the reason).
TRIM_HOOK_EXPORT int nccl_trim_hook_traffic_class(void) {
  trim::Result<trim::Params> p = trim::process_params();
  return p ? static_cast<int>(p.value().hook_traffic_class) : -1;
}

// NCCL communicators initialised with that class so far (net v11 init, one per communicator).
TRIM_HOOK_EXPORT uint64_t nccl_trim_hook_comms(void) { return trim::net::hook_counters().comms; }

// Send connections that pack pre-rotated data (wire scheme rotated).
TRIM_HOOK_EXPORT uint64_t nccl_trim_hook_send_conns(void) { return trim::net::hook_counters().send_conns; }

// Trimmable messages sent by those connections.
TRIM_HOOK_EXPORT uint64_t nccl_trim_rotated_messages(void) { return trim::net::hook_counters().rotated_messages; }
