#include "tools/harness/data.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace trim::harness {

namespace {

// splitmix64's finalizer: a counter in, 64 well-mixed bits out.
inline uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

constexpr uint64_t kTailSalt = 0x7461696c7461696cull;

inline float value_at(uint64_t key, size_t e) {
  uint64_t h = mix64(key ^ (e * 0xd1b54a32d192ed03ull));
  // Sum of four 16-bit uniforms: mean 2, variance 1/3 -> scale by sqrt(3) for unit variance.
  uint32_t s = static_cast<uint32_t>(h & 0xffff) + static_cast<uint32_t>((h >> 16) & 0xffff) +
               static_cast<uint32_t>((h >> 32) & 0xffff) + static_cast<uint32_t>(h >> 48);
  constexpr float kScale = 1.7320508f / 65536.0f;
  return (static_cast<float>(s) - 2.0f * 65536.0f) * kScale;
}

inline uint8_t tail_at(uint64_t key, size_t j) { return static_cast<uint8_t>(mix64(key ^ kTailSalt ^ j)); }

constexpr uint64_t kIntSalt = 0x696e743332696e74ull;

inline uint32_t int_at(uint64_t key, size_t e) {
  return static_cast<uint32_t>(mix64(key ^ kIntSalt ^ (e * 0xd1b54a32d192ed03ull)));
}

inline uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}

inline void compare(float got, float want, Check* c) {
  if (bits(got) != bits(want)) c->exact = false;
  double d = static_cast<double>(got) - static_cast<double>(want);
  c->err2 += d * d;
  c->ref2 += static_cast<double>(want) * static_cast<double>(want);
}

}  // namespace

uint64_t data_key(uint64_t seed, int rank, int iter) {
  return mix64(mix64(seed) ^ (static_cast<uint64_t>(rank) << 32) ^ static_cast<uint32_t>(iter));
}

void fill_input(uint64_t key, void* out, size_t bytes, Elem elem) {
  size_t n = bytes / 4;
  if (elem == Elem::kF32) {
    float* f = static_cast<float*>(out);
    for (size_t e = 0; e < n; ++e) f[e] = value_at(key, e);
  } else {
    uint32_t* u = static_cast<uint32_t*>(out);
    for (size_t e = 0; e < n; ++e) u[e] = int_at(key, e);
  }
  uint8_t* tail = static_cast<uint8_t*>(out) + n * 4;
  for (size_t j = 0; j < bytes % 4; ++j) tail[j] = tail_at(key, j);
}

uint64_t hash_bytes(const void* data, size_t bytes, uint64_t seed) {
  const uint8_t* p = static_cast<const uint8_t*>(data);
  uint64_t h = mix64(seed ^ bytes);
  size_t i = 0;
  for (; i + 8 <= bytes; i += 8) {
    uint64_t w;
    std::memcpy(&w, p + i, 8);
    h = mix64(h ^ w);
  }
  uint64_t last = 0;
  std::memcpy(&last, p + i, bytes - i);
  return mix64(h ^ last ^ 0xff);
}

Check check_copy(uint64_t key, const void* got, size_t bytes) {
  Check c;
  size_t n = bytes / 4;
  const float* f = static_cast<const float*>(got);
  for (size_t e = 0; e < n; ++e) compare(f[e], value_at(key, e), &c);
  const uint8_t* tail = static_cast<const uint8_t*>(got) + n * 4;
  for (size_t j = 0; j < bytes % 4; ++j) {
    if (tail[j] != tail_at(key, j)) {
      c.exact = false;
      ++c.mismatched_bytes;
    }
  }
  return c;
}

Check check_allreduce(const RingGeometry& geo, const uint64_t* keys, const void* got, Elem elem) {
  Check c;
  const float* f = static_cast<const float*>(got);
  const int n = geo.ranks();
  if (elem == Elem::kI32) {
    const uint32_t* u = static_cast<const uint32_t*>(got);
    for (size_t e = 0; e < geo.elems(); ++e) {
      uint32_t acc = 0;
      for (int k = 0; k < n; ++k) acc += int_at(keys[k], e);
      if (u[e] != acc) c.exact = false;
    }
  } else {
    for (int loop = 0; loop < geo.loops(); ++loop) {
      for (int seg = 0; seg < n; ++seg) {
        Segment s = geo.segment(loop, seg);
        for (size_t e = s.first; e < s.first + s.elems; ++e) {
          // The chain starts at rank `seg` (it sends its own input at step 0) and each next
          // rank adds its input to what it received: ((x_seg + x_seg+1) + x_seg+2) + ...
          float acc = value_at(keys[seg], e);
          for (int j = 1; j < n; ++j) acc = acc + value_at(keys[(seg + j) % n], e);
          compare(f[e], acc, &c);
        }
      }
    }
  }
  const uint8_t* tail = static_cast<const uint8_t*>(got) + geo.elems() * 4;
  uint64_t owner_key = keys[geo.owner(n - 1)];
  for (size_t j = 0; j < geo.tail_bytes(); ++j) {
    if (tail[j] != tail_at(owner_key, j)) {
      c.exact = false;
      ++c.mismatched_bytes;
    }
  }
  return c;
}

double nmse_between(const float* a, const float* b, size_t elems) {
  double err2 = 0, ref2 = 0;
  for (size_t e = 0; e < elems; ++e) {
    double d = static_cast<double>(a[e]) - static_cast<double>(b[e]);
    err2 += d * d;
    ref2 += static_cast<double>(b[e]) * static_cast<double>(b[e]);
  }
  return ref2 > 0 ? err2 / ref2 : (err2 > 0 ? 1.0 : 0.0);
}

}  // namespace trim::harness
