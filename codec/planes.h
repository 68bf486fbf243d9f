// Bit-plane packing: the payload of a lossy packet is plane 0 (one head bit per element,
// LSB first), then plane 1 (b1 = 15 or 16 bits per element, a little-endian bitstream), then
// plane 2 (fp32 only: the low 16 bits, little-endian u16). See docs/PROTOCOL.md.
#pragma once

#include <cstddef>
#include <cstdint>

namespace trim::codec {

// Plane 0 from the top bit of each 16-bit value.
void pack_sign_bits16(const uint16_t* v, uint32_t n, uint8_t* p0);
// 15-bit fields packed back to back (8 per 15 bytes): bits 14..0 of 16-bit values.
void pack15_from16(const uint16_t* v, uint32_t n, uint8_t* p1);
// 16-bit fields as little-endian u16: (v >> shift) & 0xffff.
void pack16_from32(const float* v, uint32_t n, int shift, uint8_t* out);
void pack16_from16(const uint16_t* v, uint32_t n, uint8_t* out);

// Inverse of pack15_*: the first n fields of a 15-bit stream (the caller guarantees the
// stream holds them).
void unpack15(const uint8_t* p1, uint32_t n, uint16_t* out);
// Inverse of pack16_*.
void unpack16(const uint8_t* p, uint32_t n, uint16_t* out);

inline uint32_t head_bit(const uint8_t* p0, uint32_t i) { return (p0[i >> 3] >> (i & 7)) & 1u; }

// Norms gathered while packing, so a row is read once: sum of squares and of absolute
// values (double), and whether every value was finite (when not, the sums are meaningless).
struct Norms {
  double sum_sq = 0.0;
  double sum_abs = 0.0;
  bool finite = true;
};

// All three planes of fp32 values in the sign layout (sign) in one pass over the input,
// adding the values' norms to *norms. p1 == nullptr (p2 unused): plane 0 and the norms only,
// which is what rht takes from the rotated values (its planes 1+2 hold the input's bits).
void pack_f32_sign_layout(const float* v, uint32_t n, uint8_t* p0, uint8_t* p1, uint8_t* p2, Norms* norms);

// One rht packet in one pass: plane 0 and the norms from the rotated values `rot` (as
// pack_f32_sign_layout(rot, n, p0, nullptr, nullptr, norms)), planes 1+2 from the input `v`
// (bits 31..16 to p1, bits 15..0 to p2, as pack16_from32 with shifts 16 and 0). When a value
// of rot is not finite, norms->finite becomes false and the sums are unspecified (the encoder
// then sends the row unrotated and recomputes them); otherwise every output is the reference's.
void pack_f32_rht(const float* rot, const float* v, uint32_t n, uint8_t* p0, uint8_t* p1, uint8_t* p2,
                  Norms* norms);
// pack_f32_rht, and where this CPU's kernel can (AVX2 or AVX-512 with PCLMUL and VPCLMULQDQ;
// n a multiple of 8) the CRC-32C registers of plane 1 (2n bytes at p1) and plane 2 (2n bytes at
// p2), each fed from a zero register with no inversion, into regs[0] and regs[1]: returns
// whether it set them (the bytes written are the same either way). For write_header's
// PayloadSpanCrc. ahead != 0: the bytes [p1, p2 + 2n) moved on by `ahead` are writable (the
// next packet's slot), and the pass may claim them for writing before the next call stores there.
bool pack_f32_rht_crc(const float* rot, const float* v, uint32_t n, uint8_t* p0, uint8_t* p1, uint8_t* p2,
                      Norms* norms, uint32_t regs[2], size_t ahead = 0);

// Decode of whole fp32 elements [0, n) of a packet: sign layout (plane 0 = sign, plane 1 =
// bits 30..16) or value layout (plane 1 = bits 31..16); plane 2 = bits 15..0.
void assemble_f32(const uint8_t* p0, const uint8_t* p1, const uint8_t* p2, bool value_layout, uint32_t n, float* dst);
// dst[i - begin] = head bit i ? if_set : if_clear, for i in [begin, end).
void fill_heads(const uint8_t* p0, uint32_t begin, uint32_t end, float if_set, float if_clear, float* dst);

// Plane 0 of sq (sd = false) or sd (sd = true) for values v[0, n), which are elements
// [first, first + n) of their row: per element the shared uniform u = rng_uniform(key, elem);
// sq: head = u * 2L < L + x, sd: head = x + (2u - 1) L > 0, x clipped to [-L, L] (NaN -> -L).
void random_heads(uint64_t key, uint32_t first, const float* v, uint32_t n, float clip, bool sd, uint8_t* p0);
// dst[i] -= (2u - 1) L for elements [first, first + n): the sd dither of head-only values.
void subtract_dither(uint64_t key, uint32_t first, uint32_t n, float clip, float* dst);

// 16-bit dtypes (bf16 when `bf16`, else IEEE fp16): exact widening, round-to-nearest-even
// narrowing (overflow to inf), and the sign layout's planes 0+1 (sign bit, bits 14..0).
void widen16(const uint16_t* v, uint32_t n, bool bf16, float* out);
void narrow16(const float* v, uint32_t n, bool bf16, uint16_t* out);
void pack16_sign_layout(const uint16_t* v, uint32_t n, uint8_t* p0, uint8_t* p1);
// Whole 16-bit values [0, n) of a packet: sign layout (sign | 15-bit field) or value layout.
void assemble16(const uint8_t* p0, const uint8_t* p1, bool value_layout, uint32_t n, uint16_t* dst);
// fill_heads for 16-bit values: dst[i - begin] = head bit i ? if_set : if_clear.
void fill_heads16(const uint8_t* p0, uint32_t begin, uint32_t end, uint16_t if_set, uint16_t if_clear, uint16_t* dst);
// widen16, then sum_squares of the widened values (and sum_abs into *sum_abs unless null), in
// one pass: the same bits as those calls; *sum_abs only where *all_finite.
double widen16_sum_squares(const uint16_t* v, uint32_t n, bool bf16, float* out, bool* all_finite, double* sum_abs);
// rht heads of a 16-bit row: plane 0 of fp32 values (their sign bits), adding |v[i]| to
// lanes[i % 8] in element order. Called on a row's packets in turn (multiples of 8 elements but
// the last), lanes_total(lanes) is then sum_abs of the row, to the bit, where it is finite.
void pack_heads_sum_abs(const float* v, uint32_t n, uint8_t* p0, double lanes[8]);

// Plane Q of 2-bit heads for values v[0, n): bit i set when |v[i]| > threshold (NaN: clear),
// adding each bin's finite |v| and count to *sums (for the bins' levels). The sums run in
// double, element i into lane i mod 8, lanes combined as sum_abs does, so that every encoder
// sends the same levels.
struct BinSums {
  double inner_abs = 0.0, outer_abs = 0.0;
  uint64_t inner = 0, outer = 0;
};
void pack_bins(const float* v, uint32_t n, float threshold, uint8_t* pq, BinSums* sums);
// dst[i - begin] for elements i in [begin, end) of a sign-head packet with 2-bit heads: the
// sign of head bit i (set: negative) times the level of bin bit i where i < nq, else
// levels.unknown (the bin was cut).
struct BinLevels;
void fill_heads2(const uint8_t* p0, const uint8_t* pq, uint32_t begin, uint32_t end, uint32_t nq,
                 const BinLevels& levels, float* dst);

// The total of eight double lanes (element i summed into lane i mod 8), combined in the one order
// every encoder uses, so that the header's scale and levels are the same bytes on every ISA.
inline double lanes_total(const double l[8]) {
  return ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]));
}

// Row norms in double precision. sum_squares skips non-finite values and reports them.
double sum_squares(const float* v, uint32_t n, bool* all_finite);
double sum_abs(const float* v, uint32_t n);

// Every function above has a portable reference (namespace scalar) and, where the CPU has
// AVX-512 (F, BW, DQ, VL, VBMI) and BMI2, a vector version picked once at startup; on AVX2
// CPUs without it (Zen 2/3, client Intel) the fp32 hot path (planes_kernels_f32.inc) and the
// 16-bit dtypes' kernels (planes_kernels_16.inc) have AVX2 versions and the rest stays scalar. Tests compare each with the reference, bit for bit;
// kernels_isa() tells which one runs ("avx512", "avx2" or "scalar").
const char* kernels_isa();
void kernels_force_scalar(bool force);  // tests and benchmarks only

namespace scalar {
// Building blocks of the fp32 sign-layout reference: plane 0 (bit 31), plane 1 (bits 30..16).
void pack_sign_bits32(const float* v, uint32_t n, uint8_t* p0);
void pack15_from32(const float* v, uint32_t n, uint8_t* p1);
// The norms' lanes: adds elements [i, n) of a run, element j into lane j % 8, in order: the
// squares of finite values to sq (a non-finite one clears *finite), |v| to ab; sq or ab may be
// null. The vector kernels finish their runs with it, so every ISA rounds the same.
void add_norm_lanes(const float* v, uint32_t i, uint32_t n, double* sq, double* ab, bool* finite);
void pack_f32_rht(const float* rot, const float* v, uint32_t n, uint8_t* p0, uint8_t* p1, uint8_t* p2,
                  Norms* norms);
#include "codec/planes_kernels.inc"
}  // namespace scalar

namespace avx512 {
bool supported();
#include "codec/planes_kernels.inc"
// avx2::pack_f32_rht_crc 16 elements a step, for n a multiple of 8; crc_supported(): with
// PCLMUL, VPCLMULQDQ and SSE4.2 besides. ahead: as the dispatcher's.
bool crc_supported();
void pack_f32_rht_crc(const float* rot, const float* v, uint32_t n, uint8_t* p0, uint8_t* p1, uint8_t* p2,
                      Norms* norms, uint32_t regs[2], size_t ahead);
}  // namespace avx512

namespace avx2 {
bool supported();  // AVX2, BMI1 and BMI2
#include "codec/planes_kernels_f32.inc"
#include "codec/planes_kernels_16.inc"  // codec/planes16_avx2.cc
// The rht packet pass (AVX-512 CPUs run it too: planes.cc).
void pack_f32_rht(const float* rot, const float* v, uint32_t n, uint8_t* p0, uint8_t* p1, uint8_t* p2,
                  Norms* norms);
// The same pass, also giving planes 1 and 2's CRC-32C registers (pack_f32_rht_crc); where the
// CPU has PCLMUL, VPCLMULQDQ and SSE4.2 besides (crc_supported()).
bool crc_supported();
void pack_f32_rht_crc(const float* rot, const float* v, uint32_t n, uint8_t* p0, uint8_t* p1, uint8_t* p2,
                      Norms* norms, uint32_t regs[2]);
}  // namespace avx2

}  // namespace trim::codec
