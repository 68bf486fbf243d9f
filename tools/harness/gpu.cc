#include "tools/harness/gpu.h"

#include "common/params.h"
#include "cuda/gpu_codec.h"
#include "common/param_enums.h"

namespace trim::harness {

bool use_gpu_memory(const Options& opt) {
  if (!opt.ptr_cuda) return false;
  Result<Params> p = process_params();  // the rank's environment is set by now
  if (p && param::test_gpu(*p) != param::TestGpu::kOff) return false;  // emulated: host memory stands in
  return gpu::gpu_available();
}

IterationSpin::IterationSpin() = default;
IterationSpin::~IterationSpin() = default;

Status IterationSpin::start(const Options& opt) {
  if (!opt.spin_kernel) return Status::ok();
  std::string err;
  kernel_ = gpu::SpinKernel::create(&err);
  if (!kernel_) return Status(Code::kUnavailable, "--spin-kernel needs a GPU: " + err);
  return Status::ok();
}

Status IterationSpin::begin(int iteration) {
  if (!kernel_) return Status::ok();
  std::string err;
  if (!kernel_->launch(static_cast<uint32_t>(iteration) + 1, &err)) return Status(Code::kSystem, err);
  return Status::ok();
}

Status IterationSpin::end(int iteration) {
  if (!kernel_) return Status::ok();
  kernel_->release(static_cast<uint32_t>(iteration) + 1);
  std::string err;
  // The kernel exits within microseconds of the flag: a second means the GPU is wedged.
  if (!kernel_->wait_done(5000, &err)) return Status(Code::kSystem, err);
  return Status::ok();
}

}  // namespace trim::harness
