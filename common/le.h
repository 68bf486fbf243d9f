// Little-endian field access: every wire format of the project is little-endian whatever the
// host is. On the little-endian hosts we build for these are single moves.
#pragma once

#include <cstdint>
#include <cstring>

namespace trim::le {

template <typename T>
inline T to_le(T v) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
  if constexpr (sizeof(T) == 2) return static_cast<T>(__builtin_bswap16(v));
  if constexpr (sizeof(T) == 4) return static_cast<T>(__builtin_bswap32(v));
  if constexpr (sizeof(T) == 8) return static_cast<T>(__builtin_bswap64(v));
#endif
  return v;
}
template <typename T>
inline void put(uint8_t* p, T v) {
  v = to_le(v);
  std::memcpy(p, &v, sizeof v);
}
template <typename T>
inline T get(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return to_le(v);
}
inline void put16(uint8_t* p, uint16_t v) { put(p, v); }
inline void put32(uint8_t* p, uint32_t v) { put(p, v); }
inline void put64(uint8_t* p, uint64_t v) { put(p, v); }
inline uint16_t get16(const uint8_t* p) { return get<uint16_t>(p); }
inline uint32_t get32(const uint8_t* p) { return get<uint32_t>(p); }
inline uint64_t get64(const uint8_t* p) { return get<uint64_t>(p); }

}  // namespace trim::le
