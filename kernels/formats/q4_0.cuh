// Q4_0 on the device: GGUF blocks of 32 weights (fp16 d, 16 bytes of
// nibbles, x = d * (q - 8)) repacked into the tiled layout of
// kernels/qweight_layout.h, 512 bytes of nibbles + 64 of scales per 16 x 64
// unit. The traits contract is listed in kernels/qweight.cuh.
#pragma once

#include <cstring>

#include "common/quant.h"
#include "kernels/ptx.cuh"
#include "kernels/qweight.cuh"

namespace qsp {
namespace kern {

template <>
struct WTraits<WFormat::kQ4_0> {
  // ---- Host -------------------------------------------------------------------------------
  static bool serves(int32_t dtype) { return dtype == QSP_DTYPE_Q4_0; }
  static constexpr int kUnit = qw::kQ4UnitBytes;
  static constexpr int kScaleUnit = qw::kScaleUnitBytes;  // fp16 d of 16 rows x 2 blocks
  __host__ __device__ static size_t scales_offset(int64_t rows, int64_t cols) { return qw::unit_array_bytes(kUnit, rows, cols); }
  static size_t bytes(int64_t rows, int64_t cols) {
    return qw::unit_array_bytes(kUnit + kScaleUnit, rows, cols);
  }
  // Tiles [t0, t1) only (kern::repack_weight_tiles): their units to `units`,
  // their scales to `side`. cols % 32 == 0 (checked by the caller).
  static void repack_tiles(int32_t, const void* src_v, int64_t rows, int64_t cols, int64_t t0, int64_t t1,
                           uint8_t* units, uint8_t* side) {
    const BlockQ4_0* src = static_cast<const BlockQ4_0*>(src_v);
    const int64_t KC = qw::n_chunks(cols), nb = cols / kQBlock;
    static const uint8_t kPad[16] = {0x88, 0x88, 0x88, 0x88, 0x88, 0x88, 0x88, 0x88,
                                     0x88, 0x88, 0x88, 0x88, 0x88, 0x88, 0x88, 0x88};  // q = 8: decodes to 0
    for (int64_t tile = t0; tile < t1; ++tile) {
      for (int64_t c = 0; c < KC; ++c) {
        const int64_t unit = (tile - t0) * KC + c;
        uint32_t* q = reinterpret_cast<uint32_t*>(units + unit * kUnit);  // [lane][s]
        uint16_t* sc = reinterpret_cast<uint16_t*>(side + unit * kScaleUnit);
        for (int g = 0; g < 8; ++g) {
#if defined(QSP_REPACK_SSE2)
          __m128i w[4];
#endif
          for (int h = 0; h < 2; ++h) {
            // Block 2c+h is chunk cols 32h .. 32h+31: k steps 2h (low
            // nibbles: elements 0..15) and 2h+1 (high nibbles: 16..31).
            const int64_t b = 2 * c + h;
            const uint8_t* qs[2];
            for (int p = 0; p < 2; ++p) {
              const int64_t row = tile * 16 + 8 * p + g;
              const bool ok = row < rows && b < nb;
              qs[p] = ok ? src[row * nb + b].qs : kPad;
              sc[4 * g + 2 * h + p] = ok ? src[row * nb + b].d : uint16_t(0);
            }
#if defined(QSP_REPACK_SSE2)
            // The lane words of steps 2h (low nibbles) and 2h + 1 (high).
            const __m128i lo4 = _mm_set1_epi8(0x0f);
            const __m128i r0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs[0]));
            const __m128i r1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs[1]));
            w[2 * h] = qw::q4_rows_sse(_mm_and_si128(r0, lo4), _mm_and_si128(r1, lo4));
            w[2 * h + 1] = qw::q4_rows_sse(_mm_and_si128(_mm_srli_epi16(r0, 4), lo4),
                                           _mm_and_si128(_mm_srli_epi16(r1, 4), lo4));
#else
            uint8_t v[2][2][16];  // [k][p][x]
            for (int p = 0; p < 2; ++p)
              for (int x = 0; x < 16; ++x) {
                v[0][p][x] = qs[p][x] & 15u;
                v[1][p][x] = qs[p][x] >> 4;
              }
            for (int k = 0; k < 2; ++k) qw::put_q4_rows(q, g, 2 * h + k, v[k][0], v[k][1]);
#endif
          }
#if defined(QSP_REPACK_SSE2)
          qw::store_q4_lanes(q, g, w);
#endif
        }
      }
    }
  }

  // ---- Layout -----------------------------------------------------------------------------
  static constexpr bool kRowMajor = false;
  static constexpr bool kWgmma = true;

  // ---- mma.sync GEMM and GEMV -------------------------------------------------------------
  static constexpr int kTileStageBytes = kUnit + kScaleUnit;
  static constexpr int kStages = 4;
  static constexpr int kGemvRawRegs = 6;
  struct Raw {
    uint32_t q[4];  // lane word per k step
    uint32_t s[2];  // scales of blocks 2c, 2c+1 (lo = row g, hi = row g+8)
  };
  // Stage smem: [tiles][kUnit] quants, then [tiles][64] scales.
  __device__ static void lds_raw(Raw& r, uint32_t sb, int tiles, int v, int lane, int hs) {
    if (hs != 0) return;  // one conflict-free LDS.128 holds all four k steps
    lds128(r.q[0], r.q[1], r.q[2], r.q[3], sb + v * kUnit + lane * 16);
    lds64(r.s[0], r.s[1], sb + tiles * kUnit + v * kScaleUnit + (lane >> 2) * 8);
  }
  // The lane's words of one unit from plain memory, what ldg_raw loads (the
  // CPU test of the integer GEMV reads them through this).
  QSP_HD static void raw_at(Raw& r, const uint8_t* w, size_t soff, size_t unit, int lane) {
    for (int i = 0; i < 4; ++i) r.q[i] = qw::rd32(w + unit * kUnit + lane * 16 + 4 * i);
    for (int i = 0; i < 2; ++i) r.s[i] = qw::rd32(w + soff + unit * kScaleUnit + (lane >> 2) * 8 + 4 * i);
  }
  __device__ static void ldg_raw(Raw& r, const uint8_t* w, size_t soff, size_t unit, int lane) {
    ldg128_stream(r.q[0], r.q[1], r.q[2], r.q[3], w + unit * kUnit + lane * 16);
    ldg64_stream(r.s[0], r.s[1], w + soff + unit * kScaleUnit + (lane >> 2) * 8);
  }
  __device__ static void frags(const Raw& r, int s, uint32_t (&f)[4]) { qw::dq_q4(r.q[s], r.s[s >> 1], f); }

  // ---- wgmma GEMM -------------------------------------------------------------------------
  // A lane's words of one chunk for the warp's tile, from the stage's smem
  // (q_tile: the tile's unit, s_tile: its scales); wg_decode (formats.cuh)
  // turns them into the A fragments of the four k steps.
  __device__ __forceinline__ static void wg_raw(uint32_t q_tile, uint32_t s_tile, int lane, Raw& r) {
    lds128(r.q[0], r.q[1], r.q[2], r.q[3], q_tile + lane * 16);
    lds64(r.s[0], r.s[1], s_tile + (lane >> 2) * 8);
  }


  // ---- Embedding --------------------------------------------------------------------------
  // Dequantizes cols [col8, col8 + 8) of `row`; col8 % 8 == 0. Those 8
  // columns share one k step, one block and one fragment register (e >> 1):
  // the four lanes t = 0..3 of row group g hold two columns each.
  __device__ static void load8(const DWeight& w, int64_t row, int64_t col8, float (&out)[8]) {
    const uint8_t* base = static_cast<const uint8_t*>(w.data);
    const qw::Coord c = qw::coord_of(row, col8, w.cols);  // t == 0, e == 0 or 2
    const float d =
        __half2float(*reinterpret_cast<const __half*>(base + scales_offset(w.rows, w.cols) + qw::scale_byte(c)));
    const size_t ub = size_t(c.unit) * kUnit;
#pragma unroll
    for (int t = 0; t < 4; ++t) {
      const int lane = c.lane + t;
      const uint32_t word = *reinterpret_cast<const uint32_t*>(base + ub + lane * 16 + 4 * c.s);
#pragma unroll
      for (int i = 0; i < 2; ++i) out[2 * t + i] = d * float(int((word >> qw::q4_shift(c.p, c.e + i)) & 15u) - 8);
    }
  }
};

}  // namespace kern
}  // namespace qsp
