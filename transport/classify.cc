#include "transport/classify.h"

namespace trim::transport {

const char* exact_reason_name(ExactReason r) {
  switch (r) {
    case ExactReason::kTrimmable: return "trimmable";
    case ExactReason::kNotCollective: return "not_allreduce_or_reducescatter";
    case ExactReason::kNotSimple: return "not_simple_protocol";
    case ExactReason::kNoDtype: return "no_dtype";
    case ExactReason::kNotFloat: return "not_float";
    case ExactReason::kTooSmall: return "below_min_bytes";
    case ExactReason::kNoScheme: return "scheme_none";
    case ExactReason::kAllgatherPhase: return "allgather_phase";
    case ExactReason::kPhaseUnknown: return "phase_unknown";
    case ExactReason::kCount: break;
  }
  return "unknown";
}

const char* dtype_source_name(DtypeSource s) {
  switch (s) {
    case DtypeSource::kNone: return "none";
    case DtypeSource::kProfiler: return "profiler";
    case DtypeSource::kDeclared: return "NCCL_TRIM_DTYPE";
  }
  return "unknown";
}

const char* phase_name(Phase p) {
  switch (p) {
    case Phase::kNone: return "none";
    case Phase::kReduceScatter: return "reduce_scatter";
    case Phase::kAllgather: return "allgather";
  }
  return "unknown";
}

Phase ring_allreduce_phase(int n_ranks, int op_steps, int step) {
  if (n_ranks < 2 || op_steps <= 0 || step < 0 || step >= op_steps) return Phase::kNone;
  const int per_loop = 2 * (n_ranks - 1) * kTransfersPerRingStep;
  if (op_steps % per_loop != 0) return Phase::kNone;  // not the ring schedule we know
  const int ring_step = (step % per_loop) / kTransfersPerRingStep;
  return ring_step < n_ranks - 1 ? Phase::kReduceScatter : Phase::kAllgather;
}

namespace {

codec::DType codec_dtype(net::DataType d) {
  switch (d) {
    case net::DataType::kF32: return codec::DType::kF32;
    case net::DataType::kBF16: return codec::DType::kBF16;
    case net::DataType::kF16: return codec::DType::kF16;
    default: return codec::DType::kRaw;
  }
}

}  // namespace

ClassifyResult classify(const ClassifyInput& in) {
  ClassifyResult out;
  // What the op is: the profiler chain is per send and exact; the setNetAttr hint is per
  // context; v8-v10 have neither unless the user forces it.
  net::Func func = in.attr.func;
  net::Proto proto = in.attr.proto;
  net::Algo algo = in.attr.algo;
  if (in.info != nullptr) {
    func = in.info->func;
    proto = in.info->proto;
    algo = in.info->algo;
  } else if (in.force && func == net::Func::kUnknown) {
    func = net::Func::kAllReduce;
    proto = net::Proto::kSimple;
  }
  // The element type: NCCL's word beats the user's declaration.
  codec::DType dtype = codec::DType::kRaw;
  bool not_float = false;
  if (in.info != nullptr && in.info->dtype != net::DataType::kUnknown) {
    out.source = DtypeSource::kProfiler;
    dtype = codec_dtype(in.info->dtype);
    not_float = dtype == codec::DType::kRaw;
  } else if (in.declared != codec::DType::kRaw) {
    out.source = DtypeSource::kDeclared;
    dtype = in.declared;
  }
  if (func == net::Func::kReduceScatter) {
    out.phase = Phase::kReduceScatter;
  } else if (func == net::Func::kAllReduce && algo == net::Algo::kRing && in.info != nullptr) {
    out.phase = ring_allreduce_phase(in.info->n_ranks, in.info->op_steps, in.info->step);
  }

  if (func != net::Func::kAllReduce && func != net::Func::kReduceScatter) {
    out.reason = ExactReason::kNotCollective;
  } else if (proto != net::Proto::kSimple) {
    out.reason = ExactReason::kNotSimple;
  } else if (not_float) {
    out.reason = ExactReason::kNotFloat;
  } else if (dtype == codec::DType::kRaw) {
    out.reason = ExactReason::kNoDtype;
  } else if (in.scheme == codec::Scheme::kNone) {
    out.reason = ExactReason::kNoScheme;
  } else if (in.bytes < in.min_bytes || in.bytes < codec::dtype_bytes(dtype)) {
    out.reason = ExactReason::kTooSmall;
  } else if (in.phase == PhaseRule::kReduceScatter && out.phase == Phase::kAllgather) {
    out.reason = ExactReason::kAllgatherPhase;
  } else if (in.phase == PhaseRule::kReduceScatter && out.phase == Phase::kNone) {
    out.reason = ExactReason::kPhaseUnknown;
  } else {
    out.trimmable = true;
    out.dtype = dtype;
    out.reason = ExactReason::kTrimmable;
  }
  return out;
}

}  // namespace trim::transport
