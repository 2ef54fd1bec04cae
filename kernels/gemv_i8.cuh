// The integer GEMV for one token (M = 1, the decode step): the weights'
// exact codes against 16-bit fixed-point activations on the int8 tensor
// cores (mma.m16n8k32, u8 codes x s8 activations, s32 sums). Everything here
// is QSP_HD: gemv_i8_kernel (kernels/gemv.cu) runs it on the device and
// tests/kernel_formats/test_gemv_i8.cu runs the very same functions for the
// 32 lanes of a warp on the CPU, with the mma emulated from its PTX fragment
// layout, against the plain dot product.
//
// ---- Why ---------------------------------------------------------------------------
// The fp16 GEMV (kernels/gemv.cu) spends ~128 warp-instructions per 16 x 64
// Q4_0 unit (576 bytes): the decode of each code to fp16, and an
// m16n8k16 mma whose 8 token columns hold one token (7/8 of it wasted). At
// 4.5 bytes per warp-instruction it is bound by instructions on an H100 and
// more so on an H200 (bench/RESULTS.md, fifteenth session); the K-quants
// with 2-3 bit codes, whose decode costs the same per code for fewer bytes,
// were 1.75-2.3x Q4_0's time per weight byte. Here:
//  - codes go to the tensor cores as they sit in the layout: one mask (and a
//    shift) turns 4 nibbles or 2-bit fields of a lane word into 4 u8 codes
//    of an A register; no conversion, no scale multiply per code;
//  - the activations are 16-bit integers x = 256 hi + lo (hi, lo signed
//    bytes) per 256-column group with an fp32 scale: as accurate as their
//    fp16 inputs (amax / 2^15 absolute against fp16's 2^-11 relative), and
//    integer sums are exact;
//  - the mma's 8 token columns carry what one token needs in several sums
//    at once: n = (limb, the k step or row half a code belongs to), each
//    lane's B register holding its activations only in the k slots of
//    "its" codes and zeros elsewhere. So the codes of different sub-block
//    scales or of two rows can share an A register, and every extraction is
//    one shift and one mask; D then holds, per lane, integer sums per (row,
//    step, limb) to which the scales apply in integer (K-quants: IMAD with the
//    sub-block scale, the mins with the sub-block activation sums) and fp32
//    once per 256 columns.
//
// ---- Activations (a warp stages the 256-column groups it consumes) --------------------
// Group j (chunks 4j .. 4j+3, zero past K): amax over its columns, sx = amax
// / kXMax, x_int = round(x / sx) in [-kXMax, kXMax]. Quantized with one fma:
// x / sx + 1.5 * 2^23 + 128 puts y = x_int + 128 in the float's low mantissa
// bits, so byte 1 of its bits is hi = floor(y / 256) (-127 .. 127) and byte 0
// xor 0x80 is lo = (y & 255) - 128, x_int = 256 hi + lo. Per chunk the warp's
// shared memory holds 128 bytes of words and the 4 step sums:
//   word(t, limb, s) at 4 (8 t + 4 limb + 2 (s & 1) + (s >> 1)): bytes e =
//     0..3 = limb (0: hi, 1: lo) of columns chunk_col(s, t, e), the columns
//     lane quad t holds in the weight layout (kernels/qweight_layout.h);
//   S[s] = the sum of x_int over the 16 columns of step s, at word
//     I8<F>::sum_pos(s) of the 4 after the chunks' words: each lane reads
//     the pair at 2 (t >> 1) as one 8-byte load and takes what it needs
//     (I8<F>::lane_sums).
//
// ---- B registers ----------------------------------------------------------------------
// Lane (g, t) provides token column n = g: limb g & 1, and a k step and
// parity chosen by the format. Its two B registers (k slots 4t .. 4t+3,
// 16 + 4t ..) are one staged word spread over the even or the odd bytes
// (prmt with zeros): bytes 0, 2 (even) or 1, 3 (odd) carry e = 0, 1 (b0) and
// e = 2, 3 (b1); the other bytes are 0, so the codes there do not count in
// this column. D (c0, c1: row g, n = 2t, 2t + 1; c2, c3: row g + 8) then
// holds per lane both limbs (hi in c0 / c2, lo in c1 / c3) of what column
// pair t carries, as the format says: 256 hi + lo is one IMAD, and each
// (row, k step)'s scale, min or offset applies in the one lane that has it.
// (Until 2026-12-05 column n = g carried limb (g >> 1) & 1: the limbs sat in
// two lanes, and every scale applied twice.)
#pragma once

#include <cstdint>
#include <cstring>

#include "kernels/formats/formats.cuh"
#include "kernels/qweight_kfrags.cuh"

namespace qsp {
namespace kern {
namespace i8 {

constexpr float kXMax = 32639.0f;           // |x_int| <= kXMax keeps hi within a signed byte
constexpr float kMagic = 12583040.0f;       // 1.5 * 2^23 + 128
constexpr uint32_t kMagicBits = 0x4b400080u;  // its bits: x_int = bits - kMagicBits
constexpr int kGroupCols = 256;             // columns per activation scale (4 chunks)
constexpr int kChunkWords = 32;             // staged words per chunk
// One group's staged words: 4 chunks of words, then their step sums S[4].
constexpr int kSumWord = 4 * kChunkWords, kGroupWords = kSumWord + 16;
// A group as the stage kernel writes it (GemmArgs::i8_stage): its words,
// then sx, padded to 16 bytes.
constexpr int kStagedWords = kGroupWords + 4;

QSP_HD inline uint32_t f2u(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
#endif
}

// d = bytes of (a, b) picked by the four selector nibbles (0-3: a, 4-7: b).
QSP_HD inline uint32_t perm(uint32_t a, uint32_t b, uint32_t sel) {
#if defined(__CUDA_ARCH__)
  return qw::prmt(a, b, sel);
#else
  const uint64_t ab = uint64_t(a) | uint64_t(b) << 32;
  uint32_t d = 0;
  for (int i = 0; i < 4; ++i) d |= uint32_t((ab >> (8 * ((sel >> (4 * i)) & 7))) & 0xffu) << (8 * i);
  return d;
#endif
}

// The quantized bits of x (inv = kXMax / amax; 0 for an all-zero group).
QSP_HD inline uint32_t qbits(float x, float inv) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(__fmaf_rn(x, inv, kMagic));
#else
  return f2u(std::fmaf(x, inv, kMagic));
#endif
}
QSP_HD inline int32_t x_int(uint32_t bits) { return int32_t(bits - kMagicBits); }

// Words of elements e = 0..3 from their quantized bits: hi (byte 1 of each)
// and lo (byte 0, xor 0x80). sum: x_int of the four (mod 2^32 arithmetic,
// exact: the result is small).
QSP_HD inline void words(const uint32_t (&b)[4], uint32_t& hi, uint32_t& lo, int32_t& sum) {
  hi = perm(perm(b[0], b[1], 0x5151u), perm(b[2], b[3], 0x5151u), 0x5410u);
  lo = perm(perm(b[0], b[1], 0x4040u), perm(b[2], b[3], 0x4040u), 0x5410u) ^ 0x80808080u;
  sum = int32_t(b[0] + b[1] + b[2] + b[3] - 4u * kMagicBits);
}

// Word index of (t, limb, s) inside a chunk's 32.
QSP_HD constexpr int word_of(int t, int limb, int s) { return 8 * t + 4 * limb + 2 * (s & 1) + (s >> 1); }

// prmt selectors spreading a word over the even (parity 0) or odd bytes of
// b0 (e = 0, 1) and b1 (e = 2, 3); kOff: zeros (the lane's column is not in
// this mma).
constexpr uint32_t kSelEven0 = 0x4140u, kSelEven1 = 0x4342u;
constexpr uint32_t kSelOdd0 = 0x1404u, kSelOdd1 = 0x3424u;
constexpr uint32_t kOff = 0x4444u;
QSP_HD inline void sels(bool on, int parity, uint32_t (&s)[2]) {
  s[0] = !on ? kOff : parity ? kSelOdd0 : kSelEven0;
  s[1] = !on ? kOff : parity ? kSelOdd1 : kSelEven1;
}

// u8 bytes of a word's 2-bit fields at bit `sh` of each byte, or nibbles.
QSP_HD inline uint32_t f2(uint32_t w, int sh) { return (w >> sh) & 0x03030303u; }
QSP_HD inline uint32_t nib(uint32_t w, int sh) { return (w >> sh) & 0x0f0f0f0fu; }

// fp16 halves as fp32.
QSP_HD inline float hlo(uint32_t w) { return qw::hd::f16lo(w); }
QSP_HD inline float hhi(uint32_t w) { return qw::hd::f16hi(w); }

// ---- Formats --------------------------------------------------------------------------
// I8<F> (absent: the format keeps the fp16 GEMV):
//   kMmas, kChains     mmas per chunk and independent accumulators (chain_of(m))
//   kWords             staged words a lane reads per chunk (1, 2 or 4, adjacent):
//                      word_base(g, t) is the first (in 32-bit words)
//   kSignedA           the A registers hold s8 codes (mma s8 x s8), else u8
//   Lane               per-lane constants (lane(g, t))
//   sum_pos(s)         where step s's activation sum is staged (see above)
//   lane_sums(w0, w1, t, Sl)  the lane's sums Sl from the pair of staged sums
//                      it reads at 2 (t >> 1)
//   prep(raw, xw, Sl, L, A, B, C)  the mmas' fragments and first accumulators
//                      (Sl: the lane's two step sums, zero on hi lanes)
//   Acc / combine(raw, D, Sl, L, acc) / flush(raw, L, sx, acc, out)
//                      D: per chain; flush once per 256-column group adds
//                      the group's part to out[p] (row g + 8p; summed over
//                      the quad's lanes afterwards)
template <WFormat F>
struct I8;

template <WFormat F, class = void>
struct HasI8 : std::false_type {};
template <WFormat F>
struct HasI8<F, std::void_t<decltype(I8<F>::kMmas)>> : std::true_type {};

// A register's high bits moved under its codes: byte j's bit (or 2-bit
// field) sits at src(j) = b + d (j & 1) + 16 (j >> 1) in w, wanted at 8 j +
// dst: even bytes shift by dst - b, odd ones by 8 + dst - b - d; `mask`
// keeps the moved field in every byte.
QSP_HD inline uint32_t shl(uint32_t w, int d) { return d >= 0 ? w << d : w >> -d; }
QSP_HD inline uint32_t move_hi(uint32_t w, int b, int d, int dst, uint32_t mask) {
  return (shl(w, dst - b) & (mask & 0x00ff00ffu)) | (shl(w, 8 + dst - b - d) & (mask & 0xff00ff00u));
}

// Q4_0 and Q4_K: a lane word per k step, nibble of (p, e) at q4_shift(p, e).
// mma h (the 32-column block / sub-block h of the chunk): A rows g = step
// 2h's word, g + 8 = step 2h + 1's (a0 / a1 their nibbles at 0, 8, 16, 24:
// (p, e) = (0,0) (1,0) (0,1) (1,1); a2 / a3 at 4, ...: e = 2, 3). Column n =
// g: step 2h + (g >> 2), row half p = (g >> 1) & 1 (the parity), limb g & 1.
// Useful D: lanes t < 2 c0 / c1 (A rows g, i.e. step 2h), t >= 2 c2 / c3
// (step 2h + 1), hi and lo of row g + 8 p with p = t & 1: each lane has one
// (row, step) of each mma, the lane's step 2h + (t >> 1).
struct Q4Like {
  static constexpr int kMmas = 2, kChains = 2, kWords = 2;
  static constexpr bool kSignedA = false;
  QSP_HD static int chain_of(int m) { return m; }
  struct Lane {
    uint32_t sel[2];
    int t, p;
  };
  QSP_HD static Lane lane(int g, int t) {
    Lane L;
    sels(true, (g >> 1) & 1, L.sel);
    L.t = t;
    L.p = t & 1;
    return L;
  }
  QSP_HD static int word_base(int g, int t) { return word_of(t, g & 1, g >> 2); }
  // The lane's sums: steps t >> 1 (h = 0) and 2 + (t >> 1) (h = 1).
  QSP_HD static constexpr int sum_pos(int s) { return 2 * (s & 1) + (s >> 1); }
  QSP_HD static void lane_sums(uint32_t w0, uint32_t w1, int, int32_t (&Sl)[2]) {
    Sl[0] = int32_t(w0);
    Sl[1] = int32_t(w1);
  }
  QSP_HD static void frags(const uint32_t (&q)[4], const uint32_t (&xw)[2], const Lane& L, uint32_t (&A)[2][4],
                           uint32_t (&B)[2][2]) {
QSP_HD_UNROLL
    for (int h = 0; h < 2; ++h) {
      A[h][0] = nib(q[2 * h], 0);
      A[h][1] = nib(q[2 * h + 1], 0);
      A[h][2] = nib(q[2 * h], 4);
      A[h][3] = nib(q[2 * h + 1], 4);
      B[h][0] = perm(xw[h], 0u, L.sel[0]);
      B[h][1] = perm(xw[h], 0u, L.sel[1]);
    }
  }
  // frags() with each A register's high bits OR-ed in, hi(step, e pair)
  // (Q5_K, Q6_K; Q4_K none), and zero first accumulators.
  template <class Hi>
  QSP_HD static void frags_hi(const uint32_t (&q)[4], const uint32_t (&xw)[2], const Lane& L, Hi hi,
                              uint32_t (&A)[2][4], uint32_t (&B)[2][2], int32_t (&C)[2][4]) {
    frags(q, xw, L, A, B);
QSP_HD_UNROLL
    for (int h = 0; h < 2; ++h) {
QSP_HD_UNROLL
      for (int i = 0; i < 4; ++i) A[h][i] |= hi(2 * h + (i & 1), i >> 1);  // a0..a3: steps 2h, 2h + 1, e 0-1, 2-3
      C[h][0] = C[h][1] = C[h][2] = C[h][3] = 0;
    }
  }
  // The lane's useful sums of mma h: hi, lo.
  QSP_HD static void useful(const int32_t (&D)[4], int t, int32_t (&u)[2]) {
    u[0] = t < 2 ? D[0] : D[2];
    u[1] = t < 2 ? D[1] : D[3];
  }
  // The lane's row's half of a word holding row g's half and row g + 8's.
  QSP_HD static uint32_t row_half(uint32_t w, const Lane& L) { return L.p ? w >> 16 : w & 0xffffu; }
  // v into the lane's row of out (rows g, g + 8).
  QSP_HD static void add_row(float v, const Lane& L, float (&out)[2]) {
    out[0] += L.p ? 0.0f : v;
    out[1] += L.p ? v : 0.0f;
  }
};

// Q4_0, Q5_0, Q4_1, Q5_1 (32-column blocks h with fp16 d, and m for the
// affine ones): x = d (q - 8) / d (q - 16) (kHigh: Q5_x's fifth bit, word
// h at qh_bit as Q5_K's, moved under the nibbles) or d q + m (kAffine). The
// lo limb starts at -8 S (-16 S) of the lane's step, so 256 hi + lo is the
// sum of the centred codes times x_int (|.| < 2^24: exact in fp32); the
// affine formats add m times the lane's step's S instead.
template <WFormat F, bool kHigh, bool kAffine>
struct LegacyI8 : Q4Like {
  using Raw = typename WTraits<F>::Raw;
  struct Acc {
    float f;
  };
  QSP_HD static void prep(const Raw& r, const uint32_t (&xw)[2], const int32_t (&Sl)[2], const Lane& L,
                          uint32_t (&A)[2][4], uint32_t (&B)[2][2], int32_t (&C)[2][4]) {
    if constexpr (kHigh) {
      const uint32_t qh = r.h;
      frags_hi(r.q, xw, L, [qh](int st, int ep) { return move_hi(qh, 4 * st + ep, 2, 4, 0x10101010u); }, A, B, C);
    } else {
      frags(r.q, xw, L, A, B);
    }
    constexpr int32_t kMid = kAffine ? 0 : kHigh ? 16 : 8;
QSP_HD_UNROLL
    for (int h = 0; h < 2; ++h) {
      C[h][0] = C[h][2] = 0;
      C[h][1] = C[h][3] = -kMid * Sl[h];
    }
  }
  QSP_HD static void combine(const Raw& r, const int32_t (&D)[2][4], const int32_t (&Sl)[2], const Lane& L,
                             Acc& acc) {
QSP_HD_UNROLL
    for (int h = 0; h < 2; ++h) {
      int32_t u[2];
      useful(D[h], L.t, u);
      acc.f += float(256 * u[0] + u[1]) * hlo(row_half(r.s[h], L));
      if constexpr (kAffine) acc.f += float(Sl[h]) * hlo(row_half(r.m[h], L));
    }
  }
  QSP_HD static void flush(const Raw&, const Lane& L, float sx, Acc& acc, float (&out)[2]) {
    add_row(acc.f * sx, L, out);
    acc.f = 0.0f;
  }
};
template <>
struct I8<WFormat::kQ4_0> : LegacyI8<WFormat::kQ4_0, false, false> {};
template <>
struct I8<WFormat::kQ5_0> : LegacyI8<WFormat::kQ5_0, true, false> {};
template <>
struct I8<WFormat::kQ4_1> : LegacyI8<WFormat::kQ4_1, false, true> {};
template <>
struct I8<WFormat::kQ5_1> : LegacyI8<WFormat::kQ5_1, true, true> {};

// Q4_K and Q5_K: x = d sc q - dmin m per 32-column sub-block h (steps 2h,
// 2h + 1, the chunk's mma h).
template <WFormat F>
struct KQ4Like : Q4Like {
  using Raw = typename WTraits<F>::Raw;
  struct Acc {
    int32_t hi, lo, mn;  // |.| < 2^29 over a group
  };
  // x = d sc q - dmin m: sc (q x) summed in integer per limb, m times the
  // lane's step's S (the sub-block's two steps are in two lanes). side[h]
  // bytes: sc, m of row g, then of row g + 8; side[2 + p]: d, dmin of row
  // g + 8 p.
  QSP_HD static void combine(const Raw& r, const int32_t (&D)[2][4], const int32_t (&Sl)[2], const Lane& L,
                             Acc& acc) {
QSP_HD_UNROLL
    for (int h = 0; h < 2; ++h) {
      int32_t u[2];
      useful(D[h], L.t, u);
      const uint32_t sm = row_half(r.side[h], L);
      const int32_t sc = int32_t(sm & 0xffu);
      acc.hi += sc * u[0];
      acc.lo += sc * u[1];
      acc.mn += int32_t(sm >> 8) * Sl[h];
    }
  }
  QSP_HD static void flush(const Raw& r, const Lane& L, float sx, Acc& acc, float (&out)[2]) {
    const uint32_t dd = L.p ? r.side[3] : r.side[2];
    add_row(((256.0f * float(acc.hi) + float(acc.lo)) * hlo(dd) - float(acc.mn) * hhi(dd)) * sx, L, out);
    acc.hi = acc.lo = acc.mn = 0;
  }
};

template <>
struct I8<WFormat::kQ4_K> : KQ4Like<WFormat::kQ4_K> {
  QSP_HD static void prep(const Raw& r, const uint32_t (&xw)[2], const int32_t (&)[2], const Lane& L,
                          uint32_t (&A)[2][4], uint32_t (&B)[2][2], int32_t (&C)[2][4]) {
    frags_hi(r.q, xw, L, [](int, int) { return 0u; }, A, B, C);
  }
};

// Q5_K: Q4_K's nibbles plus one high bit each (word qh, bit qh_bit(s, p, e)
// = 4 s + 2 p + (e >> 1) + 16 (e & 1)) moved to bit 4 of its byte: q =
// 0 .. 31 in the same mmas.
template <>
struct I8<WFormat::kQ5_K> : KQ4Like<WFormat::kQ5_K> {
  QSP_HD static void prep(const Raw& r, const uint32_t (&xw)[2], const int32_t (&)[2], const Lane& L,
                          uint32_t (&A)[2][4], uint32_t (&B)[2][2], int32_t (&C)[2][4]) {
    const uint32_t qh = r.qh;
    frags_hi(r.q, xw, L, [qh](int st, int ep) { return move_hi(qh, 4 * st + ep, 2, 4, 0x10101010u); }, A, B, C);
  }
};

// Q6_K: x = d sc (q - 32) per 16-column step, q = nibble | high << 4 (the
// 2-bit field at q2_bit of word qh[s >> 1]), sc int8. The -32 x per column
// is applied in fp32 at the flush (in integer, 32 S sc could overflow 32
// bits): mn sums sc S of the lane's steps.
template <>
struct I8<WFormat::kQ6_K> : Q4Like {
  using Raw = WTraits<WFormat::kQ6_K>::Raw;
  struct Acc {
    int32_t hi, lo, mn;  // |.| < 2^30 over a group
  };
  QSP_HD static void prep(const Raw& r, const uint32_t (&xw)[2], const int32_t (&)[2], const Lane& L,
                          uint32_t (&A)[2][4], uint32_t (&B)[2][2], int32_t (&C)[2][4]) {
    const uint32_t h0 = r.qh[0], h1 = r.qh[1];
    frags_hi(
        r.q, xw, L,
        [h0, h1](int st, int ep) { return move_hi(st < 2 ? h0 : h1, 8 * (st & 1) + 2 * ep, 4, 4, 0x30303030u); }, A,
        B, C);
  }
  QSP_HD static void combine(const Raw& r, const int32_t (&D)[2][4], const int32_t (&Sl)[2], const Lane& L,
                             Acc& acc) {
    const uint32_t scs = L.p ? r.sc[1] : r.sc[0];  // the lane's row's 4 step scales
QSP_HD_UNROLL
    for (int h = 0; h < 2; ++h) {
      int32_t u[2];
      useful(D[h], L.t, u);
      const int sh = 24 - 8 * (2 * h + (L.t >> 1));  // the lane's step's byte to the top
      const int32_t sc = int32_t(scs << sh) >> 24;
      acc.hi += sc * u[0];
      acc.lo += sc * u[1];
      acc.mn += sc * Sl[h];
    }
  }
  QSP_HD static void flush(const Raw& r, const Lane& L, float sx, Acc& acc, float (&out)[2]) {
    const float d = L.p ? hhi(r.d) : hlo(r.d);
    add_row((256.0f * float(acc.hi) + float(acc.lo) - 32.0f * float(acc.mn)) * (sx * d), L, out);
    acc.hi = acc.lo = acc.mn = 0;
  }
};

// Q2_K and Q3_K: two lane words of 2-bit fields, word w = steps 2w, 2w + 1,
// field of (s, p, e) at q2_bit. Low mma w: a0 = fields at bits 0, 8, 16, 24
// ((s, e) = (2w, 0) (2w+1, 0) (2w, 1) (2w+1, 1), row g), a2 at 2 + those (e =
// 2, 3), a1 / a3 at 4 / 6 (row g + 8). Column n = g: step g >> 1 (in low mma
// g >> 2 only, parity (g >> 1) & 1), limb g & 1. Every mma of the chunk adds
// to one accumulator, so lane t holds both limbs of one step, t: D = (row g,
// hi), (row g, lo), (row g + 8, hi), (row g + 8, lo). 256 hi + lo is then one
// IMAD and each (row, step)'s scale and min apply once, in the one lane that
// has it (with the limbs in two lanes, 2026-12-05, every scale applied twice:
// ~26 instructions a chunk where this takes ~12).
struct Q23 {
  static constexpr int kWords = 1;
  static constexpr bool kSignedA = false;
  struct Lane {
    uint32_t sel[2][2];   // low mma w
    uint32_t hsel[2][2];  // Q3_K: high mma P
    int t;
  };
  QSP_HD static Lane lane(int g, int t) {
    Lane L;
    for (int w = 0; w < 2; ++w) sels((g >> 2) == w, (g >> 1) & 1, L.sel[w]);
    // Q3_K's high bits of steps P, P + 2 (P = 0, 1): column n's step g >> 1
    // is in high mma (g >> 1) & 1, at parity g >> 2 (step P even, P + 2 odd).
    for (int P = 0; P < 2; ++P) sels(((g >> 1) & 1) == P, g >> 2, L.hsel[P]);
    L.t = t;
    return L;
  }
  QSP_HD static int word_base(int g, int t) { return word_of(t, g & 1, g >> 1); }
  // The lane's sum: step t (Sl[0], on every lane: each step's min or
  // offset is applied by one lane only).
  QSP_HD static constexpr int sum_pos(int s) { return s; }
  QSP_HD static void lane_sums(uint32_t w0, uint32_t w1, int t, int32_t (&Sl)[2]) {
    Sl[0] = int32_t((t & 1) ? w1 : w0);
    Sl[1] = 0;
  }
  // The lane's step of row g + 8p: 256 hi + lo.
  QSP_HD static int32_t limbs(const int32_t (&D)[1][4], int p) { return 256 * D[0][2 * p] + D[0][2 * p + 1]; }
  QSP_HD static void low_frags(const uint32_t (&q)[2], uint32_t xw, const Lane& L, uint32_t (&A)[4][4],
                               uint32_t (&B)[4][2]) {
QSP_HD_UNROLL
    for (int w = 0; w < 2; ++w) {
      A[w][0] = f2(q[w], 0);
      A[w][1] = f2(q[w], 4);
      A[w][2] = f2(q[w], 2);
      A[w][3] = f2(q[w], 6);
      B[w][0] = perm(xw, 0u, L.sel[w][0]);
      B[w][1] = perm(xw, 0u, L.sel[w][1]);
    }
  }
};

template <>
struct I8<WFormat::kQ2_K> : Q23 {
  static constexpr int kMmas = 2, kChains = 1;
  QSP_HD static int chain_of(int) { return 0; }
  using Raw = WTraits<WFormat::kQ2_K>::Raw;
  struct Acc {
    int32_t sc[2], mn[2];
  };
  QSP_HD static void prep(const Raw& r, const uint32_t (&xw)[1], const int32_t (&)[2], const Lane& L,
                          uint32_t (&A)[2][4], uint32_t (&B)[2][2], int32_t (&C)[1][4]) {
    uint32_t a[4][4], b[4][2];
    low_frags(r.q, xw[0], L, a, b);
QSP_HD_UNROLL
    for (int m = 0; m < 2; ++m) {
QSP_HD_UNROLL
      for (int i = 0; i < 4; ++i) A[m][i] = a[m][i];
      B[m][0] = b[m][0], B[m][1] = b[m][1];
    }
    C[0][0] = C[0][1] = C[0][2] = C[0][3] = 0;
  }
  // x = d sc q - dmin m per 16-column step; sc[p] byte s = sc | m << 4
  // (|sums| < 2^27 over a group's 4 chunks).
  QSP_HD static void combine(const Raw& r, const int32_t (&D)[1][4], const int32_t (&Sl)[2], const Lane& L,
                             Acc& acc) {
QSP_HD_UNROLL
    for (int p = 0; p < 2; ++p) {
      const uint32_t v = (r.sc[p] >> (8 * L.t)) & 0xffu;
      acc.sc[p] += int32_t(v & 15u) * limbs(D, p);
      acc.mn[p] += int32_t(v >> 4) * Sl[0];
    }
  }
  QSP_HD static void flush(const Raw& r, const Lane&, float sx, Acc& acc, float (&out)[2]) {
    out[0] += float(acc.sc[0]) * (hlo(r.dd[0]) * sx) - float(acc.mn[0]) * (hlo(r.dd[1]) * sx);
    out[1] += float(acc.sc[1]) * (hhi(r.dd[0]) * sx) - float(acc.mn[1]) * (hhi(r.dd[1]) * sx);
    acc.sc[0] = acc.sc[1] = acc.mn[0] = acc.mn[1] = 0;
  }
};

// Q3_K: q = low | high << 2, x = d (sc - 32) (q - 4). The high bits (word h,
// bit of (s, p, e) at q3h_bit) go through two more mmas into the same
// accumulator, each byte 4 * bit: high mma P holds steps P (even bytes) and
// P + 2 (odd): a0 = bits at 4P + {0, 8, 16, 24} (row g, e = 0, 1), a2 at
// +1 (e = 2, 3), a1 / a3 at +2 / +3 (row g + 8). The lo limb's sums start
// at -4 S of the lane's step (|sums| < 2^29 over a group).
template <>
struct I8<WFormat::kQ3_K> : Q23 {
  static constexpr int kMmas = 4, kChains = 1;
  QSP_HD static int chain_of(int) { return 0; }
  using Raw = WTraits<WFormat::kQ3_K>::Raw;
  struct Acc {
    int32_t sc[2];
  };
  QSP_HD static uint32_t hbits(uint32_t h, int sh) {  // bits at 8j + sh moved to 8j + 2, times 4
    return (sh >= 2 ? h >> (sh - 2) : h << (2 - sh)) & 0x04040404u;
  }
  QSP_HD static void prep(const Raw& r, const uint32_t (&xw)[1], const int32_t (&Sl)[2], const Lane& L,
                          uint32_t (&A)[4][4], uint32_t (&B)[4][2], int32_t (&C)[1][4]) {
    low_frags(r.q, xw[0], L, A, B);
QSP_HD_UNROLL
    for (int P = 0; P < 2; ++P) {
      A[2 + P][0] = hbits(r.h, 4 * P);
      A[2 + P][1] = hbits(r.h, 4 * P + 2);
      A[2 + P][2] = hbits(r.h, 4 * P + 1);
      A[2 + P][3] = hbits(r.h, 4 * P + 3);
      B[2 + P][0] = perm(xw[0], 0u, L.hsel[P][0]);
      B[2 + P][1] = perm(xw[0], 0u, L.hsel[P][1]);
    }
    C[0][0] = C[0][2] = 0;
    C[0][1] = C[0][3] = -4 * Sl[0];
  }
  QSP_HD static void combine(const Raw& r, const int32_t (&D)[1][4], const int32_t (&)[2], const Lane& L, Acc& acc) {
QSP_HD_UNROLL
    for (int p = 0; p < 2; ++p) acc.sc[p] += (int32_t((r.sc[p] >> (8 * L.t)) & 0xffu) - 32) * limbs(D, p);
  }
  QSP_HD static void flush(const Raw& r, const Lane&, float sx, Acc& acc, float (&out)[2]) {
    out[0] += float(acc.sc[0]) * (hlo(r.d) * sx);
    out[1] += float(acc.sc[1]) * (hhi(r.d) * sx);
    acc.sc[0] = acc.sc[1] = 0;
  }
};

// Q8_0: x = d q per 32-column block h (steps 2h, 2h + 1: the chunk's mma h).
// The layout's bytes are q + 128; one xor per register gives the s8 codes
// back, so A is the lane's raw words (mma s8 x s8, no unpacking and no
// correction sums): a0 / a2 = row g's words of steps 2h / 2h + 1, a1 / a3
// row g + 8's. Column n = g: limb g for g < 2 (b0 / b1 = the staged words of
// steps 2h / 2h + 1, which read in one lds.128 with those of the other block
// at word_of(t, limb, 0)), zero for g >= 2. So lane t = 0 holds, per mma,
// rows g and g + 8 x (hi, lo): 256 hi + lo in integer (|sum| < 2^27), the
// block's scale in fp32; the other lanes hold zeros.
template <>
struct I8<WFormat::kQ8_0> {
  static constexpr int kMmas = 2, kChains = 2, kWords = 4;
  static constexpr bool kSignedA = true;
  QSP_HD static int chain_of(int m) { return m; }
  using Raw = WTraits<WFormat::kQ8_0>::Raw;
  struct Lane {
    uint32_t on;  // ~0 on the lanes of columns 0 and 1
  };
  struct Acc {
    float f[2];
  };
  QSP_HD static Lane lane(int g, int) { return Lane{g < 2 ? ~0u : 0u}; }
  // Words s = 0, 2, 1, 3 of the lane's limb (word_of's order).
  QSP_HD static int word_base(int g, int t) { return word_of(t, g & 1, 0); }
  QSP_HD static constexpr int sum_pos(int s) { return s; }  // unused: no correction
  QSP_HD static void lane_sums(uint32_t, uint32_t, int, int32_t (&Sl)[2]) { Sl[0] = Sl[1] = 0; }
  QSP_HD static void prep(const Raw& r, const uint32_t (&xw)[4], const int32_t (&)[2], const Lane& L,
                          uint32_t (&A)[2][4], uint32_t (&B)[2][2], int32_t (&C)[2][4]) {
QSP_HD_UNROLL
    for (int h = 0; h < 2; ++h) {
      A[h][0] = r.q[h][0] ^ 0x80808080u;
      A[h][1] = r.q[h][2] ^ 0x80808080u;
      A[h][2] = r.q[h][1] ^ 0x80808080u;
      A[h][3] = r.q[h][3] ^ 0x80808080u;
      B[h][0] = xw[h] & L.on;      // step 2h
      B[h][1] = xw[2 + h] & L.on;  // step 2h + 1
      C[h][0] = C[h][1] = C[h][2] = C[h][3] = 0;
    }
  }
  QSP_HD static void combine(const Raw& r, const int32_t (&D)[2][4], const int32_t (&)[2], const Lane&, Acc& acc) {
QSP_HD_UNROLL
    for (int h = 0; h < 2; ++h) {
      acc.f[0] += float(256 * D[h][0] + D[h][1]) * hlo(r.s[h]);
      acc.f[1] += float(256 * D[h][2] + D[h][3]) * hhi(r.s[h]);
    }
  }
  QSP_HD static void flush(const Raw&, const Lane&, float sx, Acc& acc, float (&out)[2]) {
    out[0] += acc.f[0] * sx;
    out[1] += acc.f[1] * sx;
    acc.f[0] = acc.f[1] = 0.0f;
  }
};

// ---- Staging: lane l of a warp, group j ----------------------------------------------------
// Lane l takes chunk 4j + (l >> 3), quad t = l & 3, steps s0 = (l >> 2) & 1
// and s0 + 2: columns chunk_col(s, t, e) of each (8 values).
struct StageLane {
  int q, t, s0;
};
QSP_HD inline StageLane stage_lane(int l) { return StageLane{l >> 3, l & 3, (l >> 2) & 1}; }
// Column (within the group) of the lane's value i = 4 k + e (step s0 + 2k).
QSP_HD inline int stage_col(const StageLane& sl, int i) {
  return 64 * sl.q + qw::chunk_col(sl.s0 + 2 * (i >> 2), sl.t, i & 3);
}

}  // namespace i8
}  // namespace kern
}  // namespace qsp
