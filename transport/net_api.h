// trim::net: the one version-agnostic network API the NCCL plugin adapts (plugin/plugin.cc maps
// every ncclNet_vN call onto it). Nothing here knows NCCL's structs or numbering; the plugin
// translates sizes, flags and hints, and answers NCCL's null pointers before calling in.
//
// Threading: NCCL calls one comm from one proxy thread at a time, but different comms and
// contexts from different threads; implementations must be safe under that contract.
// Non-blocking calls return ok with a null object when they cannot proceed yet ("retry later"),
// never block, and never report that case as an error.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include "common/params.h"
#include "common/status.h"

namespace trim::net {

// Opaque handles; the transport owns their definitions. A Comm is the common view of a send or
// receive endpoint: NCCL's regMr/deregMr do not say which kind they are given.
class Context;
class ListenComm;
class Comm;
class SendComm;
class RecvComm;
class MemHandle;
class Request;

// Bytes NCCL exchanges between ranks for listen -> connect.
inline constexpr size_t kMaxHandleBytes = 128;
// Most buffers one grouped receive may carry (what DeviceProps::max_recvs may advertise).
inline constexpr int kMaxRecvs = 8;
// Value of InitOptions/ConnectOptions::traffic_class when the user set none.
inline constexpr int kTrafficClassUnset = -1;

// Which memory kinds a device can move (DeviceProps::ptr_support bits): host memory only
// (NCCL stages GPU data through its pinned host buffers; the plugin makes no CUDA call).
enum PtrSupport : int {
  kPtrHost = 1 << 0,
};

enum class MemType { kHost, kCuda };

struct DeviceProps {
  std::string name;
  std::string pci_path;  // empty = virtual NIC attached to the CPU (GPUDirect off by default)
  uint64_t guid = 0;     // equal guids = same physical port
  int ptr_support = kPtrHost;
  int speed_mbps = 0;
  int port = 0;
  float latency_us = 0.0f;
  int max_comms = 0;
  int max_recvs = 1;  // in [1, kMaxRecvs]
  size_t max_p2p_bytes = 0;   // NCCL requires (0, 1 TiB]
  size_t max_coll_bytes = 0;
  int max_multi_request_size = 1;
  bool reg_is_global = false;  // a registration is usable on every comm, not only its own
};

// Profiler hook NCCL may provide (v10+). The transport calls it with the op handle it was given
// in isend/irecv to open/close a network event; the plugin adapts it to NCCL's callback.
enum class ProfilerEvent { kStart, kStop, kUpdate, kUpdateAndStop };
using ProfilerFn = std::function<Status(void** event, ProfilerEvent type, void* op_handle,
                                        int64_t plugin_id, void* ext_data)>;

struct InitOptions {
  const Params* params = nullptr;  // the process's params (null: trim::process_params())
  uint64_t comm_id = 0;  // NCCL communicator hash (v11); 0 = the one process-wide context
  int traffic_class = kTrafficClassUnset;
  ProfilerFn profiler;   // empty when NCCL gave none
};

struct ConnectOptions {
  int traffic_class = kTrafficClassUnset;  // per connection (v10); unset = the context's
};

// What the current collective is (v11 setNetAttr), decoded by the plugin. Only SIMPLE traffic
// of a known collective may ever be trimmed; anything unknown must be sent untouched.
enum class Func { kUnknown, kBroadcast, kReduce, kAllGather, kReduceScatter, kAllReduce, kP2p };
enum class Algo { kUnknown, kTree, kRing, kOther };
enum class Proto { kUnknown, kLL, kLL128, kSimple };
struct OpAttr {
  Func func = Func::kUnknown;
  Algo algo = Algo::kUnknown;
  Proto proto = Proto::kUnknown;
};

// What NCCL's profiler event chain (ProxyStep -> ProxyOp -> Coll/P2p) says about one send.
// Our profiler plugin (plugin/profiler.cc, same .so) fills it in when isend hands NCCL's
// per-step handle to NCCL's profiler callback; NCCL routes that to the profiler's startEvent.
enum class DataType { kUnknown, kF32, kBF16, kF16, kF64, kInteger, kF8 };
struct OpInfo {
  Func func = Func::kUnknown;
  Algo algo = Algo::kUnknown;
  Proto proto = Proto::kUnknown;
  DataType dtype = DataType::kUnknown;
  uint64_t count = 0;    // elements of the whole collective
  int n_channels = 0;
  int n_ranks = 0;       // of the communicator (from the profiler's init)
  int op_steps = -1;     // network transfers of this proxy op (NCCL's ProxyOp nSteps)
  int chunk_bytes = 0;   // ProxyOp chunkSize
  int peer = -1;
  bool is_send = false;
  int step = -1;         // this transfer's index within the proxy op, 0-based
};
// Passed as the callback's ext_data; the profiler fills it only when id and magic match.
inline constexpr int64_t kProfilerPluginId = 0x5452494d;  // "TRIM"
inline constexpr uint64_t kOpQueryMagic = 0x7472696d6f707131ull;
struct OpQuery {
  uint64_t magic = kOpQueryMagic;
  bool filled = false;
  OpInfo info;
};
// Whether our profiler plugin was loaded by NCCL (init called) in this process.
bool profiler_active();
void set_profiler_active();

// A registration request; dmabuf_fd >= 0 registers through a dma-buf.
struct MemRegion {
  void* data = nullptr;
  size_t bytes = 0;
  MemType type = MemType::kHost;
  int dmabuf_fd = -1;
  uint64_t dmabuf_offset = 0;
};

// One buffer of a grouped receive or flush.
struct RecvBuffer {
  void* data = nullptr;
  size_t capacity_bytes = 0;  // the most this buffer accepts; the sender may send less
  int tag = 0;
  MemHandle* mem = nullptr;
  void* profiler_op = nullptr;  // NCCL's per-op profiler handle, or null
  // >= 0: a combining receive (ncclTrimIrecvCombine): what arrives is combined into `data` with
  // NCCL's datatype combine_type and op combine_op (data = received (op) data) instead of stored.
  int combine_type = -1;
  int combine_op = 0;
};

// What test() reports; sizes are only meaningful once done.
struct Completion {
  bool done = false;
  int count = 0;  // buffers the request covered (1 for a send)
  size_t sizes_bytes[kMaxRecvs] = {};
};

// ---- Lifetime ----

// Starts (or joins) the transport and returns a context. Logging is already routed by the
// caller. Fails with kUnavailable when the transport cannot run here; no partial state remains.
Result<Context*> init(const InitOptions& options);
// Releases a context from init; its comms must already be closed.
Status finalize(Context* ctx);

// ---- Devices (process-wide: NCCL asks without a context) ----

Result<int> device_count();
Result<DeviceProps> device_props(int dev);

// ---- Connection setup ----

// Opens a listening endpoint on `dev` and writes the handle peers connect to into
// handle_out (at most handle_capacity bytes, <= kMaxHandleBytes).
Result<ListenComm*> listen(Context* ctx, int dev, void* handle_out, size_t handle_capacity);
// Non-blocking: ok(nullptr) = not connected yet, call again.
Result<SendComm*> connect(Context* ctx, int dev, const void* handle, const ConnectOptions& options);
// Non-blocking: ok(nullptr) = no peer yet, call again.
Result<RecvComm*> accept(ListenComm* listen);

// NCCL passes send and receive endpoints through one untyped pointer: the plugin hands out
// the Comm view and narrows it back (null when the comm is of the other kind).
Comm* as_comm(SendComm* comm);
Comm* as_comm(RecvComm* comm);
SendComm* as_send(Comm* comm);
RecvComm* as_recv(Comm* comm);

// ---- Memory registration ----

Result<MemHandle*> reg_mr(Comm* comm, const MemRegion& region);
Status dereg_mr(Comm* comm, MemHandle* mem);

// ---- Data path; every call is non-blocking and ok(nullptr) means "no slot, retry" ----

Result<Request*> isend(SendComm* comm, const void* data, size_t bytes, int tag, MemHandle* mem,
                       void* profiler_op);
// n in [1, kMaxRecvs]; buffers match sends in FIFO order per comm. completion_optional: NCCL
// marked the receive as one whose completion it can detect itself (LL/LL128 flags), so the
// transport may finish it lazily; such data must never be altered.
Result<Request*> irecv(RecvComm* comm, int n, const RecvBuffer* buffers, bool completion_optional);
// NCCL's flush after a receive: receives land in host memory, which needs none, so this only
// checks its arguments and returns ok(nullptr) (no request).
Result<Request*> iflush(RecvComm* comm, int n, const RecvBuffer* buffers);
// Polls a request. Once it reports done the request is freed and must not be used again.
Status test(Request* request, Completion* out);
// Not NCCL's (ncclTrimWaitRequests): blocks the calling thread until one of `requests` (n >= 1,
// posted on comms of one context, not yet reported done) is no longer pending, another operation
// of the context completed, or `timeout_ns` passed. *ready: one of them was already done. The
// caller then test()s as usual. Never called by NCCL's proxy, which must not block.
Status wait_any(Request* const* requests, int n, int64_t timeout_ns, bool* ready);
// Hint for the ops that follow on this context (v11 only; older NCCL never calls it).
Status set_op_attr(Context* ctx, const OpAttr& attr);

// ---- Teardown ----

Status close_send(SendComm* comm);
Status close_recv(RecvComm* comm);
Status close_listen(ListenComm* listen);

// ---- Diagnostics ----

// Process-wide transport counters as one JSON object (closed connections and engine-level
// rejects): sent_packets, retransmitted_packets, received_packets, trimmed_accepted,
// trimmed_nacked, dup_packets, bad_packets, ...
std::string stats_json();
// The data packet size a send connection agreed on at its handshake (its MTU less IP and UDP), so
// tests and tools can see what NCCL_TRIM_MTU and the route made of it.
Result<uint32_t> send_packet_bytes(const SendComm* comm);
// What the nccl_trim comm hook checks: communicators initialised with its traffic class, send
// connections packing pre-rotated data (scheme rotated), messages sent that way, and send
// connections of its class that went as per-hop rht because no hook declared the class.
struct HookCounters {
  uint64_t comms = 0;
  uint64_t send_conns = 0;
  uint64_t rotated_messages = 0;
  uint64_t undeclared_conns = 0;
};
HookCounters hook_counters();

// ---- The comm hook's declaration (hook_trust.cc) ----

// The nccl_trim comm hook declares, before it creates its communicator, that it rotates the data
// of `traffic_class` itself, in rows of 2^row_log2 elements. Only then do send connections of
// that class (NCCL_TRIM_HOOK_TRAFFIC_CLASS, under NCCL_TRIM_SCHEME=rht) pack their data as
// scheme `rotated`; by default no class is trusted, and such connections rotate per hop (rht).
// Fails, naming both values, when the class is not the plugin's NCCL_TRIM_HOOK_TRAFFIC_CLASS
// (kBadConfig) or 2^row_log2 is not NCCL_TRIM_ROW_ELEMS (kInvalidArgument: rows the rotation did
// not spread would be scaled as if it had), or when the NCCL_TRIM_* environment is invalid
// (kBadConfig). Process-wide and idempotent.
Status declare_rotated(int traffic_class, int row_log2);

// The nccl_trim collectives (coll/, under the CPU backend and the harness) declare, per send
// comm, that the buffers they send from keep their meaning between calls: a bucket's gradients
// stay at one address. Only then does NCCL_TRIM_ERROR_FEEDBACK=1 apply to that comm
// (transport/feedback.h); NCCL's staging buffers carry different data every time, so NCCL's comms
// in the same process (a `cpu:trim,cuda:nccl` job loads this library once) never get it. Must
// come before the comm's first isend; a no-op when the knob is off.
Status declare_send_buffers(SendComm* comm);

// Tests only: forget every declaration (each test starts with none).
void forget_rotated_declarations_for_tests();
// "ip:port" of the UDP socket of device `dev`'s progress engine (started by the first listen
// or connect on it): where peers' data and control packets arrive.
Result<std::string> engine_endpoint(int dev);

}  // namespace trim::net
