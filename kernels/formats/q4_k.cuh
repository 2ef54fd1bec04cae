// Q4_K on the device: GGML super-blocks of 256 weights (fp16 d and dmin,
// eight 32-weight sub-blocks with 6-bit scale sc and min m packed in 12
// bytes, 4-bit q; x = d*sc*q - dmin*m) repacked into the tiled layout of
// kernels/qweight_layout.h. Per 16 x 64 unit:
//   quants 512 bytes   the 4-bit q exactly as Q4_0's nibbles (q4_shift),
//                      raw codes 0..15
//   side   128 bytes   per row and 32-column sub-block of the chunk the
//                      8-bit sc and m (6-bit values unpacked), per row its
//                      super-block's fp16 d and dmin (kernels/qweight_kquant.h,
//                      kq_sm_byte / kq_dd_byte): one 16-byte load per lane
// 640 bytes per 1024 weights = 5.0 bits per weight (GGUF Q4_K: 144 per 256
// = 4.5; the 0.5 is d / dmin repeated in each of a super-block's 4 chunks,
// which keeps every unit self-contained for the shared loaders).
// The sub-block scales are decoded in the kernel. GEMM / GEMV fragments:
// f16x2 arithmetic with d*sc and dmin*m split in two fp16 each
// (qw::dq_kq_affine, kernels/qweight_kfrags.cuh: half the fp32 decode's work).
// The embedding (load8): d*sc and dmin*m in fp32 as the CPU reference
// (src/formats/q4_K.cpp), x in fp32, bit for bit (qw::kq_affine_values).
// K % 256 == 0.
// The traits contract is listed in kernels/qweight.cuh.
#pragma once

#include <cstring>

#include "common/quant.h"
#include "kernels/ptx.cuh"
#include "kernels/qweight.cuh"
#include "kernels/qweight_kfrags.cuh"
#include "kernels/qweight_kquant.h"

namespace qsp {
namespace kern {

namespace qw {
// GGML's block_q4_K (src/formats/q4_K.cpp), as the repacking reads it.
struct GgmlQ4_K {
  uint16_t d, dmin;  // fp16 bits
  uint8_t scales[12];
  uint8_t qs[128];
};
static_assert(sizeof(GgmlQ4_K) == 144, "Q4_K block is 144 bytes in GGUF");
}  // namespace qw

template <>
struct WTraits<WFormat::kQ4_K> {
  // ---- Host -------------------------------------------------------------------------------
  static bool serves(int32_t dtype) { return dtype == QSP_DTYPE_Q4_K; }
  static constexpr int kColsMultiple = qw::kSuperCols;
  static constexpr int kUnit = qw::kQ4UnitBytes;
  static constexpr int kScaleUnit = qw::kKSideUnitBytes;
  __host__ __device__ static size_t scales_offset(int64_t rows, int64_t cols) {
    return qw::unit_array_bytes(kUnit, rows, cols);
  }
  static size_t bytes(int64_t rows, int64_t cols) { return qw::unit_array_bytes(kUnit + kScaleUnit, rows, cols); }
  // Tiles [t0, t1) only (kern::repack_weight_tiles): their units to `units`,
  // their side data to `side`. cols % 256 == 0 (checked by the caller). Padding rows decode to 0.
  static void repack_tiles(int32_t, const void* src_v, int64_t rows, int64_t cols, int64_t t0, int64_t t1,
                           uint8_t* units, uint8_t* side) {
    const qw::GgmlQ4_K* src = static_cast<const qw::GgmlQ4_K*>(src_v);
    const int64_t KC = qw::n_chunks(cols), nsb = cols / qw::kSuperCols;
#if !defined(QSP_REPACK_SSE2)
    uint8_t v[2][2][16];  // [k][p][x]
#endif
    for (int64_t tile = t0; tile < t1; ++tile) {
      for (int64_t c = 0; c < KC; ++c) {
        const int64_t unit = (tile - t0) * KC + c;
        uint32_t* q = reinterpret_cast<uint32_t*>(units + unit * kUnit);  // [lane][s], written whole
        uint8_t* sd = side + unit * kScaleUnit;
        std::memset(sd, 0, kScaleUnit);
        for (int g = 0; g < 8; ++g) {
#if defined(QSP_REPACK_SSE2)
          __m128i w[4], vv[2][2];  // lane words per step; codes [k][p]
#endif
          for (int h = 0; h < 2; ++h) {
            const int sub = 2 * int(c % 4) + h;  // sub-block of the super-block
            for (int p = 0; p < 2; ++p) {
              const int64_t row = tile * 16 + 8 * p + g;
              if (row >= rows) {  // q = 0, d = dmin = 0
#if defined(QSP_REPACK_SSE2)
                vv[0][p] = vv[1][p] = _mm_setzero_si128();
#else
                std::memset(v[0][p], 0, 16);
                std::memset(v[1][p], 0, 16);
#endif
                continue;
              }
              const qw::GgmlQ4_K& blk = src[row * nsb + c / 4];
              uint8_t sc, m;
              qw::kq_unpack_scale_min(sub, blk.scales, &sc, &m);
              qw::kq_put_side(sd, 8 * p + g, h, sc, m, blk.d, blk.dmin);
              const uint8_t* b = blk.qs + 32 * (sub / 2);
#if defined(QSP_REPACK_SSE2)
              const __m128i sh = _mm_cvtsi32_si128(4 * (sub % 2)), lo4 = _mm_set1_epi8(0x0f);
              for (int k = 0; k < 2; ++k)
                vv[k][p] = _mm_and_si128(
                    _mm_srl_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 16 * k)), sh), lo4);
#else
              for (int x = 0; x < 16; ++x) {
                v[0][p][x] = (b[x] >> (4 * (sub % 2))) & 15u;
                v[1][p][x] = (b[16 + x] >> (4 * (sub % 2))) & 15u;
              }
#endif
            }
#if defined(QSP_REPACK_SSE2)
            for (int k = 0; k < 2; ++k) w[2 * h + k] = qw::q4_rows_sse(vv[k][0], vv[k][1]);
#else
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
  // 8 raw words, but counted 11: U = 2 chunks in flight for M <= 8. The
  // factored GEMV at U = 3 spilled 36 bytes (ptxas, sm_90, eighth session;
  // the f16x2 decode ran U = 3 without). The SwiGLU GEMV counts 11 per
  // matrix (U = 1): at 8 (U = 2) ptxas spilled 60 bytes there (2026-12-04).
  static constexpr int kGemvRawRegs = 11;
  static constexpr int kGemvDualRawRegs = 11;
  struct Raw {
    uint32_t q[4];     // lane word per k step (Q4_0's nibble order)
    uint32_t side[4];  // sm of sub-blocks h = 0, 1; d / dmin of rows g, g+8
  };
  // The lane's words of one unit from plain memory: what lds_raw / ldg_raw
  // load, byte for byte (the CPU test and load8 decode through this).
  QSP_HD static void raw_at(Raw& r, const uint8_t* w, size_t soff, size_t unit, int lane) {
    for (int i = 0; i < 4; ++i) r.q[i] = qw::rd32(w + unit * kUnit + lane * 16 + 4 * i);
    for (int i = 0; i < 4; ++i) r.side[i] = qw::rd32(w + soff + unit * kScaleUnit + (lane >> 2) * 16 + 4 * i);
  }
  // Values of k step s, v[4p + e] = row 8p+g, column chunk_col(s, t, e), fp32.
  QSP_HD static void values(const Raw& r, int s, float (&v)[8]) {
    const uint32_t w = r.q[s];
    qw::kq_affine_values(r.side, s >> 1, [w](int p, int e) { return (w >> qw::q4_shift(p, e)) & 15u; }, v);
  }
  // Stage smem: [tiles][kUnit] quants, then [tiles][kScaleUnit] side units.
  // All at hs 0 (one LDS.128 each; loading per half-stage, as Q5_K does,
  // changed nothing in ptxas's spills here: 4 bytes in the large config).
  __device__ static void lds_raw(Raw& r, uint32_t sb, int tiles, int v, int lane, int hs) {
    if (hs != 0) return;
    lds128(r.q[0], r.q[1], r.q[2], r.q[3], sb + v * kUnit + lane * 16);
    lds128(r.side[0], r.side[1], r.side[2], r.side[3], sb + tiles * kUnit + v * kScaleUnit + (lane >> 2) * 16);
  }
  __device__ static void ldg_raw(Raw& r, const uint8_t* w, size_t soff, size_t unit, int lane) {
    ldg128_stream(r.q[0], r.q[1], r.q[2], r.q[3], w + unit * kUnit + lane * 16);
    ldg128_stream(r.side[0], r.side[1], r.side[2], r.side[3], w + soff + unit * kScaleUnit + (lane >> 2) * 16);
  }
  // The GEMM / GEMV fragments, in f16x2 arithmetic (qw::dq_kq_affine).
  QSP_HD static void frags(const Raw& r, int s, uint32_t (&f)[4]) { qw::dq_kq_affine(r.q[s], 0u, s, r.side, f); }

  // ---- The factored GEMV (kernels/gemv.cu) -----------------------------------------------
  // x = ds[p] * code + nm[p] (row 8p + g): exact codes in the fragment
  // positions, per-row fp32 scales of k step s (kernels/qweight_kfrags.cuh),
  // the same for the kScaleSteps steps of a sub-block.
  static constexpr bool kFactored = true, kAffine = true;
  static constexpr int kScaleSteps = 2;  // a 32-column sub-block: k steps 2h, 2h+1
  QSP_HD static void codes(const Raw& r, int s, uint32_t (&f)[4]) { qw::kq_codes(r.q[s], 0u, s, f); }
  QSP_HD static void scales(const Raw& r, int s, float (&ds)[2], float (&nm)[2]) {
    qw::kq_scales(r.side, s, ds, nm);
  }

  // ---- wgmma GEMM -------------------------------------------------------------------------
  __device__ __forceinline__ static void wg_raw(uint32_t q_tile, uint32_t s_tile, int lane, Raw& r) {
    lds128(r.q[0], r.q[1], r.q[2], r.q[3], q_tile + lane * 16);
    lds128(r.side[0], r.side[1], r.side[2], r.side[3], s_tile + (lane >> 2) * 16);
  }

  // ---- Embedding --------------------------------------------------------------------------
  QSP_HD static void load8(const DWeight& w, int64_t row, int64_t col8, float (&out)[8]) {
    load8_by_values<WTraits<WFormat::kQ4_K>>(w, row, col8, out);
  }
};

}  // namespace kern
}  // namespace qsp
