// Q5_1 on the device: GGUF blocks of 32 weights (fp16 d and m, 32 high bits
// qh, 16 bytes of nibbles, x = d * q + m, q = nibble | high bit << 4)
// repacked into the tiled layout of kernels/qweight_layout.h. Per 16 x 64
// unit: 512 bytes of nibble words (Q4_0's), 128 bytes of high-bit words (one
// 32-bit word per lane, qw::qh_bit), 64 of fp16 d and 64 of fp16 m: 768 bytes
// for 1024 weights = 6.0 bits per weight, the same as GGUF's 24-byte blocks.
// The fifth bit is unpacked in the kernel (qw::q5_raw). The traits contract is
// listed in kernels/qweight.cuh.
#pragma once

#include "common/quant.h"
#include "kernels/ptx.cuh"
#include "kernels/qweight.cuh"

namespace qsp {
namespace kern {

template <>
struct WTraits<WFormat::kQ5_1> {
  // ---- Host -------------------------------------------------------------------------------
  static bool serves(int32_t dtype) { return dtype == QSP_DTYPE_Q5_1; }
  static constexpr int kUnit = qw::kQ4UnitBytes + qw::kQhUnitBytes;  // nibbles, then high bits
  static constexpr int kScaleUnit = 2 * qw::kScaleUnitBytes;        // fp16 d, then m, of 16 rows x 2 blocks
  static constexpr int kBlockBytes = 24;                             // GGUF: fp16 d, fp16 m, qh[4], qs[16]
  __host__ __device__ static size_t scales_offset(int64_t rows, int64_t cols) {
    return qw::unit_array_bytes(kUnit, rows, cols);
  }
  static size_t bytes(int64_t rows, int64_t cols) { return qw::unit_array_bytes(kUnit + kScaleUnit, rows, cols); }
  // Tiles [t0, t1) only (kern::repack_weight_tiles). cols % 32 == 0 (checked
  // by the caller).
  static void repack_tiles(int32_t, const void* src_v, int64_t rows, int64_t cols, int64_t t0, int64_t t1,
                           uint8_t* units, uint8_t* side) {
    const uint8_t* src = static_cast<const uint8_t*>(src_v);
    const int64_t nb = cols / 32;
    qw::repack_legacy(rows, cols, t0, t1, units, side, kUnit, kScaleUnit, true, true, 0,
                      [=](int64_t row, int64_t b, uint8_t* q, uint16_t& d, uint16_t& m) {
                        const uint8_t* b0 = src + (row * nb + b) * kBlockBytes;
                        d = uint16_t(b0[0] | b0[1] << 8);
                        m = uint16_t(b0[2] | b0[3] << 8);
                        const uint8_t* blk = b0 + 2;  // qh, qs as in Q5_0
                        const uint32_t qh = uint32_t(blk[2]) | uint32_t(blk[3]) << 8 | uint32_t(blk[4]) << 16 |
                                            uint32_t(blk[5]) << 24;
                        for (int j = 0; j < 16; ++j) {
                          q[j] = uint8_t((blk[6 + j] & 15u) | ((qh >> j) & 1u) << 4);
                          q[j + 16] = uint8_t((blk[6 + j] >> 4) | ((qh >> (j + 16)) & 1u) << 4);
                        }
                      });
  }

  // ---- Layout -----------------------------------------------------------------------------
  static constexpr bool kRowMajor = false;
  static constexpr bool kWgmma = true;

  // ---- mma.sync GEMM and GEMV -------------------------------------------------------------
  static constexpr int kTileStageBytes = kUnit + kScaleUnit;
  static constexpr int kStages = 4;
  static constexpr int kGemvRawRegs = 9;
  struct Raw {
    uint32_t q[4];  // nibble word per k step
    uint32_t h;     // high bits of all four k steps
    uint32_t s[2];  // d of blocks 2c, 2c+1 (lo = row g, hi = row g+8)
    uint32_t m[2];  // m of the same
  };
  // The unit's words of one lane (host and tests: the same offsets the loads use).
  __host__ __device__ static void raw_at(Raw& r, const uint8_t* unit, const uint8_t* sunit, int lane) {
    const uint32_t* q = reinterpret_cast<const uint32_t*>(unit + lane * 16);
    const uint32_t* s = reinterpret_cast<const uint32_t*>(sunit + (lane >> 2) * 8);
    r.q[0] = q[0], r.q[1] = q[1], r.q[2] = q[2], r.q[3] = q[3];
    r.h = *reinterpret_cast<const uint32_t*>(unit + qw::kQ4UnitBytes + lane * 4);
    r.s[0] = s[0], r.s[1] = s[1];
    r.m[0] = s[16], r.m[1] = s[17];
  }
  // Stage smem: [tiles][kUnit] quants, then [tiles][kScaleUnit] scales.
  __device__ static void lds_raw(Raw& r, uint32_t sb, int tiles, int v, int lane, int hs) {
    if (hs != 0) return;  // the whole chunk in one LDS.128 + one LDS.32 (both conflict-free)
    lds128(r.q[0], r.q[1], r.q[2], r.q[3], sb + v * kUnit + lane * 16);
    lds32(r.h, sb + v * kUnit + qw::kQ4UnitBytes + lane * 4);
    lds64(r.s[0], r.s[1], sb + tiles * kUnit + v * kScaleUnit + (lane >> 2) * 8);
    lds64(r.m[0], r.m[1], sb + tiles * kUnit + v * kScaleUnit + qw::kScaleUnitBytes + (lane >> 2) * 8);
  }
  __device__ static void ldg_raw(Raw& r, const uint8_t* w, size_t soff, size_t unit, int lane) {
    ldg128_stream(r.q[0], r.q[1], r.q[2], r.q[3], w + unit * kUnit + lane * 16);
    ldg32_stream(r.h, w + unit * kUnit + qw::kQ4UnitBytes + lane * 4);
    ldg64_stream(r.s[0], r.s[1], w + soff + unit * kScaleUnit + (lane >> 2) * 8);
    ldg64_stream(r.m[0], r.m[1], w + soff + unit * kScaleUnit + qw::kScaleUnitBytes + (lane >> 2) * 8);
  }
  __host__ __device__ static void frags(const Raw& r, int s, uint32_t (&f)[4]) {
    qw::dq_q5_1(r.q[s], r.h, s, r.s[s >> 1], r.m[s >> 1], f);
  }

  // ---- wgmma GEMM -------------------------------------------------------------------------
  __device__ __forceinline__ static void wg_raw(uint32_t q_tile, uint32_t s_tile, int lane, Raw& r) {
    lds128(r.q[0], r.q[1], r.q[2], r.q[3], q_tile + lane * 16);
    lds32(r.h, q_tile + qw::kQ4UnitBytes + lane * 4);
    lds64(r.s[0], r.s[1], s_tile + (lane >> 2) * 8);
    lds64(r.m[0], r.m[1], s_tile + qw::kScaleUnitBytes + (lane >> 2) * 8);
  }

  // ---- Embedding --------------------------------------------------------------------------
  // Dequantizes cols [col8, col8 + 8) of `row` in fp32 as the CPU does
  // (see WTraits<kQ4_0>::load8 for which lanes hold them).
  __host__ __device__ static void load8(const DWeight& w, int64_t row, int64_t col8, float (&out)[8]) {
    const uint8_t* base = static_cast<const uint8_t*>(w.data);
    const qw::Coord c = qw::coord_of(row, col8, w.cols);  // t == 0, e == 0 or 2
    // scale_byte's position inside a unit's 64-byte d array; units here are kScaleUnit apart.
    const size_t in_unit = qw::scale_byte(c) - size_t(c.unit) * qw::kScaleUnitBytes;
    const uint8_t* sp = base + scales_offset(w.rows, w.cols) + size_t(c.unit) * kScaleUnit + in_unit;
    const float d = __half2float(*reinterpret_cast<const __half*>(sp));
    const float m = __half2float(*reinterpret_cast<const __half*>(sp + qw::kScaleUnitBytes));
    const uint8_t* ub = base + size_t(c.unit) * kUnit;
QSP_HD_UNROLL
    for (int t = 0; t < 4; ++t) {
      const int lane = c.lane + t;
      const uint32_t word = *reinterpret_cast<const uint32_t*>(ub + lane * 16 + 4 * c.s);
      const uint32_t hw = *reinterpret_cast<const uint32_t*>(ub + qw::kQ4UnitBytes + lane * 4);
QSP_HD_UNROLL
      for (int i = 0; i < 2; ++i) {
        const int e = c.e + i;
        const int q = int(((word >> qw::q4_shift(c.p, e)) & 15u) | ((hw >> qw::qh_bit(c.s, c.p, e)) & 1u) << 4);
        out[2 * t + i] = qw::hd::mul_add_rn(float(q), d, m);
      }
    }
  }
};

}  // namespace kern
}  // namespace qsp
