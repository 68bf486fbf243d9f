// Which messages may be trimmed. One small unit on purpose: the NCCL-awareness issue grows it
// (datatype from the profiler, reduce-scatter phase only); every input that is missing makes
// the answer "exact".
#pragma once

#include <cstdint>

#include "codec/types.h"
#include "transport/net_api.h"

namespace trim::transport {

struct ClassifyInput {
  net::OpAttr attr;                        // v11 setNetAttr; kUnknown everywhere on v8-v10
  uint64_t bytes = 0;
  codec::DType declared = codec::DType::kRaw;  // NCCL_TRIM_DTYPE; kRaw = none declared
  codec::Scheme scheme = codec::Scheme::kNone;
  uint64_t min_bytes = 0;                  // NCCL_TRIM_MIN_BYTES
};

enum class ExactReason : uint8_t {
  kTrimmable = 0,  // not exact
  kNotCollective,  // p2p, broadcast, allgather, reduce or unknown op
  kNotSimple,      // LL / LL128 lines (or unknown protocol) must never change
  kNoDtype,        // no element type declared
  kTooSmall,       // below NCCL_TRIM_MIN_BYTES
  kNoScheme,       // NCCL_TRIM_SCHEME=none
};
const char* exact_reason_name(ExactReason r);

struct ClassifyResult {
  bool trimmable = false;
  codec::DType dtype = codec::DType::kRaw;  // the element type the codec uses (kRaw when exact)
  ExactReason reason = ExactReason::kNotCollective;
};

ClassifyResult classify(const ClassifyInput& in);

}  // namespace trim::transport
