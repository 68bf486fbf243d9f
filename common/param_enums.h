// Generated from common/params.def by `make docs` (trim-config --enums); a test fails when it
// is stale. One enum per enum knob, its values in the order of the knob's choices (which is
// the index Params stores), and a typed accessor, so no code compares bare indexes.
#pragma once

#include "common/params.h"

namespace trim::param {

// NCCL_TRIM_SCHEME: none|sign|sq|sd|rht
enum class Scheme : int { kNone = 0, kSign = 1, kSq = 2, kSd = 3, kRht = 4 };
inline Scheme scheme(const Params& p) { return static_cast<Scheme>(p.scheme); }

// NCCL_TRIM_HEAD_BITS: 1|2|16
enum class HeadBits : int { k1 = 0, k2 = 1, k16 = 2 };
inline HeadBits head_bits(const Params& p) { return static_cast<HeadBits>(p.head_bits); }

// NCCL_TRIM_HEAD_SCALE: unbiased|mse
enum class HeadScale : int { kUnbiased = 0, kMse = 1 };
inline HeadScale head_scale(const Params& p) { return static_cast<HeadScale>(p.head_scale); }

// NCCL_TRIM_ERROR_FEEDBACK: 0|1
enum class ErrorFeedback : int { k0 = 0, k1 = 1 };
inline ErrorFeedback error_feedback(const Params& p) { return static_cast<ErrorFeedback>(p.error_feedback); }

// NCCL_TRIM_QUIET_LAYOUT: exact|unrotated
enum class QuietLayout : int { kExact = 0, kUnrotated = 1 };
inline QuietLayout quiet_layout(const Params& p) { return static_cast<QuietLayout>(p.quiet_layout); }

// NCCL_TRIM_LOG_LEVEL: trace|debug|info|warn|error|off
enum class LogLevel : int { kTrace = 0, kDebug = 1, kInfo = 2, kWarn = 3, kError = 4, kOff = 5 };
inline LogLevel log_level(const Params& p) { return static_cast<LogLevel>(p.log_level); }

// NCCL_TRIM_DTYPE: none|fp32|bf16|fp16
enum class Dtype : int { kNone = 0, kFp32 = 1, kBf16 = 2, kFp16 = 3 };
inline Dtype dtype(const Params& p) { return static_cast<Dtype>(p.dtype); }

// NCCL_TRIM_PHASE: reduce_scatter|all
enum class Phase : int { kReduceScatter = 0, kAll = 1 };
inline Phase phase(const Params& p) { return static_cast<Phase>(p.phase); }

// NCCL_TRIM_TUNER: 0|1
enum class Tuner : int { k0 = 0, k1 = 1 };
inline Tuner tuner(const Params& p) { return static_cast<Tuner>(p.tuner); }

// NCCL_TRIM_FORCE: 0|1
enum class Force : int { k0 = 0, k1 = 1 };
inline Force force(const Params& p) { return static_cast<Force>(p.force); }

// NCCL_TRIM_HOOK_PRECONDITION: auto|off
enum class HookPrecondition : int { kAuto = 0, kOff = 1 };
inline HookPrecondition hook_precondition(const Params& p) { return static_cast<HookPrecondition>(p.hook_precondition); }

// NCCL_TRIM_RTO_UNDO: off|on
enum class RtoUndo : int { kOff = 0, kOn = 1 };
inline RtoUndo rto_undo(const Params& p) { return static_cast<RtoUndo>(p.rto_undo); }

// NCCL_TRIM_UDP_OFFLOAD: off|on
enum class UdpOffload : int { kOff = 0, kOn = 1 };
inline UdpOffload udp_offload(const Params& p) { return static_cast<UdpOffload>(p.udp_offload); }

// NCCL_TRIM_ZEROCOPY: auto|on|off
enum class Zerocopy : int { kAuto = 0, kOn = 1, kOff = 2 };
inline Zerocopy zerocopy(const Params& p) { return static_cast<Zerocopy>(p.zerocopy); }

// NCCL_TRIM_UDP_CHECKSUM: auto|zero|kernel
enum class UdpChecksum : int { kAuto = 0, kZero = 1, kKernel = 2 };
inline UdpChecksum udp_checksum(const Params& p) { return static_cast<UdpChecksum>(p.udp_checksum); }

// NCCL_TRIM_RX_CUT: auto|off|packet
enum class RxCut : int { kAuto = 0, kOff = 1, kPacket = 2 };
inline RxCut rx_cut(const Params& p) { return static_cast<RxCut>(p.rx_cut); }

}  // namespace trim::param
