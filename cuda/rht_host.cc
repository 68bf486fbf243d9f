// libtrim-rht's host side: the ABI's plain functions and the host twin, which rotates with the
// codec's CPU FWHT (codec/rht.h) row by row: the reference the GPU kernels match bit for bit.
#include <cstring>
#include <string>
#include <vector>

#include "codec/rht.h"
#include "codec/types.h"
#include "cuda/rht_common.h"
#include "cuda/rht_geom.h"
#include "cuda/trim_rht.h"

namespace trim::rht {
namespace {

thread_local std::string t_last_error;

void widen(const uint8_t* src, int dtype, uint32_t elems, float* out) {
  for (uint32_t i = 0; i < elems; ++i) {
    uint16_t h;
    std::memcpy(&h, src + 2 * static_cast<size_t>(i), 2);
    out[i] = dtype == TRIM_RHT_BF16 ? codec::bf16_to_f32(h) : codec::f16_to_f32(h);
  }
}

void narrow(const float* in, int dtype, uint32_t elems, uint8_t* dst) {
  for (uint32_t i = 0; i < elems; ++i) {
    const uint16_t h = dtype == TRIM_RHT_BF16 ? codec::f32_to_bf16(in[i]) : codec::f32_to_f16(in[i]);
    std::memcpy(dst + 2 * static_cast<size_t>(i), &h, 2);
  }
}

int rotate_host(void* data, uint64_t n, int dtype, uint32_t row_log2, uint64_t segment_elems, uint64_t seed,
                bool forward) {
  const std::string bad = check_args(data, n, dtype, row_log2, segment_elems);
  if (!bad.empty()) return fail(bad);
  const BucketGeom g = make_geom(n, segment_elems, row_log2);
  const size_t esize = elem_bytes(dtype);
  std::vector<uint64_t> words;
  std::vector<float> row;
  for (uint64_t i = 0; i < g.rows(); ++i) {
    const RowRef r = row_ref(g, i);
    codec::rht_sign_words(row_sign_key(seed, r), r.elems, &words);
    uint8_t* base = static_cast<uint8_t*>(data) + r.offset * esize;
    float* v = reinterpret_cast<float*>(base);
    if (dtype != TRIM_RHT_F32) {
      row.resize(r.elems);
      widen(base, dtype, r.elems, row.data());
      v = row.data();
    } else if (reinterpret_cast<uintptr_t>(base) % alignof(float) != 0) {
      row.resize(r.elems);  // unaligned host buffer: rotate a copy
      std::memcpy(row.data(), base, r.elems * esize);
      v = row.data();
    }
    if (forward) {
      codec::rht_row_forward(v, v, r.elems, words);
    } else {
      codec::rht_row_inverse(v, r.elems, words);
    }
    if (dtype != TRIM_RHT_F32) {
      narrow(v, dtype, r.elems, base);
    } else if (v != reinterpret_cast<float*>(base)) {
      std::memcpy(base, v, r.elems * esize);
    }
  }
  return 0;
}

}  // namespace

int fail(std::string what) {
  t_last_error = std::move(what);
  return -1;
}

uint32_t elem_bytes(int dtype) { return dtype == TRIM_RHT_F32 ? 4u : 2u; }

std::string check_args(const void* data, uint64_t n, int dtype, uint32_t row_log2, uint64_t segment_elems) {
  if (dtype != TRIM_RHT_F32 && dtype != TRIM_RHT_BF16 && dtype != TRIM_RHT_F16) {
    return "dtype " + std::to_string(dtype) + " is not supported (1 = fp32, 2 = bf16, 3 = fp16)";
  }
  if (row_log2 > TRIM_RHT_MAX_ROW_LOG2) {
    return "row_log2 " + std::to_string(row_log2) + " is out of range (0..15: rows of 1..32768 elements)";
  }
  if (n > 0 && data == nullptr) return "data is null";
  if (segment_elems > 0 && (n + segment_elems - 1) / segment_elems > UINT32_MAX) {
    return "more than 2^32 segments";
  }
  return "";
}

}  // namespace trim::rht

extern "C" {

int trim_rht_abi_version(void) { return TRIM_RHT_ABI_VERSION; }

const char* trim_rht_last_error(void) { return trim::rht::t_last_error.c_str(); }

uint64_t trim_rht_bucket_seed(uint64_t job_seed, uint32_t bucket, uint64_t step) {
  return trim::rht::bucket_seed(job_seed, bucket, step);
}

int trim_rht_forward_host(void* data, uint64_t n, int dtype, uint32_t row_log2, uint64_t segment_elems,
                          uint64_t seed) {
  return trim::rht::rotate_host(data, n, dtype, row_log2, segment_elems, seed, true);
}

int trim_rht_inverse_host(void* data, uint64_t n, int dtype, uint32_t row_log2, uint64_t segment_elems,
                          uint64_t seed) {
  return trim::rht::rotate_host(data, n, dtype, row_log2, segment_elems, seed, false);
}

}  // extern "C"
