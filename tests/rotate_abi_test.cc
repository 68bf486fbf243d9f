// libtrim-rht's ABI (cuda/trim_rht.h) without a GPU: argument errors and their per-thread text,
// the host twin's round trip, seeds, and the shared library the Python comm hook loads with ctypes
// (what it exports, and that it rotates as the statically linked twin does).
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "cuda/trim_rht.h"
#include "tests/rotate_cases.h"
#include "tests/test_paths.h"

namespace {

namespace tt = trim::testing;

using RotateFn = int (*)(void*, uint64_t, int, uint32_t, uint64_t, uint64_t);
using RotateCudaFn = int (*)(void*, uint64_t, int, uint32_t, uint64_t, uint64_t, void*);

bool contains(const char* text, const char* part) { return text != nullptr && std::strstr(text, part) != nullptr; }

TEST(RotateAbi, VersionIsOne) { EXPECT_EQ(trim_rht_abi_version(), TRIM_RHT_ABI_VERSION); }

TEST(RotateAbi, BadArgumentsFailWithAReason) {
  float v[8] = {};
  for (RotateFn fn : {trim_rht_forward_host, trim_rht_inverse_host}) {
    EXPECT_EQ(fn(v, 8, 0, 3, 0, 1), -1);
    EXPECT_TRUE(contains(trim_rht_last_error(), "dtype")) << trim_rht_last_error();
    EXPECT_EQ(fn(v, 8, 4, 3, 0, 1), -1);
    EXPECT_TRUE(contains(trim_rht_last_error(), "dtype")) << trim_rht_last_error();
    EXPECT_EQ(fn(v, 8, TRIM_RHT_F32, 16, 0, 1), -1);
    EXPECT_TRUE(contains(trim_rht_last_error(), "row_log2")) << trim_rht_last_error();
    EXPECT_EQ(fn(nullptr, 8, TRIM_RHT_BF16, 3, 0, 1), -1);
    EXPECT_TRUE(contains(trim_rht_last_error(), "null")) << trim_rht_last_error();
    EXPECT_EQ(fn(nullptr, 0, TRIM_RHT_F32, 3, 0, 1), 0);  // nothing to do
  }
  // The GPU entry points refuse them too (a stub build refuses everything, saying why).
  for (RotateCudaFn fn : {trim_rht_forward_cuda, trim_rht_inverse_cuda}) {
    EXPECT_EQ(fn(v, 8, 9, 3, 0, 1, nullptr), -1);
    EXPECT_STRNE(trim_rht_last_error(), "");
    EXPECT_EQ(fn(nullptr, 8, TRIM_RHT_F32, 16, 0, 1, nullptr), -1);
    EXPECT_STRNE(trim_rht_last_error(), "");
  }
}

TEST(RotateAbi, ErrorTextIsPerThread) {
  float v[4] = {};
  ASSERT_EQ(trim_rht_forward_host(v, 4, 7, 2, 0, 1), -1);
  const std::string mine = trim_rht_last_error();
  std::string theirs;
  std::thread([&] {
    trim_rht_forward_host(v, 4, TRIM_RHT_F32, 20, 0, 1);
    theirs = trim_rht_last_error();
  }).join();
  EXPECT_EQ(trim_rht_last_error(), mine);
  EXPECT_NE(theirs, mine);
  EXPECT_TRUE(contains(theirs.c_str(), "row_log2")) << theirs;
}

// Relative L2 error of inverse(forward(x)) against x.
double round_trip_error(const tt::RotateCase& c, int dtype) {
  const std::vector<uint8_t> in = tt::rotate_input(c.n, dtype, 11, false);
  std::vector<uint8_t> buf = in;
  EXPECT_EQ(trim_rht_forward_host(buf.data(), c.n, dtype, c.row_log2, c.segment_elems, 99), 0);
  EXPECT_EQ(trim_rht_inverse_host(buf.data(), c.n, dtype, c.row_log2, c.segment_elems, 99), 0);
  auto value = [&](const std::vector<uint8_t>& b, uint64_t i) -> double {
    if (dtype == TRIM_RHT_F32) {
      float f;
      std::memcpy(&f, &b[4 * i], 4);
      return f;
    }
    uint16_t h;
    std::memcpy(&h, &b[2 * i], 2);
    return dtype == TRIM_RHT_BF16 ? trim::codec::bf16_to_f32(h) : trim::codec::f16_to_f32(h);
  };
  double err = 0, norm = 0;
  for (uint64_t i = 0; i < c.n; ++i) {
    const double x = value(in, i), d = value(buf, i) - x;
    err += d * d;
    norm += x * x;
  }
  return norm > 0 ? std::sqrt(err / norm) : std::sqrt(err);
}

TEST(RotateAbi, HostRoundTripIsWithinRounding) {
  for (const tt::RotateCase& c : tt::rotate_cases()) {
    SCOPED_TRACE(c.name());
    EXPECT_LT(round_trip_error(c, TRIM_RHT_F32), 4e-6);
    EXPECT_LT(round_trip_error(c, TRIM_RHT_BF16), 0x1p-7);
    EXPECT_LT(round_trip_error(c, TRIM_RHT_F16), 0x1p-9);
  }
}

TEST(RotateAbi, SeedsDecideTheRotation) {
  const tt::RotateCase c{5000, 10, 3000};
  const std::vector<uint8_t> in = tt::rotate_input(c.n, TRIM_RHT_F32, 3, false);
  std::vector<uint8_t> a = in, b = in, d = in;
  ASSERT_EQ(trim_rht_forward_host(a.data(), c.n, TRIM_RHT_F32, c.row_log2, c.segment_elems, 42), 0);
  ASSERT_EQ(trim_rht_forward_host(b.data(), c.n, TRIM_RHT_F32, c.row_log2, c.segment_elems, 42), 0);
  ASSERT_EQ(trim_rht_forward_host(d.data(), c.n, TRIM_RHT_F32, c.row_log2, c.segment_elems, 43), 0);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, d);
  std::set<uint64_t> seeds;
  for (uint64_t job : {1ull, 2ull}) {
    for (uint32_t bucket : {0u, 1u}) {
      for (uint64_t step : {0ull, 1ull}) seeds.insert(trim_rht_bucket_seed(job, bucket, step));
    }
  }
  EXPECT_EQ(seeds.size(), 8u);
  EXPECT_EQ(trim_rht_bucket_seed(7, 3, 1000), trim_rht_bucket_seed(7, 3, 1000));
}

std::vector<std::string> exported_symbols(const std::string& lib) {
  std::vector<std::string> out;
  FILE* f = popen(("nm -D --defined-only '" + lib + "' 2>/dev/null").c_str(), "r");
  if (f == nullptr) return out;
  char line[512];
  while (std::fgets(line, sizeof line, f) != nullptr) {
    std::string s(line);
    while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
    const size_t sp = s.find_last_of(' ');
    out.push_back(sp == std::string::npos ? s : s.substr(sp + 1));
  }
  pclose(f);
  return out;
}

TEST(RotateAbi, SharedLibraryExportsOnlyTheAbi) {
  const std::vector<std::string> syms = exported_symbols(tt::rht_lib_path());
  ASSERT_FALSE(syms.empty()) << "nm found nothing in " << tt::rht_lib_path();
  std::set<std::string> have;
  for (const std::string& s : syms) {
    EXPECT_EQ(s.rfind("trim_rht_", 0), 0u) << "libtrim-rht.so exports " << s;
    have.insert(s);
  }
  for (const char* want : {"trim_rht_abi_version", "trim_rht_last_error", "trim_rht_bucket_seed",
                           "trim_rht_forward_host", "trim_rht_inverse_host", "trim_rht_forward_cuda",
                           "trim_rht_inverse_cuda", "trim_rht_cuda_available"}) {
    EXPECT_EQ(have.count(want), 1u) << want;
  }
}

// What ctypes sees: the library loads on its own and rotates like the twin linked here.
TEST(RotateAbi, SharedLibraryRotatesLikeTheStaticTwin) {
  void* lib = dlopen(tt::rht_lib_path().c_str(), RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(lib, nullptr) << dlerror();
  auto forward = reinterpret_cast<RotateFn>(dlsym(lib, "trim_rht_forward_host"));
  auto available = reinterpret_cast<int (*)()>(dlsym(lib, "trim_rht_cuda_available"));
  auto last_error = reinterpret_cast<const char* (*)()>(dlsym(lib, "trim_rht_last_error"));
  ASSERT_TRUE(forward != nullptr && available != nullptr && last_error != nullptr);
  const tt::RotateCase c{3077, 10, 1000};
  for (int dtype : {TRIM_RHT_F32, TRIM_RHT_BF16, TRIM_RHT_F16}) {
    const std::vector<uint8_t> in = tt::rotate_input(c.n, dtype, 5, true);
    std::vector<uint8_t> a = in, b = in;
    ASSERT_EQ(forward(a.data(), c.n, dtype, c.row_log2, c.segment_elems, 77), 0) << last_error();
    ASSERT_EQ(trim_rht_forward_host(b.data(), c.n, dtype, c.row_log2, c.segment_elems, 77), 0);
    EXPECT_EQ(tt::compare_bits(a, b, dtype), "") << tt::dtype_label(dtype);
  }
  if (available() == 0) {
    EXPECT_STRNE(last_error(), "");  // no GPU here: it says why
  }
  dlclose(lib);
}

}  // namespace
