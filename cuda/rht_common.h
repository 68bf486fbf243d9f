// What the host twin and the GPU side of libtrim-rht share: argument checks and the per-thread
// error text behind trim_rht_last_error().
#pragma once

#include <cstdint>
#include <string>

namespace trim::rht {

// Records `what` as this thread's last error and returns -1 (the ABI's failure value).
int fail(std::string what);
// "" when the arguments are valid, else what is wrong with them.
std::string check_args(const void* data, uint64_t n, int dtype, uint32_t row_log2, uint64_t segment_elems);
uint32_t elem_bytes(int dtype);

}  // namespace trim::rht
