// The NCCL net plugin: the one file that exports ncclNetPlugin_v8..v12 and adapts each
// version's calling convention onto trim::net. Everything NCCL-specific (structs, numbering,
// result codes, log levels) stops here.
//
// Error mapping (trim::Code -> ncclResult_t):
//   kInvalidArgument -> ncclInvalidArgument  NCCL handed us something out of contract.
//   kBadConfig       -> ncclInvalidUsage     the user's NCCL_TRIM_* setting is wrong.
//   kBadPacket       -> ncclRemoteError      a peer or the network corrupted a message.
//   kUnavailable     -> ncclSystemError      the environment lacks something (e.g. the
//                                            transport): NCCL calls this "unhandled system
//                                            error", whereas ncclInternalError asks users to
//                                            report an NCCL bug, which this is not. NCCL treats
//                                            every init failure alike (falls back, or fails
//                                            under NCCL_NET=Trim), so only the text differs.
//   kInternal        -> ncclInternalError    our invariant broke: a bug.
//   kSystem          -> ncclSystemError      a syscall failed.
// Every failure is also logged at WARN with our message, since NCCL prints only the code.
#include <algorithm>
#include <atomic>
#include <climits>
#include <cstring>
#include <mutex>
#include <set>
#include <string>
#include <type_traits>
#include <vector>

#include "common/log.h"
#include "common/params.h"
#include "plugin/nccl_net.h"
#include "transport/net_api.h"
#include "common/param_enums.h"

namespace {

namespace net = trim::net;
using trim::Code;
using trim::Status;

constexpr const char* kPluginName = "Trim";

// ---- Results ----

ncclResult_t to_nccl(Code code) {
  switch (code) {
    case Code::kOk: return ncclSuccess;
    case Code::kInvalidArgument: return ncclInvalidArgument;
    case Code::kBadConfig: return ncclInvalidUsage;
    case Code::kBadPacket: return ncclRemoteError;
    case Code::kUnavailable: return ncclSystemError;
    case Code::kInternal: return ncclInternalError;
    case Code::kSystem: return ncclSystemError;
  }
  return ncclInternalError;
}

// Logs a failed call once, with our reason, and converts it for NCCL.
ncclResult_t report(const char* call, const Status& status) {
  if (status.is_ok()) return ncclSuccess;
  TRIM_WARN("NET/Trim: {} failed: {}", call, status.to_string());
  return to_nccl(status.code());
}

ncclResult_t null_arg(const char* call, const char* what) {
  return report(call, Status(Code::kInvalidArgument, std::string(what) + " is null"));
}

// ---- Logging through NCCL ----

std::atomic<ncclDebugLogger_t> g_logger{nullptr};

void forward_to_nccl(void* /*ctx*/, trim::log::Level level, const char* file, int line,
                     const char* msg) {
  ncclDebugLogger_t logger = g_logger.load(std::memory_order_acquire);
  if (logger == nullptr) return;
  ncclDebugLogLevel nccl_level = NCCL_LOG_INFO;
  unsigned long flags = NCCL_INIT | NCCL_NET;  // shown under plain NCCL_DEBUG=INFO
  switch (level) {
    case trim::log::Level::kError:
    case trim::log::Level::kWarn: nccl_level = NCCL_LOG_WARN; break;
    case trim::log::Level::kInfo: break;
    case trim::log::Level::kDebug: flags = NCCL_NET; break;  // needs NCCL_DEBUG_SUBSYS=NET
    case trim::log::Level::kTrace:
      nccl_level = NCCL_LOG_TRACE;
      flags = NCCL_NET;
      break;
    case trim::log::Level::kOff: return;
  }
  // "%s" keeps a '%' in our text from being read as a conversion.
  logger(nccl_level, flags, file, line, "%s", msg);
}

// ---- Init shared by every version ----

net::ProfilerFn wrap_profiler(ncclProfilerCallback_t fn) {
  if (fn == nullptr) return {};
  return [fn](void** event, net::ProfilerEvent type, void* op, int64_t plugin_id, void* ext) {
    int nccl_type = ncclProfilerNetEventStart;
    switch (type) {
      case net::ProfilerEvent::kStart: nccl_type = ncclProfilerNetEventStart; break;
      case net::ProfilerEvent::kStop: nccl_type = ncclProfilerNetEventStop; break;
      case net::ProfilerEvent::kUpdate: nccl_type = ncclProfilerNetEventUpdate; break;
      case net::ProfilerEvent::kUpdateAndStop: nccl_type = ncclProfilerNetEventUpdateAndStop; break;
    }
    ncclResult_t r = fn(event, nccl_type, op, plugin_id, ext);
    return r == ncclSuccess ? Status::ok()
                            : Status(Code::kUnavailable, "NCCL profiler callback returned " + std::to_string(r));
  };
}

// Routes logs to NCCL, loads NCCL_TRIM_* and starts the transport. Runs on every init (v11
// calls it per communicator), so a later communicator sees the same checks.
// NCCL_TRIM_LOG_LEVEL's choices are the logger's levels, in order.
static_assert(static_cast<int>(trim::param::LogLevel::kTrace) == static_cast<int>(trim::log::Level::kTrace) &&
                  static_cast<int>(trim::param::LogLevel::kOff) == static_cast<int>(trim::log::Level::kOff),
              "NCCL_TRIM_LOG_LEVEL's choices must follow trim::log::Level");

ncclResult_t init_common(ncclDebugLogger_t logger, ncclProfilerCallback_t prof, uint64_t comm_id,
                         int traffic_class, net::Context** out) {
  if (logger == nullptr) return null_arg("init", "NCCL's logger");
  g_logger.store(logger, std::memory_order_release);
  trim::log::set_forward(&forward_to_nccl, nullptr);

  std::vector<std::string> warnings;
  trim::Result<trim::Params> params = trim::process_params(&warnings);
  if (!params) return report("init", params.status());
  trim::log::set_level(static_cast<trim::log::Level>(trim::param::log_level(*params)));
  for (const std::string& w : warnings) TRIM_WARN("NET/Trim: {}", w);

  net::InitOptions options;
  options.params = &params.value();  // loaded once here, passed down
  options.comm_id = comm_id;
  options.traffic_class = traffic_class;
  options.profiler = wrap_profiler(prof);
  trim::Result<net::Context*> ctx = net::init(options);
  if (!ctx) return report("init", ctx.status());
  *out = ctx.value();
  TRIM_INFO("NET/Trim: initialized (comm {:#x})", comm_id);
  return ncclSuccess;
}

// v8-v10 have one process-wide context and no ctx argument anywhere.
std::mutex g_legacy_mutex;
std::atomic<net::Context*> g_legacy_ctx{nullptr};

ncclResult_t init_legacy(ncclDebugLogger_t logger, ncclProfilerCallback_t prof) {
  std::lock_guard<std::mutex> lock(g_legacy_mutex);
  if (g_legacy_ctx.load() != nullptr) {
    // Already running: only refresh where logs go.
    if (logger == nullptr) return null_arg("init", "NCCL's logger");
    g_logger.store(logger, std::memory_order_release);
    return ncclSuccess;
  }
  net::Context* ctx = nullptr;
  ncclResult_t r = init_common(logger, prof, 0, net::kTrafficClassUnset, &ctx);
  if (r == ncclSuccess) g_legacy_ctx.store(ctx);
  return r;
}

net::Context* legacy_ctx() { return g_legacy_ctx.load(std::memory_order_acquire); }

Status legacy_not_initialized() { return Status(Code::kUnavailable, "init has not succeeded"); }
Status null_ctx() { return Status(Code::kInvalidArgument, "ctx is null"); }

// ---- Devices ----

ncclResult_t devices(int* ndev) {
  if (ndev == nullptr) return null_arg("devices", "ndev");
  *ndev = 0;
  trim::Result<int> n = net::device_count();
  if (!n) return report("devices", n.status());
  *ndev = n.value();
  return ncclSuccess;
}

// NCCL keeps the name/pciPath pointers it is given: intern them for the life of the library.
char* intern(const std::string& text) {
  static std::mutex mutex;
  static std::set<std::string>* strings = new std::set<std::string>();  // never freed on purpose
  std::lock_guard<std::mutex> lock(mutex);
  return const_cast<char*>(strings->insert(text).first->c_str());
}

int to_nccl_ptr_support(int flags) { return (flags & net::kPtrHost) != 0 ? NCCL_PTR_HOST : 0; }

// Fields every version has, in every version's struct.
template <typename Props>
void fill_common(const net::DeviceProps& p, Props* props) {
  *props = Props{};
  props->name = intern(p.name);
  props->pciPath = p.pci_path.empty() ? nullptr : intern(p.pci_path);
  props->guid = p.guid;
  props->ptrSupport = to_nccl_ptr_support(p.ptr_support);
  props->regIsGlobal = p.reg_is_global ? 1 : 0;
  props->speed = p.speed_mbps;
  props->port = p.port;
  props->latency = p.latency_us;
  props->maxComms = p.max_comms;
  props->maxRecvs = p.max_recvs;
  props->netDeviceType = NCCL_NET_DEVICE_HOST;
  props->netDeviceVersion = NCCL_NET_DEVICE_INVALID_VERSION;
}

// v9+ additions. NCCL rejects maxP2pBytes outside (0, 1 TiB] only at connection setup, with
// no hint of why: catch a transport bug here instead.
template <typename Props>
Status fill_v9(int dev, const net::DeviceProps& p, Props* props) {
  if (p.max_p2p_bytes == 0 || p.max_p2p_bytes > static_cast<size_t>(NCCL_MAX_NET_SIZE_BYTES)) {
    return Status(Code::kInternal, "device " + std::to_string(dev) + " reports max_p2p_bytes " +
                                       std::to_string(p.max_p2p_bytes) + ", outside (0, 1 TiB]");
  }
  fill_common(p, props);
  props->forceFlush = 0;  // host memory: nothing for iflush to do
  props->vProps.ndevs = 1;  // a physical device is its own one-member virtual NIC
  props->vProps.devs[0] = dev;
  props->maxP2pBytes = p.max_p2p_bytes;
  props->maxCollBytes = p.max_coll_bytes;
  return Status::ok();
}

ncclResult_t get_properties_v8(int dev, ncclNetProperties_v8_t* props) {
  if (props == nullptr) return null_arg("getProperties", "props");
  trim::Result<net::DeviceProps> p = net::device_props(dev);
  if (!p) return report("getProperties", p.status());
  fill_common(p.value(), props);
  return ncclSuccess;
}

ncclResult_t get_properties_v9(int dev, ncclNetProperties_v9_t* props) {
  if (props == nullptr) return null_arg("getProperties", "props");
  trim::Result<net::DeviceProps> p = net::device_props(dev);
  if (!p) return report("getProperties", p.status());
  return report("getProperties", fill_v9(dev, p.value(), props));
}

ncclResult_t get_properties_v11(int dev, ncclNetProperties_v11_t* props) {
  if (props == nullptr) return null_arg("getProperties", "props");
  trim::Result<net::DeviceProps> p = net::device_props(dev);
  if (!p) return report("getProperties", p.status());
  Status st = fill_v9(dev, p.value(), props);
  if (!st.is_ok()) return report("getProperties", st);
  props->maxMultiRequestSize = p->max_multi_request_size;
  return ncclSuccess;
}

// v12's railId. NCCL 2.30 reads rails within one host only: with NCCL_CROSS_NIC=0 a ring must
// leave a node on the rail it entered by (graph/search.cc), and NCCL_NET_MERGE_POLICY=RAIL
// merges only one rail's NICs into a virtual NIC (we offer no makeVDevice). A NIC without a
// rail is compared by guid and port instead (ours: port 0 on every device). One rail per
// physical port, i.e. per distinct guid (aliases of one interface share their port's guid, hence
// its rail), numbered in device order, so gives NCCL the answers it computed from the guids for
// v11, and its topology dump shows which devices are one port. We cannot know more: which
// switch a port is cabled to is the fabric's business.
trim::Result<int16_t> rail_of(int dev, uint64_t guid) {
  std::vector<uint64_t> ports;  // distinct guids of devices 0..dev-1, first seen first
  for (int d = 0; d < dev; ++d) {
    trim::Result<net::DeviceProps> p = net::device_props(d);
    if (!p) return p.status();
    if (std::find(ports.begin(), ports.end(), p->guid) == ports.end()) ports.push_back(p->guid);
  }
  // ports.size() when dev is the first device on its port: the next rail.
  const size_t rail = static_cast<size_t>(std::find(ports.begin(), ports.end(), guid) - ports.begin());
  if (rail > static_cast<size_t>(INT16_MAX)) return static_cast<int16_t>(NCCL_NET_ID_UNDEF);
  return static_cast<int16_t>(rail);
}

// planeId stays NCCL_NET_ID_UNDEF: a plane is a separate fabric (its own switches) that a UDP
// socket cannot see, and NCCL 2.30 never joins NICs of two different defined planes, whatever
// NCCL_CROSS_NIC says, so a guessed plane could only forbid rings that v11 allows.
ncclResult_t get_properties_v12(int dev, ncclNetProperties_v12_t* props) {
  if (props == nullptr) return null_arg("getProperties", "props");
  trim::Result<net::DeviceProps> p = net::device_props(dev);
  if (!p) return report("getProperties", p.status());
  Status st = fill_v9(dev, p.value(), props);
  if (!st.is_ok()) return report("getProperties", st);
  props->maxMultiRequestSize = p->max_multi_request_size;
  trim::Result<int16_t> rail = rail_of(dev, p->guid);
  if (!rail) return report("getProperties", rail.status());
  props->railId = *rail;
  props->planeId = NCCL_NET_ID_UNDEF;
  return ncclSuccess;
}

// ---- Connection setup ----

// Arguments are checked first (a null from NCCL is ncclInvalidArgument whatever our state) and
// out-parameters cleared before any failure, so NCCL never reads a stale pointer. A null ctx
// fails with `no_ctx`: NCCL passed null (v11) or init has not succeeded (v8-v10).
ncclResult_t listen_in(net::Context* ctx, const Status& no_ctx, int dev, void* handle, void** listen_comm) {
  if (listen_comm == nullptr) return null_arg("listen", "listenComm");
  *listen_comm = nullptr;
  if (handle == nullptr) return null_arg("listen", "handle");
  if (ctx == nullptr) return report("listen", no_ctx);
  trim::Result<net::ListenComm*> l = net::listen(ctx, dev, handle, NCCL_NET_HANDLE_MAXSIZE);
  if (!l) return report("listen", l.status());
  *listen_comm = l.value();
  return ncclSuccess;
}

ncclResult_t listen_legacy(int dev, void* handle, void** listen_comm) {
  return listen_in(legacy_ctx(), legacy_not_initialized(), dev, handle, listen_comm);
}

// v11 and v12 (same signature).
ncclResult_t listen_v11(void* ctx, int dev, void* handle, void** listen_comm) {
  return listen_in(static_cast<net::Context*>(ctx), null_ctx(), dev, handle, listen_comm);
}

// sendDevComm is ignored: we report NCCL_NET_DEVICE_HOST, so NCCL never asks for offload.
ncclResult_t connect_in(net::Context* ctx, const Status& no_ctx, int dev, int traffic_class, void* handle,
                        void** send_comm) {
  if (send_comm == nullptr) return null_arg("connect", "sendComm");
  *send_comm = nullptr;
  if (handle == nullptr) return null_arg("connect", "handle");
  if (ctx == nullptr) return report("connect", no_ctx);
  net::ConnectOptions options;
  options.traffic_class = traffic_class;
  trim::Result<net::SendComm*> s = net::connect(ctx, dev, handle, options);
  if (!s) return report("connect", s.status());
  *send_comm = s.value() == nullptr ? nullptr : net::as_comm(s.value());  // null: call again
  return ncclSuccess;
}

ncclResult_t connect_v8(int dev, void* handle, void** send_comm, ncclNetDeviceHandle_v8_t** /*dev_comm*/) {
  return connect_in(legacy_ctx(), legacy_not_initialized(), dev, net::kTrafficClassUnset, handle, send_comm);
}

ncclResult_t connect_v10(int dev, ncclNetCommConfig_v10_t* config, void* handle, void** send_comm,
                         ncclNetDeviceHandle_v10_t** /*dev_comm*/) {
  // A null config carries no traffic class: treat it as unset rather than an error.
  int tc = config == nullptr ? net::kTrafficClassUnset : config->trafficClass;
  return connect_in(legacy_ctx(), legacy_not_initialized(), dev, tc, handle, send_comm);
}

// v11 and v12 (same signature).
ncclResult_t connect_v11(void* ctx, int dev, void* handle, void** send_comm,
                         ncclNetDeviceHandle_v11_t** /*dev_comm*/) {
  return connect_in(static_cast<net::Context*>(ctx), null_ctx(), dev, net::kTrafficClassUnset, handle,
                    send_comm);
}

ncclResult_t accept_any(void* listen_comm, void** recv_comm, ncclNetDeviceHandle_v8_t** /*dev_comm*/) {
  if (recv_comm == nullptr) return null_arg("accept", "recvComm");
  *recv_comm = nullptr;
  if (listen_comm == nullptr) return null_arg("accept", "listenComm");
  trim::Result<net::RecvComm*> r = net::accept(static_cast<net::ListenComm*>(listen_comm));
  if (!r) return report("accept", r.status());
  *recv_comm = r.value() == nullptr ? nullptr : net::as_comm(r.value());  // null: call again
  return ncclSuccess;
}

// ---- Memory registration ----

ncclResult_t reg_region(const char* call, void* comm, net::MemRegion region, int type, void** mhandle) {
  if (mhandle == nullptr) return null_arg(call, "mhandle");
  *mhandle = nullptr;
  if (comm == nullptr) return null_arg(call, "comm");
  if (type == NCCL_PTR_HOST) {
    region.type = net::MemType::kHost;
  } else if (type == NCCL_PTR_CUDA) {
    region.type = net::MemType::kCuda;
  } else {
    return report(call, Status(Code::kInvalidArgument, "memory type " + std::to_string(type) +
                                                           " is neither NCCL_PTR_HOST nor NCCL_PTR_CUDA"));
  }
  trim::Result<net::MemHandle*> m = net::reg_mr(static_cast<net::Comm*>(comm), region);
  if (!m) return report(call, m.status());
  *mhandle = m.value();
  return ncclSuccess;
}

ncclResult_t reg_mr(void* comm, void* data, size_t size, int type, void** mhandle) {
  net::MemRegion region;
  region.data = data;
  region.bytes = size;
  return reg_region("regMr", comm, region, type, mhandle);
}

ncclResult_t reg_mr_dmabuf(void* comm, void* data, size_t size, int type, uint64_t offset, int fd,
                           void** mhandle) {
  net::MemRegion region;
  region.data = data;
  region.bytes = size;
  region.dmabuf_fd = fd;
  region.dmabuf_offset = offset;
  return reg_region("regMrDmaBuf", comm, region, type, mhandle);
}

ncclResult_t dereg_mr(void* comm, void* mhandle) {
  if (comm == nullptr) return null_arg("deregMr", "comm");
  if (mhandle == nullptr) return null_arg("deregMr", "mhandle");
  return report("deregMr", net::dereg_mr(static_cast<net::Comm*>(comm), static_cast<net::MemHandle*>(mhandle)));
}

// ---- Data path ----

ncclResult_t isend_in(void* send_comm, void* data, size_t size, int tag, void* mhandle, void* phandle,
                      void** request) {
  if (request == nullptr) return null_arg("isend", "request");
  *request = nullptr;
  if (send_comm == nullptr) return null_arg("isend", "sendComm");
  net::SendComm* comm = net::as_send(static_cast<net::Comm*>(send_comm));
  if (comm == nullptr) return report("isend", Status(Code::kInvalidArgument, "comm is not a send comm"));
  trim::Result<net::Request*> r =
      net::isend(comm, data, size, tag, static_cast<net::MemHandle*>(mhandle), phandle);
  if (!r) return report("isend", r.status());
  *request = r.value();  // null: no slot, NCCL retries
  return ncclSuccess;
}

ncclResult_t isend_v8(void* send_comm, void* data, int size, int tag, void* mhandle, void** request) {
  if (size < 0) {
    if (request != nullptr) *request = nullptr;
    return report("isend", Status(Code::kInvalidArgument, "size " + std::to_string(size) + " < 0"));
  }
  return isend_in(send_comm, data, static_cast<size_t>(size), tag, mhandle, nullptr, request);
}

ncclResult_t isend_v9(void* send_comm, void* data, size_t size, int tag, void* mhandle, void** request) {
  return isend_in(send_comm, data, size, tag, mhandle, nullptr, request);
}

ncclResult_t isend_v10(void* send_comm, void* data, size_t size, int tag, void* mhandle, void* phandle,
                       void** request) {
  return isend_in(send_comm, data, size, tag, mhandle, phandle, request);
}

template <typename T>
bool is_negative(T v) {
  if constexpr (std::is_signed_v<T>) {
    return v < 0;
  } else {
    (void)v;
    return false;
  }
}

// Builds the RecvBuffer list shared by irecv and iflush; `Size` is int (v8, iflush) or size_t.
template <typename Size>
Status gather_buffers(int n, void** data, const Size* sizes, const int* tags, void** mhandles,
                      void** phandles, net::RecvBuffer* out) {
  if (n < 1 || n > net::kMaxRecvs) {
    return Status(Code::kInvalidArgument,
                  "n = " + std::to_string(n) + ", expected 1 to " + std::to_string(net::kMaxRecvs));
  }
  if (data == nullptr || sizes == nullptr || mhandles == nullptr) {
    return Status(Code::kInvalidArgument, "data, sizes or mhandles is null");
  }
  for (int i = 0; i < n; ++i) {
    if (is_negative(sizes[i])) return Status(Code::kInvalidArgument, "size " + std::to_string(i) + " < 0");
    out[i].data = data[i];
    out[i].capacity_bytes = static_cast<size_t>(sizes[i]);
    out[i].tag = tags == nullptr ? 0 : tags[i];
    out[i].mem = static_cast<net::MemHandle*>(mhandles[i]);
    out[i].profiler_op = phandles == nullptr ? nullptr : phandles[i];
  }
  return Status::ok();
}

net::RecvComm* recv_comm_of(void* recv_comm) { return net::as_recv(static_cast<net::Comm*>(recv_comm)); }

template <typename Size>
ncclResult_t irecv_in(void* recv_comm, int n, void** data, Size* sizes, int* tags, void** mhandles,
                      void** phandles, void** request) {
  if (request == nullptr) return null_arg("irecv", "request");
  // NCCL may pre-set the optional-completion marker; note it, then always overwrite it.
  const bool optional = *request == reinterpret_cast<void*>(NCCL_NET_OPTIONAL_RECV_COMPLETION);
  *request = nullptr;
  if (recv_comm == nullptr) return null_arg("irecv", "recvComm");
  if (tags == nullptr) return null_arg("irecv", "tags");
  net::RecvBuffer buffers[net::kMaxRecvs];
  Status st = gather_buffers(n, data, sizes, tags, mhandles, phandles, buffers);
  if (!st.is_ok()) return report("irecv", st);
  net::RecvComm* comm = recv_comm_of(recv_comm);
  if (comm == nullptr) return report("irecv", Status(Code::kInvalidArgument, "comm is not a receive comm"));
  trim::Result<net::Request*> r = net::irecv(comm, n, buffers, optional);
  if (!r) return report("irecv", r.status());
  *request = r.value();  // null: no slot, NCCL retries
  return ncclSuccess;
}

ncclResult_t irecv_v8(void* recv_comm, int n, void** data, int* sizes, int* tags, void** mhandles,
                      void** request) {
  return irecv_in(recv_comm, n, data, sizes, tags, mhandles, nullptr, request);
}

ncclResult_t irecv_v9(void* recv_comm, int n, void** data, size_t* sizes, int* tags, void** mhandles,
                      void** request) {
  return irecv_in(recv_comm, n, data, sizes, tags, mhandles, nullptr, request);
}

ncclResult_t irecv_v10(void* recv_comm, int n, void** data, size_t* sizes, int* tags, void** mhandles,
                       void** phandles, void** request) {
  return irecv_in(recv_comm, n, data, sizes, tags, mhandles, phandles, request);
}

ncclResult_t iflush(void* recv_comm, int n, void** data, int* sizes, void** mhandles, void** request) {
  if (request == nullptr) return null_arg("iflush", "request");
  *request = nullptr;
  if (recv_comm == nullptr) return null_arg("iflush", "recvComm");
  net::RecvBuffer buffers[net::kMaxRecvs];
  Status st = gather_buffers(n, data, sizes, static_cast<const int*>(nullptr), mhandles, nullptr, buffers);
  if (!st.is_ok()) return report("iflush", st);
  net::RecvComm* comm = recv_comm_of(recv_comm);
  if (comm == nullptr) return report("iflush", Status(Code::kInvalidArgument, "comm is not a receive comm"));
  trim::Result<net::Request*> r = net::iflush(comm, n, buffers);
  if (!r) return report("iflush", r.status());
  *request = r.value();  // null: nothing to flush
  return ncclSuccess;
}

ncclResult_t test_request(void* request, int* done, int* sizes) {
  if (done == nullptr) return null_arg("test", "done");
  *done = 0;
  if (request == nullptr) return null_arg("test", "request");
  net::Completion c;
  Status st = net::test(static_cast<net::Request*>(request), &c);
  if (!st.is_ok()) return report("test", st);
  if (c.done && sizes != nullptr) {  // NCCL passes null when it does not want sizes
    for (int i = 0; i < c.count && i < net::kMaxRecvs; ++i) {
      if (c.sizes_bytes[i] > static_cast<size_t>(INT_MAX)) {
        return report("test", Status(Code::kInternal, "completed size exceeds INT_MAX"));
      }
      sizes[i] = static_cast<int>(c.sizes_bytes[i]);
    }
  }
  *done = c.done ? 1 : 0;
  return ncclSuccess;
}

// ---- Teardown ----

ncclResult_t close_send(void* send_comm) {
  if (send_comm == nullptr) return null_arg("closeSend", "sendComm");
  net::SendComm* comm = net::as_send(static_cast<net::Comm*>(send_comm));
  if (comm == nullptr) return report("closeSend", Status(Code::kInvalidArgument, "comm is not a send comm"));
  return report("closeSend", net::close_send(comm));
}

ncclResult_t close_recv(void* recv_comm) {
  if (recv_comm == nullptr) return null_arg("closeRecv", "recvComm");
  net::RecvComm* comm = recv_comm_of(recv_comm);
  if (comm == nullptr) return report("closeRecv", Status(Code::kInvalidArgument, "comm is not a receive comm"));
  return report("closeRecv", net::close_recv(comm));
}

ncclResult_t close_listen(void* listen_comm) {
  if (listen_comm == nullptr) return null_arg("closeListen", "listenComm");
  return report("closeListen", net::close_listen(static_cast<net::ListenComm*>(listen_comm)));
}

// ---- Version-specific entry points ----

ncclResult_t init_v8(ncclDebugLogger_t logger) { return init_legacy(logger, nullptr); }

ncclResult_t init_v10(ncclDebugLogger_t logger, ncclProfilerCallback_t prof) { return init_legacy(logger, prof); }

// v11 and v12: per communicator (v12 changes no argument).
ncclResult_t init_v11(void** ctx, uint64_t comm_id, ncclNetCommConfig_v11_t* config, ncclDebugLogger_t logger,
                      ncclProfilerCallback_t prof) {
  if (ctx == nullptr) return null_arg("init", "ctx");
  *ctx = nullptr;
  int tc = config == nullptr ? net::kTrafficClassUnset : config->trafficClass;
  net::Context* out = nullptr;
  ncclResult_t r = init_common(logger, prof, comm_id, tc, &out);
  if (r == ncclSuccess) *ctx = out;
  return r;
}

ncclResult_t finalize_v11(void* ctx) {
  if (ctx == nullptr) return null_arg("finalize", "ctx");
  return report("finalize", net::finalize(static_cast<net::Context*>(ctx)));
}

// Decodes NCCL's one-hot masks; several or no known bits (e.g. the all-ones "undefined") give
// kUnknown. Bit numbers: ncclFunc_t, NCCL_ALGO_*, NCCL_PROTO_* of NCCL 2.28.
bool single_bit(uint32_t mask, int* bit) {
  if (mask == 0 || (mask & (mask - 1)) != 0) return false;
  *bit = __builtin_ctz(mask);
  return true;
}

net::OpAttr decode_attr(const ncclNetAttr_v11_t& a) {
  net::OpAttr out;
  constexpr uint32_t kCollMask = 0x1f;         // Broadcast..AllReduce
  constexpr uint32_t kP2pMask = 0x3f << 5;     // SendRecv, Send, Recv, AlltoAll, Scatter, Gather
  int bit = 0;
  if (single_bit(a.op & (kCollMask | kP2pMask), &bit) && bit < 5) {
    static constexpr net::Func kFuncs[] = {net::Func::kBroadcast, net::Func::kReduce, net::Func::kAllGather,
                                           net::Func::kReduceScatter, net::Func::kAllReduce};
    out.func = kFuncs[bit];
  } else if (a.op != UINT32_MAX && (a.op & kP2pMask) != 0 && (a.op & kCollMask) == 0) {
    out.func = net::Func::kP2p;
    return out;  // algo/proto keep stale values for p2p: ignore them
  } else {
    return out;
  }
  if (single_bit(a.algo, &bit)) out.algo = bit == 0 ? net::Algo::kTree : bit == 1 ? net::Algo::kRing : net::Algo::kOther;
  if (single_bit(a.proto, &bit) && bit <= 2) {
    static constexpr net::Proto kProtos[] = {net::Proto::kLL, net::Proto::kLL128, net::Proto::kSimple};
    out.proto = kProtos[bit];
  }
  return out;
}

// v11 and v12 (same attributes). The peers/flows hints are dropped: the transport has no use
// for them yet.
ncclResult_t set_net_attr_v11(void* ctx, ncclNetAttr_v11_t* attr) {
  if (ctx == nullptr) return null_arg("setNetAttr", "ctx");
  if (attr == nullptr) return null_arg("setNetAttr", "netAttr");
  return report("setNetAttr", net::set_op_attr(static_cast<net::Context*>(ctx), decode_attr(*attr)));
}

// ---- Tables, filled by field name so the slot order lives only in nccl_net.h (several slots
// share a signature: positional initializers could swap them silently). getDeviceMr,
// irecvConsumed and makeVDevice stay null: NCCL checks for null and then skips device offload
// and virtual NICs, which we do not offer (each physical device is its own one-member vNIC in
// vProps; NCCL 2.30 then lists physical devices only). ----

template <typename Table>
constexpr void fill_shared(Table* t) {
  t->name = kPluginName;
  t->devices = devices;
  t->regMr = reg_mr;
  t->regMrDmaBuf = reg_mr_dmabuf;
  t->deregMr = dereg_mr;
  t->iflush = iflush;
  t->test = test_request;
  t->closeSend = close_send;
  t->closeRecv = close_recv;
  t->closeListen = close_listen;
  t->getDeviceMr = nullptr;
  t->irecvConsumed = nullptr;
}

constexpr ncclNet_v8_t make_v8() {
  ncclNet_v8_t t{};
  fill_shared(&t);
  t.init = init_v8;
  t.getProperties = get_properties_v8;
  t.listen = listen_legacy;
  t.connect = connect_v8;
  t.accept = accept_any;
  t.isend = isend_v8;
  t.irecv = irecv_v8;
  return t;
}

constexpr ncclNet_v9_t make_v9() {
  ncclNet_v9_t t{};
  fill_shared(&t);
  t.init = init_v8;
  t.getProperties = get_properties_v9;
  t.listen = listen_legacy;
  t.connect = connect_v8;
  t.accept = accept_any;
  t.isend = isend_v9;
  t.irecv = irecv_v9;
  t.makeVDevice = nullptr;
  return t;
}

constexpr ncclNet_v10_t make_v10() {
  ncclNet_v10_t t{};
  fill_shared(&t);
  t.init = init_v10;
  t.getProperties = get_properties_v9;
  t.listen = listen_legacy;
  t.connect = connect_v10;
  t.accept = accept_any;
  t.isend = isend_v10;
  t.irecv = irecv_v10;
  t.makeVDevice = nullptr;
  return t;
}

constexpr ncclNet_v11_t make_v11() {
  ncclNet_v11_t t{};
  fill_shared(&t);
  t.init = init_v11;
  t.getProperties = get_properties_v11;
  t.listen = listen_v11;
  t.connect = connect_v11;
  t.accept = accept_any;
  t.isend = isend_v10;
  t.irecv = irecv_v10;
  t.makeVDevice = nullptr;
  t.finalize = finalize_v11;
  t.setNetAttr = set_net_attr_v11;
  return t;
}

// v12: v11's calls; only the properties differ (railId, planeId, the wider vProps). Config and
// attributes have v11's layout, so v11's init and setNetAttr serve as they are.
constexpr ncclNet_v12_t make_v12() {
  ncclNet_v12_t t{};
  fill_shared(&t);
  t.init = init_v11;
  t.getProperties = get_properties_v12;
  t.listen = listen_v11;
  t.connect = connect_v11;
  t.accept = accept_any;
  t.isend = isend_v10;
  t.irecv = irecv_v10;
  t.makeVDevice = nullptr;
  t.finalize = finalize_v11;
  t.setNetAttr = set_net_attr_v11;
  return t;
}

// constexpr copies: the exported tables are constant-initialized, ready before any dlsym.
constexpr ncclNet_v8_t kTableV8 = make_v8();
constexpr ncclNet_v9_t kTableV9 = make_v9();
constexpr ncclNet_v10_t kTableV10 = make_v10();
constexpr ncclNet_v11_t kTableV11 = make_v11();
constexpr ncclNet_v12_t kTableV12 = make_v12();

}  // namespace

// Non-const so they get external linkage; default visibility overrides -fvisibility=hidden and
// plugin/exports.map keeps everything else local.
extern "C" {
__attribute__((visibility("default"))) ncclNet_v8_t ncclNetPlugin_v8 = kTableV8;
__attribute__((visibility("default"))) ncclNet_v9_t ncclNetPlugin_v9 = kTableV9;
__attribute__((visibility("default"))) ncclNet_v10_t ncclNetPlugin_v10 = kTableV10;
__attribute__((visibility("default"))) ncclNet_v11_t ncclNetPlugin_v11 = kTableV11;
// NCCL 2.30+ probes v12 first; 2.28/2.29 know v11 at most and never look it up.
__attribute__((visibility("default"))) ncclNet_v12_t ncclNetPlugin_v12 = kTableV12;

// Not part of NCCL's ABI: our harness reads the transport's counters through it. Writes one
// JSON object (NUL-terminated) and returns its length, or -1 when it does not fit.
__attribute__((visibility("default"))) int ncclTrimStatsJson(char* buf, int cap) {
  if (buf == nullptr || cap <= 0) return -1;
  const std::string json = trim::net::stats_json();
  if (json.size() + 1 > static_cast<size_t>(cap)) return -1;
  std::memcpy(buf, json.c_str(), json.size() + 1);
  return static_cast<int>(json.size());
}

// Not part of NCCL's ABI: the nccl_trim collectives (coll/) call it on each send comm they
// connect, before its first isend, to say that its send buffers keep their meaning between calls,
// which NCCL_TRIM_ERROR_FEEDBACK needs. Per comm: NCCL's comms in the same process never get it.
__attribute__((visibility("default"))) int ncclTrimDeclareSendBuffers(void* send_comm) {
  if (send_comm == nullptr) return null_arg("ncclTrimDeclareSendBuffers", "sendComm");
  net::SendComm* comm = net::as_send(static_cast<net::Comm*>(send_comm));
  if (comm == nullptr) {
    return report("ncclTrimDeclareSendBuffers", Status(Code::kInvalidArgument, "comm is not a send comm"));
  }
  return report("ncclTrimDeclareSendBuffers", net::declare_send_buffers(comm));
}

// Not part of NCCL's ABI: the nccl_trim collectives' (coll/) reduce-scatter receive. Like irecv
// with one buffer, but what arrives is combined into `data` with NCCL's datatype and op
// (data = received (op) data, AVG as SUM) on the transport's threads, each element once; size is
// the most bytes accepted. Trimmed values combine as they decode. NCCL never calls it; coll looks
// it up with dlsym and keeps its own staging and reduction when it is absent.
__attribute__((visibility("default"))) int ncclTrimIrecvCombine(void* recv_comm, void* data, size_t size, int tag,
                                                                void* mhandle, void* phandle, int datatype, int op,
                                                                void** request) {
  if (request == nullptr) return null_arg("ncclTrimIrecvCombine", "request");
  *request = nullptr;
  if (recv_comm == nullptr) return null_arg("ncclTrimIrecvCombine", "recvComm");
  if (data == nullptr && size != 0) return null_arg("ncclTrimIrecvCombine", "data");
  net::RecvComm* comm = recv_comm_of(recv_comm);
  if (comm == nullptr) {
    return report("ncclTrimIrecvCombine", Status(Code::kInvalidArgument, "comm is not a receive comm"));
  }
  net::RecvBuffer b;
  b.data = data;
  b.capacity_bytes = size;
  b.tag = tag;
  b.mem = static_cast<net::MemHandle*>(mhandle);
  b.profiler_op = phandle;
  b.combine_type = datatype < 0 ? INT32_MAX : datatype;  // negative is not "store": refused as unknown
  b.combine_op = op;
  trim::Result<net::Request*> r = net::irecv(comm, 1, &b, false);
  if (!r) return report("ncclTrimIrecvCombine", r.status());
  *request = r.value();  // null: no slot, retry
  return ncclSuccess;
}

// Not part of NCCL's ABI: the nccl_trim collectives' (coll/) wait between passes of test():
// blocks until one of `requests` (n >= 1, of one context, none yet reported done by test) is no
// longer pending, another operation of that context completed, or timeout_ns passed. *ready = 1:
// one was done already. Instead of sleep-polling, the caller is woken by the completion. NCCL
// never calls it (its proxy must not block); coll looks it up with dlsym and keeps its sleeps
// when it is absent.
__attribute__((visibility("default"))) int ncclTrimWaitRequests(void* const* requests, int n, int64_t timeout_ns,
                                                                int* ready) {
  if (ready == nullptr) return null_arg("ncclTrimWaitRequests", "ready");
  *ready = 0;
  if (requests == nullptr) return null_arg("ncclTrimWaitRequests", "requests");
  bool r = false;
  const Status st = net::wait_any(reinterpret_cast<net::Request* const*>(requests), n, timeout_ns, &r);
  if (!st.is_ok()) return report("ncclTrimWaitRequests", st);
  *ready = r ? 1 : 0;
  return ncclSuccess;
}
}
