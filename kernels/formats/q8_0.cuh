// Q8_0 on the device: GGUF blocks of 32 weights (fp16 d, 32 int8 q,
// x = d * q) repacked into the tiled layout of kernels/qweight_layout.h,
// 1024 bytes of q + 128 (uint8) + 64 of scales per 16 x 64 unit. The traits contract
// is listed in kernels/qweight.cuh.
#pragma once

#include "common/quant.h"
#include "kernels/ptx.cuh"
#include "kernels/qweight.cuh"

namespace qsp {
namespace kern {

template <>
struct WTraits<WFormat::kQ8_0> {
  // ---- Host -------------------------------------------------------------------------------
  static bool serves(int32_t dtype) { return dtype == QSP_DTYPE_Q8_0; }
  static constexpr int kUnit = qw::kQ8UnitBytes;
  static constexpr int kScaleUnit = qw::kScaleUnitBytes;  // fp16 d of 16 rows x 2 blocks
  __host__ __device__ static size_t scales_offset(int64_t rows, int64_t cols) {
    return qw::unit_array_bytes(kUnit, rows, cols);
  }
  static size_t bytes(int64_t rows, int64_t cols) {
    return qw::unit_array_bytes(kUnit + kScaleUnit, rows, cols);
  }
  // Tiles [t0, t1) only (kern::repack_weight_tiles): their units to `units`,
  // their scales to `side`. cols % 32 == 0 (checked by the caller).
  static void repack_tiles(int32_t, const void* src_v, int64_t rows, int64_t cols, int64_t t0, int64_t t1,
                           uint8_t* units, uint8_t* side) {
    const BlockQ8_0* src = static_cast<const BlockQ8_0*>(src_v);
    const int64_t KC = qw::n_chunks(cols), nb = cols / kQBlock;
    for (int64_t tile = t0; tile < t1; ++tile) {
      for (int64_t c = 0; c < KC; ++c) {
        const int64_t unit = (tile - t0) * KC + c;
        uint8_t* q = units + unit * kUnit;
        uint16_t* sc = reinterpret_cast<uint16_t*>(side + unit * kScaleUnit);
        for (int rr = 0; rr < 16; ++rr) {
          const int64_t row = tile * 16 + rr;
          const int g = rr & 7, p = rr >> 3;
          for (int h = 0; h < 2; ++h) {
            const int64_t b = 2 * c + h;
            const bool ok = row < rows && b < nb;
            sc[4 * g + 2 * h + p] = ok ? src[row * nb + b].d : uint16_t(0);
            uint8_t v[32];  // q + 128; padding 128 (0)
            for (int i = 0; i < 32; ++i) v[i] = ok ? uint8_t(int(src[row * nb + b].qs[i]) + 128) : uint8_t(128);
            qw::put_q8(q, g, p, 2 * h, v);
            qw::put_q8(q, g, p, 2 * h + 1, v + 16);
          }
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
  static constexpr int kGemvRawRegs = 10;
  struct Raw {
    uint32_t q[2][4];  // [half-stage][rows g: steps 2hs, 2hs+1; rows g+8: same]
    uint32_t s[2];
  };
  // Loaded per half-stage (20 registers for 4 tiles instead of 40): the unit
  // keeps each half-stage's 16 bytes per lane contiguous, so still LDS.128.
  __device__ static void lds_raw(Raw& r, uint32_t sb, int tiles, int v, int lane, int hs) {
    lds128(r.q[hs][0], r.q[hs][1], r.q[hs][2], r.q[hs][3], sb + v * kUnit + hs * 512 + lane * 16);
    lds32(r.s[hs], sb + tiles * kUnit + v * kScaleUnit + (lane >> 2) * 8 + 4 * hs);
  }
  // ldg_raw's words by plain reads (the integer GEMV's CPU test: kernels/gemv_i8.cuh).
  QSP_HD static void raw_at(Raw& r, const uint8_t* w, size_t soff, size_t unit, int lane) {
    for (int h = 0; h < 2; ++h)
      for (int i = 0; i < 4; ++i) r.q[h][i] = qw::rd32(w + unit * kUnit + h * 512 + lane * 16 + 4 * i);
    for (int i = 0; i < 2; ++i) r.s[i] = qw::rd32(w + soff + unit * kScaleUnit + (lane >> 2) * 8 + 4 * i);
  }
  __device__ static void ldg_raw(Raw& r, const uint8_t* w, size_t soff, size_t unit, int lane) {
    ldg128_stream(r.q[0][0], r.q[0][1], r.q[0][2], r.q[0][3], w + unit * kUnit + lane * 16);
    ldg128_stream(r.q[1][0], r.q[1][1], r.q[1][2], r.q[1][3], w + unit * kUnit + 512 + lane * 16);
    ldg64_stream(r.s[0], r.s[1], w + soff + unit * kScaleUnit + (lane >> 2) * 8);
  }
  __device__ static void frags(const Raw& r, int s, uint32_t (&f)[4]) {
    qw::dq_q8(r.q[s >> 1][s & 1], r.q[s >> 1][2 + (s & 1)], r.s[s >> 1], f);
  }

  // ---- wgmma GEMM -------------------------------------------------------------------------
  __device__ __forceinline__ static void wg_raw(uint32_t q_tile, uint32_t s_tile, int lane, Raw& r) {
#pragma unroll
    for (int h = 0; h < 2; ++h) lds128(r.q[h][0], r.q[h][1], r.q[h][2], r.q[h][3], q_tile + h * 512 + lane * 16);
    lds64(r.s[0], r.s[1], s_tile + (lane >> 2) * 8);
  }


  // ---- Embedding --------------------------------------------------------------------------
  // Dequantizes cols [col8, col8 + 8) of `row` (see WTraits<kQ4_0>::load8).
  __device__ static void load8(const DWeight& w, int64_t row, int64_t col8, float (&out)[8]) {
    const uint8_t* base = static_cast<const uint8_t*>(w.data);
    const qw::Coord c = qw::coord_of(row, col8, w.cols);  // t == 0, e == 0 or 2
    const float d =
        __half2float(*reinterpret_cast<const __half*>(base + scales_offset(w.rows, w.cols) + qw::scale_byte(c)));
    const size_t ub = size_t(c.unit) * kUnit;
#pragma unroll
    for (int t = 0; t < 4; ++t) {
#pragma unroll
      for (int i = 0; i < 2; ++i) out[2 * t + i] = d * float(int(base[ub + qw::q8_byte(c.lane + t, c.s, c.p, c.e + i)]) - 128);
    }
  }
};

}  // namespace kern
}  // namespace qsp
