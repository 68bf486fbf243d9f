// How far each rank's fp32 AllReduce result is from rank 0's. When the ranks' result hashes
// differ, rank 0 publishes its result in memory the parent mapped shared before forking the
// ranks, and every other rank measures its NMSE against it: no result travels over the plugin
// or the bootstrap channel.
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/status.h"
#include "tools/harness/bootstrap.h"

namespace trim::harness {

// Anonymous shared memory, inherited across fork. Pages are only backed once touched, so an
// unused buffer (identical replicas) costs nothing.
class SharedBuffer {
 public:
  explicit SharedBuffer(size_t bytes);
  ~SharedBuffer();
  SharedBuffer(const SharedBuffer&) = delete;
  SharedBuffer& operator=(const SharedBuffer&) = delete;
  char* data() const { return data_; }
  size_t bytes() const { return bytes_; }

 private:
  char* data_ = nullptr;
  size_t bytes_ = 0;
};

// Every rank calls it after the same AllReduce, with its result (`elems` fp32 values) and its
// hash; returns this rank's NMSE against rank 0 (0 when every hash matches rank 0's).
Result<double> replica_nmse(RankChannel* chan, int rank, SharedBuffer* shared, const void* result, size_t elems,
                            uint64_t hash);

}  // namespace trim::harness
