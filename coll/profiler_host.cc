#include "coll/profiler_host.h"

#include <dlfcn.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <mutex>

#include "coll/net_plugin.h"

namespace trim::coll {

namespace {

// NCCL's profiler table is process-wide: the callback's stop and record need no communicator.
std::atomic<const ncclProfiler_trim_t*> g_table{nullptr};
std::mutex g_misuse_mu;
std::string g_misuse;

// The enable tests of NCCL's src/plugin/profiler.cc, one per event kind.
constexpr int kGroupApiEnable = ncclProfileGroupApi | ncclProfileP2pApi | ncclProfileCollApi |
                                ncclProfileKernelLaunch | ncclProfileGroup | ncclProfileColl | ncclProfileP2p |
                                ncclProfileProxyOp | ncclProfileProxyStep | ncclProfileKernelCh |
                                ncclProfileNetPlugin;
constexpr int kCollApiEnable = ncclProfileCollApi | ncclProfileColl | ncclProfileProxyOp | ncclProfileProxyStep |
                               ncclProfileKernelCh | ncclProfileNetPlugin;
constexpr int kP2pApiEnable = ncclProfileP2pApi | ncclProfileP2p | ncclProfileProxyOp | ncclProfileProxyStep |
                              ncclProfileKernelCh | ncclProfileNetPlugin;
constexpr int kGroupEnable = ncclProfileGroup | ncclProfileColl | ncclProfileP2p | ncclProfileProxyOp |
                             ncclProfileProxyStep | ncclProfileKernelCh | ncclProfileNetPlugin;
constexpr int kCollEnable =
    ncclProfileColl | ncclProfileProxyOp | ncclProfileProxyStep | ncclProfileKernelCh | ncclProfileNetPlugin;
constexpr int kP2pEnable =
    ncclProfileP2p | ncclProfileProxyOp | ncclProfileProxyStep | ncclProfileKernelCh | ncclProfileNetPlugin;
constexpr int kProxyOpEnable = ncclProfileProxyOp | ncclProfileProxyStep | ncclProfileNetPlugin;
constexpr int kProxyStepEnable = ncclProfileProxyStep | ncclProfileNetPlugin;
constexpr int kGroupStartApiStop = 23;  // ncclProfilerGroupStartApiStop
constexpr int kGroupEndApiStart = 24;   // ncclProfilerGroupEndApiStart
constexpr int kNetPluginUpdate = 21;    // ncclProfilerNetPluginUpdate

ncclProfilerEventDescr_trim_t descr(uint64_t type, void* parent, int rank) {
  ncclProfilerEventDescr_trim_t d{};
  d.type = type;
  d.parentObj = parent;
  d.rank = rank;
  return d;
}

}  // namespace

ProfilerHost::~ProfilerHost() { finalize(); }

bool ProfilerHost::load(void* library) {
  for (const char* v : {"v6", "v5"}) {
    std::string symbol = std::string("ncclProfiler_") + v;
    auto* table = static_cast<const ncclProfiler_trim_t*>(dlsym(library, symbol.c_str()));
    if (table == nullptr) continue;
    table_ = table;
    version_ = v;
    g_table.store(table, std::memory_order_release);
    return true;
  }
  return false;
}

void ProfilerHost::init(uint64_t comm_id, int n_nodes, int n_ranks, int rank) {
  rank_ = rank;
  if (!loaded()) return;
  ncclResult_t r = table_->init(&context_, comm_id, &mask_, "trim-coll", n_nodes, n_ranks, rank, plugin_logger);
  initialized_ = true;
  if (r != ncclSuccess) {
    std::fprintf(stderr, "[rank %d] profiler %s init returned %s; going on without it, like NCCL\n", rank,
                 version_, result_name(r).c_str());
  }
}

void ProfilerHost::finalize() {
  if (!initialized_) return;
  initialized_ = false;
  if (context_ != nullptr) (void)table_->finalize(context_);
  context_ = nullptr;
}

uint64_t ProfilerHost::next_seq(const char* func) { return seq_[func]++; }

void ProfilerHost::start(void** handle, ncclProfilerEventDescr_trim_t* d) {
  // *handle is not cleared first: NCCL does not either (its slots start zeroed).
  if (loaded()) (void)table_->startEvent(context_, handle, d);
}

void ProfilerHost::stop(void* handle) {
  if (loaded()) (void)table_->stopEvent(handle);
}

void ProfilerHost::record(void* handle, int state, ncclProfilerEventStateArgs_trim_t* args) {
  if (loaded()) (void)table_->recordEventState(handle, state, args);
}

void ProfilerHost::note_misuse(const std::string& what) {
  std::lock_guard<std::mutex> lock(g_misuse_mu);
  if (g_misuse.empty()) g_misuse = what;
}

std::string ProfilerHost::misuse() {
  std::lock_guard<std::mutex> lock(g_misuse_mu);
  return g_misuse;
}

ncclResult_t nccl_profiler_callback(void** eHandle, int type, void* pHandle, int64_t pluginId, void* extData) {
  const ncclProfiler_trim_t* table = g_table.load(std::memory_order_acquire);
  if (table == nullptr) return ncclSuccess;
  // NCCL dereferences these unchecked; a plugin passing anything else would crash it.
  if (eHandle == nullptr || (type == ncclProfilerNetEventStart && pHandle == nullptr)) {
    ProfilerHost::note_misuse("net plugin called NCCL's profiler callback (type " + std::to_string(type) +
                              ") with a null " + (eHandle == nullptr ? "eHandle" : "pHandle"));
    return ncclSuccess;
  }
  if (type == ncclProfilerNetEventStart) {
    auto* p = static_cast<ProxyEventHandle*>(pHandle);
    ProxySub* sub = p->subArgPtr;
    if (sub == nullptr || sub->host == nullptr) {
      ProfilerHost::note_misuse("profiler callback: pHandle is not one NCCL gave with a posted step");
      return ncclSuccess;
    }
    if ((sub->eActivationMask & ncclProfileNetPlugin) != 0) {
      ncclProfilerEventDescr_trim_t d = descr(ncclProfileNetPlugin, p->stepEventHandle, sub->rank);
      d.netPlugin.id = pluginId;
      d.netPlugin.data = extData;
      sub->host->start(eHandle, &d);
    }
  } else if (type == ncclProfilerNetEventStop) {
    (void)table->stopEvent(*eHandle);
  } else {
    ncclProfilerEventStateArgs_trim_t args{};
    args.netPlugin.data = extData;
    (void)table->recordEventState(*eHandle, kNetPluginUpdate, &args);
    if (type != ncclProfilerNetEventUpdate) (void)table->stopEvent(*eHandle);
  }
  return ncclSuccess;
}

// ---- ProxyOp ----

void ProxyOp::start(void* task_handle, int mask, int peer, int n_steps, int chunk_bytes, bool is_send) {
  stop();
  sub_ = ProxySub{};
  sub_.eActivationMask = mask;
  sub_.rank = host_->rank();
  sub_.profilerContext = host_->context();
  sub_.taskEventHandle = task_handle;
  sub_.host = host_;
  started_ = true;
  if (!host_->loaded() || (mask & kProxyOpEnable) == 0) return;
  ncclProfilerEventDescr_trim_t d = descr(ncclProfileProxyOp, task_handle, sub_.rank);
  d.proxyOp.pid = getpid();
  d.proxyOp.channelId = 0;
  d.proxyOp.peer = peer;
  d.proxyOp.nSteps = n_steps;
  d.proxyOp.chunkSize = chunk_bytes;
  d.proxyOp.isSend = is_send ? 1 : 0;
  host_->start(&sub_.opEventHandle, &d);
  if (sub_.opEventHandle != nullptr) {
    ncclProfilerEventStateArgs_trim_t args{};
    host_->record(sub_.opEventHandle, kOpInProgress, &args);
  }
}

void ProxyOp::start_step(int step) {
  ProxyEventHandle& h = sub_.pHandles[step % kNcclSteps];
  if (host_->loaded() && (sub_.eActivationMask & kProxyStepEnable) != 0) {
    ncclProfilerEventDescr_trim_t d = descr(ncclProfileProxyStep, sub_.opEventHandle, sub_.rank);
    d.proxyStep.step = step;
    host_->start(&h.stepEventHandle, &d);
  }
  h.subArgPtr = &sub_;
  open_steps_[step % kNcclSteps] = step;
}

void ProxyOp::record_step(int step, int state, size_t bytes) {
  void* h = sub_.pHandles[step % kNcclSteps].stepEventHandle;
  if (sub_.opEventHandle == nullptr || h == nullptr) return;
  ncclProfilerEventStateArgs_trim_t args{};
  args.proxyStep.transSize = bytes;
  host_->record(h, state, &args);
}

void ProxyOp::stop_step(int step) {
  ProxyEventHandle& h = sub_.pHandles[step % kNcclSteps];
  if (h.stepEventHandle != nullptr) host_->stop(h.stepEventHandle);
  h.stepEventHandle = nullptr;
  open_steps_[step % kNcclSteps] = -1;
}

void ProxyOp::stop() {
  if (!started_) return;
  for (int s : open_steps_) {
    if (s >= 0) stop_step(s);
  }
  if (sub_.opEventHandle != nullptr) host_->stop(sub_.opEventHandle);
  sub_.opEventHandle = nullptr;
  started_ = false;
}

// ---- OpEvents ----

void OpEvents::start_task(const TaskInfo& t) {
  const int rank = host_->rank();
  // The API call: a group of one operation, its API event stopped once it is enqueued.
  if ((mask_ & kGroupApiEnable) != 0) {
    ncclProfilerEventDescr_trim_t d = descr(ncclProfileGroupApi, nullptr, rank);
    host_->start(&group_api_, &d);
    if (group_api_ != nullptr) host_->record(group_api_, kGroupStartApiStop, nullptr);
  }
  void* api = nullptr;
  if (t.p2p && (mask_ & kP2pApiEnable) != 0) {
    ncclProfilerEventDescr_trim_t d = descr(ncclProfileP2pApi, group_api_, rank);
    d.p2pApi.func = t.func;
    d.p2pApi.count = t.count;
    d.p2pApi.datatype = t.datatype;
    host_->start(&api, &d);
  } else if (!t.p2p && (mask_ & kCollApiEnable) != 0) {
    ncclProfilerEventDescr_trim_t d = descr(ncclProfileCollApi, group_api_, rank);
    d.collApi.func = t.func;
    d.collApi.count = t.count;
    d.collApi.datatype = t.datatype;
    d.collApi.root = t.root;
    host_->start(&api, &d);
  }
  if (api != nullptr) host_->stop(api);
  if (group_api_ != nullptr) host_->record(group_api_, kGroupEndApiStart, nullptr);
  // The plan's launch (hostStreamPlanTask): group event, then the task event.
  if ((mask_ & kGroupEnable) != 0) {
    ncclProfilerEventDescr_trim_t d = descr(ncclProfileGroup, nullptr, rank);
    host_->start(&group_, &d);
  }
  if (t.p2p && (mask_ & kP2pEnable) != 0) {
    ncclProfilerEventDescr_trim_t d = descr(ncclProfileP2p, api, rank);
    d.p2p.func = t.func;
    d.p2p.datatype = t.datatype;
    d.p2p.count = t.count;
    d.p2p.peer = t.root;
    d.p2p.nChannels = 1;
    d.p2p.parentGroup = group_;
    host_->start(&task_, &d);
  } else if (!t.p2p && (mask_ & kCollEnable) != 0) {
    const bool bytes_only = std::strcmp(t.func, "AllGather") == 0 || std::strcmp(t.func, "Broadcast") == 0;
    ncclProfilerEventDescr_trim_t d = descr(ncclProfileColl, api, rank);
    d.coll.seqNumber = host_->next_seq(t.func);
    d.coll.func = t.func;
    d.coll.count = bytes_only ? t.count * t.elem_bytes : t.count;
    d.coll.root = t.root;
    d.coll.datatype = bytes_only ? "ncclInt8" : t.datatype;
    d.coll.nChannels = 1;
    d.coll.nWarps = 16;
    d.coll.algo = t.algo;
    d.coll.proto = t.proto;
    d.coll.parentGroup = group_;
    host_->start(&task_, &d);
  }
  task_open_ = true;
}

void OpEvents::stop_task() {
  if (!task_open_) return;
  task_open_ = false;
  if (task_ != nullptr) host_->stop(task_);
  if (group_ != nullptr) host_->stop(group_);
  if (group_api_ != nullptr) host_->stop(group_api_);
  group_ = group_api_ = nullptr;
  // task_ stays: it is the proxy ops' parent handle, stopped or not.
}

void OpEvents::begin(const TaskInfo& task, const OpShape& send, const OpShape& recv) {
  end();
  mask_ = host_->loaded() ? host_->mask() : 0;
  task_ = nullptr;
  start_task(task);
  const bool task_first = host_->next_op() % 2 == 0;
  if (task_first) stop_task();
  if (send.n_steps >= 0) send_.start(task_, mask_, send.peer, send.n_steps, send.chunk_bytes, true);
  if (recv.n_steps >= 0) recv_.start(task_, mask_, recv.peer, recv.n_steps, recv.chunk_bytes, false);
  stop_task();
}

void OpEvents::end() {
  send_.stop();
  recv_.stop();
  stop_task();
}

}  // namespace trim::coll
