// The K-quant device formats' shared pieces (Q4_K, Q5_K, Q6_K; the layouts
// themselves are documented in kernels/formats/q4_k.cuh, q5_k.cuh, q6_k.cuh).
// Everything here is __host__ __device__ (QSP_HD) so the decode the kernels
// run also runs in the CPU test (tests/kernel_formats/), compared there with
// the CPU reference's dequantization.
#pragma once

#include <cstdint>
#include <cstring>

#include "common/quant.h"
#include "kernels/qweight_layout.h"

// Device passes only: the host compiler warns on an unknown pragma.
#if defined(__CUDA_ARCH__)
#define QSP_UNROLL _Pragma("unroll")
#else
#define QSP_UNROLL
#endif

// ---- K-quants (Q4_K, Q5_K, Q6_K): shared pieces ---------------------------------------
// GGML's super-blocks of 256 weights: K must be a multiple of 256
// (WTraits::kColsMultiple). The per-format layouts are documented in
// kernels/formats/q4_k.cuh, q5_k.cuh and q6_k.cuh; these helpers are
// __host__ __device__ so the decode runs unchanged in the CPU test
// (tests/kernel_formats/).

namespace qsp {
namespace kern {
namespace qw {

constexpr int kSuperCols = 256;  // GGML K-quant super-block

// fp16 bits -> fp32 (exact).
QSP_HD inline float h2f(uint16_t h) {
#if defined(__CUDA_ARCH__)
  float f;
  asm("cvt.f32.f16 %0, %1;\n" : "=f"(f) : "h"(h));
  return f;
#else
  return fp16_to_fp32(h);
#endif
}
// q < 2^23 as an exact fp32 without an I2F: the bits of 2^23 + q, minus 2^23.
QSP_HD inline float small_u2f(uint32_t q) {
  const uint32_t b = 0x4B000000u | q;
  float f;
  memcpy(&f, &b, 4);
  return f - 8388608.0f;
}

// Q4_K / Q5_K side unit (128 bytes per 16 x 64 unit): for row group g, 16
// bytes at 16*g (one 16-byte load per lane):
//   byte 16*g + 4*h + 2*p      8-bit sc of row 8p+g, sub-block h of the chunk
//   byte 16*g + 4*h + 2*p + 1  8-bit m  of the same
//   byte 16*g + 8 + 4*p        fp16 d    of row 8p+g's super-block
//   byte 16*g + 8 + 4*p + 2    fp16 dmin of the same
constexpr int kKSideUnitBytes = 128;
QSP_HD constexpr int kq_sm_byte(int g, int p, int h) { return 16 * g + 4 * h + 2 * p; }
QSP_HD constexpr int kq_dd_byte(int g, int p) { return 16 * g + 8 + 4 * p; }

// Q4_K / Q5_K: x = (d * sc) * q - dmin * m in fp32, as the CPU reference
// (src/formats/q4_K.cpp) computes it. d * sc, dmin * m and (d * sc) * q are
// exact (11 + 6 + 5 bits < 24), so the one rounding is the subtraction's
// whether or not the compiler fuses it into an FMA: host and device agree
// bit for bit. `side`: the lane's four side words (sm of h = 0, 1; dd of
// p = 0, 1); q(p, e) the 4- or 5-bit code; v[4p + e].
template <class Q>
QSP_HD inline void kq_affine_values(const uint32_t (&side)[4], int h, Q q, float (&v)[8]) {
  QSP_UNROLL
  for (int p = 0; p < 2; ++p) {
    const uint32_t sm = side[h] >> (16 * p), dd = side[2 + p];
    const float ds = h2f(uint16_t(dd)) * float(sm & 0xffu);
    const float ms = h2f(uint16_t(dd >> 16)) * float((sm >> 8) & 0xffu);
  QSP_UNROLL
    for (int e = 0; e < 4; ++e) v[4 * p + e] = ds * small_u2f(q(p, e)) - ms;
  }
}

// Host repacking of the Q4_K / Q5_K side unit: writes sc / m / d / dmin of
// tile row rr (0..15), sub-block h of the chunk.
inline void kq_put_side(uint8_t* side, int rr, int h, uint8_t sc, uint8_t m, uint16_t d, uint16_t dmin) {
  const int g = rr & 7, p = rr >> 3;
  side[kq_sm_byte(g, p, h)] = sc;
  side[kq_sm_byte(g, p, h) + 1] = m;
  memcpy(side + kq_dd_byte(g, p), &d, 2);
  memcpy(side + kq_dd_byte(g, p) + 2, &dmin, 2);
}

// GGML's get_scale_min_k4: the 6-bit sc and m of sub-block j (0..7) from a
// Q4_K / Q5_K block's 12 packed bytes (as src/formats/quant_util.h unpacks them).
inline void kq_unpack_scale_min(int j, const uint8_t* q, uint8_t* sc, uint8_t* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = uint8_t((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
    *m = uint8_t((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

}  // namespace qw
}  // namespace kern
}  // namespace qsp
