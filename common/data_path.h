// The data-path rule for device calls: NCCL's kernel spins on the GPU while its proxy thread
// (isend/irecv/test) and our progress engine move its data, so a call on those threads that
// waits for other work on the device never returns. Every device call is declared with its
// class; the threads of the data path say so with a Scope; a call that may wait made inside a
// Scope is a violation: counted and logged always, refused when enforcement is on (test-only:
// NCCL_TRIM_TEST_GPU=emulate*, NCCL_TRIM_TEST_CUDA_CHECK=on), so CI catches a regression on
// CPU machines. No CUDA here: the CUDA wrapper (cuda/cuda_calls.h) and the emulated device
// (transport/device_codec.cc) both check through this unit.
#pragma once

#include <cstdint>
#include <string>

namespace trim::data_path {

enum class CallClass : uint8_t {
  kNeverWaits,  // launches and async copies on our own non-blocking streams, event record/query
  kMayWait,     // allocation/free, pinned or host registration, sync copies, synchronize, module load
};

// Marks the calling thread as on the data path while alive (nests).
class Scope {
 public:
  Scope();
  ~Scope();
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;
};

// Lifts a Scope for a stretch that is allowed to wait (tests only; never in the plugin).
class OffScope {
 public:
  OffScope();
  ~OffScope();
  OffScope(const OffScope&) = delete;
  OffScope& operator=(const OffScope&) = delete;

 private:
  int saved_;
};

bool on_data_path();

// Whether a call of class `cls` named `what` may proceed on this thread. False only for a
// kMayWait call inside a Scope with enforcement on; every such call is counted either way.
bool allow(CallClass cls, const char* what);

// Process-wide enforcement switch (off by default).
void set_enforce(bool on);
bool enforcing();

// Violations since start (or reset), and the last one's description ("cudaFree on the data path").
uint64_t violations();
std::string last_violation();
void reset_violations();

}  // namespace trim::data_path
