// `trim-bench cuda`: the comm hook's GPU rotation (libtrim-rht: trim_rht_forward_cuda /
// trim_rht_inverse_cuda, cuda/rotate.cu) against a device-to-device cudaMemcpy of the same
// bytes, both timed with CUDA events in the same run. Per dtype (fp32, bf16, fp16) and op
// (forward, inverse): one call over a message of 1 GiB (--quick: 128 MiB), rotated in place in
// rows of 2^15, after a warm-up call, over several reps; gbps counts message bytes once.
//   --json          one JSON line per (dtype, op): bench, dtype, op, bytes, gbps, copy_gbps,
//                   ratio (= gbps / copy_gbps, best rep of each), row_log2, device, gbps_median, reps
//   --row-log2 L    rows of 2^L (0..15) instead of 2^15
//   --reps N        timed reps per measurement [10; --quick 5]
//   --check         instead: odd buckets (several rows, short last rows, segments) of every dtype
//                   and op against the host twin, bit for bit (NaN payloads aside); exit 1 on a
//                   difference. One JSON line per check.
// Without a usable GPU (no driver, no device, a build without nvcc) it prints
// {"bench":"cuda","skipped":true,"reason":...} and exits 0.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "codec/types.h"
#include "cuda/trim_rht.h"
#include "tools/bench/bench_util.h"

#ifdef TRIM_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace {

std::string json_escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '"' || c == '\\') o += '\\';
    o += c;
  }
  return o;
}

int skipped(const std::string& why) {
  std::printf("{\"bench\":\"cuda\",\"skipped\":true,\"reason\":\"%s\"}\n", json_escape(why).c_str());
  return 0;
}

int usage(const char* bad) {
  std::fprintf(stderr,
               "trim-bench cuda: bad argument '%s'\n"
               "usage: trim-bench cuda [--quick] [--json] [--row-log2 L] [--reps N] [--check]\n",
               bad);
  return 2;
}

struct Options : trim::bench::CommonFlags {
  bool check = false;
  uint32_t row_log2 = 15;
  int reps = 0;  // 0: the default
};

#ifdef TRIM_HAVE_CUDA

const int kDtypes[] = {TRIM_RHT_F32, TRIM_RHT_BF16, TRIM_RHT_F16};
const char* dtype_name(int d) { return d == TRIM_RHT_F32 ? "fp32" : d == TRIM_RHT_BF16 ? "bf16" : "fp16"; }
uint32_t dtype_size(int d) { return d == TRIM_RHT_F32 ? 4u : 2u; }

// Gaussian-like values (sum of uniforms) in `dtype`, from a cheap generator: their statistics
// matter little to the kernel, their volume does.
std::vector<uint8_t> make_values(uint64_t n, int dtype, uint64_t seed) {
  std::vector<uint8_t> out(n * dtype_size(dtype));
  uint64_t x = 0x9E3779B97F4A7C15ull ^ seed;
  for (uint64_t i = 0; i < n; ++i) {
    float s = 0;
    for (int k = 0; k < 4; ++k) {
      x = x * 6364136223846793005ull + 1442695040888963407ull;
      s += static_cast<float>(x >> 40) * 0x1p-24f - 0.5f;
    }
    if (dtype == TRIM_RHT_F32) {
      std::memcpy(&out[4 * i], &s, 4);
    } else {
      const uint16_t h = dtype == TRIM_RHT_BF16 ? trim::codec::f32_to_bf16(s) : trim::codec::f32_to_f16(s);
      std::memcpy(&out[2 * i], &h, 2);
    }
  }
  return out;
}

int cuda_fail(const char* what, cudaError_t e) {
  std::fprintf(stderr, "trim-bench cuda: %s: %s\n", what, cudaGetErrorString(e));
  return 1;
}

int rht_fail(const char* what) {
  std::fprintf(stderr, "trim-bench cuda: %s: %s\n", what, trim_rht_last_error());
  return 1;
}

// Device memory freed on scope exit.
struct DeviceBytes {
  void* p = nullptr;
  explicit DeviceBytes(uint64_t bytes) {
    if (cudaMalloc(&p, bytes) != cudaSuccess) p = nullptr;
  }
  ~DeviceBytes() {
    if (p != nullptr) cudaFree(p);
  }
  DeviceBytes(const DeviceBytes&) = delete;
  DeviceBytes& operator=(const DeviceBytes&) = delete;
};

struct Events {
  cudaEvent_t start = nullptr, stop = nullptr;
  Events() {
    cudaEventCreate(&start);
    cudaEventCreate(&stop);
  }
  ~Events() {
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
  }
  Events(const Events&) = delete;
  Events& operator=(const Events&) = delete;
};

struct Timing {
  double best_s = 0, median_s = 0;
  bool ok = false;
};

// One warm-up call, then `reps` calls each between two events on `stream`.
template <typename F>
Timing time_reps(int reps, cudaStream_t stream, F&& enqueue) {
  Timing t;
  Events ev;
  if (!enqueue() || cudaStreamSynchronize(stream) != cudaSuccess) return t;
  std::vector<double> secs;
  for (int r = 0; r < reps; ++r) {
    cudaEventRecord(ev.start, stream);
    if (!enqueue()) return t;
    cudaEventRecord(ev.stop, stream);
    if (cudaEventSynchronize(ev.stop) != cudaSuccess) return t;
    float ms = 0;
    cudaEventElapsedTime(&ms, ev.start, ev.stop);
    secs.push_back(ms * 1e-3);
  }
  std::sort(secs.begin(), secs.end());
  t.best_s = secs.front();
  t.median_s = secs[secs.size() / 2];
  t.ok = true;
  return t;
}

// Fills `bytes` of device memory with make_values's pattern (64 MiB of it, repeated).
bool fill(void* d, uint64_t bytes, int dtype) {
  const std::vector<uint8_t> chunk = make_values((64ull << 20) / dtype_size(dtype), dtype, 1);
  for (uint64_t off = 0; off < bytes; off += chunk.size()) {
    const uint64_t len = std::min<uint64_t>(chunk.size(), bytes - off);
    if (cudaMemcpy(static_cast<uint8_t*>(d) + off, chunk.data(), len, cudaMemcpyHostToDevice) != cudaSuccess) {
      return false;
    }
  }
  return true;
}

int run_bench(const Options& opt) {
  const uint64_t bytes = (opt.quick ? 128ull : 1024ull) << 20;
  const int reps = opt.reps > 0 ? opt.reps : opt.quick ? 5 : 10;
  int device = 0;
  cudaDeviceProp prop{};
  cudaGetDevice(&device);
  cudaGetDeviceProperties(&prop, device);
  DeviceBytes msg(bytes), copy(bytes);
  if (msg.p == nullptr || copy.p == nullptr) return cuda_fail("cudaMalloc", cudaGetLastError());
  cudaStream_t stream = nullptr;
  if (cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess) {
    return cuda_fail("cudaStreamCreate", cudaGetLastError());
  }
  if (!fill(msg.p, bytes, TRIM_RHT_F32)) return cuda_fail("fill", cudaGetLastError());
  const Timing copy_t = time_reps(reps, stream, [&] {
    return cudaMemcpyAsync(copy.p, msg.p, bytes, cudaMemcpyDeviceToDevice, stream) == cudaSuccess;
  });
  if (!copy_t.ok) return cuda_fail("device-to-device copy", cudaGetLastError());
  const double copy_gbps = bytes / copy_t.best_s / 1e9;
  for (int dtype : kDtypes) {
    if (!fill(msg.p, bytes, dtype)) return cuda_fail("fill", cudaGetLastError());
    const uint64_t n = bytes / dtype_size(dtype);
    for (bool inverse : {false, true}) {
      const Timing t = time_reps(reps, stream, [&] {
        return (inverse ? trim_rht_inverse_cuda : trim_rht_forward_cuda)(msg.p, n, dtype, opt.row_log2, 0, 12345,
                                                                         stream) == 0;
      });
      if (!t.ok) return rht_fail(inverse ? "inverse" : "forward");
      const double gbps = bytes / t.best_s / 1e9;
      const char* op = inverse ? "inverse" : "forward";
      if (opt.json) {
        std::printf("{\"bench\":\"cuda\",\"dtype\":\"%s\",\"op\":\"%s\",\"bytes\":%llu,\"gbps\":%.2f,"
                    "\"copy_gbps\":%.2f,\"ratio\":%.3f,\"row_log2\":%u,\"device\":\"%s\",\"gbps_median\":%.2f,"
                    "\"reps\":%d}\n",
                    dtype_name(dtype), op, static_cast<unsigned long long>(bytes), gbps, copy_gbps, gbps / copy_gbps,
                    opt.row_log2, json_escape(prop.name).c_str(), bytes / t.median_s / 1e9, reps);
      } else {
        std::printf("%-4s %-7s rows 2^%-2u %8.1f GB/s  (d2d copy %8.1f GB/s, ratio %.3f; median %.1f GB/s)\n",
                    dtype_name(dtype), op, opt.row_log2, gbps, copy_gbps, gbps / copy_gbps,
                    bytes / t.median_s / 1e9);
      }
      std::fflush(stdout);
    }
  }
  cudaStreamDestroy(stream);
  return 0;
}

// Elements whose bits differ (any NaN matches any NaN: the GPU's add returns the canonical NaN).
uint64_t differences(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b, int dtype) {
  const uint32_t es = dtype_size(dtype);
  const uint32_t exp = dtype == TRIM_RHT_F32 ? 0x7F800000u : dtype == TRIM_RHT_BF16 ? 0x7F80u : 0x7C00u;
  const uint32_t abs = dtype == TRIM_RHT_F32 ? 0x7FFFFFFFu : 0x7FFFu;
  uint64_t bad = 0;
  for (uint64_t i = 0; i < a.size() / es; ++i) {
    uint32_t x = 0, y = 0;
    std::memcpy(&x, &a[i * es], es);
    std::memcpy(&y, &b[i * es], es);
    if (x != y && !((x & abs) > exp && (y & abs) > exp)) ++bad;
  }
  return bad;
}

int run_check(const Options& opt) {
  struct Shape {
    uint64_t n, segment;
    uint32_t row_log2;
  };
  const uint32_t l = opt.row_log2;
  const uint64_t row = 1ull << l;
  const Shape shapes[] = {{4 * row + 1000, 0, l}, {3 * row + 5, 2 * row + 7, l}, {100003, 4097, 10}, {3077, 1000, 0}};
  int failures = 0;
  for (int dtype : kDtypes) {
    for (bool inverse : {false, true}) {
      for (const Shape& s : shapes) {
        const std::vector<uint8_t> in = make_values(s.n, dtype, s.n);
        std::vector<uint8_t> want = in, got(in.size());
        const int hrc = (inverse ? trim_rht_inverse_host : trim_rht_forward_host)(want.data(), s.n, dtype, s.row_log2,
                                                                                  s.segment, 777);
        if (hrc != 0) return rht_fail("host twin");
        DeviceBytes d(in.size());
        if (d.p == nullptr) return cuda_fail("cudaMalloc", cudaGetLastError());
        if (cudaMemcpy(d.p, in.data(), in.size(), cudaMemcpyHostToDevice) != cudaSuccess) {
          return cuda_fail("upload", cudaGetLastError());
        }
        if ((inverse ? trim_rht_inverse_cuda : trim_rht_forward_cuda)(d.p, s.n, dtype, s.row_log2, s.segment, 777,
                                                                      nullptr) != 0) {
          return rht_fail("rotation");
        }
        if (cudaMemcpy(got.data(), d.p, got.size(), cudaMemcpyDeviceToHost) != cudaSuccess) {
          return cuda_fail("download", cudaGetLastError());
        }
        const uint64_t bad = differences(got, want, dtype);
        failures += bad != 0;
        std::printf("{\"bench\":\"cuda\",\"check\":true,\"dtype\":\"%s\",\"op\":\"%s\",\"n\":%llu,\"row_log2\":%u,"
                    "\"segment\":%llu,\"ok\":%s,\"differences\":%llu}\n",
                    dtype_name(dtype), inverse ? "inverse" : "forward", static_cast<unsigned long long>(s.n),
                    s.row_log2, static_cast<unsigned long long>(s.segment), bad == 0 ? "true" : "false",
                    static_cast<unsigned long long>(bad));
      }
    }
  }
  return failures == 0 ? 0 : 1;
}

#endif  // TRIM_HAVE_CUDA

}  // namespace

int run_cuda_bench(int argc, char** argv) {
  Options opt;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (trim::bench::take_common_flag(a, &opt)) continue;
    if (a == "--check") {
      opt.check = true;
    } else if ((a == "--row-log2" || a == "--reps") && i + 1 < argc) {
      char* end = nullptr;
      const long v = std::strtol(argv[++i], &end, 10);
      if (*end != '\0' || v < 0 || (a == "--row-log2" && v > TRIM_RHT_MAX_ROW_LOG2) || (a == "--reps" && v < 1)) {
        return usage(argv[i]);
      }
      if (a == "--row-log2") {
        opt.row_log2 = static_cast<uint32_t>(v);
      } else {
        opt.reps = static_cast<int>(v);
      }
    } else {
      return usage(argv[i]);
    }
  }
  if (trim_rht_cuda_available() == 0) return skipped(trim_rht_last_error());
#ifdef TRIM_HAVE_CUDA
  return opt.check ? run_check(opt) : run_bench(opt);
#else
  return skipped("trim-bench was built without the CUDA headers");
#endif
}
