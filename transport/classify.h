// Which messages may be trimmed. One small unit on purpose, with a table test of every
// combination: what NCCL says about a send (the v11 setNetAttr hint, and the profiler chain
// ProxyStep -> ProxyOp -> Coll), what the user declared, and the phase rule. Every input that
// is missing or inconsistent makes the answer "exact": never guess.
#pragma once

#include <cstdint>

#include "codec/types.h"
#include "transport/net_api.h"

namespace trim::transport {

// NCCL_TRIM_PHASE: which sends of a ring AllReduce may be trimmed.
enum class PhaseRule {
  kReduceScatter,  // only the first n-1 ring steps of each chunk (partial sums): replicas stay identical
  kAll,            // the allgather half too: every rank but the owner ends with estimates (replicas diverge)
};

// Where the element type came from.
enum class DtypeSource { kNone, kProfiler, kDeclared };
const char* dtype_source_name(DtypeSource s);

struct ClassifyInput {
  net::OpAttr attr;                        // v11 setNetAttr; kUnknown everywhere on v8-v10
  const net::OpInfo* info = nullptr;       // from our profiler; null when NCCL gave none
  uint64_t bytes = 0;
  codec::DType declared = codec::DType::kRaw;  // NCCL_TRIM_DTYPE; kRaw = none declared
  codec::Scheme scheme = codec::Scheme::kNone;
  uint64_t min_bytes = 0;                  // NCCL_TRIM_MIN_BYTES
  PhaseRule phase = PhaseRule::kReduceScatter;
  bool force = false;                      // NCCL_TRIM_FORCE: v8-v10 traffic counts as AllReduce SIMPLE
};

enum class ExactReason : uint8_t {
  kTrimmable = 0,  // not exact
  kNotCollective,  // p2p, broadcast, allgather, reduce or unknown op
  kNotSimple,      // LL / LL128 lines (or unknown protocol) must never change
  kNoDtype,        // no element type known (no profiler, nothing declared)
  kNotFloat,       // integers, fp64, fp8: the codec has no lossy form for them
  kTooSmall,       // below NCCL_TRIM_MIN_BYTES
  kNoScheme,       // NCCL_TRIM_SCHEME=none
  kAllgatherPhase, // final values of a ring AllReduce: trimming them makes replicas diverge
  kPhaseUnknown,   // ring position missing or inconsistent (or not a ring) under the reduce-scatter rule
  kCount
};
const char* exact_reason_name(ExactReason r);

enum class Phase : uint8_t { kNone, kReduceScatter, kAllgather };
const char* phase_name(Phase p);

struct ClassifyResult {
  bool trimmable = false;
  codec::DType dtype = codec::DType::kRaw;  // the element type the codec uses (kRaw when exact)
  ExactReason reason = ExactReason::kNotCollective;
  DtypeSource source = DtypeSource::kNone;
  Phase phase = Phase::kNone;
};

ClassifyResult classify(const ClassifyInput& in);

// Network transfers per ring step of a SIMPLE ring collective: chunkSteps / sliceSteps =
// (NCCL_STEPS/2) / (NCCL_STEPS/4) (src/include/collectives.h, 2.28-2.30, host buffers).
inline constexpr int kTransfersPerRingStep = 2;

// The half of a ring AllReduce that transfer `step` of a proxy op with `op_steps` transfers
// belongs to, for `n_ranks` ranks: each loop (chunk) is 2(n-1) ring steps, the first n-1
// reduce-scatter (src/device/all_reduce.h runRing). kNone when the numbers do not fit.
Phase ring_allreduce_phase(int n_ranks, int op_steps, int step);

}  // namespace trim::transport
