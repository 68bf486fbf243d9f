// The profiler and tuner plugins of the built .so, called as NCCL calls them: through the
// exported tables, with NCCL's event chain (Coll -> ProxyOp -> ProxyStep -> NetPlugin) and
// NCCL's cost table.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <vector>

#include "plugin/nccl_ext.h"
#include "tests/env_guard.h"
#include "transport/net_api.h"
#include "tests/test_paths.h"

namespace {

namespace net = trim::net;

void quiet_logger(ncclDebugLogLevel, unsigned long, const char*, int, const char*, ...) {}

class ExtPlugins : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { handle_ = dlopen(trim::testing::plugin_path().c_str(), RTLD_NOW | RTLD_LOCAL); }
  void SetUp() override {
    ASSERT_NE(handle_, nullptr) << dlerror();
    v5_ = static_cast<ncclProfiler_trim_t*>(dlsym(handle_, "ncclProfiler_v5"));
    v6_ = static_cast<ncclProfiler_trim_t*>(dlsym(handle_, "ncclProfiler_v6"));
    t5_ = static_cast<ncclTuner_v5_trim_t*>(dlsym(handle_, "ncclTunerPlugin_v5"));
    t6_ = static_cast<ncclTuner_v6_trim_t*>(dlsym(handle_, "ncclTunerPlugin_v6"));
    ASSERT_NE(v5_, nullptr);
    ASSERT_NE(v6_, nullptr);
    ASSERT_NE(t5_, nullptr);
    ASSERT_NE(t6_, nullptr);
    ASSERT_EQ(v6_->init(&ctx_, 7, &mask_, "test", 4, 4, 0, quiet_logger), ncclSuccess);
  }
  void TearDown() override {
    if (ctx_ != nullptr) {
      EXPECT_EQ(v6_->finalize(ctx_), ncclSuccess);
    }
  }

  void* start(ncclProfilerEventDescr_trim_t d) {
    void* h = reinterpret_cast<void*>(0x1);  // NCCL's slot may hold garbage: start must overwrite it
    EXPECT_EQ(v6_->startEvent(ctx_, &h, &d), ncclSuccess);
    return h;
  }
  void* coll(const char* func, const char* dtype, const char* algo, const char* proto) {
    ncclProfilerEventDescr_trim_t d{};
    d.type = ncclProfileColl;
    d.coll.func = func;
    d.coll.datatype = dtype;
    d.coll.algo = algo;
    d.coll.proto = proto;
    d.coll.count = 12345;
    d.coll.nChannels = 2;
    return start(d);
  }
  void* proxy_op(void* parent, int n_steps, pid_t pid = getpid()) {
    ncclProfilerEventDescr_trim_t d{};
    d.type = ncclProfileProxyOp;
    d.parentObj = parent;
    d.proxyOp.pid = pid;
    d.proxyOp.nSteps = n_steps;
    d.proxyOp.chunkSize = 1 << 20;
    d.proxyOp.peer = 1;
    d.proxyOp.isSend = 1;
    return start(d);
  }
  void* step(void* op, int s) {
    ncclProfilerEventDescr_trim_t d{};
    d.type = ncclProfileProxyStep;
    d.parentObj = op;
    d.proxyStep.step = s;
    return start(d);
  }
  // What NCCL's callback does with the net plugin's start: a NetPlugin event under the step.
  net::OpQuery ask(void* step_handle, int64_t id = net::kProfilerPluginId) {
    net::OpQuery q;
    ncclProfilerEventDescr_trim_t d{};
    d.type = ncclProfileNetPlugin;
    d.parentObj = step_handle;
    d.netPlugin.id = id;
    d.netPlugin.data = &q;
    EXPECT_EQ(start(d), nullptr) << "no event is kept for a query";
    return q;
  }

  static void* handle_;
  ncclProfiler_trim_t* v5_ = nullptr;
  ncclProfiler_trim_t* v6_ = nullptr;
  ncclTuner_v5_trim_t* t5_ = nullptr;
  ncclTuner_v6_trim_t* t6_ = nullptr;
  void* ctx_ = nullptr;
  int mask_ = 0;
};
void* ExtPlugins::handle_ = nullptr;

TEST_F(ExtPlugins, TablesAreNamedTrimAndAskOnlyForNetPluginEvents) {
  EXPECT_STREQ(v5_->name, "Trim");
  EXPECT_STREQ(v6_->name, "Trim");
  EXPECT_STREQ(t5_->name, "Trim");
  EXPECT_STREQ(t6_->name, "Trim");
  EXPECT_EQ(t6_->getChunkSize, nullptr);  // chunk sizes stay NCCL's
  EXPECT_EQ(mask_, ncclProfileNetPlugin);
}

TEST_F(ExtPlugins, QueryIsAnsweredFromTheChainEvenAfterTheCollIsStopped) {
  void* c = coll("AllReduce", "ncclFloat32", "RING", "SIMPLE");
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(v6_->stopEvent(c), ncclSuccess);  // NCCL stops a Coll once enqueued, before its proxy ops run
  void* op = proxy_op(c, 36);
  ASSERT_NE(op, nullptr);
  void* s = step(op, 13);
  ASSERT_NE(s, nullptr);
  net::OpQuery q = ask(s);
  ASSERT_TRUE(q.filled);
  EXPECT_EQ(q.info.func, net::Func::kAllReduce);
  EXPECT_EQ(q.info.dtype, net::DataType::kF32);
  EXPECT_EQ(q.info.algo, net::Algo::kRing);
  EXPECT_EQ(q.info.proto, net::Proto::kSimple);
  EXPECT_EQ(q.info.count, 12345u);
  EXPECT_EQ(q.info.n_channels, 2);
  EXPECT_EQ(q.info.n_ranks, 4);
  EXPECT_EQ(q.info.op_steps, 36);
  EXPECT_EQ(q.info.step, 13);
  EXPECT_EQ(q.info.peer, 1);
  EXPECT_TRUE(q.info.is_send);
  // A recording of state changes is accepted and changes nothing.
  ncclProfilerEventStateArgs_trim_t args{};
  EXPECT_EQ(v6_->recordEventState(s, 9, &args), ncclSuccess);
  EXPECT_EQ(v6_->stopEvent(s), ncclSuccess);
  EXPECT_EQ(v6_->stopEvent(op), ncclSuccess);
}

TEST_F(ExtPlugins, DatatypesAndOpsAsNcclSpellsThem) {
  struct Case {
    const char* func;
    const char* dtype;
    const char* proto;
    net::Func want_func;
    net::DataType want_dtype;
    net::Proto want_proto;
  } cases[] = {
      {"AllReduce", "ncclInt32", "SIMPLE", net::Func::kAllReduce, net::DataType::kInteger, net::Proto::kSimple},
      {"ReduceScatter", "ncclBfloat16", "LL128", net::Func::kReduceScatter, net::DataType::kBF16, net::Proto::kLL128},
      {"Broadcast", "ncclFloat16", "LL", net::Func::kBroadcast, net::DataType::kF16, net::Proto::kLL},
      {"AllGather", "ncclFloat64", "SIMPLE", net::Func::kAllGather, net::DataType::kF64, net::Proto::kSimple},
      {"AlltoAll", "ncclUint8", "SIMPLE", net::Func::kUnknown, net::DataType::kInteger, net::Proto::kSimple},
      {"AllReduce", "Unknown", "Unknown", net::Func::kAllReduce, net::DataType::kUnknown, net::Proto::kUnknown},
  };
  for (const Case& k : cases) {
    void* c = coll(k.func, k.dtype, "RING", k.proto);
    void* op = proxy_op(c, 12);
    net::OpQuery q = ask(step(op, 0));
    ASSERT_TRUE(q.filled) << k.func;
    EXPECT_EQ(q.info.func, k.want_func) << k.func;
    EXPECT_EQ(q.info.dtype, k.want_dtype) << k.dtype;
    EXPECT_EQ(q.info.proto, k.want_proto) << k.proto;
    v6_->stopEvent(op);
    v6_->stopEvent(c);
  }
  // Point-to-point ops are SendRecv, whatever their buffers hold.
  ncclProfilerEventDescr_trim_t p2p{};
  p2p.type = ncclProfileP2p;
  p2p.p2p.func = "Send";
  p2p.p2p.datatype = "ncclFloat32";
  void* p = start(p2p);
  void* op = proxy_op(p, 4);
  net::OpQuery q = ask(step(op, 1));
  ASSERT_TRUE(q.filled);
  EXPECT_EQ(q.info.func, net::Func::kP2p);
  v6_->stopEvent(op);
}

// A ProxyOp that starts only after thousands of later collectives were enqueued finds its
// Coll record recycled: it must get no answer (exact), never the later collective's facts.
TEST_F(ExtPlugins, ARecycledCollRecordGivesNoAnswer) {
  void* old_coll = coll("AllReduce", "ncclFloat32", "RING", "SIMPLE");
  v6_->stopEvent(old_coll);
  void* fresh = proxy_op(old_coll, 12);
  EXPECT_TRUE(ask(step(fresh, 0)).filled);
  for (int i = 0; i < 5000; ++i) v6_->stopEvent(coll("AllReduce", "ncclInt32", "RING", "SIMPLE"));
  void* late = proxy_op(old_coll, 12);
  const net::OpQuery q = ask(step(late, 0));
  EXPECT_FALSE(q.filled) << "answered with dtype " << static_cast<int>(q.info.dtype);
  v6_->stopEvent(fresh);
  v6_->stopEvent(late);
}

TEST_F(ExtPlugins, NothingIsAnsweredWithoutAChainOrForAnotherPlugin) {
  void* c = coll("AllReduce", "ncclFloat32", "RING", "SIMPLE");
  // Another plugin's event id: its data is not ours to write.
  void* op = proxy_op(c, 12);
  void* s = step(op, 2);
  EXPECT_FALSE(ask(s, 42).filled);
  // A query without our magic is left alone.
  net::OpQuery q;
  q.magic = 1;
  ncclProfilerEventDescr_trim_t d{};
  d.type = ncclProfileNetPlugin;
  d.parentObj = s;
  d.netPlugin.id = net::kProfilerPluginId;
  d.netPlugin.data = &q;
  start(d);
  EXPECT_FALSE(q.filled);
  // A proxy op of another process (PXN): its parent pointer is not ours to read.
  void* foreign = proxy_op(c, 12, getpid() + 1);
  EXPECT_FALSE(ask(step(foreign, 0)).filled);
  // No parent at all.
  void* orphan = proxy_op(nullptr, 12);
  EXPECT_FALSE(ask(step(orphan, 0)).filled);
  EXPECT_EQ(step(nullptr, 0), nullptr);
  EXPECT_FALSE(ask(nullptr).filled);
  // Events we have no use for get no handle; stopping null is fine.
  ncclProfilerEventDescr_trim_t group{};
  group.type = ncclProfileGroup;
  EXPECT_EQ(start(group), nullptr);
  EXPECT_EQ(v6_->stopEvent(nullptr), ncclSuccess);
  for (void* h : {op, foreign, orphan}) v6_->stopEvent(h);
}

// NCCL's cost table: float[algo][proto], passed as float**.
struct CostTable {
  static constexpr int kAlgos = 7, kProtos = 3;
  float t[kAlgos][kProtos];
  CostTable() {
    for (auto& row : t)
      for (float& x : row) x = 5.0f;
    t[NCCL_ALGO_TREE][NCCL_PROTO_SIMPLE] = 1.0f;
  }
  float** ptr() { return reinterpret_cast<float**>(t); }
};

TEST_F(ExtPlugins, TunerMakesRingSimpleCheapestOnlyForLargeReductions) {
  void* tctx = nullptr;
  ASSERT_EQ(t5_->init(&tctx, 1, 4, 4, quiet_logger, nullptr, nullptr), ncclSuccess);
  int channels = 0;
  CostTable big;
  ASSERT_EQ(t5_->getCollInfo(tctx, ncclFuncAllReduce, 1 << 20, 1, big.ptr(), 7, 3, 0, &channels), ncclSuccess);
  EXPECT_EQ(big.t[NCCL_ALGO_RING][NCCL_PROTO_SIMPLE], 0.0f);
  EXPECT_EQ(big.t[NCCL_ALGO_TREE][NCCL_PROTO_SIMPLE], 1.0f);  // everything else untouched
  EXPECT_EQ(big.t[NCCL_ALGO_RING][NCCL_PROTO_LL], 5.0f);
  EXPECT_EQ(channels, 0);
  CostTable rs;
  t5_->getCollInfo(tctx, ncclFuncReduceScatter, 1 << 20, 1, rs.ptr(), 7, 3, 0, &channels);
  EXPECT_EQ(rs.t[NCCL_ALGO_RING][NCCL_PROTO_SIMPLE], 0.0f);
  for (ncclFunc_t f : {ncclFuncBroadcast, ncclFuncAllGather, ncclFuncReduce}) {
    CostTable other;
    t5_->getCollInfo(tctx, f, 1 << 20, 1, other.ptr(), 7, 3, 0, &channels);
    EXPECT_EQ(other.t[NCCL_ALGO_RING][NCCL_PROTO_SIMPLE], 5.0f) << f;
  }
  CostTable small;
  t5_->getCollInfo(tctx, ncclFuncAllReduce, 65535, 1, small.ptr(), 7, 3, 0, &channels);
  EXPECT_EQ(small.t[NCCL_ALGO_RING][NCCL_PROTO_SIMPLE], 5.0f);  // below NCCL_TRIM_MIN_BYTES: never trimmed
  CostTable unavailable;
  unavailable.t[NCCL_ALGO_RING][NCCL_PROTO_SIMPLE] = NCCL_ALGO_PROTO_IGNORE;
  t5_->getCollInfo(tctx, ncclFuncAllReduce, 1 << 20, 1, unavailable.ptr(), 7, 3, 0, &channels);
  EXPECT_EQ(unavailable.t[NCCL_ALGO_RING][NCCL_PROTO_SIMPLE], NCCL_ALGO_PROTO_IGNORE);
  EXPECT_EQ(t5_->finalize(tctx), ncclSuccess);
}

TEST_F(ExtPlugins, TunerOffChangesNothing) {
  trim::testing::EnvGuard off{"NCCL_TRIM_TUNER", "0"};
  void* tctx = nullptr;
  ASSERT_EQ(t6_->init(&tctx, 1, 4, 4, quiet_logger, nullptr, nullptr), ncclSuccess);
  CostTable t;
  int channels = 0;
  t6_->getCollInfo(tctx, ncclFuncAllReduce, 1 << 20, 1, t.ptr(), 7, 3, 0, &channels);
  EXPECT_EQ(t.t[NCCL_ALGO_RING][NCCL_PROTO_SIMPLE], 5.0f);
  EXPECT_EQ(t6_->finalize(tctx), ncclSuccess);
  trim::testing::EnvGuard bad{"NCCL_TRIM_TUNER", "yes"};
  EXPECT_NE(t6_->init(&tctx, 1, 4, 4, quiet_logger, nullptr, nullptr), ncclSuccess);
}

}  // namespace
