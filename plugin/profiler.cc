// The profiler plugin NCCL finds in this library (ncclProfiler_v5 for 2.28, _v6 for 2.29+)
// when no other profiler is configured. It exists to tell our own isend what each send is:
// its activation mask asks only for NetPlugin events, for which NCCL still reports the chain
// Coll/P2p -> ProxyOp -> ProxyStep; when isend hands NCCL's per-step handle to NCCL's
// profiler callback (transport/send_class.cc), NCCL calls our startEvent with a NetPlugin
// event whose parent is that step, and we answer into the OpQuery isend passed along.
//
// Lifetimes: NCCL stops a Coll event once it is enqueued, possibly before the proxy thread
// starts its ProxyOps, so Coll records live in a per-communicator ring, and a Coll's handle is
// not a pointer but a token (its sequence number, odd-tagged): a ProxyOp copies the record
// under a sequence lock and only if the slot still holds that very collective; a recycled
// slot gives no answer (the send stays exact) instead of another collective's facts.
// ProxyOps are heap objects freed at stop; a ProxyOp holds its (up to NCCL_STEPS) live steps
// itself, as NCCL indexes them by step % NCCL_STEPS.
#include <unistd.h>

#include <array>
#include <atomic>
#include <cstring>
#include <memory>

#include "common/log.h"
#include "plugin/nccl_ext.h"
#include "transport/net_api.h"

namespace trim::plugin {
namespace {

namespace net = trim::net;

constexpr int kNcclSteps = 8;
constexpr size_t kCollRing = 4096;  // collectives a ProxyOp may trail its Coll event by

enum class Kind : uint8_t { kColl, kP2p, kOp, kStep };

struct CollFacts {
  net::Func func = net::Func::kUnknown;
  net::Algo algo = net::Algo::kUnknown;
  net::Proto proto = net::Proto::kUnknown;
  net::DataType dtype = net::DataType::kUnknown;
  uint8_t n_channels = 0;
  uint64_t count = 0;
  bool valid = false;
};

// Packed so a slot is two atomics under a sequence counter.
uint64_t pack(const CollFacts& f) {
  return static_cast<uint64_t>(f.func) | static_cast<uint64_t>(f.algo) << 8 | static_cast<uint64_t>(f.proto) << 16 |
         static_cast<uint64_t>(f.dtype) << 24 | static_cast<uint64_t>(f.n_channels) << 32;
}
CollFacts unpack(uint64_t v, uint64_t count) {
  CollFacts f;
  f.func = static_cast<net::Func>(v & 0xff);
  f.algo = static_cast<net::Algo>((v >> 8) & 0xff);
  f.proto = static_cast<net::Proto>((v >> 16) & 0xff);
  f.dtype = static_cast<net::DataType>((v >> 24) & 0xff);
  f.n_channels = static_cast<uint8_t>((v >> 32) & 0xff);
  f.count = count;
  f.valid = true;
  return f;
}

struct CollSlot {
  Kind kind = Kind::kColl;
  std::atomic<uint32_t> version{0};  // odd while being written
  std::atomic<uint64_t> seq{0};      // which collective the slot holds
  std::atomic<uint64_t> facts{0};
  std::atomic<uint64_t> count{0};

  void write(uint64_t s, const CollFacts& f) {
    const uint32_t v = version.load(std::memory_order_relaxed);
    version.store(v + 1, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_release);
    seq.store(s, std::memory_order_relaxed);
    facts.store(pack(f), std::memory_order_relaxed);
    count.store(f.count, std::memory_order_relaxed);
    version.store(v + 2, std::memory_order_release);
  }
  // The facts of collective `want`, or invalid ones when the slot holds another or is torn.
  CollFacts read(uint64_t want) const {
    const uint32_t v1 = version.load(std::memory_order_acquire);
    const uint64_t s = seq.load(std::memory_order_relaxed);
    const uint64_t f = facts.load(std::memory_order_relaxed);
    const uint64_t c = count.load(std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_acquire);
    const uint32_t v2 = version.load(std::memory_order_relaxed);
    if ((v1 & 1) != 0 || v1 != v2 || v1 == 0 || s != want) return CollFacts();
    return unpack(f, c);
  }
};

// Coll handles are tokens: (sequence << 1) | 1. Our objects are aligned, so a real pointer is
// never odd, and NCCL only hands handles back, never dereferences them.
void* coll_token(uint64_t seq) { return reinterpret_cast<void*>(static_cast<uintptr_t>(seq << 1 | 1)); }
bool is_coll_token(const void* h) { return (reinterpret_cast<uintptr_t>(h) & 1) != 0; }
uint64_t token_seq(const void* h) { return static_cast<uint64_t>(reinterpret_cast<uintptr_t>(h) >> 1); }

struct OpObj;
struct StepObj {
  Kind kind = Kind::kStep;
  OpObj* op = nullptr;
  int step = -1;
};

struct OpObj {
  Kind kind = Kind::kOp;
  CollFacts coll;
  int n_ranks = 0;
  int n_steps = -1;
  int chunk_bytes = 0;
  int peer = -1;
  bool is_send = false;
  std::array<StepObj, kNcclSteps> steps;
};

struct Context {
  int n_ranks = 0;
  std::atomic<uint64_t> next{1};
  std::unique_ptr<CollSlot[]> ring{new CollSlot[kCollRing]};
  CollSlot p2p;  // every point-to-point op: exact

  // The facts of a ProxyOp's parent handle (a Coll token or our P2p record).
  CollFacts parent_facts(const void* parent) const {
    if (parent == &p2p) return p2p.read(0);
    if (!is_coll_token(parent)) return CollFacts();
    const uint64_t s = token_seq(parent);
    return ring[s % kCollRing].read(s);
  }
};

bool eq(const char* a, const char* b) { return a != nullptr && std::strcmp(a, b) == 0; }

net::Func parse_func(const char* s) {
  if (eq(s, "AllReduce")) return net::Func::kAllReduce;
  if (eq(s, "ReduceScatter")) return net::Func::kReduceScatter;
  if (eq(s, "AllGather")) return net::Func::kAllGather;
  if (eq(s, "Broadcast")) return net::Func::kBroadcast;
  if (eq(s, "Reduce")) return net::Func::kReduce;
  return net::Func::kUnknown;
}
net::Algo parse_algo(const char* s) {
  if (eq(s, "RING")) return net::Algo::kRing;
  if (eq(s, "TREE")) return net::Algo::kTree;
  return s == nullptr ? net::Algo::kUnknown : net::Algo::kOther;
}
net::Proto parse_proto(const char* s) {
  if (eq(s, "SIMPLE")) return net::Proto::kSimple;
  if (eq(s, "LL")) return net::Proto::kLL;
  if (eq(s, "LL128")) return net::Proto::kLL128;
  return net::Proto::kUnknown;
}
net::DataType parse_dtype(const char* s) {
  if (eq(s, "ncclFloat32")) return net::DataType::kF32;
  if (eq(s, "ncclBfloat16")) return net::DataType::kBF16;
  if (eq(s, "ncclFloat16")) return net::DataType::kF16;
  if (eq(s, "ncclFloat64")) return net::DataType::kF64;
  if (eq(s, "ncclFloat8e4m3") || eq(s, "ncclFloat8e5m2")) return net::DataType::kF8;
  if (eq(s, "ncclInt8") || eq(s, "ncclUint8") || eq(s, "ncclInt32") || eq(s, "ncclUint32") ||
      eq(s, "ncclInt64") || eq(s, "ncclUint64")) {
    return net::DataType::kInteger;
  }
  return net::DataType::kUnknown;
}

ncclResult_t prof_init(void** context, uint64_t comm_id, int* mask, const char* name, int n_nodes, int n_ranks,
                       int rank, ncclDebugLogger_t logfn) {
  (void)name;
  (void)n_nodes;
  (void)logfn;  // our logs already go to the logger the net plugin got
  if (context == nullptr || mask == nullptr) return ncclInvalidArgument;
  auto ctx = std::make_unique<Context>();
  ctx->n_ranks = n_ranks;
  ctx->p2p.write(0, CollFacts{net::Func::kP2p, net::Algo::kUnknown, net::Proto::kUnknown, net::DataType::kUnknown, 0,
                           0, true});
  *context = ctx.release();
  // NetPlugin alone: NCCL still builds the Coll -> ProxyOp -> ProxyStep chain it parents.
  *mask = ncclProfileNetPlugin;
  net::set_profiler_active();
  TRIM_INFO("NET/Trim: profiler plugin active for comm {:#x} (rank {} of {}): sends are classified from NCCL's "
            "event chain",
            comm_id, rank, n_ranks);
  return ncclSuccess;
}

void answer(const StepObj* step, net::OpQuery* q) {
  const OpObj* op = step->op;
  if (op == nullptr || !op->coll.valid) return;
  net::OpInfo& i = q->info;
  i.func = op->coll.func;
  i.algo = op->coll.algo;
  i.proto = op->coll.proto;
  i.dtype = op->coll.dtype;
  i.count = op->coll.count;
  i.n_channels = op->coll.n_channels;
  i.n_ranks = op->n_ranks;
  i.op_steps = op->n_steps;
  i.chunk_bytes = op->chunk_bytes;
  i.peer = op->peer;
  i.is_send = op->is_send;
  i.step = step->step;
  q->filled = true;
}

ncclResult_t prof_start(void* context, void** handle, ncclProfilerEventDescr_trim_t* d) {
  if (handle == nullptr) return ncclInvalidArgument;
  *handle = nullptr;
  auto* ctx = static_cast<Context*>(context);
  if (ctx == nullptr || d == nullptr) return ncclSuccess;
  switch (d->type) {
    case ncclProfileColl: {
      const uint64_t seq = ctx->next.fetch_add(1, std::memory_order_relaxed);
      ctx->ring[seq % kCollRing].write(
          seq, CollFacts{parse_func(d->coll.func), parse_algo(d->coll.algo), parse_proto(d->coll.proto),
                         parse_dtype(d->coll.datatype), d->coll.nChannels, d->coll.count, true});
      *handle = coll_token(seq);
      break;
    }
    case ncclProfileP2p: *handle = &ctx->p2p; break;
    case ncclProfileProxyOp: {
      auto op = std::make_unique<OpObj>();
      // A parent from another process (PXN) is not ours to read.
      if (d->parentObj != nullptr && d->proxyOp.pid == getpid()) op->coll = ctx->parent_facts(d->parentObj);
      op->n_ranks = ctx->n_ranks;
      op->n_steps = d->proxyOp.nSteps;
      op->chunk_bytes = d->proxyOp.chunkSize;
      op->peer = d->proxyOp.peer;
      op->is_send = d->proxyOp.isSend != 0;
      *handle = op.release();
      break;
    }
    case ncclProfileProxyStep: {
      auto* op = static_cast<OpObj*>(d->parentObj);
      if (op == nullptr || is_coll_token(op) || op->kind != Kind::kOp || d->proxyStep.step < 0) break;
      StepObj& s = op->steps[static_cast<size_t>(d->proxyStep.step) % kNcclSteps];
      s.op = op;
      s.step = d->proxyStep.step;
      *handle = &s;
      break;
    }
    case ncclProfileNetPlugin: {
      // Only our own query, recognised by id and magic, is ever written to.
      auto* step = static_cast<const StepObj*>(d->parentObj);
      auto* q = static_cast<net::OpQuery*>(d->netPlugin.data);
      if (d->netPlugin.id != net::kProfilerPluginId || step == nullptr || is_coll_token(step) || q == nullptr ||
          q->magic != net::kOpQueryMagic || step->kind != Kind::kStep) {
        break;
      }
      answer(step, q);
      break;  // no event is kept: nothing to stop
    }
    default: break;
  }
  return ncclSuccess;
}

ncclResult_t prof_stop(void* handle) {
  if (handle == nullptr || is_coll_token(handle)) return ncclSuccess;
  // Every handle we give out starts with its Kind.
  if (*static_cast<const Kind*>(handle) == Kind::kOp) delete static_cast<OpObj*>(handle);
  return ncclSuccess;
}

ncclResult_t prof_record(void* handle, ncclProfilerEventState_t state, ncclProfilerEventStateArgs_trim_t* args) {
  (void)handle;
  (void)state;
  (void)args;
  return ncclSuccess;
}

ncclResult_t prof_finalize(void* context) {
  delete static_cast<Context*>(context);
  return ncclSuccess;
}

}  // namespace
}  // namespace trim::plugin

extern "C" {
__attribute__((visibility("default"))) ncclProfiler_trim_t ncclProfiler_v5 = {
    "Trim", trim::plugin::prof_init, trim::plugin::prof_start, trim::plugin::prof_stop, trim::plugin::prof_record,
    trim::plugin::prof_finalize};
__attribute__((visibility("default"))) ncclProfiler_trim_t ncclProfiler_v6 = {
    "Trim", trim::plugin::prof_init, trim::plugin::prof_start, trim::plugin::prof_stop, trim::plugin::prof_record,
    trim::plugin::prof_finalize};
}
