// The device layout of GEMM weights ("tiled" layout) and its device-side view:
// element accessors (embed) and the fragment decoders (gemm). Host packing is
// in gemm.cu (repack_weight); both follow the map documented here.
//
// W is rows (N, outputs) x cols (K, inputs), K contiguous in GGUF.
//
// ---- Why this layout ---------------------------------------------------------
// The GEMMs multiply with mma.sync.m16n8k16 (sm_80+) and wgmma.m64nNk16
// (sm_90a). Both give thread (lane = 4*g + t) of a warp the k-indices
// {2t, 2t+1, 2t+8, 2t+9} of each 16-wide k step of its A fragment (rows g and
// g+8 of a 16-row slice; mma.sync's B fragment holds the same k-indices of
// column g). The layout stores, for every 16-row x 64-column unit, each
// lane's weights of all four k steps in one 16-byte word (Q4_0; two for
// Q8_0), in natural column order:
//     col(s, t, e) = 16*s + 2*t + (e & 1) + 8*(e >> 1)      k step s = 0..3
// (e = 0,1 are the {2t, 2t+1} register, e = 2,3 the {2t+8, 2t+9} one).
// Consequences:
//  - Activations need no permutation anywhere: the wgmma kernel reads them
//    through TMA in the canonical 128-byte swizzle, the mma.sync kernel with
//    ldmatrix, the GEMV with 4-byte loads.
//  - A lane's quantized weights for one 16x64 unit are one 16-byte word
//    (Q4_0) or two (Q8_0), decoded in registers straight into fragments:
//    weights are the wgmma A operand (from registers) or the mma.sync B one.
//  - Both 32-wide quant blocks of a chunk are uniform per k-step pair: steps
//    0,1 lie in block 2c, steps 2,3 in block 2c+1 for every lane.
//
// ---- Q4_0 and Q8_0 ------------------------------------------------------------
// Rows are padded to a multiple of 16 (tiles), cols to a multiple of 64
// (chunks); padding decodes to 0. The buffer is
//     quants [n_tiles][n_chunks][unit_bytes]     unit_bytes = 512 (Q4_0) / 1024 (Q8_0)
//     scales [n_tiles][n_chunks][64]             fp16 GGUF d of the 32-blocks
// so the units of one 16-row tile are contiguous along K.
// Inside a unit, row r of the tile is (g = r & 7, p = r >> 3): p selects the
// fragment half (rows g or g+8 of an m16 A tile / the two n8 B tiles).
//  Q4_0: byte lane*16 + 4*s holds the 32-bit word of (lane, step s): the 8
//        nibbles (raw GGUF q, value d*(q-8)) of rows g and g+8 at col(s,t,e),
//        nibble shift 8*p + 16*(e&1) + 4*(e>>1). That order is what the
//        Marlin-style lop3 decode (0x000f000f / 0x00f000f0 masks, then >>8)
//        turns into the four fragment registers with no shuffling.
//  Q8_0: byte 512*(s>>1) + 16*lane + 8*p + 4*(s&1) + e holds q + 128 (uint8)
//        of row 8p+g at col(s,t,e): a lane's 16 bytes of one half cover k
//        steps 2h, 2h+1 of both row halves, i.e. one LDS.128 per half-stage.
//        prmt places the bytes under an fp16 exponent (0x64xx = 1024 + x).
//  Scales: byte 8*g + 2*(2*h + p) of a unit's 64 holds d of row 8p+g, block
//        2c+h: a lane reads its 8 bytes once per unit (LDS.64 / LDG.64).
// ---- F16 -------------------------------------------------------------------------
// Plain row-major fp16 [rows][cols] (GGUF F16 / BF16 / F32 converted), no
// padding: the permutation above is applied on the fly by the loads.
#pragma once

#include <cuda_fp16.h>

#include <cstddef>
#include <cstdint>

#include "kernels/kernels.h"

namespace qsp {
namespace kern {
namespace qw {

constexpr int kTileRows = 16;       // rows per tile (m16 of the GEMV's A, two n8 of the GEMM's B)
constexpr int kChunkCols = 64;      // cols per chunk (four k16 mma steps)
constexpr int kScaleUnitBytes = 64; // 16 rows x 2 blocks x fp16
constexpr int kQ4UnitBytes = 512;   // 16 x 64 nibbles
constexpr int kQ8UnitBytes = 1024;  // 16 x 64 bytes

__host__ __device__ constexpr int64_t n_tiles(int64_t rows) { return (rows + kTileRows - 1) / kTileRows; }
__host__ __device__ constexpr int64_t n_chunks(int64_t cols) { return (cols + kChunkCols - 1) / kChunkCols; }
__host__ __device__ constexpr int unit_bytes(WFormat f) {
  return f == WFormat::kQ4_0 ? kQ4UnitBytes : f == WFormat::kQ8_0 ? kQ8UnitBytes : 0;
}
// Byte offset of the scale array (= bytes of the quant array).
__host__ __device__ constexpr size_t scales_offset(WFormat f, int64_t rows, int64_t cols) {
  return size_t(n_tiles(rows)) * size_t(n_chunks(cols)) * size_t(unit_bytes(f));
}

// Physical column (within a 64-chunk) of lane-quad t, k step s, element e.
__host__ __device__ constexpr int chunk_col(int s, int t, int e) { return 16 * s + 2 * t + (e & 1) + 8 * (e >> 1); }
// Q4_0 nibble shift inside a lane word for fragment half p, element e.
__host__ __device__ constexpr int q4_shift(int p, int e) { return 8 * p + 16 * (e & 1) + 4 * (e >> 1); }

// Byte of (lane, k step s, fragment half p, element e) inside a Q8_0 unit.
__host__ __device__ constexpr int q8_byte(int lane, int s, int p, int e) {
  return 512 * (s >> 1) + 16 * lane + 8 * p + 4 * (s & 1) + e;
}

// Where element (row, col) lives: the inverse of chunk_col plus the unit.
struct Coord {
  int64_t unit;  // tile * n_chunks + chunk
  int lane;      // 4*g + t
  int s, e, p, h, g;
};
__host__ __device__ inline Coord coord_of(int64_t row, int64_t col, int64_t cols) {
  Coord c;
  const int r = int(row & 15), j = int(col & 63);
  c.unit = (row >> 4) * n_chunks(cols) + (col >> 6);
  c.g = r & 7;
  c.p = r >> 3;
  c.h = j >> 5;
  c.s = j >> 4;
  c.e = (j & 1) + 2 * ((j >> 3) & 1);
  c.lane = 4 * c.g + ((j >> 1) & 3);
  return c;
}
// Byte offset of a scale inside the scale array.
__host__ __device__ inline size_t scale_byte(const Coord& c) {
  return size_t(c.unit) * kScaleUnitBytes + 8 * c.g + 2 * (2 * c.h + c.p);
}

// ---- Element accessors (embed, debugging) ---------------------------------
// Dequantizes cols [col8, col8 + 8) of `row`; col8 % 8 == 0. Those 8 columns
// share one k step, one block and one fragment register (e >> 1): the four
// lanes t = 0..3 of row group g hold two columns each.
__device__ inline void load8(const DWeight& w, int64_t row, int64_t col8, float (&out)[8]) {
  const uint8_t* base = static_cast<const uint8_t*>(w.data);
  if (w.fmt == WFormat::kF16) {
    const uint4 v = *reinterpret_cast<const uint4*>(base + (size_t(row) * w.cols + col8) * 2);
    const __half2* h = reinterpret_cast<const __half2*>(&v);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 f = __half22float2(h[i]);
      out[2 * i] = f.x;
      out[2 * i + 1] = f.y;
    }
    return;
  }
  const Coord c = coord_of(row, col8, w.cols);  // t == 0, e == 0 or 2
  const float d = __half2float(
      *reinterpret_cast<const __half*>(base + scales_offset(w.fmt, w.rows, w.cols) + scale_byte(c)));
  const size_t ub = size_t(c.unit) * unit_bytes(w.fmt);
#pragma unroll
  for (int t = 0; t < 4; ++t) {
    const int lane = c.lane + t;
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int e = c.e + i;
      int q;
      if (w.fmt == WFormat::kQ4_0) {
        const uint32_t word = *reinterpret_cast<const uint32_t*>(base + ub + lane * 16 + 4 * c.s);
        q = int((word >> q4_shift(c.p, e)) & 15u) - 8;
      } else {
        q = int(base[ub + q8_byte(lane, c.s, c.p, e)]) - 128;
      }
      out[2 * t + i] = d * float(q);
    }
  }
}

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
