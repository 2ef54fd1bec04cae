// The device side of the tiled weight layout (kernels/qweight_layout.h, where
// the layout and its reasons are documented): the fragment decoders shared by
// the format headers (kernels/formats/), and the contract every format's
// traits (WTraits<F>) fulfil.
#pragma once

#include <cuda_fp16.h>

#include <cstddef>
#include <cstdint>

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
