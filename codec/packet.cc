#include "codec/packet.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "common/le.h"

namespace trim::codec {
namespace {

using namespace le;  // every field of the header is little-endian

constexpr size_t kCheckOffset = 52;  // kCheckPoints x {u16 end, u16 check}
constexpr size_t kCrcOffset = kCheckOffset + 4 * kCheckPoints;
static_assert(kCrcOffset + 4 == kHeaderBytes, "the header CRC ends the header");
constexpr size_t kFlagsOffset = 3;
// The header bytes that seed the payload's check points: what identifies the packet and its
// encoding (scheme .. scale), not the flags or what the transport stamps later (psn, dst).
constexpr size_t kCheckSeedOffset = 4, kCheckSeedBytes = 36;

struct CrcTable {
  uint32_t t[256];
  CrcTable() {
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1u) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
      t[i] = c;
    }
  }
};

uint32_t crc32c_sw(uint32_t crc, const uint8_t* data, size_t len) {
  static const CrcTable table;
  uint32_t c = ~crc;
  for (size_t i = 0; i < len; ++i) c = table.t[(c ^ data[i]) & 0xFFu] ^ (c >> 8);
  return ~c;
}

// a * b mod P, both bit-reflected (x^0 is the top bit).
uint32_t crc_multiply(uint32_t a, uint32_t b) {
  uint32_t product = 0;
  for (uint32_t m = 1u << 31; m != 0; m >>= 1) {
    if ((a & m) != 0) product ^= b;
    b = (b & 1u) ? (b >> 1) ^ 0x82F63B78u : b >> 1;
  }
  return product;
}

#if defined(__x86_64__)
// The crc32 instruction has a latency of 3 cycles: one chain of it runs at a third of the rate the
// core can issue it. Long inputs go as three interleaved lanes, joined by multiplying the earlier
// lanes' registers by x^(8 lane) and x^(16 lane) (CRC is linear in its register), four table
// lookups each. Two lane lengths, so the serial remainder is under 3 x 128 bytes.
constexpr size_t kLongLaneBytes = 1024, kShortLaneBytes = 128;

// Multiplying by a fixed power as four byte-indexed tables: shift(v) = T0[v0] ^ T1[v1] ^ T2[v2] ^ T3[v3].
// Built from x^(8 n) (n zero bytes fed to x^0) and one multiplication per entry: tens of
// microseconds, where shifting each entry bit by bit took milliseconds on the first packet.
struct CrcShiftTable {
  uint32_t t[4][256];
  explicit CrcShiftTable(size_t n) {
    const auto power = static_cast<uint32_t>(detail::crc32c_xpow(static_cast<uint32_t>(8 * n)) >> 32);
    for (uint32_t b = 0; b < 4; ++b) {
      for (uint32_t i = 0; i < 256; ++i) t[b][i] = crc_multiply(power, i << (8 * b));
    }
  }
  uint32_t operator()(uint32_t v) const {
    return t[0][v & 0xFFu] ^ t[1][(v >> 8) & 0xFFu] ^ t[2][(v >> 16) & 0xFFu] ^ t[3][v >> 24];
  }
};

// Blocks of three `lane`-byte lanes from register c while they fit; returns the new register.
template <size_t kLane>
__attribute__((target("sse4.2"))) uint64_t crc_lanes(uint64_t c, const uint8_t* data, size_t len, size_t* i,
                                                     const CrcShiftTable& shift1, const CrcShiftTable& shift2) {
  for (; *i + 3 * kLane <= len; *i += 3 * kLane) {
    uint64_t b = 0, d = 0;
    const uint8_t* p = data + *i;
    for (size_t k = 0; k < kLane; k += 8) {
      c = __builtin_ia32_crc32di(c, get64(p + k));
      b = __builtin_ia32_crc32di(b, get64(p + kLane + k));
      d = __builtin_ia32_crc32di(d, get64(p + 2 * kLane + k));
    }
    c = shift2(static_cast<uint32_t>(c)) ^ shift1(static_cast<uint32_t>(b)) ^ static_cast<uint32_t>(d);
  }
  return c;
}

// One chain over [i, len): words, then the last 0..7 bytes as at most one 4-, 2- and 1-byte step
// (a byte at a time cost up to 7 steps of 3 cycles on the encoder's short check-point spans).
__attribute__((target("sse4.2"))) inline uint32_t crc_chain(uint64_t c, const uint8_t* data, size_t i, size_t len) {
  for (; i + 8 <= len; i += 8) c = __builtin_ia32_crc32di(c, get64(data + i));
  uint32_t c32 = static_cast<uint32_t>(c);
  if (len - i >= 4) c32 = __builtin_ia32_crc32si(c32, get32(data + i)), i += 4;
  if (len - i >= 2) c32 = __builtin_ia32_crc32hi(c32, get16(data + i)), i += 2;
  if (len - i >= 1) c32 = __builtin_ia32_crc32qi(c32, data[i]);
  return ~c32;
}

__attribute__((target("sse4.2"))) uint32_t crc32c_hw(uint32_t crc, const uint8_t* data, size_t len) {
  if (len < 3 * kShortLaneBytes) return crc_chain(~crc, data, 0, len);  // no lanes: skip their tables
  static const CrcShiftTable long1(kLongLaneBytes), long2(2 * kLongLaneBytes);
  static const CrcShiftTable short1(kShortLaneBytes), short2(2 * kShortLaneBytes);
  uint64_t c = ~crc;
  size_t i = 0;
  c = crc_lanes<kLongLaneBytes>(c, data, len, &i, long1, long2);
  c = crc_lanes<kShortLaneBytes>(c, data, len, &i, short1, short2);
  return crc_chain(c, data, i, len);
}
#endif

#if defined(__x86_64__)
// Folding with carry-less multiplies (VPCLMULQDQ on 256 bits): four accumulators of two 16-byte
// blocks each take 128 bytes per step, every block multiplied forward by x^(8 * 128) mod P and
// added to the block 128 bytes on; the eight are then folded into one 16-byte block, whose
// CRC-32C from a zero register is the prefix's register (CRC is linear, and a 16-byte message's
// CRC is M(x) x^32 mod P), so the SSE4.2 instruction both reduces it and takes the rest. The
// constants are x^e mod P in the bit-reflected frame, e one less than the distance because the
// product of two reflected 64-bit values lands one bit low. Zen 3: 17 -> 22 GB/s on a 1936-byte
// plane, where the three crc32 lanes are bound by the instruction's one per cycle. The constants: detail::crc32c_xpow.
constexpr size_t kFoldStepBytes = 128, kFoldMinBytes = 2 * kFoldStepBytes;

#define TRIM_CRC_FOLD __attribute__((target("avx2,pclmul,vpclmulqdq,sse4.2")))

// a * x^(8 d) mod P per 128-bit lane, k holding x^(8 d + 63) and x^(8 d - 1) in each lane.
TRIM_CRC_FOLD inline __m256i fold256(__m256i a, __m256i k) {
  return _mm256_xor_si256(_mm256_clmulepi64_epi128(a, k, 0x00), _mm256_clmulepi64_epi128(a, k, 0x11));
}
TRIM_CRC_FOLD inline __m128i fold128(__m128i a, __m128i k) {
  return _mm_xor_si128(_mm_clmulepi64_si128(a, k, 0x00), _mm_clmulepi64_si128(a, k, 0x11));
}
TRIM_CRC_FOLD inline __m256i load256(const uint8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }

TRIM_CRC_FOLD uint32_t crc32c_fold(uint32_t crc, const uint8_t* data, size_t len) {
  if (len < kFoldMinBytes) return crc32c_hw(crc, data, len);  // before the constants' guards
  static const detail::CrcFoldConstants f128(kFoldStepBytes), f16(16);
  const __m256i k128 = _mm256_set_epi64x(static_cast<int64_t>(f128.high), static_cast<int64_t>(f128.low),
                                         static_cast<int64_t>(f128.high), static_cast<int64_t>(f128.low));
  // The register enters as the first four bytes' xor (the crc32 instruction's own definition).
  __m256i a0 = _mm256_xor_si256(load256(data), _mm256_zextsi128_si256(_mm_cvtsi32_si128(static_cast<int>(~crc))));
  __m256i a1 = load256(data + 32), a2 = load256(data + 64), a3 = load256(data + 96);
  size_t i = kFoldStepBytes;
  for (; i + kFoldStepBytes <= len; i += kFoldStepBytes) {
    a0 = _mm256_xor_si256(fold256(a0, k128), load256(data + i));
    a1 = _mm256_xor_si256(fold256(a1, k128), load256(data + i + 32));
    a2 = _mm256_xor_si256(fold256(a2, k128), load256(data + i + 64));
    a3 = _mm256_xor_si256(fold256(a3, k128), load256(data + i + 96));
  }
  const __m128i k16 = _mm_set_epi64x(static_cast<int64_t>(f16.high), static_cast<int64_t>(f16.low));
  const __m128i blocks[8] = {_mm256_castsi256_si128(a0), _mm256_extracti128_si256(a0, 1),
                             _mm256_castsi256_si128(a1), _mm256_extracti128_si256(a1, 1),
                             _mm256_castsi256_si128(a2), _mm256_extracti128_si256(a2, 1),
                             _mm256_castsi256_si128(a3), _mm256_extracti128_si256(a3, 1)};
  __m128i acc = blocks[0];
  for (int j = 1; j < 8; ++j) acc = _mm_xor_si128(fold128(acc, k16), blocks[j]);
  uint64_t c = _mm_crc32_u64(0, static_cast<uint64_t>(_mm_cvtsi128_si64(acc)));
  c = _mm_crc32_u64(c, static_cast<uint64_t>(_mm_extract_epi64(acc, 1)));
  return crc_chain(c, data, i, len);  // under 128 bytes left: one chain
}

// The header's 76 bytes as nine words and a tail, the TRIMMED bit masked in the first word.
__attribute__((target("sse4.2"))) uint32_t header_crc_hw(const uint8_t* h) {
  static_assert(kCrcOffset % 8 == 4, "nine words and four bytes");
  uint64_t c = 0xFFFFFFFFu;
  c = __builtin_ia32_crc32di(c, get64(h) & ~(static_cast<uint64_t>(kFlagTrimmed) << (8 * kFlagsOffset)));
  for (size_t i = 8; i + 8 <= kCrcOffset; i += 8) c = __builtin_ia32_crc32di(c, get64(h + i));
  return ~__builtin_ia32_crc32si(static_cast<uint32_t>(c), get32(h + kCrcOffset - 4));
}
#endif

// The CRC covers bytes [0, 76) with the TRIMMED flag cleared, so our switch's native mode may
// set the flag without recomputing anything.
uint32_t header_crc(const uint8_t* h) {
#if defined(__x86_64__)
  static const bool hw = __builtin_cpu_supports("sse4.2");
  if (hw) return header_crc_hw(h);
#endif
  uint8_t copy[kCrcOffset];
  std::memcpy(copy, h, kCrcOffset);
  copy[kFlagsOffset] = static_cast<uint8_t>(copy[kFlagsOffset] & ~kFlagTrimmed);
  return crc32c_sw(0, copy, kCrcOffset);
}

}  // namespace

uint32_t verified_prefix(const uint8_t* h, const uint8_t* payload, uint32_t received, bool* failed) {
  uint32_t crc = crc32c(h + kCheckSeedOffset, kCheckSeedBytes);
  uint32_t verified = 0;
  *failed = false;
  for (uint32_t i = 0; i < kCheckPoints; ++i) {
    const uint32_t end = get16(h + kCheckOffset + 4 * i);
    if (end == 0 || end > received) break;
    crc = crc32c_extend(crc, payload + verified, end - verified);
    if ((crc & 0xFFFFu) != get16(h + kCheckOffset + 4 * i + 2)) {
      *failed = true;
      break;
    }
    verified = end;
  }
  return verified;
}

namespace {

PacketError fail(PacketError e) {
  packet_error_counters().add(e);
  return e;
}

}  // namespace

const char* packet_error_name(PacketError e) {
  switch (e) {
    case PacketError::kOk: return "ok";
    case PacketError::kTruncatedHeader: return "truncated_header";
    case PacketError::kBadMagic: return "bad_magic";
    case PacketError::kBadVersion: return "bad_version";
    case PacketError::kBadChecksum: return "bad_checksum";
    case PacketError::kBadField: return "bad_field";
    case PacketError::kBadLength: return "bad_length";
    case PacketError::kLengthPastPacket: return "length_past_packet";
    case PacketError::kElemOverflow: return "elem_overflow";
    case PacketError::kInconsistent: return "inconsistent";
    case PacketError::kWrongCookie: return "wrong_cookie";
    case PacketError::kBadPayloadCheck: return "bad_payload_check";
    case PacketError::kCount: break;
  }
  return "unknown";
}

PacketErrorCounters& packet_error_counters() {
  static PacketErrorCounters counters;
  return counters;
}

namespace {

// 2: PCLMUL folding, 1: SSE4.2 lanes, 0: table; the best this CPU runs, or what a test forced.
int crc_best_path() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("pclmul") &&
      __builtin_cpu_supports("vpclmulqdq") && __builtin_cpu_supports("sse4.2")) {
    return 2;
  }
  if (__builtin_cpu_supports("sse4.2")) return 1;
#endif
  return 0;
}
const int kCrcBestPath = crc_best_path();
std::atomic<int> g_crc_path{kCrcBestPath};

}  // namespace

namespace {

// x^(8 2^i - 33) mod P for i = 3 .. 15 (spans of 8 .. 32768 bytes): a register times one of
// these, carry-less, then crc32 from a zero register (which multiplies by x^32 and reduces; the
// product of two reflected 32-bit values adds one more x) is the register shifted by 2^i bytes.
// Built by doubling with plain multiplications mod P: microseconds, once.
struct ShiftPowers {
  static constexpr int kFirst = 3, kLast = 15;
  uint32_t k[kLast + 1] = {};
  ShiftPowers() {
    uint32_t step = static_cast<uint32_t>(detail::crc32c_xpow(8u << kFirst) >> 32);  // x^(8 2^i)
    k[kFirst] = static_cast<uint32_t>(detail::crc32c_xpow((8u << kFirst) - 33) >> 32);
    for (int i = kFirst + 1; i <= kLast; ++i) {
      k[i] = crc_multiply(k[i - 1], step);
      step = crc_multiply(step, step);
    }
  }
};

#if defined(__x86_64__)
// reg * k * x^33 mod P (k = x^(8 n - 33): reg shifted by n bytes).
__attribute__((target("pclmul,sse4.2"))) inline uint32_t shift_step(uint32_t reg, uint32_t k) {
  const __m128i p = _mm_clmulepi64_si128(_mm_cvtsi32_si128(static_cast<int>(reg)), _mm_cvtsi32_si128(static_cast<int>(k)), 0);
  return static_cast<uint32_t>(__builtin_ia32_crc32di(0, static_cast<uint64_t>(_mm_cvtsi128_si64(p))));
}

__attribute__((target("pclmul,sse4.2"))) uint32_t shift_clmul(uint32_t reg, uint32_t bytes) {
  static const ShiftPowers powers;
  // The bytes below 8 as zero bytes through the crc32 instruction (at most three steps).
  if (bytes & 4) reg = __builtin_ia32_crc32si(reg, 0);
  if (bytes & 2) reg = __builtin_ia32_crc32hi(reg, 0);
  if (bytes & 1) reg = __builtin_ia32_crc32qi(reg, 0);
  for (uint32_t rest = bytes >> ShiftPowers::kFirst, i = ShiftPowers::kFirst; rest != 0; rest >>= 1, ++i) {
    if ((rest & 1) != 0) reg = shift_step(reg, powers.k[i]);
  }
  return reg;
}
#endif

}  // namespace

namespace detail {
uint64_t crc32c_xpow(uint32_t e) {
  uint32_t v = 1u << 31;  // x^0
  for (uint32_t i = 0; i < e; ++i) v = (v & 1u) ? (v >> 1) ^ 0x82F63B78u : v >> 1;
  return static_cast<uint64_t>(v) << 32;  // bit j of the 64-bit frame holds x^(63 - j)
}

uint32_t crc32c_shift(uint32_t reg, uint32_t bytes) {
#if defined(__x86_64__)
  static const bool clmul = __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.2");
  if (clmul && bytes < (2u << ShiftPowers::kLast)) {
    // The encoder shifts by the same plane size packet after packet: that length's own
    // multiplier x^(8 bytes - 33) = x^31 x^(8 (bytes - 8)), kept, makes it one step. One word
    // (length, multiplier) that any thread may replace: no lock, no thread-local lookup.
    static std::atomic<uint64_t> last{0};
    if (bytes < 8) return shift_clmul(reg, bytes);
    uint64_t kept = last.load(std::memory_order_relaxed);
    if (static_cast<uint32_t>(kept >> 32) != bytes) {
      static const ShiftPowers powers;
      kept = static_cast<uint64_t>(bytes) << 32 | shift_clmul(powers.k[ShiftPowers::kFirst], bytes - 8);
      last.store(kept, std::memory_order_relaxed);
    }
    return shift_step(reg, static_cast<uint32_t>(kept));
  }
#endif
  return crc_multiply(reg, static_cast<uint32_t>(crc32c_xpow(8 * bytes) >> 32));
}

int crc32c_path() { return g_crc_path.load(std::memory_order_relaxed); }
bool crc32c_force_path(int path) {
  if (path < 0) path = kCrcBestPath;
  if (path > kCrcBestPath) return false;  // each path's CPU needs include the lower ones'
  g_crc_path.store(path, std::memory_order_relaxed);
  return true;
}
}  // namespace detail

uint32_t crc32c_extend(uint32_t crc, const uint8_t* data, size_t len) {
#if defined(__x86_64__)
  const int path = g_crc_path.load(std::memory_order_relaxed);
  if (path != 0 && len < kFoldMinBytes) return crc_chain(~crc, data, 0, len);  // the check points in the heads
  if (path == 2) return crc32c_fold(crc, data, len);
  if (path == 1) return crc32c_hw(crc, data, len);
#endif
  return crc32c_sw(crc, data, len);
}

uint32_t crc32c(const uint8_t* data, size_t len) { return crc32c_extend(0, data, len); }

uint32_t check_point_ends(uint32_t payload_bytes, uint32_t trim_bytes, uint32_t planned_cut,
                          uint16_t ends[kCheckPoints]) {
  // In order of worth: the whole payload, the trim point (our switch's cut), the fabric's planned
  // cut, then points inside the heads (a byte of heads is 8 elements, a byte of tails 1/4 of one)
  // and one inside the tails.
  const uint32_t t = trim_bytes, p = payload_bytes;
  const uint32_t wanted[] = {p, t, planned_cut, t / 2, t / 4, t - t / 4, t + (p - std::min(t, p)) / 2, t / 8};
  uint32_t n = 0;
  for (uint32_t w : wanted) {
    if (n == kCheckPoints) break;
    if (w == 0 || w > p || std::find(ends, ends + n, w) != ends + n) continue;
    ends[n++] = static_cast<uint16_t>(w);
  }
  std::sort(ends, ends + n);
  return n;
}

BinLevels bin_levels(float scale, uint16_t bin_ratio) {
  BinLevels l;
  l.outer = scale;
  l.inner = scale * (static_cast<float>(bin_ratio) / 65535.0f);
  l.unknown = kBinOuterFraction * l.outer + (1.0f - kBinOuterFraction) * l.inner;
  return l;
}

PlaneBits plane_bits(Scheme scheme, DType dtype, bool tail, uint32_t head_bits) {
  if (tail) return {0, 0, 8};
  if (scheme == Scheme::kNone) return {0, 0, 8 * dtype_bytes(dtype)};
  // sq and sd heads are not the sign bit, nor is rht's (the sign of the rotated value), so
  // their planes 1+2 carry the whole original value (one extra bit per element) and an
  // untrimmed packet decodes exactly; the head of sign and rotated is the sign bit itself.
  bool whole_value = scheme == Scheme::kSq || scheme == Scheme::kSd || scheme == Scheme::kRht;
  uint32_t b1 = whole_value ? 16 : 15;
  uint32_t b2 = dtype == DType::kF32 ? 16 : 0;
  return {1, b1, b2, head_bits == 2 && sign_head(scheme) ? 1u : 0u};
}

PlaneBytes plane_bytes(const PlaneBits& bits, uint32_t elems) {
  auto bytes = [elems](uint32_t b) { return static_cast<uint32_t>((static_cast<uint64_t>(elems) * b + 7) / 8); };
  return {bytes(bits.b0), bytes(bits.b1), bytes(bits.b2), bytes(bits.bq)};
}

uint32_t trim_point_bytes(const PlaneBytes& planes, Scheme scheme, uint32_t head_bits) {
  if (scheme == Scheme::kNone) return 0;
  return head_bits == 16 ? planes.p0 + planes.p1 : planes.p0 + planes.pq;
}

void write_prefix(uint8_t* out, uint16_t magic, uint8_t version, uint64_t cookie) {
  put16(out + 0, magic);
  out[2] = version;
  put64(out + 8, cookie);
}

uint64_t prefix_cookie(const uint8_t* data) { return get64(data + 8); }

void write_header(const PacketHeader& h, uint8_t* out, uint32_t planned_cut, const PayloadSpanCrc* spans,
                  uint32_t span_count) {
  write_prefix(out, kMagic, kVersion, h.cookie);
  out[3] = h.flags;
  out[4] = static_cast<uint8_t>(h.scheme);
  out[5] = static_cast<uint8_t>(h.dtype);
  out[6] = h.head_bits;
  out[7] = h.row_log2;
  put32(out + 16, h.msg_seq);
  put32(out + 20, h.msg_bytes);
  put32(out + 24, h.row);
  put16(out + 28, h.first_elem);
  put16(out + 30, h.elem_count);
  put16(out + 32, h.payload_bytes);
  put16(out + 34, h.trim_bytes);
  put32(out + 36, f32_bits(h.scale));
  put32(out + 40, h.psn);
  put32(out + 44, h.dst_ip4);
  put16(out + 48, h.dst_port);
  put16(out + 50, h.bin_ratio);
  std::memset(out + kCheckOffset, 0, 4 * kCheckPoints);
  if (h.scheme != Scheme::kNone) {
    uint16_t ends[kCheckPoints];
    const uint32_t n = check_point_ends(h.payload_bytes, h.trim_bytes, planned_cut, ends);
    const uint8_t* payload = out + kHeaderBytes;
    uint32_t crc = crc32c(out + kCheckSeedOffset, kCheckSeedBytes), pos = 0, s = 0;
    for (uint32_t i = 0; i < n; ++i) {
      while (pos < ends[i]) {
        while (s < span_count && spans[s].start < pos) ++s;  // cut by an earlier point: read
        if (s < span_count && spans[s].start == pos && pos + spans[s].bytes <= ends[i]) {
          crc = ~(detail::crc32c_shift(~crc, spans[s].bytes) ^ spans[s].reg);  // CRC is linear
          pos += spans[s++].bytes;
          continue;
        }
        // Read up to the next span (one that starts here does not fit before this point: read on).
        const bool next = s < span_count && spans[s].start > pos && spans[s].start < ends[i];
        const uint32_t stop = next ? spans[s].start : ends[i];
        crc = crc32c_extend(crc, payload + pos, stop - pos);
        pos = stop;
      }
      put16(out + kCheckOffset + 4 * i, ends[i]);
      put16(out + kCheckOffset + 4 * i + 2, static_cast<uint16_t>(crc));
    }
  }
  put32(out + kCrcOffset, header_crc(out));
}

void stamp_transport(uint8_t* packet, uint32_t psn, uint32_t dst_ip4, uint16_t dst_port) {
  put32(packet + 40, psn);
  put32(packet + 44, dst_ip4);
  put16(packet + 48, dst_port);
  put32(packet + kCrcOffset, header_crc(packet));
}

uint32_t stamped_psn(const uint8_t* packet) { return get32(packet + 40); }

void mark_trimmed(uint8_t* packet) { packet[kFlagsOffset] |= kFlagTrimmed; }

void mark_udp_checksummed(uint8_t* packet) { packet[kFlagsOffset] |= kFlagUdpChecksummed; }

void mark_resent(uint8_t* packet) {
  if ((packet[kFlagsOffset] & kFlagResent) != 0) return;
  packet[kFlagsOffset] |= kFlagResent;
  put32(packet + kCrcOffset, header_crc(packet));
}

namespace {

// The header's fields as they stand, nothing checked, but for scheme and dtype: the callers
// check those bytes before they become enums.
inline void read_fields(const uint8_t* data, PacketHeader* h) {
  h->flags = data[3];
  h->head_bits = data[6];
  h->row_log2 = data[7];
  h->cookie = prefix_cookie(data);
  h->msg_seq = get32(data + 16);
  h->msg_bytes = get32(data + 20);
  h->row = get32(data + 24);
  h->first_elem = get16(data + 28);
  h->elem_count = get16(data + 30);
  h->payload_bytes = get16(data + 32);
  h->trim_bytes = get16(data + 34);
  h->scale = bits_f32(get32(data + 36));
  h->psn = get32(data + 40);
  h->dst_ip4 = get32(data + 44);
  h->dst_port = get16(data + 48);
  h->bin_ratio = get16(data + 50);
}

// parse_packet's checks; `count`: in packet_error_counters() (not for our own packets).
PacketError parse(const uint8_t* data, const uint8_t* payload, size_t len, ParsedPacket* out, bool count) {
  const auto fail = [count](PacketError e) { return count ? codec::fail(e) : e; };
  if (data == nullptr || len < kHeaderBytes) return fail(PacketError::kTruncatedHeader);
  if (get16(data) != kMagic) return fail(PacketError::kBadMagic);
  if (data[2] != kVersion) return fail(PacketError::kBadVersion);
  if (get32(data + kCrcOffset) != header_crc(data)) return fail(PacketError::kBadChecksum);

  // Filled in place: a local header copied out at the end cost a 54-byte rep movsb per packet
  // (and *out is unspecified on failure anyway).
  PacketHeader& h = out->hdr;
  read_fields(data, &h);
  const uint8_t scheme = data[4], dtype = data[5];

  if ((h.flags & ~kFlagsKnown) != 0 || scheme >= kNumSchemes || dtype >= kNumDTypes ||
      !valid_head_bits(h.head_bits) || h.row_log2 < 3 || h.row_log2 > 15) {
    return fail(PacketError::kBadField);
  }
  h.scheme = static_cast<Scheme>(scheme);
  h.dtype = static_cast<DType>(dtype);
  bool lossy = h.scheme != Scheme::kNone;
  // 2-bit heads are a sign and a bin: sq/sd (random heads) have none, and only a row with
  // bins has a bin ratio.
  const bool bins = h.head_bits == 2 && sign_head(h.scheme) && !h.tail();
  if ((h.head_bits == 2 && (h.scheme == Scheme::kSq || h.scheme == Scheme::kSd)) || (!bins && h.bin_ratio != 0)) {
    return fail(PacketError::kBadField);
  }
  if (lossy && (h.dtype == DType::kRaw || h.tail() || !std::isfinite(h.scale) || h.scale < 0.0f)) {
    return fail(PacketError::kBadField);
  }
  if (!lossy && (h.scale != 0.0f || h.trimmable())) return fail(PacketError::kBadField);

  // Geometry: the elements must lie inside their row and the row inside the message.
  const uint64_t elem_bytes = dtype_bytes(h.dtype);
  const uint64_t row_elems = 1ull << h.row_log2;
  const uint64_t typed_elems = h.msg_bytes / elem_bytes;
  const uint64_t typed_rows = (typed_elems + row_elems - 1) / row_elems;
  if (h.elem_count == 0) return fail(PacketError::kBadLength);
  if (h.tail()) {
    if (h.first_elem != 0 || h.elem_count != h.msg_bytes % elem_bytes || h.row != typed_rows) {
      return fail(PacketError::kElemOverflow);
    }
  } else {
    uint64_t end = static_cast<uint64_t>(h.first_elem) + h.elem_count;
    if (end > row_elems || static_cast<uint64_t>(h.row) * row_elems + end > typed_elems) {
      return fail(PacketError::kElemOverflow);
    }
  }
  PlaneBytes planes = plane_bytes(plane_bits(h.scheme, h.dtype, h.tail(), h.head_bits), h.elem_count);
  if (h.payload_bytes != planes.total() || h.trim_bytes != trim_point_bytes(planes, h.scheme, h.head_bits)) {
    return fail(PacketError::kBadLength);
  }
  // The check points: ascending prefix lengths ending at the payload's end (lossy packets), the
  // unused ones all zero; none at all on raw packets (the UDP checksum guards those).
  uint32_t points = 0, prev = 0;
  bool tail_zero = true;
  for (uint32_t i = 0; i < kCheckPoints; ++i) {
    const uint32_t end = get16(data + kCheckOffset + 4 * i), check = get16(data + kCheckOffset + 4 * i + 2);
    if (end == 0) {
      tail_zero = tail_zero && check == 0;
      continue;
    }
    if (points != i || end <= prev) return fail(PacketError::kBadField);
    prev = end;
    ++points;
  }
  if (!tail_zero || (lossy ? points == 0 || prev != h.payload_bytes : points != 0)) return fail(PacketError::kBadField);
  if (len > kHeaderBytes + h.payload_bytes) return fail(PacketError::kLengthPastPacket);

  out->payload = payload;
  const uint32_t received = static_cast<uint32_t>(len - kHeaderBytes);
  out->check_failed = false;
  // Whole and checksummed by the sender's kernel: the receiving kernel checked it all already.
  const bool kernel_verified = (h.flags & kFlagUdpChecksummed) != 0 && received == h.payload_bytes;
  out->payload_received =
      lossy && !kernel_verified ? verified_prefix(data, out->payload, received, &out->check_failed) : received;
  out->trimmed = out->payload_received < h.payload_bytes;
  out->marked_trimmed = false;
  if (count && out->check_failed) packet_error_counters().add(PacketError::kBadPayloadCheck);
  return PacketError::kOk;
}

}  // namespace

PacketError parse_packet(const uint8_t* data, size_t len, ParsedPacket* out) {
  return parse(data, data == nullptr ? nullptr : data + kHeaderBytes, len, out, true);
}

PacketError parse_packet_at(const uint8_t* hdr, const uint8_t* payload, size_t len, ParsedPacket* out) {
  return parse(hdr, payload, len, out, true);
}

bool peek_header(const uint8_t* hdr, PacketHeader* out) {
  if (get16(hdr) != kMagic || hdr[2] != kVersion || hdr[4] >= kNumSchemes || hdr[5] >= kNumDTypes) return false;
  read_fields(hdr, out);
  out->scheme = static_cast<Scheme>(hdr[4]);
  out->dtype = static_cast<DType>(hdr[5]);
  return true;
}

PacketError parse_own_packet(const uint8_t* data, size_t len, uint32_t payload_kept, ParsedPacket* out) {
  const PacketError e = parse(data, data + kHeaderBytes, len, out, false);
  if (e != PacketError::kOk || payload_kept >= out->payload_received) return e;
  out->payload_received = payload_kept;
  out->trimmed = true;
  return e;
}

}  // namespace trim::codec
