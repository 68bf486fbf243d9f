#include "tools/harness/replica.h"

#include <sys/mman.h>

#include <cstring>
#include <string>
#include <vector>

#include "tools/harness/data.h"

namespace trim::harness {

SharedBuffer::SharedBuffer(size_t bytes) {
  void* p = mmap(nullptr, bytes == 0 ? 1 : bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS | MAP_NORESERVE,
                 -1, 0);
  if (p == MAP_FAILED) return;  // replica_nmse reports it if ever needed
  data_ = static_cast<char*>(p);
  bytes_ = bytes;
}

SharedBuffer::~SharedBuffer() {
  if (data_ != nullptr) munmap(data_, bytes_ == 0 ? 1 : bytes_);
}

Result<double> replica_nmse(RankChannel* chan, int rank, SharedBuffer* shared, const void* result, size_t elems,
                            uint64_t hash) {
  const std::string mine(reinterpret_cast<const char*>(&hash), sizeof(hash));
  Result<std::vector<std::string>> hashes = chan->allgather(mine);
  if (!hashes) return hashes.status();
  bool same = true;
  for (const std::string& h : *hashes) same = same && h == (*hashes)[0];
  if (same) return 0.0;
  // Every rank saw the same hashes, so all take this branch together.
  const size_t bytes = elems * 4;
  const bool fits = shared != nullptr && shared->data() != nullptr && shared->bytes() >= bytes;
  if (rank == 0 && fits) std::memcpy(shared->data(), result, bytes);
  TRIM_RETURN_IF_ERROR(chan->barrier());
  double nmse = 0;
  if (rank != 0 && fits) {
    nmse = nmse_between(static_cast<const float*>(result), reinterpret_cast<const float*>(shared->data()), elems);
  }
  TRIM_RETURN_IF_ERROR(chan->barrier());  // rank 0 may overwrite the buffer after this
  if (!fits) return Status(Code::kInternal, "replicas differ but no shared buffer to compare them");
  return nmse;
}

}  // namespace trim::harness
