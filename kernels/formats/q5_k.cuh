// Q5_K on the device: GGML super-blocks of 256 weights (fp16 d and dmin,
// eight 32-weight sub-blocks with 6-bit scale sc and min m packed in 12
// bytes, 5-bit q: a low nibble plus one bit of qh; x = d*sc*q - dmin*m)
// repacked into the tiled layout of kernels/qweight_layout.h. Per 16 x 64
// unit:
//   quants 640 bytes   bytes 0..511: the low 4 bits exactly as Q4_0's
//                      nibbles (q4_shift); bytes 512 + 4*lane: the lane's
//                      32 high bits, bit qh_bit(s, p, e) for k step s, row
//                      half p, element e, as Q5_0's (kernels/qweight.cuh:
//                      an f16x2 register's two bits 16 apart, so one shift
//                      puts both under their nibbles; one 4-byte load)
//   side   128 bytes   as Q4_K: per row and 32-column sub-block the 8-bit
//                      sc and m, per row the super-block's fp16 d and dmin
//                      (kernels/qweight_kquant.h)
// 768 bytes per 1024 weights = 6.0 bits per weight (GGUF Q5_K: 176 per 256
// = 5.5; the 0.5 is d / dmin repeated in each of a super-block's 4 chunks).
// The sub-block scales are decoded in the kernel: for GEMM / GEMV
// fragments in f16x2 arithmetic as Q4_K's (qw::dq_kq_affine); for the embedding
// in fp32 as the CPU reference (src/formats/q5_K.cpp, qw::kq_affine_values).
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
// GGML's block_q5_K (src/formats/q5_K.cpp), as the repacking reads it.
struct GgmlQ5_K {
  uint16_t d, dmin;  // fp16 bits
  uint8_t scales[12];
  uint8_t qh[32];
  uint8_t qs[128];
};
static_assert(sizeof(GgmlQ5_K) == 176, "Q5_K block is 176 bytes in GGUF");
constexpr int kQ5KHighBytes = 512;  // offset of the high bits in a Q5_K unit
}  // namespace qw

template <>
struct WTraits<WFormat::kQ5_K> {
  // ---- Host -------------------------------------------------------------------------------
  static bool serves(int32_t dtype) { return dtype == QSP_DTYPE_Q5_K; }
  static constexpr int kColsMultiple = qw::kSuperCols;
  static constexpr int kUnit = qw::kQ4UnitBytes + 128;  // + 1024 high bits
  static constexpr int kScaleUnit = qw::kKSideUnitBytes;
  __host__ __device__ static size_t scales_offset(int64_t rows, int64_t cols) {
    return qw::unit_array_bytes(kUnit, rows, cols);
  }
  static size_t bytes(int64_t rows, int64_t cols) { return qw::unit_array_bytes(kUnit + kScaleUnit, rows, cols); }
  // Tiles [t0, t1) only (kern::repack_weight_tiles): their units to `units`,
  // their side data to `side`. cols % 256 == 0 (checked by the caller). Padding rows decode to 0.
  static void repack_tiles(int32_t, const void* src_v, int64_t rows, int64_t cols, int64_t t0, int64_t t1,
                           uint8_t* units, uint8_t* side) {
    const qw::GgmlQ5_K* src = static_cast<const qw::GgmlQ5_K*>(src_v);
    const int64_t KC = qw::n_chunks(cols), nsb = cols / qw::kSuperCols;
    uint8_t v[16], hv[16];
    for (int64_t tile = t0; tile < t1; ++tile) {
      for (int64_t c = 0; c < KC; ++c) {
        const int64_t unit = (tile - t0) * KC + c;
        uint32_t* q = reinterpret_cast<uint32_t*>(units + unit * kUnit);  // [lane][s]
        uint8_t* sd = side + unit * kScaleUnit;
        std::memset(q, 0, kUnit);
        std::memset(sd, 0, kScaleUnit);
        uint32_t* qh = reinterpret_cast<uint32_t*>(units + unit * kUnit + qw::kQ5KHighBytes);  // [lane]
        for (int rr = 0; rr < 16; ++rr) {
          const int64_t row = tile * 16 + rr;
          if (row >= rows) continue;  // q = 0, d = dmin = 0
          const int g = rr & 7, p = rr >> 3;
          const qw::GgmlQ5_K& blk = src[row * nsb + c / 4];
          for (int h = 0; h < 2; ++h) {
            const int sub = 2 * int(c % 4) + h;  // sub-block of the super-block
            uint8_t sc, m;
            qw::kq_unpack_scale_min(sub, blk.scales, &sc, &m);
            qw::kq_put_side(sd, rr, h, sc, m, blk.d, blk.dmin);
            for (int k = 0; k < 2; ++k) {
              const uint8_t* b = blk.qs + 32 * (sub / 2) + 16 * k;
              const uint8_t* hb = blk.qh + 16 * k;
              for (int x = 0; x < 16; ++x) {
                v[x] = (b[x] >> (4 * (sub % 2))) & 15u;
                hv[x] = (hb[x] >> sub) & 1u;
              }
              qw::put_q4(q, g, p, 2 * h + k, v);
              qw::put_bit(qh, g, p, 2 * h + k, hv);
            }
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
  // 9 raw words: U = 3 chunks in flight for M <= 8 (the fp32 decode needed
  // 11: U = 2). The SwiGLU GEMV counts 11 per matrix (U = 1): at 9 (U = 2)
  // ptxas spilled 112 bytes there (sm_90, 2026-12-04).
  static constexpr int kGemvRawRegs = 9;
  static constexpr int kGemvDualRawRegs = 11;
  struct Raw {
    uint32_t q[4];     // lane word per k step (Q4_0's nibble order)
    uint32_t qh;       // the lane's high bits, bit qw::qh_bit(s, p, e)
    uint32_t side[4];  // sm of sub-blocks h = 0, 1; d / dmin of rows g, g+8
  };
  // The lane's words of one unit from plain memory: what lds_raw / ldg_raw
  // load, byte for byte (the CPU test and load8 decode through this).
  QSP_HD static void raw_at(Raw& r, const uint8_t* w, size_t soff, size_t unit, int lane) {
    for (int i = 0; i < 4; ++i) r.q[i] = qw::rd32(w + unit * kUnit + lane * 16 + 4 * i);
    r.qh = qw::rd32(w + unit * kUnit + qw::kQ5KHighBytes + lane * 4);
    for (int i = 0; i < 4; ++i) r.side[i] = qw::rd32(w + soff + unit * kScaleUnit + (lane >> 2) * 16 + 4 * i);
  }
  // Values of k step s, v[4p + e] = row 8p+g, column chunk_col(s, t, e), fp32.
  QSP_HD static void values(const Raw& r, int s, float (&v)[8]) {
    const uint32_t w = r.q[s], qh = r.qh;
    qw::kq_affine_values(
        r.side, s >> 1,
        [w, qh, s](int p, int e) {
          return ((w >> qw::q4_shift(p, e)) & 15u) | (((qh >> qw::qh_bit(s, p, e)) & 1u) << 4);
        },
        v);
  }
  // Stage smem: [tiles][kUnit] quants, then [tiles][kScaleUnit] side units.
  // Per half-stage hs (k steps 2hs, 2hs+1 = sub-block h = hs): their two
  // quant words and side words only, fewer registers per tile live through
  // the stage than loading the whole unit at hs 0, which made ptxas spill
  // 8-24 bytes in every mma config (now 8 in one); the same words raw_at reads.
  __device__ static void lds_raw(Raw& r, uint32_t sb, int tiles, int v, int lane, int hs) {
    lds64(r.q[2 * hs], r.q[2 * hs + 1], sb + v * kUnit + lane * 16 + 8 * hs);
    if (hs == 0) {
      lds32(r.qh, sb + v * kUnit + qw::kQ5KHighBytes + lane * 4);
    }
    const uint32_t side = sb + tiles * kUnit + v * kScaleUnit + (lane >> 2) * 16;
    lds32(r.side[hs], side + 4 * hs);
    lds64(r.side[2], r.side[3], side + 8);
  }
  __device__ static void ldg_raw(Raw& r, const uint8_t* w, size_t soff, size_t unit, int lane) {
    ldg128_stream(r.q[0], r.q[1], r.q[2], r.q[3], w + unit * kUnit + lane * 16);
    ldg32_stream(r.qh, w + unit * kUnit + qw::kQ5KHighBytes + lane * 4);
    ldg128_stream(r.side[0], r.side[1], r.side[2], r.side[3], w + soff + unit * kScaleUnit + (lane >> 2) * 16);
  }
  // The GEMM / GEMV fragments, in f16x2 arithmetic (qw::dq_kq_affine).
  QSP_HD static void frags(const Raw& r, int s, uint32_t (&f)[4]) { qw::dq_kq_affine(r.q[s], r.qh, s, r.side, f); }

  // ---- The factored GEMV (kernels/gemv.cu) -----------------------------------------------
  // x = ds[p] * code + nm[p] (row 8p + g): exact codes in the fragment
  // positions, per-row fp32 scales of k step s (kernels/qweight_kfrags.cuh),
  // the same for the kScaleSteps steps of a sub-block.
  static constexpr bool kFactored = true, kAffine = true;
  static constexpr int kScaleSteps = 2;  // a 32-column sub-block: k steps 2h, 2h+1
  QSP_HD static void codes(const Raw& r, int s, uint32_t (&f)[4]) { qw::kq_codes(r.q[s], r.qh, s, f); }
  QSP_HD static void scales(const Raw& r, int s, float (&ds)[2], float (&nm)[2]) {
    qw::kq_scales(r.side, s, ds, nm);
  }

  // ---- wgmma GEMM -------------------------------------------------------------------------
  __device__ __forceinline__ static void wg_raw(uint32_t q_tile, uint32_t s_tile, int lane, Raw& r) {
    lds128(r.q[0], r.q[1], r.q[2], r.q[3], q_tile + lane * 16);
    lds32(r.qh, q_tile + qw::kQ5KHighBytes + lane * 4);
    lds128(r.side[0], r.side[1], r.side[2], r.side[3], s_tile + (lane >> 2) * 16);
  }

  // ---- Embedding --------------------------------------------------------------------------
  QSP_HD static void load8(const DWeight& w, int64_t row, int64_t col8, float (&out)[8]) {
    load8_by_values<WTraits<WFormat::kQ5_K>>(w, row, col8, out);
  }
};

}  // namespace kern
}  // namespace qsp
