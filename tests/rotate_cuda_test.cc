// The GPU rotation (trim_rht_forward_cuda / trim_rht_inverse_cuda) against the host twin, bit for
// bit (NaN payloads aside: tests/rotate_cases.h), on the emulator's odd cases, enqueued on two
// streams at once; plus its no-ops, refusals and error hygiene. Every test skips, saying why,
// where trim_rht_cuda_available() is 0 (no GPU, no driver, or a build without nvcc).
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "cuda/trim_rht.h"
#include "tests/rotate_cases.h"

#ifdef TRIM_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace {

namespace tt = trim::testing;

constexpr uint64_t kSeed = 0xC0FFEE1234ull;

class RotateCuda : public ::testing::Test {
 protected:
  void SetUp() override {
#ifdef TRIM_HAVE_CUDA
    if (trim_rht_cuda_available() == 0) GTEST_SKIP() << "no usable GPU: " << trim_rht_last_error();
#else
    GTEST_SKIP() << "built without nvcc: " << (trim_rht_cuda_available() ? "" : trim_rht_last_error());
#endif
  }
};

#ifdef TRIM_HAVE_CUDA

#define CUDA_OK(call) ASSERT_EQ((call), cudaSuccess) << #call << ": " << cudaGetErrorString(cudaGetLastError())

// Device memory freed on scope exit.
class DeviceBytes {
 public:
  explicit DeviceBytes(size_t bytes) {
    if (cudaMalloc(&p_, bytes == 0 ? 1 : bytes) != cudaSuccess) p_ = nullptr;
  }
  ~DeviceBytes() {
    if (p_ != nullptr) cudaFree(p_);
  }
  DeviceBytes(const DeviceBytes&) = delete;
  DeviceBytes& operator=(const DeviceBytes&) = delete;
  uint8_t* get() const { return static_cast<uint8_t*>(p_); }

 private:
  void* p_ = nullptr;
};

class Stream {
 public:
  Stream() {
    if (cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking) != cudaSuccess) s_ = nullptr;
  }
  ~Stream() {
    if (s_ != nullptr) cudaStreamDestroy(s_);
  }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  cudaStream_t get() const { return s_; }

 private:
  cudaStream_t s_ = nullptr;
};

int rotate(bool inverse, void* d, const tt::RotateCase& c, int dtype, cudaStream_t s) {
  return inverse ? trim_rht_inverse_cuda(d, c.n, dtype, c.row_log2, c.segment_elems, kSeed, s)
                 : trim_rht_forward_cuda(d, c.n, dtype, c.row_log2, c.segment_elems, kSeed, s);
}

// One bucket on the device, `shift` elements past an aligned allocation.
struct Job {
  tt::RotateCase c;
  int dtype;
  bool inverse;
  uint64_t shift;
  std::vector<uint8_t> in, want;
  std::unique_ptr<DeviceBytes> mem;
  uint8_t* data() const { return mem->get() + shift * tt::dtype_size(dtype); }
};

// Every case, dtype and direction (plain and with specials), half of them on each stream, all in
// flight at once; then each result against the host twin.
void expect_all_match(uint64_t shift, size_t max_cases) {
  Stream s1, s2;
  ASSERT_TRUE(s1.get() != nullptr && s2.get() != nullptr);
  std::vector<Job> jobs;
  const std::vector<tt::RotateCase> cases = tt::rotate_cases();
  for (size_t k = 0; k < cases.size() && k < max_cases; ++k) {
    for (int dtype : {TRIM_RHT_F32, TRIM_RHT_BF16, TRIM_RHT_F16}) {
      for (bool inverse : {false, true}) {
        for (bool specials : {false, true}) {
          Job j{cases[k], dtype, inverse, shift, {}, {}, nullptr};
          j.in = tt::rotate_input(j.c.n, dtype, static_cast<uint32_t>(k * 3 + dtype), specials);
          std::string err;
          j.want = tt::host_twin(j.in, j.c, dtype, kSeed, inverse, &err);
          ASSERT_EQ(err, "");
          j.mem = std::make_unique<DeviceBytes>(j.in.size() + 16);
          ASSERT_NE(j.mem->get(), nullptr);
          jobs.push_back(std::move(j));
        }
      }
    }
  }
  for (size_t i = 0; i < jobs.size(); ++i) {
    Job& j = jobs[i];
    const cudaStream_t s = i % 2 ? s2.get() : s1.get();
    CUDA_OK(cudaMemcpyAsync(j.data(), j.in.data(), j.in.size(), cudaMemcpyHostToDevice, s));
    ASSERT_EQ(rotate(j.inverse, j.data(), j.c, j.dtype, s), 0) << trim_rht_last_error();
  }
  CUDA_OK(cudaStreamSynchronize(s1.get()));
  CUDA_OK(cudaStreamSynchronize(s2.get()));
  for (const Job& j : jobs) {
    std::vector<uint8_t> got(j.in.size());
    CUDA_OK(cudaMemcpy(got.data(), j.data(), got.size(), cudaMemcpyDeviceToHost));
    EXPECT_EQ(tt::compare_bits(got, j.want, j.dtype), "")
        << j.c.name() << " " << tt::dtype_label(j.dtype) << (j.inverse ? " inverse" : " forward") << " shift "
        << j.shift;
  }
}

TEST_F(RotateCuda, MatchesHostTwinBitForBit) { expect_all_match(0, SIZE_MAX); }

// Buckets that start off 16-byte alignment take the one-by-one load.
TEST_F(RotateCuda, UnalignedBucketMatchesHostTwin) {
  expect_all_match(1, 48);
  expect_all_match(3, 48);
}

// A bucket of many tiles on the legacy default stream (NULL), with segments of odd length, and
// GPU forward then GPU inverse: the host twin's round trip bit for bit.
TEST_F(RotateCuda, LargeBucketRoundTripOnDefaultStream) {
  const tt::RotateCase c{(1ull << 22) + 12345, 15, 1000003};
  for (int dtype : {TRIM_RHT_F32, TRIM_RHT_BF16}) {
    const std::vector<uint8_t> in = tt::rotate_input(c.n, dtype, 8, false);
    std::string err;
    const std::vector<uint8_t> fwd = tt::host_twin(in, c, dtype, kSeed, false, &err);
    const std::vector<uint8_t> back = tt::host_twin(fwd, c, dtype, kSeed, true, &err);
    ASSERT_EQ(err, "");
    DeviceBytes d(in.size());
    ASSERT_NE(d.get(), nullptr);
    CUDA_OK(cudaMemcpy(d.get(), in.data(), in.size(), cudaMemcpyHostToDevice));
    ASSERT_EQ(rotate(false, d.get(), c, dtype, nullptr), 0) << trim_rht_last_error();
    std::vector<uint8_t> got(in.size());
    CUDA_OK(cudaMemcpy(got.data(), d.get(), got.size(), cudaMemcpyDeviceToHost));
    EXPECT_EQ(tt::compare_bits(got, fwd, dtype), "") << tt::dtype_label(dtype) << " forward";
    ASSERT_EQ(rotate(true, d.get(), c, dtype, nullptr), 0) << trim_rht_last_error();
    CUDA_OK(cudaMemcpy(got.data(), d.get(), got.size(), cudaMemcpyDeviceToHost));
    EXPECT_EQ(tt::compare_bits(got, back, dtype), "") << tt::dtype_label(dtype) << " round trip";
  }
}

TEST_F(RotateCuda, ZeroElementsIsANoOp) {
  EXPECT_EQ(trim_rht_forward_cuda(nullptr, 0, TRIM_RHT_F32, 15, 0, 1, nullptr), 0);
  EXPECT_EQ(trim_rht_inverse_cuda(nullptr, 0, TRIM_RHT_BF16, 3, 0, 1, nullptr), 0);
  const std::vector<uint8_t> in = tt::rotate_input(64, TRIM_RHT_F32, 2, false);
  DeviceBytes d(in.size());
  ASSERT_NE(d.get(), nullptr);
  CUDA_OK(cudaMemcpy(d.get(), in.data(), in.size(), cudaMemcpyHostToDevice));
  EXPECT_EQ(trim_rht_forward_cuda(d.get(), 0, TRIM_RHT_F32, 5, 0, 1, nullptr), 0);
  CUDA_OK(cudaDeviceSynchronize());
  std::vector<uint8_t> got(in.size());
  CUDA_OK(cudaMemcpy(got.data(), d.get(), got.size(), cudaMemcpyDeviceToHost));
  EXPECT_EQ(got, in);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

// Refused calls say why, enqueue nothing and leave no CUDA error behind; the next call works.
TEST_F(RotateCuda, RefusalsLeaveNoCudaError) {
  DeviceBytes d(4096);
  ASSERT_NE(d.get(), nullptr);
  std::vector<float> host(256);
  struct Bad {
    void* p;
    int dtype;
    uint32_t row_log2;
    const char* says;
  };
  const Bad bad[] = {{d.get(), 0, 3, "dtype"},
                     {d.get(), TRIM_RHT_F32, 16, "row_log2"},
                     {nullptr, TRIM_RHT_F32, 3, "null"},
                     {host.data(), TRIM_RHT_F32, 3, "host memory"},
                     {d.get() + 1, TRIM_RHT_BF16, 3, "aligned"},
                     {d.get() + 2, TRIM_RHT_F32, 3, "aligned"}};
  for (const Bad& b : bad) {
    EXPECT_EQ(trim_rht_forward_cuda(b.p, 256, b.dtype, b.row_log2, 0, 1, nullptr), -1) << b.says;
    EXPECT_NE(std::string(trim_rht_last_error()).find(b.says), std::string::npos) << trim_rht_last_error();
    EXPECT_EQ(cudaGetLastError(), cudaSuccess) << b.says;
  }
  EXPECT_EQ(trim_rht_forward_cuda(d.get(), 256, TRIM_RHT_F32, 8, 0, 1, nullptr), 0) << trim_rht_last_error();
  CUDA_OK(cudaDeviceSynchronize());
}

// An earlier runtime call's (non-sticky) error is not taken for the launch's.
TEST_F(RotateCuda, StaleErrorIsNotTheLaunchsFailure) {
  DeviceBytes d(4096);
  ASSERT_NE(d.get(), nullptr);
  void* huge = nullptr;
  ASSERT_NE(cudaMalloc(&huge, ~size_t{0} >> 2), cudaSuccess);  // leaves cudaErrorMemoryAllocation
  EXPECT_EQ(trim_rht_inverse_cuda(d.get(), 1024, TRIM_RHT_F16, 10, 0, 1, nullptr), 0) << trim_rht_last_error();
  CUDA_OK(cudaDeviceSynchronize());
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

#else

TEST_F(RotateCuda, MatchesHostTwinBitForBit) {}

#endif  // TRIM_HAVE_CUDA

}  // namespace
