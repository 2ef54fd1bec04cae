// The device side of the tiled weight layout (kernels/qweight_layout.h, where
// the layout and its reasons are documented): the fragment decoders shared by
// the format headers (kernels/formats/), and the contract every format's
// traits (WTraits<F>) fulfil.
#pragma once

#include <cuda_fp16.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kernels/kernels.h"
#include "kernels/ptx.cuh"
#include "kernels/qweight_layout.h"

namespace qsp {
namespace kern {

// ---- A weight format on the device ---------------------------------------------
// One specialization per WFormat, each in kernels/formats/<name>.cuh
// (kernels/formats/formats.cuh includes them all). It provides:
//  Host
//   serves(dtype)     whether GGUF dtype `dtype` is stored in this format
//   bytes(rows, cols) bytes of the device layout of a rows x cols matrix
//   scales_offset(rows, cols)  byte offset of the scale array (0: none)
//   repack_tiles(dtype, src, rows, cols, t0, t1, units, side)  GGUF bytes ->
//                     the device layout of 16-row tiles [t0, t1): their units
//                     (row-major: rows) to `units`, their side data to `side`
//                     (kern::repack_weight_tiles; repack_weight runs it over
//                     all tiles on all cores)
//   kColsMultiple     optional: K must be a multiple of it (the K-quants:
//                     256); 32 where absent (qw::ColsMultiple, gemm_supported)
//  Layout
//   kRowMajor         plain row-major fp16 (true) or the tiled units of
//                     qweight_layout.h (false): kUnit bytes of packed
//                     weights and kScaleUnit (a multiple of 16) of side data
//                     (scales) per 16 x 64 unit, copied as is by the loaders
//   kWgmma            the sm_90a wgmma GEMM decodes it
//  mma.sync GEMM and GEMV
//   kTileStageBytes   smem bytes one 16-row tile takes in one BK = 64 stage
//   kStages           pipeline depth of the mma kernel (smem budget)
//   kGemvRawRegs      registers of one lane's Raw (sets the GEMV unroll)
//   kGemvDualRawRegs  (optional) the same for the SwiGLU GEMV's two matrices
//   Raw               a lane's undecoded words for one tile and one chunk
//   lds_raw()         smem -> Raw for half-stage hs (k steps 2hs, 2hs+1)
//   ldg_raw() / ldg_rows()  global -> Raw for the GEMV (tiled / row-major)
//   frags()           Raw, k step s -> four decoded f16x2 (order below)
//  wgmma GEMM (kWgmma)
//   wg_raw()          a stage's smem -> Raw of one chunk (formats.cuh's wg_decode
//                     makes the A fragments of its four k steps through frags())
//  Embedding
//   load8()           dequantized columns [col8, col8 + 8) of one row
template <WFormat F>
struct WTraits;

namespace qw {

// Swizzled 16-byte column slot of a 128-byte smem row (64 fp16 of one chunk),
// as the mma.sync GEMM stages activations and row-major fp16 weights:
// ldmatrix reads one slot of 8 consecutive rows, which then hit 8 distinct
// bank groups.
__device__ __forceinline__ int swz(int row, int slot) { return slot ^ (row & 7); }

// ---- Fragment decoders (gemm) -------------------------------------------------
// Each produces, for one lane word set and k step, the four f16x2 registers
//   f[0] = rows g,   e = 0,1     f[1] = rows g,   e = 2,3
//   f[2] = rows g+8, e = 0,1     f[3] = rows g+8, e = 2,3
// already multiplied by the block scales. As mma B operand (W^T), f[0..1]
// are {b0, b1} of the n8 tile of rows 0..7 and f[2..3] of rows 8..15; as the
// GEMV's A operand they are {a0, a2, a1, a3}.
// `sc` is the lane's scale word for the block of this step: lo half = row g,
// hi half = row g+8.

__device__ __forceinline__ uint32_t lop3_and_or(uint32_t a, uint32_t b, uint32_t c) {  // (a & b) | c
  uint32_t d;
  asm("lop3.b32 %0, %1, %2, %3, 0xEA;\n" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
}
__device__ __forceinline__ uint32_t prmt(uint32_t a, uint32_t b, uint32_t sel) {
  uint32_t d;
  asm("prmt.b32 %0, %1, %2, %3;\n" : "=r"(d) : "r"(a), "r"(b), "r"(sel));
  return d;
}
__device__ __forceinline__ uint32_t hsub2(uint32_t a, uint32_t b) {
  uint32_t d;
  asm("sub.rn.f16x2 %0, %1, %2;\n" : "=r"(d) : "r"(a), "r"(b));
  return d;
}
__device__ __forceinline__ uint32_t hmul2(uint32_t a, uint32_t b) {
  uint32_t d;
  asm("mul.rn.f16x2 %0, %1, %2;\n" : "=r"(d) : "r"(a), "r"(b));
  return d;
}
__device__ __forceinline__ uint32_t hfma2(uint32_t a, uint32_t b, uint32_t c) {
  uint32_t d;
  asm("fma.rn.f16x2 %0, %1, %2, %3;\n" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
}

// Q4_0: q | 0x6400 as fp16 is 1024 + q (exact), so (x - 1032) = q - 8. The
// nibble at bit 4 gives 1024 + 16q: x/16 - 72 = q - 8 with one fma (exact).
// Then one rounding: (q - 8) * d in fp16, the same as a dequantized fp16 weight.
__device__ __forceinline__ void dq_q4(uint32_t q, uint32_t sc, uint32_t (&f)[4]) {
  constexpr uint32_t kLo = 0x000f000fu, kHi = 0x00f000f0u, kExp = 0x64006400u;
  constexpr uint32_t kSub = 0x64086408u;  // 1032, 1032
  constexpr uint32_t kMul = 0x2c002c00u;  // 1/16, 1/16
  constexpr uint32_t kAdd = 0xd480d480u;  // -72, -72
  const uint32_t s_lo = prmt(sc, sc, 0x1010u);  // (d_g, d_g)
  const uint32_t s_hi = prmt(sc, sc, 0x3232u);  // (d_g+8, d_g+8)
  const uint32_t q8 = q >> 8;
  f[0] = hmul2(hsub2(lop3_and_or(q, kLo, kExp), kSub), s_lo);
  f[1] = hmul2(hfma2(lop3_and_or(q, kHi, kExp), kMul, kAdd), s_lo);
  f[2] = hmul2(hsub2(lop3_and_or(q8, kLo, kExp), kSub), s_hi);
  f[3] = hmul2(hfma2(lop3_and_or(q8, kHi, kExp), kMul, kAdd), s_hi);
}

// Q8_0: bytes u = q + 128 under exponent 0x64 are 1024 + u; minus 1152 = q.
// qg / qg8: the lane words of rows g and g+8 for this step (bytes e = 0..3).
__device__ __forceinline__ void dq_q8(uint32_t qg, uint32_t qg8, uint32_t sc, uint32_t (&f)[4]) {
  constexpr uint32_t kExp = 0x64646464u;
  constexpr uint32_t kSub = 0x64806480u;  // 1152, 1152
  const uint32_t s_lo = prmt(sc, sc, 0x1010u);
  const uint32_t s_hi = prmt(sc, sc, 0x3232u);
  f[0] = hmul2(hsub2(prmt(qg, kExp, 0x4140u), kSub), s_lo);
  f[1] = hmul2(hsub2(prmt(qg, kExp, 0x4342u), kSub), s_lo);
  f[2] = hmul2(hsub2(prmt(qg8, kExp, 0x4140u), kSub), s_hi);
  f[3] = hmul2(hsub2(prmt(qg8, kExp, 0x4342u), kSub), s_hi);
}

}  // namespace qw
}  // namespace kern
}  // namespace qsp

// ---- Column granularity of a format (K-quants) -----------------------------------------
// WTraits<F>::kColsMultiple where a format declares it (the K-quants: 256,
// one GGML super-block spans four chunks), else 32 (one quant block).
namespace qsp {
namespace kern {
namespace qw {

template <class T, class = void>
struct ColsMultiple {
  static constexpr int value = 32;
};
template <class T>
struct ColsMultiple<T, decltype(void(T::kColsMultiple))> {
  static constexpr int value = T::kColsMultiple;
};

}  // namespace qw
}  // namespace kern
}  // namespace qsp

// ==== Legacy 32-block formats with a min or a fifth bit: Q4_1, Q5_0, Q5_1 ====
// (kernels/formats/q4_1.cuh, q5_0.cuh, q5_1.cuh). Their units keep Q4_0's
// nibble word per lane (qweight_layout.h); Q5_x add one 32-bit word of high
// bits per lane, Q4_1 / Q5_1 an fp16 min array next to the d array. The
// decoders below are QSP_HD: the kernels run them, and
// tests/kernel_formats/test_legacy_q2k_q3k.cu runs the very same functions on the CPU for
// every lane and k step. Only the f16x2 arithmetic itself differs: PTX on the
// device, an exact host emulation (double, then one rounding to fp16, which
// is what the PTX ops compute) on the host.
// #pragma unroll for QSP_HD code: the host compiler does not know it.
#if defined(__CUDA_ARCH__)
#define QSP_HD_UNROLL _Pragma("unroll")
#else
#define QSP_HD_UNROLL
#endif

namespace qsp {
namespace kern {
namespace qw {
namespace hd {

#if !defined(__CUDA_ARCH__)
inline float h2f(uint32_t bits) {
  __half_raw r;
  r.x = uint16_t(bits);
  return __half2float(__half(r));
}
inline uint32_t d2h(double v) {
  const __half_raw r = __half_raw(__double2half(v));
  return r.x;
}
template <class Op>
inline uint32_t host_f16x2(uint32_t a, uint32_t b, uint32_t c, Op op) {
  const uint32_t lo = d2h(op(double(h2f(a & 0xffffu)), double(h2f(b & 0xffffu)), double(h2f(c & 0xffffu))));
  const uint32_t hi = d2h(op(double(h2f(a >> 16)), double(h2f(b >> 16)), double(h2f(c >> 16))));
  return lo | hi << 16;
}
#endif

// a - b, a * b, a * b + c on f16x2 words, each half rounded once to nearest.
QSP_HD inline uint32_t fsub2(uint32_t a, uint32_t b) {
#if defined(__CUDA_ARCH__)
  return hsub2(a, b);
#else
  return host_f16x2(a, b, 0u, [](double x, double y, double) { return x - y; });
#endif
}
QSP_HD inline uint32_t fmul2(uint32_t a, uint32_t b) {
#if defined(__CUDA_ARCH__)
  return hmul2(a, b);
#else
  return host_f16x2(a, b, 0u, [](double x, double y, double) { return x * y; });
#endif
}
QSP_HD inline uint32_t ffma2(uint32_t a, uint32_t b, uint32_t c) {
#if defined(__CUDA_ARCH__)
  return hfma2(a, b, c);
#else
  // fp16 x fp16 is exact in double; the sum of the values met here (|q| < 32
  // times a scale, plus a min) too, so one rounding as fma.rn.f16x2.
  return host_f16x2(a, b, c, [](double x, double y, double z) { return x * y + z; });
#endif
}
// (lo, lo) and (hi, hi) of a word of two fp16: a lane's scale of row g / g+8.
QSP_HD inline uint32_t bcast_lo(uint32_t w) {
#if defined(__CUDA_ARCH__)
  return prmt(w, w, 0x1010u);
#else
  return (w & 0xffffu) * 0x10001u;
#endif
}
QSP_HD inline uint32_t bcast_hi(uint32_t w) {
#if defined(__CUDA_ARCH__)
  return prmt(w, w, 0x3232u);
#else
  return (w >> 16) * 0x10001u;
#endif
}

// a * b + c rounded twice, as the CPU reference's float code computes it
// (the device would otherwise contract it into one fma): load8 matches the
// CPU exactly.
QSP_HD inline float mul_add_rn(float a, float b, float c) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(__fmul_rn(a, b), c);
#else
  return a * b + c;
#endif
}

}  // namespace hd

// Bytes per 16 x 64 unit of the high-bit words (Q5_0 / Q5_1): 32 lanes x 32 bits.
constexpr int kQhUnitBytes = 128;
// Bit of the lane's high-bit word for (k step s, fragment half p, element e):
// register j = 2p + (e >> 1) of step s in bits 4s + j (e even) and
// 16 + 4s + j (e odd), i.e. the two halves of an f16x2 register 16 bits apart
// like their nibbles in the nibble word.
QSP_HD constexpr int qh_bit(int s, int p, int e) { return 4 * s + 2 * p + (e >> 1) + 16 * (e & 1); }

// The four registers of k step s as exact fp16 integers under exponent
// 0x6400: f[0], f[2] = 1024 + q, f[1], f[3] = 1024 + 16 q, q = nibble |
// high bit << 4 (qh = 0: plain 4-bit q). Nibbles sit as in Q4_0 (q4_shift);
// the high bit of register j moves from qh_bit to bit 4 (j even) or 8 (j odd)
// of its half: one shift (constant once s is) and two lop3 per register.
QSP_HD inline void q5_raw(uint32_t q, uint32_t qh, int s, uint32_t (&x)[4]) {
  constexpr uint32_t kExp = 0x64006400u;
QSP_HD_UNROLL
  for (int j = 0; j < 4; ++j) {
    const int src = 4 * s + j, dst = (j & 1) ? 8 : 4;
    const uint32_t hb = dst >= src ? qh << (dst - src) : qh >> (src - dst);
    const uint32_t hmask = (j & 1) ? 0x01000100u : 0x00100010u;
    const uint32_t nmask = (j & 1) ? 0x00f000f0u : 0x000f000fu;
    x[j] = ((j < 2 ? q : q >> 8) & nmask) | (hb & hmask) | kExp;
  }
}

// Q5_0: x = d * (q - 16). f[0], f[2]: (1024 + q) - 1040 = q - 16; f[1],
// f[3]: (1024 + 16 q) / 16 - 80 = q - 16 (exact), then one rounding, the
// product with d, as Q4_0. sc: the lane's d word of this step's block.
QSP_HD inline void dq_q5_0(uint32_t q, uint32_t qh, int s, uint32_t sc, uint32_t (&f)[4]) {
  constexpr uint32_t kSub = 0x64106410u;  // 1040, 1040
  constexpr uint32_t kMul = 0x2c002c00u;  // 1/16, 1/16
  constexpr uint32_t kAdd = 0xd500d500u;  // -80, -80
  uint32_t x[4];
  q5_raw(q, qh, s, x);
  const uint32_t d_lo = hd::bcast_lo(sc), d_hi = hd::bcast_hi(sc);
  f[0] = hd::fmul2(hd::fsub2(x[0], kSub), d_lo);
  f[1] = hd::fmul2(hd::ffma2(x[1], kMul, kAdd), d_lo);
  f[2] = hd::fmul2(hd::fsub2(x[2], kSub), d_hi);
  f[3] = hd::fmul2(hd::ffma2(x[3], kMul, kAdd), d_hi);
}

// Q4_1 (qh = 0) and Q5_1: x = d * q + m. q exact in fp16 ((1024 + q) - 1024,
// (1024 + 16 q) / 16 - 64), then one fma: the exact d * q + m rounded once
// to fp16. sc / mn: the lane's d and m words of this step's block.
QSP_HD inline void dq_q5_1(uint32_t q, uint32_t qh, int s, uint32_t sc, uint32_t mn, uint32_t (&f)[4]) {
  constexpr uint32_t kSub = 0x64006400u;  // 1024, 1024
  constexpr uint32_t kMul = 0x2c002c00u;  // 1/16, 1/16
  constexpr uint32_t kAdd = 0xd400d400u;  // -64, -64
  uint32_t x[4];
  q5_raw(q, qh, s, x);
  const uint32_t d_lo = hd::bcast_lo(sc), d_hi = hd::bcast_hi(sc);
  const uint32_t m_lo = hd::bcast_lo(mn), m_hi = hd::bcast_hi(mn);
  f[0] = hd::ffma2(hd::fsub2(x[0], kSub), d_lo, m_lo);
  f[1] = hd::ffma2(hd::ffma2(x[1], kMul, kAdd), d_lo, m_lo);
  f[2] = hd::ffma2(hd::fsub2(x[2], kSub), d_hi, m_hi);
  f[3] = hd::ffma2(hd::ffma2(x[3], kMul, kAdd), d_hi, m_hi);
}

// Host repacking shared by the three, tiles [t0, t1) (units to `units`, side
// data to `side`): `blk(row, b, q, d, m)` fills the 32
// values q (0..31) and the fp16 bits of d and m of block b of row (always a
// real block). Padding gets d = m = 0 and q = pad_q (Q5_0: 16, i.e. 0).
// Unit: [512 B nibble words (Q4_0's)][qh_bytes: high-bit word of lane l at
// 4 l]; side data: [64 B d (Q4_0's)][m_bytes: the same for m].
template <class Blk>
void repack_legacy(int64_t rows, int64_t cols, int64_t t0, int64_t t1, uint8_t* units, uint8_t* side, int unit,
                   int scale_unit, bool has_qh, bool has_m, int pad_q, Blk blk) {
  const int64_t KC = n_chunks(cols), nb = cols / 32;
  uint8_t q[2][32], lo[2][32], hi[32];
  for (int64_t tile = t0; tile < t1; ++tile) {
    for (int64_t c = 0; c < KC; ++c) {
      const int64_t u = (tile - t0) * KC + c;
      uint8_t* ub = units + u * unit;
      uint32_t* nib = reinterpret_cast<uint32_t*>(ub);                // [lane][s]
      uint32_t* qh = reinterpret_cast<uint32_t*>(ub + kQ4UnitBytes);  // [lane]
      uint16_t* sc = reinterpret_cast<uint16_t*>(side + u * scale_unit);
      if (has_qh) std::memset(qh, 0, size_t(unit - kQ4UnitBytes));
      for (int g = 0; g < 8; ++g) {
        for (int h = 0; h < 2; ++h) {
          const int64_t b = 2 * c + h;
          for (int p = 0; p < 2; ++p) {
            const int64_t row = tile * 16 + 8 * p + g;
            uint16_t d = 0, m = 0;
            if (row < rows && b < nb) {
              blk(row, b, q[p], d, m);
            } else {
              std::memset(q[p], pad_q, sizeof q[p]);
            }
            sc[4 * g + 2 * h + p] = d;
            if (has_m) sc[32 + 4 * g + 2 * h + p] = m;
            for (int i = 0; i < 32; ++i) lo[p][i] = q[p][i] & 15u;
            if (has_qh) {
              for (int i = 0; i < 32; ++i) hi[i] = q[p][i] >> 4;
              put_bit(qh, g, p, 2 * h, hi);
              put_bit(qh, g, p, 2 * h + 1, hi + 16);
            }
          }
          put_q4_rows(nib, g, 2 * h, lo[0], lo[1]);
          put_q4_rows(nib, g, 2 * h + 1, lo[0] + 16, lo[1] + 16);
        }
      }
    }
  }
}

}  // namespace qw
}  // namespace kern
}  // namespace qsp

namespace qsp {
namespace kern {

// load8 for a format whose traits read one lane's undecoded words anywhere
// (raw_at) and decode them to fp32 values (values): the K-quants. Columns
// [col8, col8 + 8) of `row` sit in lanes c.lane + t, t = 0..3, two each
// (see WTraits<kQ4_0>::load8).
template <class T>
QSP_HD inline void load8_by_values(const DWeight& w, int64_t row, int64_t col8, float (&out)[8]) {
  const uint8_t* base = static_cast<const uint8_t*>(w.data);
  const qw::Coord c = qw::coord_of(row, col8, w.cols);  // t == 0, e == 0 or 2
  const size_t soff = T::scales_offset(w.rows, w.cols);
QSP_HD_UNROLL
  for (int t = 0; t < 4; ++t) {
    typename T::Raw r;
    T::raw_at(r, base, soff, size_t(c.unit), c.lane + t);
    float v[8];
    T::values(r, c.s, v);
    out[2 * t] = v[4 * c.p + c.e];
    out[2 * t + 1] = v[4 * c.p + c.e + 1];
  }
}


}  // namespace kern
}  // namespace qsp
