// Scalar conversions (fp16 / bf16, exact) and typed views of the Q4_0 / Q8_0
// blocks for the code that builds or inspects blocks by hand (tests, the
// synthesizer). Everything else about a format is its Format record
// (src/formats/format.h). GGUF/GGML define the blocks; the static_asserts pin
// the byte layout so nothing can drift.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "formats/format.h"
#include "qsp/qsp.h"

namespace qsp {

constexpr int kQBlock = 32;  // weights per quantization block (Q4_0 and Q8_0)

// Q4_0: x[i] = d * (q[i] - 8); q[i] for i < 16 is the low nibble of qs[i],
// for i >= 16 the high nibble of qs[i - 16].
struct BlockQ4_0 {
  uint16_t d;        // fp16 bits
  uint8_t qs[16];
};
// Q8_0: x[i] = d * qs[i].
struct BlockQ8_0 {
  uint16_t d;        // fp16 bits
  int8_t qs[32];
};
static_assert(sizeof(BlockQ4_0) == 18, "Q4_0 block is 18 bytes in GGUF");
static_assert(sizeof(BlockQ8_0) == 34, "Q8_0 block is 34 bytes in GGUF");

// ---- fp16 / bf16 <-> fp32, exact, no hardware support needed ---------------
inline float fp32_from_bits(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }
inline uint32_t bits_from_fp32(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }

inline float fp16_to_fp32(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  if (exp == 0x1f) return fp32_from_bits(sign | 0x7f800000u | (mant << 13));  // inf / nan
  if (exp == 0) {
    if (mant == 0) return fp32_from_bits(sign);
    // Subnormal: value = mant * 2^-24.
    float v = std::ldexp(float(mant), -24);
    return sign ? -v : v;
  }
  return fp32_from_bits(sign | ((exp + 112u) << 23) | (mant << 13));
}

// Round to nearest, ties to even; overflow to inf; NaN stays NaN.
inline uint16_t fp32_to_fp16(float f) {
  const uint32_t x = bits_from_fp32(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t absx = x & 0x7fffffffu;
  if (absx >= 0x7f800000u) return uint16_t(sign | 0x7c00u | (absx > 0x7f800000u ? 0x200u : 0u));
  if (absx >= 0x477ff000u) return uint16_t(sign | 0x7c00u);  // rounds past 65504
  if (absx < 0x38800000u) {  // below the smallest normal: subnormal or zero
    // value / 2^-24, rounded to nearest even integer.
    const float v = fp32_from_bits(absx) * 16777216.0f;
    float r = std::nearbyint(v);  // default rounding mode: ties to even
    return uint16_t(sign | uint32_t(r));
  }
  uint32_t mant = absx & 0x7fffffu;
  uint32_t exp = (absx >> 23) - 112u;
  uint32_t h = (exp << 10) | (mant >> 13);
  const uint32_t rest = mant & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;  // carries into exp correctly
  return uint16_t(sign | h);
}

inline float bf16_to_fp32(uint16_t b) { return fp32_from_bits(uint32_t(b) << 16); }

inline uint16_t fp32_to_bf16(float f) {
  uint32_t x = bits_from_fp32(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return uint16_t((x >> 16) | 0x40u);  // quiet NaN
  x += 0x7fffu + ((x >> 16) & 1u);
  return uint16_t(x >> 16);
}

// ---- dtype facts: the format registry's (src/formats/format.h) -------------
// Bytes of one row of n_cols elements; 0 when impossible (unknown dtype,
// n_cols not a multiple of the block, or a size past 2^64).
inline uint64_t dtype_row_bytes(int32_t t, uint64_t n_cols) {
  const fmt::Format* f = fmt::find(t);
  return f ? f->row_bytes(n_cols) : 0;
}
// Dequantizes / converts one row of n_cols elements to fp32.
inline void dequantize_row(int32_t dtype, const void* row, float* out, uint64_t n_cols) {
  fmt::dequantize_row(dtype, row, out, n_cols);
}

// The reference quantizers (GGML's quantize_row_q4_0_ref / q8_0_ref), defined
// with their formats in src/formats/; n % 32 == 0.
void quantize_row_q4_0(const float* x, BlockQ4_0* y, uint64_t n);
void quantize_row_q8_0(const float* x, BlockQ8_0* y, uint64_t n);

}  // namespace qsp
