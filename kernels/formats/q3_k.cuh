// Q3_K on the device: GGUF super-blocks of 256 weights (16 sub-blocks of 16
// with a 6-bit scale code each, scale = code - 32, packed in 12 bytes; fp16
// d; 3-bit q as 2 low bits + an hmask bit; x = d * (code - 32) * (q - 4))
// repacked into the tiled layout of kernels/qweight_layout.h. A unit's four
// k steps are four sub-blocks of one super-block (qweight_kfrags.cuh). Per 16 x 64
// unit:
//   quants  384 bytes: [256: lane l's two low-bit words at 8 l, bit
//           qw::q2_bit][128: its hmask word at 256 + 4 l, bit qw::q3h_bit]
//   side     96 bytes: [64: the 6-bit scale code of each row and sub-block,
//           one byte each, qw::ksc_byte][32: fp16 d_g, d_g+8 at 64 + 4 g]
// 480 bytes for 1024 weights = 3.75 bits per weight against GGUF's 3.4375
// (110-byte blocks): the codes take a byte instead of 6 bits (+0.125 bpw)
// and d (2 bytes per row and super-block) is repeated in each of the
// super-block's four 64-column units (+0.1875 bpw), so that every unit is
// self-contained for the loaders. The high bit, the codes and d are decoded
// in the kernel (qw::dq_q3_k). The traits contract is listed in
// kernels/qweight.cuh.
#pragma once

#include <cstring>

#include "common/quant.h"
#include "kernels/ptx.cuh"
#include "kernels/qweight.cuh"
#include "kernels/qweight_kfrags.cuh"

namespace qsp {
namespace kern {

template <>
struct WTraits<WFormat::kQ3_K> {
  // ---- Host -------------------------------------------------------------------------------
  static bool serves(int32_t dtype) { return dtype == QSP_DTYPE_Q3_K; }
  static constexpr int kColsMultiple = 256;  // whole super-blocks
  static constexpr int kUnit = 384;       // 16 x 64 x (2 + 1) bits
  static constexpr int kScaleUnit = 96;   // 64 scale codes + 16 rows x d
  static constexpr int kBlockBytes = 110; // GGUF: hmask[32], qs[64], scales[12], fp16 d
  __host__ __device__ static size_t scales_offset(int64_t rows, int64_t cols) {
    return qw::unit_array_bytes(kUnit, rows, cols);
  }
  static size_t bytes(int64_t rows, int64_t cols) { return qw::unit_array_bytes(kUnit + kScaleUnit, rows, cols); }
  // GGML's 6-bit scale code of sub-block s (src/formats/q3_K.cpp).
  static int scale_code(const uint8_t* scales, int s) {
    const int low = s < 8 ? scales[s] & 0xF : scales[s - 8] >> 4;
    return low | ((scales[8 + s % 4] >> (2 * (s / 4))) & 3) << 4;
  }
  // Tiles [t0, t1) only (kern::repack_weight_tiles): their units to `units`,
  // their side data to `side`. cols % 256 == 0 (checked by the caller).
  static void repack_tiles(int32_t, const void* src_v, int64_t rows, int64_t cols, int64_t t0, int64_t t1,
                           uint8_t* units, uint8_t* side) {
    const uint8_t* src = static_cast<const uint8_t*>(src_v);
    const int64_t KC = qw::n_chunks(cols), nsb = cols / 256;
    uint8_t lo[16], hi[16];
    for (int64_t tile = t0; tile < t1; ++tile) {
      for (int64_t c = 0; c < KC; ++c) {
        const int64_t u = (tile - t0) * KC + c;
        uint32_t* q = reinterpret_cast<uint32_t*>(units + u * kUnit);         // [lane][2]
        uint32_t* hm = reinterpret_cast<uint32_t*>(units + u * kUnit + 256);  // [lane]
        uint8_t* sc = side + u * kScaleUnit;
        std::memset(q, 0, kUnit);
        std::memset(sc, 32, 64);  // padding: code 32 = scale 0
        std::memset(sc + 64, 0, kScaleUnit - 64);
        for (int rr = 0; rr < 16; ++rr) {
          const int64_t row = tile * 16 + rr;
          if (row >= rows) continue;  // padding: d = 0
          const int g = rr & 7, p = rr >> 3;
          const uint8_t* blk = src + (row * nsb + c / 4) * kBlockBytes;
          reinterpret_cast<uint16_t*>(sc + 64 + 4 * g)[p] = uint16_t(blk[108] | blk[109] << 8);
          for (int s = 0; s < 4; ++s) sc[qw::ksc_byte(g, p, s)] = uint8_t(scale_code(blk + 96, int(4 * (c % 4)) + s));
          for (int s = 0; s < 4; ++s) {
            // Elements 64 (c % 4) + 16 s + x of the super-block: 32-group grp.
            const int grp = int(2 * (c % 4)) + (s >> 1);
            const uint8_t* b = blk + 32 + 32 * (grp / 4) + 16 * (s & 1);
            const uint8_t* m = blk + 16 * (s & 1);
            for (int x = 0; x < 16; ++x) {
              lo[x] = (b[x] >> (2 * (grp % 4))) & 3u;
              hi[x] = (m[x] >> grp) & 1u;
            }
            qw::put_q2(q, g, p, s, lo);
            qw::put_bit(hm, g, p, s, hi);
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
  // 6 words, but the fp32 decode needs temporaries: 8 keeps the GEMV at 3
  // chunks in flight for M <= 8 without spills (4 spilled 28-60 bytes in
  // the 85-register budget of 3 blocks per SM, ptxas sm_90).
  static constexpr int kGemvRawRegs = 8;
  struct Raw {
    uint32_t q[2];   // low bits: steps 0, 1 / 2, 3
    uint32_t h;      // high bits of all four steps
    uint32_t sc[2];  // scale codes of rows g / g+8, byte s = step s
    uint32_t d;      // (d_g, d_g8)
  };
  __host__ __device__ static void raw_at(Raw& r, const uint8_t* unit, const uint8_t* sunit, int lane) {
    const uint32_t* q = reinterpret_cast<const uint32_t*>(unit + lane * 8);
    const uint32_t* s = reinterpret_cast<const uint32_t*>(sunit + (lane >> 2) * 8);
    r.q[0] = q[0], r.q[1] = q[1];
    r.h = *reinterpret_cast<const uint32_t*>(unit + 256 + lane * 4);
    r.sc[0] = s[0], r.sc[1] = s[1];
    r.d = *reinterpret_cast<const uint32_t*>(sunit + 64 + (lane >> 2) * 4);
  }
  // Stage smem: [tiles][kUnit] quants, then [tiles][kScaleUnit] side data.
  __device__ static void lds_raw(Raw& r, uint32_t sb, int tiles, int v, int lane, int hs) {
    if (hs != 0) return;  // the whole chunk at once
    lds64(r.q[0], r.q[1], sb + v * kUnit + lane * 8);
    lds32(r.h, sb + v * kUnit + 256 + lane * 4);
    const uint32_t s = sb + tiles * kUnit + v * kScaleUnit;
    lds64(r.sc[0], r.sc[1], s + (lane >> 2) * 8);
    lds32(r.d, s + 64 + (lane >> 2) * 4);
  }
  __device__ static void ldg_raw(Raw& r, const uint8_t* w, size_t soff, size_t unit, int lane) {
    ldg64_stream(r.q[0], r.q[1], w + unit * kUnit + lane * 8);
    ldg32_stream(r.h, w + unit * kUnit + 256 + lane * 4);
    const uint8_t* s = w + soff + unit * kScaleUnit;
    ldg64_stream(r.sc[0], r.sc[1], s + (lane >> 2) * 8);
    ldg32_stream(r.d, s + 64 + (lane >> 2) * 4);
  }
  __host__ __device__ static void frags(const Raw& r, int s, uint32_t (&f)[4]) {
    qw::dq_q3_k(r.q, r.h, r.sc, r.d, s, f);
  }

  // ---- The factored GEMV (kernels/gemv.cu) -----------------------------------------------
  // x = ds[p] * code + nm[p] (row 8p + g): exact codes in the fragment
  // positions, per-row fp32 scales of k step s (kernels/qweight_kfrags.cuh),
  // the same for the kScaleSteps steps of a sub-block.
  static constexpr bool kFactored = true, kAffine = false;
  static constexpr int kScaleSteps = 1;  // a 16-column sub-block per k step
  QSP_HD static void codes(const Raw& r, int s, uint32_t (&f)[4]) { qw::q3_codes(r.q, r.h, s, f); }
  QSP_HD static void scales(const Raw& r, int s, float (&ds)[2], float (&nm)[2]) {
    qw::q3_scales(r.sc, r.d, s, ds);
    nm[0] = nm[1] = 0.0f;
  }

  // ---- wgmma GEMM -------------------------------------------------------------------------
  __device__ __forceinline__ static void wg_raw(uint32_t q_tile, uint32_t s_tile, int lane, Raw& r) {
    lds64(r.q[0], r.q[1], q_tile + lane * 8);
    lds32(r.h, q_tile + 256 + lane * 4);
    lds64(r.sc[0], r.sc[1], s_tile + (lane >> 2) * 8);
    lds32(r.d, s_tile + 64 + (lane >> 2) * 4);
  }

  // ---- Embedding --------------------------------------------------------------------------
  // Dequantizes cols [col8, col8 + 8) of `row` in fp32 exactly as the CPU
  // reference: (d * (code - 32)) * (q - 4).
  __host__ __device__ static void load8(const DWeight& w, int64_t row, int64_t col8, float (&out)[8]) {
    const uint8_t* base = static_cast<const uint8_t*>(w.data);
    const qw::Coord c = qw::coord_of(row, col8, w.cols);  // t == 0, e == 0 or 2
    const uint8_t* su = base + scales_offset(w.rows, w.cols) + size_t(c.unit) * kScaleUnit;
    const int code = su[qw::ksc_byte(c.g, c.p, c.s)];
    const float d = qw::hd::f16lo(reinterpret_cast<const uint16_t*>(su + 64 + 4 * c.g)[c.p]);
    const float dl = d * float(code - 32);
    const uint8_t* ub = base + size_t(c.unit) * kUnit;
    QSP_HD_UNROLL
    for (int t = 0; t < 4; ++t) {
      const int lane = c.lane + t;
      const uint32_t word = *reinterpret_cast<const uint32_t*>(ub + lane * 8 + 4 * (c.s >> 1));
      const uint32_t hw = *reinterpret_cast<const uint32_t*>(ub + 256 + lane * 4);
      QSP_HD_UNROLL
      for (int i = 0; i < 2; ++i) {
        const int e = c.e + i;
        const int q = int(((word >> qw::q2_bit(c.s, c.p, e)) & 3u) | ((hw >> qw::q3h_bit(c.s, c.p, e)) & 1u) << 2);
        out[2 * t + i] = dl * float(q - 4);
      }
    }
  }
};

}  // namespace kern
}  // namespace qsp
