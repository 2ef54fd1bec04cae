// fp16 weights on the device: plain row-major [rows][cols] fp16, no padding
// (kernels/qweight_layout.h), for GGUF F16 as is and BF16 / F32 converted at
// upload. The tiled permutation is applied on the fly by the loads. Not on
// the wgmma path. The traits contract is listed in kernels/qweight.cuh.
#pragma once

#include <algorithm>
#include <cstring>

#include "common/quant.h"
#include "kernels/ptx.cuh"
#include "kernels/qweight.cuh"

namespace qsp {
namespace kern {

template <>
struct WTraits<WFormat::kF16> {
  // ---- Host -------------------------------------------------------------------------------
  static bool serves(int32_t dtype) {
    return dtype == QSP_DTYPE_F16 || dtype == QSP_DTYPE_BF16 || dtype == QSP_DTYPE_F32;
  }
  __host__ __device__ static size_t scales_offset(int64_t, int64_t) { return 0; }
  static size_t bytes(int64_t rows, int64_t cols) { return size_t(rows) * size_t(cols) * 2; }
  // Tiles [t0, t1) only (kern::repack_weight_tiles), a tile being 16 rows
  // here too: rows [16 t0, min(rows, 16 t1)) to `units`; no side data.
  static void repack_tiles(int32_t dtype, const void* src, int64_t rows, int64_t cols, int64_t t0, int64_t t1,
                           uint8_t* units, uint8_t*) {
    const int64_t r0 = std::min(rows, qw::kTileRows * t0), r1 = std::min(rows, qw::kTileRows * t1);
    if (r1 <= r0) return;
    const int64_t n = (r1 - r0) * cols, first = r0 * cols;
    if (dtype == QSP_DTYPE_F16) {
      std::memcpy(units, static_cast<const uint16_t*>(src) + first, size_t(n) * 2);
      return;
    }
    uint16_t* o = reinterpret_cast<uint16_t*>(units);
    if (dtype == QSP_DTYPE_F32) {
      const float* f = static_cast<const float*>(src) + first;
      for (int64_t i = 0; i < n; ++i) o[i] = fp32_to_fp16(f[i]);
    } else {
      const uint16_t* bf = static_cast<const uint16_t*>(src) + first;
      for (int64_t i = 0; i < n; ++i) o[i] = fp32_to_fp16(bf16_to_fp32(bf[i]));
    }
  }

  // ---- Layout -----------------------------------------------------------------------------
  static constexpr bool kRowMajor = true;
  static constexpr bool kWgmma = false;

  // ---- mma.sync GEMM and GEMV -------------------------------------------------------------
  static constexpr int kTileStageBytes = qw::kTileRows * 128;  // 16 rows x 64 fp16, swizzled like A
  static constexpr int kStages = 3;                           // 48 KB per stage in the large config
  static constexpr int kGemvRawRegs = 16;
  struct Raw {
    uint32_t w[4][4];  // [k step][f0..f3] (see qweight.cuh's fragment order)
  };
  // ldmatrix.x4 per k step: matrix i = rows 8 (i >> 1).. of the tile, k half i & 1.
  __device__ static void lds_raw(Raw& r, uint32_t sb, int, int v, int lane, int hs) {
    const int mi = lane >> 3;
    const int row = v * 16 + (lane & 7) + 8 * (mi >> 1);
#pragma unroll
    for (int ss = 0; ss < 2; ++ss) {
      const int s = 2 * hs + ss;
      ldmatrix_x4(r.w[s], sb + row * 128 + qw::swz(row, 2 * s + (mi & 1)) * 16);
    }
  }
  // rows: the two row pointers (already offset to the chunk), null = zero;
  // hi_ok: k steps 2, 3 exist (K may end half way through the chunk).
  __device__ static void ldg_rows(Raw& r, const __half* row_g, const __half* row_g8, int t, bool hi_ok) {
    const __half* rows[2] = {row_g, row_g8};
#pragma unroll
    for (int s = 0; s < 4; ++s)
#pragma unroll
      for (int p = 0; p < 2; ++p)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          uint32_t& d = r.w[s][2 * p + h];
          if (rows[p] && (s < 2 || hi_ok)) {
            ldg32_stream(d, rows[p] + 16 * s + 2 * t + 8 * h);
          } else {
            d = 0u;
          }
        }
  }
  __device__ static void frags(const Raw& r, int s, uint32_t (&f)[4]) {
    f[0] = r.w[s][0];
    f[1] = r.w[s][1];
    f[2] = r.w[s][2];
    f[3] = r.w[s][3];
  }

  // ---- Embedding --------------------------------------------------------------------------
  // Columns [col8, col8 + 8) of `row`; col8 % 8 == 0.
  __device__ static void load8(const DWeight& w, int64_t row, int64_t col8, float (&out)[8]) {
    const uint8_t* base = static_cast<const uint8_t*>(w.data);
    const uint4 v = *reinterpret_cast<const uint4*>(base + (size_t(row) * w.cols + col8) * 2);
    const __half2* h = reinterpret_cast<const __half2*>(&v);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 f = __half22float2(h[i]);
      out[2 * i] = f.x;
      out[2 * i + 1] = f.y;
    }
  }
};

}  // namespace kern
}  // namespace qsp
