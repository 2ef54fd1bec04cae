// Q2_K on the device: GGUF super-blocks of 256 weights (16 sub-blocks of 16
// with a 4-bit scale sc and 4-bit min m each, fp16 d and dmin, 2-bit q;
// x = d * sc * q - dmin * m) repacked into the tiled layout of
// kernels/qweight_layout.h. A unit's four k steps are four sub-blocks of one
// super-block (qweight_kfrags.cuh). Per 16 x 64 unit:
//   quants  256 bytes: lane l's two words at 8 l, bit qw::q2_bit(s, p, e)
//   side    128 bytes: [64: the GGUF scale byte (sc | m << 4) of each row
//           and sub-block, qw::ksc_byte][64: fp16 d_g, d_g+8, dmin_g,
//           dmin_g+8 at 64 + 8 g]
// 384 bytes for 1024 weights = 3.0 bits per weight against GGUF's 2.625
// (84-byte blocks): the sub-block scales cost what they do in GGUF (0.5
// bpw); d and dmin (4 bytes per row and super-block) are repeated in each of
// the super-block's four 64-column units (+0.375 bpw) so that every unit is
// self-contained for the loaders, which fetch whole units per chunk (split-K
// and the GEMV's round-robin give a warp any chunk). Scales are decoded in
// the kernel (qw::dq_q2_k). The traits contract is listed in
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
struct WTraits<WFormat::kQ2_K> {
  // ---- Host -------------------------------------------------------------------------------
  static bool serves(int32_t dtype) { return dtype == QSP_DTYPE_Q2_K; }
  static constexpr int kColsMultiple = 256;  // whole super-blocks
  static constexpr int kUnit = 256;       // 16 x 64 x 2 bits
  static constexpr int kScaleUnit = 128;  // 64 scale bytes + 16 rows x (d, dmin)
  static constexpr int kBlockBytes = 84;  // GGUF: scales[16], qs[64], fp16 d, fp16 dmin
  __host__ __device__ static size_t scales_offset(int64_t rows, int64_t cols) {
    return qw::unit_array_bytes(kUnit, rows, cols);
  }
  static size_t bytes(int64_t rows, int64_t cols) { return qw::unit_array_bytes(kUnit + kScaleUnit, rows, cols); }
  // Tiles [t0, t1) only (kern::repack_weight_tiles): their units to `units`,
  // their side data to `side`. cols % 256 == 0 (checked by the caller).
  static void repack_tiles(int32_t, const void* src_v, int64_t rows, int64_t cols, int64_t t0, int64_t t1,
                           uint8_t* units, uint8_t* side) {
    const uint8_t* src = static_cast<const uint8_t*>(src_v);
    const int64_t KC = qw::n_chunks(cols), nsb = cols / 256;
    uint8_t v[16];
    for (int64_t tile = t0; tile < t1; ++tile) {
      for (int64_t c = 0; c < KC; ++c) {
        const int64_t u = (tile - t0) * KC + c;
        uint32_t* q = reinterpret_cast<uint32_t*>(units + u * kUnit);  // [lane][2]
        uint8_t* sc = side + u * kScaleUnit;
        std::memset(q, 0, kUnit);
        std::memset(sc, 0, kScaleUnit);
        for (int rr = 0; rr < 16; ++rr) {
          const int64_t row = tile * 16 + rr;
          if (row >= rows) continue;  // padding: q = 0, sc = m = 0, d = dmin = 0
          const int g = rr & 7, p = rr >> 3;
          const uint8_t* blk = src + (row * nsb + c / 4) * kBlockBytes;
          uint16_t* dd = reinterpret_cast<uint16_t*>(sc + 64 + 8 * g);
          dd[p] = uint16_t(blk[80] | blk[81] << 8);
          dd[2 + p] = uint16_t(blk[82] | blk[83] << 8);
          for (int s = 0; s < 4; ++s) sc[qw::ksc_byte(g, p, s)] = blk[4 * (c % 4) + s];
          for (int s = 0; s < 4; ++s) {
            // Elements 64 (c % 4) + 16 s + x of the super-block: 32-group grp.
            const int grp = int(2 * (c % 4)) + (s >> 1);
            const uint8_t* b = blk + 16 + 32 * (grp / 4) + 16 * (s & 1);
            for (int x = 0; x < 16; ++x) v[x] = (b[x] >> (2 * (grp % 4))) & 3u;
            qw::put_q2(q, g, p, s, v);
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
    uint32_t sc[2];  // scale bytes of rows g / g+8, byte s = step s
    uint32_t dd[2];  // (d_g, d_g8), (dmin_g, dmin_g8)
  };
  __host__ __device__ static void raw_at(Raw& r, const uint8_t* unit, const uint8_t* sunit, int lane) {
    const uint32_t* q = reinterpret_cast<const uint32_t*>(unit + lane * 8);
    const uint32_t* s = reinterpret_cast<const uint32_t*>(sunit + (lane >> 2) * 8);
    const uint32_t* d = reinterpret_cast<const uint32_t*>(sunit + 64 + (lane >> 2) * 8);
    r.q[0] = q[0], r.q[1] = q[1], r.sc[0] = s[0], r.sc[1] = s[1], r.dd[0] = d[0], r.dd[1] = d[1];
  }
  // Stage smem: [tiles][kUnit] quants, then [tiles][kScaleUnit] side data.
  __device__ static void lds_raw(Raw& r, uint32_t sb, int tiles, int v, int lane, int hs) {
    if (hs != 0) return;  // the whole chunk at once: one LDS.64 of quants, two of side data
    lds64(r.q[0], r.q[1], sb + v * kUnit + lane * 8);
    const uint32_t s = sb + tiles * kUnit + v * kScaleUnit + (lane >> 2) * 8;
    lds64(r.sc[0], r.sc[1], s);
    lds64(r.dd[0], r.dd[1], s + 64);
  }
  __device__ static void ldg_raw(Raw& r, const uint8_t* w, size_t soff, size_t unit, int lane) {
    ldg64_stream(r.q[0], r.q[1], w + unit * kUnit + lane * 8);
    const uint8_t* s = w + soff + unit * kScaleUnit + (lane >> 2) * 8;
    ldg64_stream(r.sc[0], r.sc[1], s);
    ldg64_stream(r.dd[0], r.dd[1], s + 64);
  }
  __host__ __device__ static void frags(const Raw& r, int s, uint32_t (&f)[4]) { qw::dq_q2_k(r.q, r.sc, r.dd, s, f); }

  // ---- The factored GEMV (kernels/gemv.cu) -----------------------------------------------
  // x = ds[p] * code + nm[p] (row 8p + g): exact codes in the fragment
  // positions, per-row fp32 scales of k step s (kernels/qweight_kfrags.cuh),
  // the same for the kScaleSteps steps of a sub-block.
  static constexpr bool kFactored = true, kAffine = true;
  static constexpr int kScaleSteps = 1;  // a 16-column sub-block per k step
  QSP_HD static void codes(const Raw& r, int s, uint32_t (&f)[4]) { qw::q2_codes(r.q, s, f); }
  QSP_HD static void scales(const Raw& r, int s, float (&ds)[2], float (&nm)[2]) {
    qw::q2_scales(r.sc, r.dd, s, ds, nm);
  }

  // ---- wgmma GEMM -------------------------------------------------------------------------
  __device__ __forceinline__ static void wg_raw(uint32_t q_tile, uint32_t s_tile, int lane, Raw& r) {
    lds64(r.q[0], r.q[1], q_tile + lane * 8);
    lds64(r.sc[0], r.sc[1], s_tile + (lane >> 2) * 8);
    lds64(r.dd[0], r.dd[1], s_tile + 64 + (lane >> 2) * 8);
  }

  // ---- Embedding --------------------------------------------------------------------------
  // Dequantizes cols [col8, col8 + 8) of `row` in fp32 exactly as the CPU
  // reference: (d * sc) * q - dmin * m, rounded per operation.
  __host__ __device__ static void load8(const DWeight& w, int64_t row, int64_t col8, float (&out)[8]) {
    const uint8_t* base = static_cast<const uint8_t*>(w.data);
    const qw::Coord c = qw::coord_of(row, col8, w.cols);  // t == 0, e == 0 or 2
    const uint8_t* su = base + scales_offset(w.rows, w.cols) + size_t(c.unit) * kScaleUnit;
    const uint8_t b = su[qw::ksc_byte(c.g, c.p, c.s)];
    const uint16_t* dd = reinterpret_cast<const uint16_t*>(su + 64 + 8 * c.g);
    const float d = qw::hd::f16lo(dd[c.p]), dm = qw::hd::f16lo(dd[2 + c.p]);
    const float dl = d * float(b & 15), ml = dm * float(b >> 4);
    const uint8_t* ub = base + size_t(c.unit) * kUnit;
    QSP_HD_UNROLL
    for (int t = 0; t < 4; ++t) {
      const uint32_t word = *reinterpret_cast<const uint32_t*>(ub + (c.lane + t) * 8 + 4 * (c.s >> 1));
      QSP_HD_UNROLL
      for (int i = 0; i < 2; ++i) {
        const uint32_t q = (word >> qw::q2_bit(c.s, c.p, c.e + i)) & 3u;
        out[2 * t + i] = qw::hd::mul_sub_rn(dl, float(q), ml);
      }
    }
  }
};

}  // namespace kern
}  // namespace qsp
