// The harness on a GPU machine: buffers in GPU (managed) memory for --ptr cuda, and
// --spin-kernel, which reproduces what NCCL's kernel does while its proxy calls the plugin —
// spin on the GPU until the host has moved the data — so a plugin call that waits for the
// device hangs here as it hangs under NCCL.
#pragma once

#include <memory>
#include <string>

#include "common/status.h"
#include "tools/harness/options.h"

namespace trim::gpu {
class SpinKernel;
}

namespace trim::harness {

// --ptr cuda with a real GPU (not NCCL_TRIM_TEST_GPU=emulate*): the ranks' buffers are
// managed memory, which the plugin encodes/decodes on the GPU and the rank reads on the CPU.
bool use_gpu_memory(const Options& opt);

// One spinning kernel per iteration: begin() launches it (it spins until released), end()
// releases it once the iteration's operations have completed and waits, bounded, for it to
// exit. A no-op without --spin-kernel.
class IterationSpin {
 public:
  IterationSpin();
  ~IterationSpin();
  IterationSpin(const IterationSpin&) = delete;
  IterationSpin& operator=(const IterationSpin&) = delete;
  // Needs a GPU; the error says why not.
  Status start(const Options& opt);
  Status begin(int iteration);
  Status end(int iteration);
  bool active() const { return kernel_ != nullptr; }

 private:
  std::unique_ptr<gpu::SpinKernel> kernel_;
};

}  // namespace trim::harness
