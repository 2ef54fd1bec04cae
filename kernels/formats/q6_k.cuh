// Q6_K on the device: GGML super-blocks of 256 weights (fp16 d, sixteen
// 16-weight sub-blocks with an int8 scale sc, 6-bit q: a low nibble in ql
// plus two bits in qh; x = d*sc*(q - 32)) repacked into the tiled layout of
// kernels/qweight_layout.h. A 16-column sub-block is exactly one k step of
// a chunk. Per 16 x 64 unit:
//   quants 768 bytes   bytes 0..511: the low 4 bits exactly as Q4_0's
//                      nibbles (q4_shift); bytes 512 + 8*lane: the lane's
//                      64 high bits, word s >> 1, bits q2_bit(s, p, e) for
//                      k step s, row half p, element e (kernels/qweight_kfrags.cuh:
//                      an f16x2 register's two fields 16 bits apart)
//   side    96 bytes   byte 8*g + 4*p + s: int8 sc of row 8p+g, k step s;
//                      bytes 64 + 4*g + 2*p: fp16 d of row 8p+g's super-block
// 864 bytes per 1024 weights = 6.75 bits per weight (GGUF Q6_K: 210 per 256
// = 6.5625; the extra is d repeated in each of a super-block's 4 chunks).
// The sub-block scales are decoded in the kernel. GEMM / GEMV fragments:
// d*sc split in two fp16, times the exact q - 32 in f16x2 (qw::dq_q6_k). The
// embedding: d*sc in fp32, then (d*sc)*(q - 32) in fp32 in the CPU
// reference's order (src/formats/q6_K.cpp; d*sc is exact, so the product is
// the one rounding), bit for bit. K % 256 == 0. The traits contract is listed in
// kernels/qweight.cuh.
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
// GGML's block_q6_K (src/formats/q6_K.cpp), as the repacking reads it.
struct GgmlQ6_K {
  uint8_t ql[128];  // low four bits
  uint8_t qh[64];   // high two bits
  int8_t scales[16];
  uint16_t d;  // fp16 bits
};
static_assert(sizeof(GgmlQ6_K) == 210, "Q6_K block is 210 bytes in GGUF");
constexpr int kQ6KHighBytes = 512;  // offset of the high bits in a Q6_K unit
constexpr int kQ6KSideBytes = 96;   // sc of 16 rows x 4 steps + d of 16 rows
}  // namespace qw

template <>
struct WTraits<WFormat::kQ6_K> {
  // ---- Host -------------------------------------------------------------------------------
  static bool serves(int32_t dtype) { return dtype == QSP_DTYPE_Q6_K; }
  static constexpr int kColsMultiple = qw::kSuperCols;
  static constexpr int kUnit = qw::kQ4UnitBytes + 256;  // + 2048 high bits
  static constexpr int kScaleUnit = qw::kQ6KSideBytes;
  __host__ __device__ static size_t scales_offset(int64_t rows, int64_t cols) {
    return qw::unit_array_bytes(kUnit, rows, cols);
  }
  static size_t bytes(int64_t rows, int64_t cols) { return qw::unit_array_bytes(kUnit + kScaleUnit, rows, cols); }
  // Tiles [t0, t1) only (kern::repack_weight_tiles): their units to `units`,
  // their side data to `side`. cols % 256 == 0 (checked by the caller). Padding rows decode to 0 (d = 0).
  static void repack_tiles(int32_t, const void* src_v, int64_t rows, int64_t cols, int64_t t0, int64_t t1,
                           uint8_t* units, uint8_t* side) {
    const qw::GgmlQ6_K* src = static_cast<const qw::GgmlQ6_K*>(src_v);
    const int64_t KC = qw::n_chunks(cols), nsb = cols / qw::kSuperCols;
#if !defined(QSP_REPACK_SSE2)
    uint8_t lo[2][16], hi[2][16];
#endif
    for (int64_t tile = t0; tile < t1; ++tile) {
      for (int64_t c = 0; c < KC; ++c) {
        const int64_t unit = (tile - t0) * KC + c;
        uint32_t* q = reinterpret_cast<uint32_t*>(units + unit * kUnit);                        // [lane][s]
        uint32_t* qh = reinterpret_cast<uint32_t*>(units + unit * kUnit + qw::kQ6KHighBytes);  // [lane][2]
        uint8_t* sd = side + unit * kScaleUnit;
#if !defined(QSP_REPACK_SSE2)
        std::memset(qh, 0, kUnit - qw::kQ6KHighBytes);  // the low nibble words are written whole
#endif
        std::memset(sd, 0, kScaleUnit);
        for (int g = 0; g < 8; ++g) {
          // Rows g and g + 8 of the tile; a padding row has q = 0, sc = 0, d = 0.
          const qw::GgmlQ6_K* blk[2];
          for (int p = 0; p < 2; ++p) {
            const int64_t row = tile * 16 + 8 * p + g;
            blk[p] = row < rows ? &src[row * nsb + c / 4] : nullptr;
            if (!blk[p]) continue;
            for (int s = 0; s < 4; ++s) sd[8 * g + 4 * p + s] = uint8_t(blk[p]->scales[4 * (c % 4) + s]);
            std::memcpy(sd + 64 + 4 * g + 2 * p, &blk[p]->d, 2);
          }
#if defined(QSP_REPACK_SSE2)
          __m128i w[4], hv[2][4];
          for (int s = 0; s < 4; ++s) {
            // Elements el = 64 (c % 4) + 16 s + x = 128 h + 32 k + i of the super-block.
            const int grp = int(2 * (c % 4)) + (s >> 1), h = grp / 4, k = grp % 4, i0 = 16 * (s & 1);
            __m128i lv[2];
            for (int p = 0; p < 2; ++p) {
              if (!blk[p]) {
                lv[p] = hv[p][s] = _mm_setzero_si128();
                continue;
              }
              const uint8_t* lp = blk[p]->ql + 64 * h + 32 * (k % 2) + i0;
              const __m128i l = _mm_loadu_si128(reinterpret_cast<const __m128i*>(lp));
              const __m128i hb = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk[p]->qh + 32 * h + i0));
              lv[p] = _mm_and_si128(_mm_srl_epi16(l, _mm_cvtsi32_si128(4 * (k / 2))), _mm_set1_epi8(0x0f));
              hv[p][s] = _mm_and_si128(_mm_srl_epi16(hb, _mm_cvtsi32_si128(2 * k)), _mm_set1_epi8(0x03));
            }
            w[s] = qw::q4_rows_sse(lv[0], lv[1]);
          }
          qw::store_q4_lanes(q, g, w);
          qw::store_q2_lanes(qh, g, hv[0], hv[1]);
#else
          for (int s = 0; s < 4; ++s) {
            // Elements el = 64 (c % 4) + 16 s + x = 128 h + 32 k + i of the super-block.
            const int grp = int(2 * (c % 4)) + (s >> 1), h = grp / 4, k = grp % 4, i0 = 16 * (s & 1);
            for (int p = 0; p < 2; ++p) {
              if (!blk[p]) {
                std::memset(lo[p], 0, 16);
                std::memset(hi[p], 0, 16);
                continue;
              }
              const uint8_t* l = blk[p]->ql + 64 * h + 32 * (k % 2) + i0;
              const uint8_t* hb = blk[p]->qh + 32 * h + i0;
              for (int x = 0; x < 16; ++x) {
                lo[p][x] = (l[x] >> (4 * (k / 2))) & 15u;
                hi[p][x] = (hb[x] >> (2 * k)) & 3u;
              }
            }
            qw::put_q4_rows(q, g, s, lo[0], lo[1]);
            qw::put_q2_rows(qh, g, s, hi[0], hi[1]);
          }
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
  static constexpr int kGemvRawRegs = 9;
  struct Raw {
    uint32_t q[4];   // lane word per k step (Q4_0's nibble order)
    uint32_t qh[2];  // high bits of steps 0, 1 and 2, 3
    uint32_t sc[2];  // int8 sc of rows g (sc[0]) and g+8 (sc[1]), byte s = k step
    uint32_t d;      // fp16 d of rows g (lo) and g+8 (hi)
  };
  // The lane's words of one unit from plain memory: what lds_raw / ldg_raw
  // load, byte for byte (the CPU test and load8 decode through this).
  QSP_HD static void raw_at(Raw& r, const uint8_t* w, size_t soff, size_t unit, int lane) {
    for (int i = 0; i < 4; ++i) r.q[i] = qw::rd32(w + unit * kUnit + lane * 16 + 4 * i);
    for (int i = 0; i < 2; ++i) r.qh[i] = qw::rd32(w + unit * kUnit + qw::kQ6KHighBytes + lane * 8 + 4 * i);
    const uint8_t* side = w + soff + unit * kScaleUnit;
    for (int i = 0; i < 2; ++i) r.sc[i] = qw::rd32(side + (lane >> 2) * 8 + 4 * i);
    r.d = qw::rd32(side + 64 + (lane >> 2) * 4);
  }
  // Values of k step s, v[4p + e] = row 8p+g, column chunk_col(s, t, e), fp32.
  QSP_HD static void values(const Raw& r, int s, float (&v)[8]) {
    const uint32_t w = r.q[s], hb = r.qh[s >> 1];
    QSP_UNROLL
    for (int p = 0; p < 2; ++p) {
      const float ds = qw::h2f(uint16_t(r.d >> (16 * p))) * float(int8_t(r.sc[p] >> (8 * s)));
      QSP_UNROLL
      for (int e = 0; e < 4; ++e) {
        const uint32_t q = ((w >> qw::q4_shift(p, e)) & 15u) | (((hb >> qw::q2_bit(s, p, e)) & 3u) << 4);
        v[4 * p + e] = ds * (qw::small_u2f(q) - 32.0f);
      }
    }
  }
  // Stage smem: [tiles][kUnit] quants, then [tiles][kScaleUnit] side units.
  // Quants, scales and d of all four k steps at hs 0; the high-bit word of
  // steps 2hs, 2hs+1 per half-stage (one register less per tile live through
  // the stage, which keeps the mma kernel's spills small).
  __device__ static void lds_raw(Raw& r, uint32_t sb, int tiles, int v, int lane, int hs) {
    const uint32_t side = sb + tiles * kUnit + v * kScaleUnit;
    if (hs == 0) {
      lds128(r.q[0], r.q[1], r.q[2], r.q[3], sb + v * kUnit + lane * 16);
      lds64(r.sc[0], r.sc[1], side + (lane >> 2) * 8);
      lds32(r.d, side + 64 + (lane >> 2) * 4);
    }
    lds32(r.qh[hs], sb + v * kUnit + qw::kQ6KHighBytes + lane * 8 + 4 * hs);
  }
  __device__ static void ldg_raw(Raw& r, const uint8_t* w, size_t soff, size_t unit, int lane) {
    ldg128_stream(r.q[0], r.q[1], r.q[2], r.q[3], w + unit * kUnit + lane * 16);
    ldg64_stream(r.qh[0], r.qh[1], w + unit * kUnit + qw::kQ6KHighBytes + lane * 8);
    const uint8_t* side = w + soff + unit * kScaleUnit;
    ldg64_stream(r.sc[0], r.sc[1], side + (lane >> 2) * 8);
    ldg32_stream(r.d, side + 64 + (lane >> 2) * 4);
  }
  // The GEMM / GEMV fragments, in f16x2 arithmetic (qw::dq_q6_k).
  QSP_HD static void frags(const Raw& r, int s, uint32_t (&f)[4]) { qw::dq_q6_k(r.q[s], r.qh[s >> 1], s, r.sc, r.d, f); }

  // ---- The factored GEMV (kernels/gemv.cu) -----------------------------------------------
  // x = ds[p] * code + nm[p] (row 8p + g): exact codes in the fragment
  // positions, per-row fp32 scales of k step s (kernels/qweight_kfrags.cuh),
  // the same for the kScaleSteps steps of a sub-block.
  static constexpr bool kFactored = true, kAffine = false;
  static constexpr int kScaleSteps = 1;  // a 16-column sub-block per k step
  QSP_HD static void codes(const Raw& r, int s, uint32_t (&f)[4]) { qw::q6_codes(r.q[s], r.qh[s >> 1], s, f); }
  QSP_HD static void scales(const Raw& r, int s, float (&ds)[2], float (&nm)[2]) {
    qw::q6_scales(r.sc, r.d, s, ds);
    nm[0] = nm[1] = 0.0f;
  }

  // ---- wgmma GEMM -------------------------------------------------------------------------
  __device__ __forceinline__ static void wg_raw(uint32_t q_tile, uint32_t s_tile, int lane, Raw& r) {
    lds128(r.q[0], r.q[1], r.q[2], r.q[3], q_tile + lane * 16);
    lds64(r.qh[0], r.qh[1], q_tile + qw::kQ6KHighBytes + lane * 8);
    lds64(r.sc[0], r.sc[1], s_tile + (lane >> 2) * 8);
    lds32(r.d, s_tile + 64 + (lane >> 2) * 4);
  }

  // ---- Embedding --------------------------------------------------------------------------
  QSP_HD static void load8(const DWeight& w, int64_t row, int64_t col8, float (&out)[8]) {
    load8_by_values<WTraits<WFormat::kQ6_K>>(w, row, col8, out);
  }
};

}  // namespace kern
}  // namespace qsp
