// libtrim-rht's GPU entry points where nvcc was missing at build time: they fail and say so.
#include "cuda/rht_common.h"
#include "cuda/trim_rht.h"

extern "C" {

int trim_rht_forward_cuda(void*, uint64_t, int, uint32_t, uint64_t, uint64_t, void*) {
  return trim::rht::fail("libtrim-rht was built without nvcc: no GPU rotation (the host twin works)");
}
int trim_rht_inverse_cuda(void*, uint64_t, int, uint32_t, uint64_t, uint64_t, void*) {
  return trim::rht::fail("libtrim-rht was built without nvcc: no GPU rotation (the host twin works)");
}
int trim_rht_cuda_available(void) {
  trim::rht::fail("libtrim-rht was built without nvcc");
  return 0;
}

}  // extern "C"
