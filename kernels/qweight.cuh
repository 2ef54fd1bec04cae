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

#include "common/parallel.h"
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
//   repack(dtype, src, rows, cols, dst)  GGUF bytes -> the device layout
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
//   wg_frags()        a stage's smem -> the A fragments of all four k steps
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

// Host repacking shared by the three: `blk(row, b, q, d, m)` fills the 32
// values q (0..31) and the fp16 bits of d and m of block b of row (always a
// real block). Padding gets d = m = 0 and q = pad_q (Q5_0: 16, i.e. 0).
// Unit: [512 B nibble words (Q4_0's)][qh_bytes: high-bit word of lane l at
// 4 l]; side data: [64 B d (Q4_0's)][m_bytes: the same for m].
template <class Blk>
void repack_legacy(int64_t rows, int64_t cols, uint8_t* dst, int unit, int scale_unit, bool has_qh, bool has_m,
                   int pad_q, Blk blk) {
  const int64_t KC = n_chunks(cols), nb = cols / 32;
  const size_t soff = unit_array_bytes(unit, rows, cols);
  static const ChunkMap map;
  parallel_for(n_tiles(rows), rows * cols, [=](int64_t t0, int64_t t1) {
    uint8_t q[32];
    for (int64_t tile = t0; tile < t1; ++tile) {
      for (int64_t c = 0; c < KC; ++c) {
        const int64_t u = tile * KC + c;
        uint8_t* ub = dst + u * unit;
        uint32_t* nib = reinterpret_cast<uint32_t*>(ub);  // [lane][s]
        uint32_t* qh = reinterpret_cast<uint32_t*>(ub + kQ4UnitBytes);  // [lane]
        uint16_t* sc = reinterpret_cast<uint16_t*>(dst + soff + u * scale_unit);
        std::memset(ub, 0, size_t(unit));
        for (int rr = 0; rr < 16; ++rr) {
          const int64_t row = tile * 16 + rr;
          const int g = rr & 7, p = rr >> 3;
          for (int h = 0; h < 2; ++h) {
            const int64_t b = 2 * c + h;
            uint16_t d = 0, m = 0;
            if (row < rows && b < nb) {
              blk(row, b, q, d, m);
            } else {
              std::memset(q, pad_q, sizeof q);
            }
            sc[4 * g + 2 * h + p] = d;
            if (has_m) sc[32 + 4 * g + 2 * h + p] = m;
            for (int i = 0; i < 32; ++i) {
              const int j = 32 * h + i, lane = 4 * g + map.t[j];
              nib[lane * 4 + map.s[j]] |= uint32_t(q[i] & 15u) << q4_shift(p, map.e[j]);
              if (has_qh) qh[lane] |= uint32_t(q[i] >> 4) << qh_bit(map.s[j], p, map.e[j]);
            }
          }
        }
      }
    }
  });
}

}  // namespace qw
}  // namespace kern
}  // namespace qsp

// ==== K-quant super-block formats: Q2_K, Q3_K ====================================
// (kernels/formats/q2_k.cuh, q3_k.cuh). Their 16-weight sub-blocks are exactly
// the k steps of a unit: step s of chunk c is sub-block 4 (c % 4) + s of
// super-block c / 4, so a lane needs one sub-block scale per row and step.
// The scale products (d * sc, dmin * m) and the values are computed in fp32
// as the CPU reference does, then rounded once to the fp16 fragment.
namespace qsp {
namespace kern {
namespace qw {

namespace hd {

// fp16 halves of a word as fp32.
QSP_HD inline float f16lo(uint32_t w) {
#if defined(__CUDA_ARCH__)
  return __half2float(__ushort_as_half(uint16_t(w & 0xffffu)));
#else
  return h2f(w & 0xffffu);
#endif
}
QSP_HD inline float f16hi(uint32_t w) {
#if defined(__CUDA_ARCH__)
  return __half2float(__ushort_as_half(uint16_t(w >> 16)));
#else
  return h2f(w >> 16);
#endif
}
// float(x) - bias for a small unsigned x (< 2^22) without I2F: x under the
// exponent of 2^23 is 2^23 + x exactly, minus 2^23 + bias (exact while
// bias < 2^22).
QSP_HD inline float small_u2f(uint32_t x, int bias) {
#if defined(__CUDA_ARCH__)
  const float f = __uint_as_float(0x4b000000u | x);
#else
  float f;  // the same bits on the host, so that the CPU test runs this very arithmetic
  const uint32_t b = 0x4b000000u | x;
  std::memcpy(&f, &b, 4);
#endif
  return f - float(8388608 + bias);
}
// (lo, hi) rounded to nearest fp16, as one f16x2 word.
QSP_HD inline uint32_t pack2(float lo, float hi) {
#if defined(__CUDA_ARCH__)
  uint32_t d;
  asm("cvt.rn.f16x2.f32 %0, %1, %2;\n" : "=r"(d) : "f"(hi), "f"(lo));
  return d;
#else
  return d2h(double(lo)) | d2h(double(hi)) << 16;
#endif
}
// a * b - c rounded twice (no fma contraction), as the CPU reference.
QSP_HD inline float mul_sub_rn(float a, float b, float c) {
#if defined(__CUDA_ARCH__)
  return __fsub_rn(__fmul_rn(a, b), c);
#else
  return a * b - c;
#endif
}

}  // namespace hd

// A 2-bit field of (k step s, fragment half p, element e) in a lane's two
// 32-bit words, word s >> 1 (Q2_K's and Q3_K's low bits, Q6_K's high bits):
// register j = 2p + (e >> 1) of step s at bit 2 (4 (s & 1) + j) for e even
// and 16 + the same for e odd, so an f16x2 register's two fields sit 16 bits
// apart and one shift and mask put both under exponent 0x64.
QSP_HD constexpr int q2_bit(int s, int p, int e) { return 2 * (4 * (s & 1) + 2 * p + (e >> 1)) + 16 * (e & 1); }
// Q3_K's high bit in the lane's hmask word: as Q5_0's (qh_bit).
QSP_HD constexpr int q3h_bit(int s, int p, int e) { return 4 * s + 2 * p + (e >> 1) + 16 * (e & 1); }
// Sub-block scale byte of (row group g, half p, k step s) in a unit's 64
// scale bytes: a lane's 8 bytes are one LDS.64 / LDG.64 (word p, byte s).
QSP_HD constexpr int ksc_byte(int g, int p, int s) { return 8 * g + 4 * p + s; }

// ---- K-quants in fp16 (Q4_K, Q5_K, Q6_K fragments) ------------------------------
// The GEMM / GEMV fragments of these formats decode in f16x2 arithmetic on
// the exact integer codes, as Q4_1 / Q5_0 do, with the sub-block scale d * sc
// (and dmin * m) split once per k step into two fp16: hi = RN16(d sc) and the
// remainder lo = RN16(d sc - hi) (exact: d sc has 17 significant bits). Then
// x = (q hi + (-m dmin)_hi) + (q lo + (-m dmin)_lo): the large part one fma,
// rounded once relative to x itself, the small part an fma of terms 2^-11
// smaller. |x16 - x| <= 2 ulp16(x), near the fp32 decode's 0.5 (which the
// embedding, load8, keeps: it must equal the CPU reference exactly) at half
// its instructions. What did not do: one fp16 scale, RN16(d sc) q - RN16(dmin
// m), ~2x cheaper still, but the rounding of dmin m is 2^-12 of the
// sub-block's range whatever x is, which near x = 0 is many ulps: GEMM
// outputs went from ~4e-4 to 1.0e-3 relative L2 vs the CPU and the op test's
// per-element bound failed (H200, 2026-12-04).
namespace hd {
// (lo half of a, lo half of b) and (hi of a, hi of b).
QSP_HD inline uint32_t pack_lo2(uint32_t a, uint32_t b) {
#if defined(__CUDA_ARCH__)
  return prmt(a, b, 0x5410u);
#else
  return (a & 0xffffu) | (b << 16);
#endif
}
QSP_HD inline uint32_t pack_hi2(uint32_t a, uint32_t b) {
#if defined(__CUDA_ARCH__)
  return prmt(a, b, 0x7632u);
#else
  return (a >> 16) | (b & 0xffff0000u);
#endif
}
// Unsigned bytes B0 and B1 of w as an exact fp16 pair: under exponent 0x64
// each byte is 1024 + u, minus 1024.
template <int B0, int B1>
QSP_HD inline uint32_t u8pair(uint32_t w) {
#if defined(__CUDA_ARCH__)
  return hsub2(prmt(w, 0x64646464u, uint32_t(B0 | 4 << 4 | B1 << 8 | 4 << 12)), 0x64006400u);
#else
  return d2h(double((w >> (8 * B0)) & 0xffu)) | d2h(double((w >> (8 * B1)) & 0xffu)) << 16;
#endif
}
QSP_HD inline uint32_t fadd2(uint32_t a, uint32_t b) {
#if defined(__CUDA_ARCH__)
  uint32_t d;
  asm("add.rn.f16x2 %0, %1, %2;\n" : "=r"(d) : "r"(a), "r"(b));
  return d;
#else
  return host_f16x2(a, b, 0u, [](double x, double y, double) { return x + y; });
#endif
}
// a * b split into hi = RN16(a b) and lo = RN16(a b - hi), per half.
QSP_HD inline void mul2_split(uint32_t a, uint32_t b, uint32_t& hi, uint32_t& lo) {
  hi = fmul2(a, b);
  lo = ffma2(a, b, hi ^ 0x80008000u);
}
// Signed byte s of a and of b as an exact fp16 pair: (u ^ 0x80) = sc + 128
// under exponent 0x64, minus 1152.
QSP_HD inline uint32_t i8pair(uint32_t a, uint32_t b, int s) {
#if defined(__CUDA_ARCH__)
  const uint32_t x = prmt(a, b, uint32_t(s | (s + 4) << 8));
  uint32_t y;
  asm("lop3.b32 %0, %1, %2, %3, 0x6A;\n" : "=r"(y) : "r"(x), "r"(0x00ff00ffu), "r"(0x64806480u));  // (x & b) ^ c
  return hsub2(y, 0x64806480u);
#else
  return d2h(double(int8_t(a >> (8 * s)))) | d2h(double(int8_t(b >> (8 * s)))) << 16;
#endif
}
}  // namespace hd

// t (exact codes) * d + nm, the scale pairs split in hi / lo (rows g, g+8:
// the lo or hi half of each pair for row_g).
QSP_HD inline uint32_t affine_frag(uint32_t t, bool row_g, uint32_t ds_hi, uint32_t ds_lo, uint32_t nm_hi,
                                   uint32_t nm_lo) {
  const auto bc = [row_g](uint32_t w) { return row_g ? hd::bcast_lo(w) : hd::bcast_hi(w); };
  return hd::fadd2(hd::ffma2(t, bc(ds_hi), bc(nm_hi)), hd::ffma2(t, bc(ds_lo), bc(nm_lo)));
}
// t * d, d split in hi / lo: t hi + RN16(t lo).
QSP_HD inline uint32_t scaled_frag(uint32_t t, bool row_g, uint32_t ds_hi, uint32_t ds_lo) {
  const uint32_t h = row_g ? hd::bcast_lo(ds_hi) : hd::bcast_hi(ds_hi);
  const uint32_t l = row_g ? hd::bcast_lo(ds_lo) : hd::bcast_hi(ds_lo);
  return hd::ffma2(t, h, hd::fmul2(t, l));
}

// Q4_K / Q5_K, k step s (sub-block h = s >> 1 of the chunk): x = d sc q -
// dmin m with both products split in hi / lo fp16 (above). q: exact fp16
// codes from q5_raw (qh = 0: Q4_K's 4-bit codes). side: the lane's four side
// words (kernels/qweight_kquant.h: sc / m bytes of h = 0, 1 for rows g, g+8;
// (d, dmin) of row g, of row g+8).
QSP_HD inline void dq_kq_affine(uint32_t q, uint32_t qh, int s, const uint32_t (&side)[4], uint32_t (&f)[4]) {
  constexpr uint32_t kSub = 0x64006400u;  // 1024, 1024
  constexpr uint32_t kMul = 0x2c002c00u;  // 1/16, 1/16
  constexpr uint32_t kAdd = 0xd400d400u;  // -64, -64
  const uint32_t sm = side[s >> 1];
  uint32_t ds_hi, ds_lo, nm_hi, nm_lo;
  hd::mul2_split(hd::u8pair<0, 2>(sm), hd::pack_lo2(side[2], side[3]), ds_hi, ds_lo);
  hd::mul2_split(hd::u8pair<1, 3>(sm), hd::pack_hi2(side[2], side[3]) ^ 0x80008000u, nm_hi, nm_lo);
  uint32_t x[4];
  q5_raw(q, qh, s, x);
QSP_HD_UNROLL
  for (int j = 0; j < 4; ++j) {
    const uint32_t t = (j & 1) ? hd::ffma2(x[j], kMul, kAdd) : hd::fsub2(x[j], kSub);  // q, exact
    f[j] = affine_frag(t, j < 2, ds_hi, ds_lo, nm_hi, nm_lo);
  }
}


// Q6_K, k step s: the codes q = nibble | high << 4 as exact fp16 under
// exponent 0x64 (1024 + q, or 1024 + 16 q for the nibble at bit 4), minus
// 1056 (or / 16 - 96): q - 32 exactly; then (q - 32) hi + RN16((q - 32) lo),
// d * sc split as above: one rounding relative to x, plus one 2^-11 smaller.
// qhw: the lane's high word of this step (fields at q2_bit); sc: its int8 scales of rows g
// (sc[0]) and g+8 (sc[1]), byte s; dw: (d_g, d_g8).
QSP_HD inline void dq_q6_k(uint32_t q, uint32_t qhw, int s, const uint32_t (&sc)[2], uint32_t dw, uint32_t (&f)[4]) {
  constexpr uint32_t kExp = 0x64006400u, kSub = 0x64206420u;  // 1056, 1056
  constexpr uint32_t kMul = 0x2c002c00u;                       // 1/16, 1/16
  constexpr uint32_t kAdd = 0xd600d600u;                       // -96, -96
  uint32_t ds_hi, ds_lo;
  hd::mul2_split(hd::i8pair(sc[0], sc[1], s), dw, ds_hi, ds_lo);
QSP_HD_UNROLL
  for (int j = 0; j < 4; ++j) {
    const int src = 2 * (4 * (s & 1) + j), dst = (j & 1) ? 8 : 4;
    const uint32_t hb = dst >= src ? qhw << (dst - src) : qhw >> (src - dst);
    const uint32_t hmask = (j & 1) ? 0x03000300u : 0x00300030u;
    const uint32_t nmask = (j & 1) ? 0x00f000f0u : 0x000f000fu;
    const uint32_t x = ((j < 2 ? q : q >> 8) & nmask) | (hb & hmask) | kExp;
    const uint32_t t = (j & 1) ? hd::ffma2(x, kMul, kAdd) : hd::fsub2(x, kSub);
    f[j] = scaled_frag(t, j < 2, ds_hi, ds_lo);
  }
}

// Byte s of a (lo half) and of b (hi half) under exponent 0x64 with the
// byte masked by `mask` after shifting it right by `shr`: exact fp16
// 1024 + ((byte >> shr) & mask) per half.
template <int kShr, uint32_t kMask>
QSP_HD inline uint32_t byte_pair(uint32_t a, uint32_t b, int s) {
#if defined(__CUDA_ARCH__)
  const uint32_t x = prmt(a, b, uint32_t(s | (s + 4) << 8)) >> kShr;
  return lop3_and_or(x, kMask * 0x10001u, 0x64006400u);
#else
  return (0x6400u | ((a >> (8 * s + kShr)) & kMask)) | (0x6400u | ((b >> (8 * s + kShr)) & kMask)) << 16;
#endif
}
// The exact fp16 codes of register j of k step s from the 2-bit fields at
// q2_bit (word w) and, with kHigh, Q3_K's high bit at q3h_bit (word h) as
// bit 2: 1024 + q per half.
template <bool kHigh>
QSP_HD inline uint32_t q23_raw(uint32_t w, uint32_t h, int s, int j) {
  const int src = 2 * (4 * (s & 1) + j);
  uint32_t x = ((w >> src) & 0x00030003u) | 0x64006400u;
  if (kHigh) {
    const int hs = 4 * s + j;  // q3h_bit of element 0 of register j
    x |= (hs >= 2 ? h >> (hs - 2) : h << (2 - hs)) & 0x00040004u;
  }
  return x;
}

// Q2_K, k step s (one 16-column sub-block): x = d sc q - dmin m in f16x2 with
// d sc and dmin m split in hi / lo (affine_frag). q: the lane's two low-bit
// words; sc: its 8 scale bytes (low nibble sc, high nibble m) of rows g /
// g+8, byte s; dd: (d_g, d_g8), (dmin_g, dmin_g8).
QSP_HD inline void dq_q2_k(const uint32_t (&q)[2], const uint32_t (&sc)[2], const uint32_t (&dd)[2], int s,
                           uint32_t (&f)[4]) {
  constexpr uint32_t kSub = 0x64006400u;  // 1024, 1024
  uint32_t ds_hi, ds_lo, nm_hi, nm_lo;
  hd::mul2_split(hd::fsub2(byte_pair<0, 15>(sc[0], sc[1], s), kSub), dd[0], ds_hi, ds_lo);
  hd::mul2_split(hd::fsub2(byte_pair<4, 15>(sc[0], sc[1], s), kSub), dd[1] ^ 0x80008000u, nm_hi, nm_lo);
  const uint32_t w = q[s >> 1];
QSP_HD_UNROLL
  for (int j = 0; j < 4; ++j) f[j] = affine_frag(hd::fsub2(q23_raw<false>(w, 0u, s, j), kSub), j < 2, ds_hi, ds_lo, nm_hi, nm_lo);
}

// Q3_K, k step s: x = d (code - 32) (q - 4), q = low | high << 2, in f16x2:
// code - 32 and q - 4 exact, d (code - 32) split in hi / lo (scaled_frag).
// sc: the lane's 8 six-bit scale codes (bytes) of rows g / g+8, byte s; dw:
// (d_g, d_g8).
QSP_HD inline void dq_q3_k(const uint32_t (&q)[2], uint32_t h, const uint32_t (&sc)[2], uint32_t dw, int s,
                           uint32_t (&f)[4]) {
  uint32_t ds_hi, ds_lo;
  hd::mul2_split(hd::fsub2(byte_pair<0, 255>(sc[0], sc[1], s), 0x64206420u), dw, ds_hi, ds_lo);  // code - 32
  const uint32_t w = q[s >> 1];
QSP_HD_UNROLL
  for (int j = 0; j < 4; ++j) f[j] = scaled_frag(hd::fsub2(q23_raw<true>(w, h, s, j), 0x64046404u), j < 2, ds_hi, ds_lo);  // q - 4
}

}  // namespace qw
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
