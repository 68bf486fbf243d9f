// The tuner plugin NCCL finds in this library (ncclTunerPlugin_v5 for 2.28, _v6 for 2.30)
// when no other tuner is configured. Only ring/SIMPLE traffic of AllReduce and ReduceScatter
// may ever be trimmed, so for those collectives of at least NCCL_TRIM_MIN_BYTES it makes
// RING/SIMPLE the cheapest entry of NCCL's cost table (NCCL picks the smallest non-negative
// cost) and leaves every other choice, and every other collective, to NCCL.
#include <memory>
#include <string>
#include <vector>

#include "common/log.h"
#include "common/params.h"
#include "plugin/nccl_ext.h"
#include "common/param_enums.h"

namespace trim::plugin {
namespace {

struct TunerContext {
  bool enabled = true;
  size_t min_bytes = 0;
  uint64_t forced = 0;
};

ncclResult_t tuner_init(void** ctx, uint64_t comm_id, size_t n_ranks, size_t n_nodes, ncclDebugLogger_t logfn,
                        ncclNvlDomainInfo_trim_t* nvl, ncclTunerConstants_trim_t* constants) {
  (void)n_nodes;
  (void)logfn;
  (void)nvl;
  (void)constants;
  if (ctx == nullptr) return ncclInvalidArgument;
  std::vector<std::string> warnings;
  Result<Params> p = process_params(&warnings);  // the net plugin's init loaded them already
  if (!p) {
    TRIM_WARN("NET/Trim: tuner: {}", p.status().message());
    return ncclInvalidUsage;
  }
  for (const std::string& w : warnings) TRIM_WARN("NET/Trim: {}", w);
  auto t = std::make_unique<TunerContext>();
  t->enabled = param::tuner(*p) == param::Tuner::k1;
  t->min_bytes = static_cast<size_t>(p->min_bytes);
  TRIM_INFO("NET/Trim: tuner plugin {} for comm {:#x} ({} ranks): AllReduce/ReduceScatter of >= {} B {}",
            t->enabled ? "active" : "loaded but off (NCCL_TRIM_TUNER=0)", comm_id, n_ranks, t->min_bytes,
            t->enabled ? "prefer RING/SIMPLE" : "left to NCCL");
  *ctx = t.release();
  return ncclSuccess;
}

ncclResult_t tuner_get_coll_info(void* ctx, ncclFunc_t coll, size_t bytes, int pipe_ops, float** cost_table,
                                 int num_algo, int num_proto, int reg_buff, int* n_channels) {
  (void)pipe_ops;
  (void)reg_buff;
  (void)n_channels;  // 0 = NCCL decides
  auto* t = static_cast<TunerContext*>(ctx);
  if (t == nullptr || cost_table == nullptr || !t->enabled) return ncclSuccess;
  if (coll != ncclFuncAllReduce && coll != ncclFuncReduceScatter) return ncclSuccess;
  if (bytes < t->min_bytes || num_algo <= NCCL_ALGO_RING || num_proto <= NCCL_PROTO_SIMPLE) return ncclSuccess;
  // NCCL passes its float[num_algo][num_proto] table as float**.
  float* table = reinterpret_cast<float*>(cost_table);
  float& ring_simple = table[NCCL_ALGO_RING * num_proto + NCCL_PROTO_SIMPLE];
  if (ring_simple == NCCL_ALGO_PROTO_IGNORE) return ncclSuccess;  // not available on this communicator
  ring_simple = 0.0f;
  ++t->forced;
  return ncclSuccess;
}

ncclResult_t tuner_finalize(void* ctx) {
  auto* t = static_cast<TunerContext*>(ctx);
  if (t != nullptr) TRIM_INFO("NET/Trim: tuner: RING/SIMPLE preferred for {} collectives", t->forced);
  delete t;
  return ncclSuccess;
}

}  // namespace
}  // namespace trim::plugin

extern "C" {
__attribute__((visibility("default"))) ncclTuner_v5_trim_t ncclTunerPlugin_v5 = {
    "Trim", trim::plugin::tuner_init, trim::plugin::tuner_get_coll_info, trim::plugin::tuner_finalize};
// getChunkSize is optional (NCCL checks for null): chunk sizes stay NCCL's.
__attribute__((visibility("default"))) ncclTuner_v6_trim_t ncclTunerPlugin_v6 = {
    "Trim", trim::plugin::tuner_init, trim::plugin::tuner_get_coll_info, trim::plugin::tuner_finalize, nullptr};
}
