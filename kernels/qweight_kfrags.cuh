// The K-quants' fragment decoders (kernels/formats/q2_k.cuh .. q6_k.cuh):
// the GEMM / GEMV turn a lane's packed words into f16x2 fragments here, in
// f16x2 arithmetic on exact integer codes with each sub-block scale split
// in two fp16 (see "K-quants in fp16" below); the bit layouts they read
// (q2_bit, q3h_bit, ksc_byte); and the fp32 helpers the embedding (load8)
// uses to equal the CPU reference bit for bit. Q2_K / Q3_K: their 16-weight
// sub-blocks are exactly the k steps of a unit (step s of chunk c is
// sub-block 4 (c % 4) + s of super-block c / 4), so a lane needs one
// sub-block scale per row and step; Q4_K / Q5_K have one per 32 (two steps).
// Everything is QSP_HD: the CPU test (tests/kernel_formats/) runs it.
#pragma once

#include <cstdint>

#include "kernels/qweight.cuh"

namespace qsp {
namespace kern {
namespace qw {

namespace hd {

// fp16 halves of a word as fp32.
QSP_HD inline float f16lo(uint32_t w) {
#if defined(__CUDA_ARCH__)
  return __half2float(__ushort_as_half(uint16_t(w & 0xffffu)));
#else
  return h2f(w & 0xffffu);
#endif
}
QSP_HD inline float f16hi(uint32_t w) {
#if defined(__CUDA_ARCH__)
  return __half2float(__ushort_as_half(uint16_t(w >> 16)));
#else
  return h2f(w >> 16);
#endif
}
// float(x) - bias for a small unsigned x (< 2^22) without I2F: x under the
// exponent of 2^23 is 2^23 + x exactly, minus 2^23 + bias (exact while
// bias < 2^22).
QSP_HD inline float small_u2f(uint32_t x, int bias) {
#if defined(__CUDA_ARCH__)
  const float f = __uint_as_float(0x4b000000u | x);
#else
  float f;  // the same bits on the host, so that the CPU test runs this very arithmetic
  const uint32_t b = 0x4b000000u | x;
  std::memcpy(&f, &b, 4);
#endif
  return f - float(8388608 + bias);
}
// (lo, hi) rounded to nearest fp16, as one f16x2 word.
QSP_HD inline uint32_t pack2(float lo, float hi) {
#if defined(__CUDA_ARCH__)
  uint32_t d;
  asm("cvt.rn.f16x2.f32 %0, %1, %2;\n" : "=r"(d) : "f"(hi), "f"(lo));
  return d;
#else
  return d2h(double(lo)) | d2h(double(hi)) << 16;
#endif
}
// a * b - c rounded twice (no fma contraction), as the CPU reference.
QSP_HD inline float mul_sub_rn(float a, float b, float c) {
#if defined(__CUDA_ARCH__)
  return __fsub_rn(__fmul_rn(a, b), c);
#else
  return a * b - c;
#endif
}

}  // namespace hd

// A 2-bit field of (k step s, fragment half p, element e) in a lane's two
// 32-bit words, word s >> 1 (Q2_K's and Q3_K's low bits, Q6_K's high bits):
// register j = 2p + (e >> 1) of step s at bit 2 (4 (s & 1) + j) for e even
// and 16 + the same for e odd, so an f16x2 register's two fields sit 16 bits
// apart and one shift and mask put both under exponent 0x64.
QSP_HD constexpr int q2_bit(int s, int p, int e) { return 2 * (4 * (s & 1) + 2 * p + (e >> 1)) + 16 * (e & 1); }
// Q3_K's high bit in the lane's hmask word: as Q5_0's (qh_bit).
QSP_HD constexpr int q3h_bit(int s, int p, int e) { return 4 * s + 2 * p + (e >> 1) + 16 * (e & 1); }
// Sub-block scale byte of (row group g, half p, k step s) in a unit's 64
// scale bytes: a lane's 8 bytes are one LDS.64 / LDG.64 (word p, byte s).
QSP_HD constexpr int ksc_byte(int g, int p, int s) { return 8 * g + 4 * p + s; }

// ---- K-quants in fp16 (Q4_K, Q5_K, Q6_K fragments) ------------------------------
// The GEMM / GEMV fragments of these formats decode in f16x2 arithmetic on
// the exact integer codes, as Q4_1 / Q5_0 do, with the sub-block scale d * sc
// (and dmin * m) split once per k step into two fp16: hi = RN16(d sc) and the
// remainder lo = RN16(d sc - hi) (exact: d sc has 17 significant bits). Then
// x = (q hi + (-m dmin)_hi) + (q lo + (-m dmin)_lo): the large part one fma,
// rounded once relative to x itself, the small part an fma of terms 2^-11
// smaller. |x16 - x| <= 2 ulp16(x), near the fp32 decode's 0.5 (which the
// embedding, load8, keeps: it must equal the CPU reference exactly) at half
// its instructions. What did not do: one fp16 scale, RN16(d sc) q - RN16(dmin
// m), ~2x cheaper still, but the rounding of dmin m is 2^-12 of the
// sub-block's range whatever x is, which near x = 0 is many ulps: GEMM
// outputs went from ~4e-4 to 1.0e-3 relative L2 vs the CPU and the op test's
// per-element bound failed (H200, 2026-12-04). The scale-only formats (Q3_K,
// Q6_K: x = d sc q, no min to cancel against) do take the one fp16 scale:
// x16 = RN16(q RN16(d sc)), within ~1 ulp16(x), not a multiple of the range.
namespace hd {
// (lo half of a, lo half of b) and (hi of a, hi of b).
QSP_HD inline uint32_t pack_lo2(uint32_t a, uint32_t b) {
#if defined(__CUDA_ARCH__)
  return prmt(a, b, 0x5410u);
#else
  return (a & 0xffffu) | (b << 16);
#endif
}
QSP_HD inline uint32_t pack_hi2(uint32_t a, uint32_t b) {
#if defined(__CUDA_ARCH__)
  return prmt(a, b, 0x7632u);
#else
  return (a >> 16) | (b & 0xffff0000u);
#endif
}
// Unsigned bytes B0 and B1 of w as an exact fp16 pair: under exponent 0x64
// each byte is 1024 + u, minus 1024.
template <int B0, int B1>
QSP_HD inline uint32_t u8pair(uint32_t w) {
#if defined(__CUDA_ARCH__)
  return hsub2(prmt(w, 0x64646464u, uint32_t(B0 | 4 << 4 | B1 << 8 | 4 << 12)), 0x64006400u);
#else
  return d2h(double((w >> (8 * B0)) & 0xffu)) | d2h(double((w >> (8 * B1)) & 0xffu)) << 16;
#endif
}
QSP_HD inline uint32_t fadd2(uint32_t a, uint32_t b) {
#if defined(__CUDA_ARCH__)
  uint32_t d;
  asm("add.rn.f16x2 %0, %1, %2;\n" : "=r"(d) : "r"(a), "r"(b));
  return d;
#else
  return host_f16x2(a, b, 0u, [](double x, double y, double) { return x + y; });
#endif
}
// a * b split into hi = RN16(a b) and lo = RN16(a b - hi), per half.
QSP_HD inline void mul2_split(uint32_t a, uint32_t b, uint32_t& hi, uint32_t& lo) {
  hi = fmul2(a, b);
  lo = ffma2(a, b, hi ^ 0x80008000u);
}
// Signed byte s of a and of b as an exact fp16 pair: (u ^ 0x80) = sc + 128
// under exponent 0x64, minus 1152.
QSP_HD inline uint32_t i8pair(uint32_t a, uint32_t b, int s) {
#if defined(__CUDA_ARCH__)
  const uint32_t x = prmt(a, b, uint32_t(s | (s + 4) << 8));
  uint32_t y;
  asm("lop3.b32 %0, %1, %2, %3, 0x6A;\n" : "=r"(y) : "r"(x), "r"(0x00ff00ffu), "r"(0x64806480u));  // (x & b) ^ c
  return hsub2(y, 0x64806480u);
#else
  return d2h(double(int8_t(a >> (8 * s)))) | d2h(double(int8_t(b >> (8 * s)))) << 16;
#endif
}
}  // namespace hd

// t (exact codes) * d + nm, the scale pairs split in hi / lo (rows g, g+8:
// the lo or hi half of each pair for row_g).
QSP_HD inline uint32_t affine_frag(uint32_t t, bool row_g, uint32_t ds_hi, uint32_t ds_lo, uint32_t nm_hi,
                                   uint32_t nm_lo) {
  const auto bc = [row_g](uint32_t w) { return row_g ? hd::bcast_lo(w) : hd::bcast_hi(w); };
  return hd::fadd2(hd::ffma2(t, bc(ds_hi), bc(nm_hi)), hd::ffma2(t, bc(ds_lo), bc(nm_lo)));
}
// t * RN16(d): for the scale-only formats (Q3_K, Q6_K), whose t is a small
// exact integer: two roundings (d's, the product's), within ~1 fp16 ulp of
// t d; no cancellation to amplify them, unlike d sc q - dmin m.
QSP_HD inline uint32_t scaled1_frag(uint32_t t, bool row_g, uint32_t ds) {
  return hd::fmul2(t, row_g ? hd::bcast_lo(ds) : hd::bcast_hi(ds));
}

// Q4_K / Q5_K, k step s (sub-block h = s >> 1 of the chunk): x = d sc q -
// dmin m with both products split in hi / lo fp16 (above). q: exact fp16
// codes from q5_raw (qh = 0: Q4_K's 4-bit codes). side: the lane's four side
// words (kernels/qweight_kquant.h: sc / m bytes of h = 0, 1 for rows g, g+8;
// (d, dmin) of row g, of row g+8).
// Q4_K / Q5_K codes of k step s: q (0..31) as exact fp16, per register
// (f[0], f[1]: row g; f[2], f[3]: row g+8; the fragment positions).
QSP_HD inline void kq_codes(uint32_t q, uint32_t qh, int s, uint32_t (&t)[4]) {
  constexpr uint32_t kSub = 0x64006400u;  // 1024, 1024
  constexpr uint32_t kMul = 0x2c002c00u;  // 1/16, 1/16
  constexpr uint32_t kAdd = 0xd400d400u;  // -64, -64
  uint32_t x[4];
  q5_raw(q, qh, s, x);
QSP_HD_UNROLL
  for (int j = 0; j < 4; ++j) t[j] = (j & 1) ? hd::ffma2(x[j], kMul, kAdd) : hd::fsub2(x[j], kSub);
}
QSP_HD inline void dq_kq_affine(uint32_t q, uint32_t qh, int s, const uint32_t (&side)[4], uint32_t (&f)[4]) {
  const uint32_t sm = side[s >> 1];
  uint32_t ds_hi, ds_lo, nm_hi, nm_lo;
  hd::mul2_split(hd::u8pair<0, 2>(sm), hd::pack_lo2(side[2], side[3]), ds_hi, ds_lo);
  hd::mul2_split(hd::u8pair<1, 3>(sm), hd::pack_hi2(side[2], side[3]) ^ 0x80008000u, nm_hi, nm_lo);
  uint32_t t[4];
  kq_codes(q, qh, s, t);
QSP_HD_UNROLL
  for (int j = 0; j < 4; ++j) f[j] = affine_frag(t[j], j < 2, ds_hi, ds_lo, nm_hi, nm_lo);
}


// Q6_K, k step s: the codes q = nibble | high << 4 as exact fp16 under
// exponent 0x64 (1024 + q, or 1024 + 16 q for the nibble at bit 4), minus
// 1056 (or / 16 - 96): q - 32 exactly; then (q - 32) RN16(d sc)
// (scaled1_frag): d sc's rounding and the product's.
// qhw: the lane's high word of this step (fields at q2_bit); sc: its int8 scales of rows g
// (sc[0]) and g+8 (sc[1]), byte s; dw: (d_g, d_g8).
// Q6_K codes of k step s: q - 32 as exact fp16 (positions as kq_codes).
QSP_HD inline void q6_codes(uint32_t q, uint32_t qhw, int s, uint32_t (&t)[4]) {
  constexpr uint32_t kExp = 0x64006400u, kSub = 0x64206420u;  // 1056, 1056
  constexpr uint32_t kMul = 0x2c002c00u;                       // 1/16, 1/16
  constexpr uint32_t kAdd = 0xd600d600u;                       // -96, -96
QSP_HD_UNROLL
  for (int j = 0; j < 4; ++j) {
    const int src = 2 * (4 * (s & 1) + j), dst = (j & 1) ? 8 : 4;
    const uint32_t hb = dst >= src ? qhw << (dst - src) : qhw >> (src - dst);
    const uint32_t hmask = (j & 1) ? 0x03000300u : 0x00300030u;
    const uint32_t nmask = (j & 1) ? 0x00f000f0u : 0x000f000fu;
    const uint32_t x = ((j < 2 ? q : q >> 8) & nmask) | (hb & hmask) | kExp;
    t[j] = (j & 1) ? hd::ffma2(x, kMul, kAdd) : hd::fsub2(x, kSub);
  }
}
QSP_HD inline void dq_q6_k(uint32_t q, uint32_t qhw, int s, const uint32_t (&sc)[2], uint32_t dw, uint32_t (&f)[4]) {
  const uint32_t ds = hd::fmul2(hd::i8pair(sc[0], sc[1], s), dw);
  uint32_t t[4];
  q6_codes(q, qhw, s, t);
QSP_HD_UNROLL
  for (int j = 0; j < 4; ++j) f[j] = scaled1_frag(t[j], j < 2, ds);
}

// Byte s of a (lo half) and of b (hi half) under exponent 0x64 with the
// byte masked by `mask` after shifting it right by `shr`: exact fp16
// 1024 + ((byte >> shr) & mask) per half.
template <int kShr, uint32_t kMask>
QSP_HD inline uint32_t byte_pair(uint32_t a, uint32_t b, int s) {
#if defined(__CUDA_ARCH__)
  const uint32_t x = prmt(a, b, uint32_t(s | (s + 4) << 8)) >> kShr;
  return lop3_and_or(x, kMask * 0x10001u, 0x64006400u);
#else
  return (0x6400u | ((a >> (8 * s + kShr)) & kMask)) | (0x6400u | ((b >> (8 * s + kShr)) & kMask)) << 16;
#endif
}
// The exact fp16 codes of register j of k step s from the 2-bit fields at
// q2_bit (word w) and, with kHigh, Q3_K's high bit at q3h_bit (word h) as
// bit 2: 1024 + q per half.
template <bool kHigh>
QSP_HD inline uint32_t q23_raw(uint32_t w, uint32_t h, int s, int j) {
  const int src = 2 * (4 * (s & 1) + j);
  uint32_t x = ((w >> src) & 0x00030003u) | 0x64006400u;
  if (kHigh) {
    const int hs = 4 * s + j;  // q3h_bit of element 0 of register j
    x |= (hs >= 2 ? h >> (hs - 2) : h << (2 - hs)) & 0x00040004u;
  }
  return x;
}

// Q2_K / Q3_K codes of k step s as exact fp16 (positions as kq_codes): q
// (0..3), and q - 4 (-4..3) with Q3_K's high bit.
QSP_HD inline void q2_codes(const uint32_t (&q)[2], int s, uint32_t (&t)[4]) {
QSP_HD_UNROLL
  for (int j = 0; j < 4; ++j) t[j] = hd::fsub2(q23_raw<false>(q[s >> 1], 0u, s, j), 0x64006400u);
}
QSP_HD inline void q3_codes(const uint32_t (&q)[2], uint32_t h, int s, uint32_t (&t)[4]) {
QSP_HD_UNROLL
  for (int j = 0; j < 4; ++j) t[j] = hd::fsub2(q23_raw<true>(q[s >> 1], h, s, j), 0x64046404u);
}

// Q2_K, k step s (one 16-column sub-block): x = d sc q - dmin m in f16x2 with
// d sc and dmin m split in hi / lo (affine_frag). q: the lane's two low-bit
// words; sc: its 8 scale bytes (low nibble sc, high nibble m) of rows g /
// g+8, byte s; dd: (d_g, d_g8), (dmin_g, dmin_g8).
QSP_HD inline void dq_q2_k(const uint32_t (&q)[2], const uint32_t (&sc)[2], const uint32_t (&dd)[2], int s,
                           uint32_t (&f)[4]) {
  constexpr uint32_t kSub = 0x64006400u;  // 1024, 1024
  uint32_t ds_hi, ds_lo, nm_hi, nm_lo;
  hd::mul2_split(hd::fsub2(byte_pair<0, 15>(sc[0], sc[1], s), kSub), dd[0], ds_hi, ds_lo);
  hd::mul2_split(hd::fsub2(byte_pair<4, 15>(sc[0], sc[1], s), kSub), dd[1] ^ 0x80008000u, nm_hi, nm_lo);
  uint32_t t[4];
  q2_codes(q, s, t);
QSP_HD_UNROLL
  for (int j = 0; j < 4; ++j) f[j] = affine_frag(t[j], j < 2, ds_hi, ds_lo, nm_hi, nm_lo);
}

// Q3_K, k step s: x = d (code - 32) (q - 4), q = low | high << 2, in f16x2:
// code - 32 and q - 4 exact, d (code - 32) rounded once to fp16 (scaled1_frag).
// sc: the lane's 8 six-bit scale codes (bytes) of rows g / g+8, byte s; dw:
// (d_g, d_g8).
QSP_HD inline void dq_q3_k(const uint32_t (&q)[2], uint32_t h, const uint32_t (&sc)[2], uint32_t dw, int s,
                           uint32_t (&f)[4]) {
  const uint32_t ds = hd::fmul2(hd::fsub2(byte_pair<0, 255>(sc[0], sc[1], s), 0x64206420u), dw);  // d (code - 32)
  uint32_t t[4];
  q3_codes(q, h, s, t);
QSP_HD_UNROLL
  for (int j = 0; j < 4; ++j) f[j] = scaled1_frag(t[j], j < 2, ds);
}

// ---- The factored GEMV's per-row scales (kernels/gemv.cu) -----------------------------------
// x = ds[p] * code + nm[p] for row 8p + g of k step s, in fp32 as the CPU
// reference computes it (every product exact, one rounding): the GEMV runs
// the exact codes through the tensor cores against the activations (fp32
// sums) and applies these to each k step's partial sums, so the weights are
// never rounded to fp16.
QSP_HD inline void kq_scales(const uint32_t (&side)[4], int s, float (&ds)[2], float (&nm)[2]) {
  const uint32_t sm = side[s >> 1];
QSP_HD_UNROLL
  for (int p = 0; p < 2; ++p) {
    const uint32_t b = sm >> (16 * p), dd = side[2 + p];
    ds[p] = hd::f16lo(dd) * hd::small_u2f(b & 0xffu, 0);
    nm[p] = -(hd::f16hi(dd) * hd::small_u2f((b >> 8) & 0xffu, 0));
  }
}
QSP_HD inline void q6_scales(const uint32_t (&sc)[2], uint32_t dw, int s, float (&ds)[2]) {
QSP_HD_UNROLL
  for (int p = 0; p < 2; ++p) {
    const float d = p ? hd::f16hi(dw) : hd::f16lo(dw);
    ds[p] = d * hd::small_u2f(((sc[p] >> (8 * s)) & 0xffu) ^ 0x80u, 128);  // int8 sc
  }
}
QSP_HD inline void q2_scales(const uint32_t (&sc)[2], const uint32_t (&dd)[2], int s, float (&ds)[2], float (&nm)[2]) {
QSP_HD_UNROLL
  for (int p = 0; p < 2; ++p) {
    const uint32_t b = (sc[p] >> (8 * s)) & 0xffu;
    ds[p] = (p ? hd::f16hi(dd[0]) : hd::f16lo(dd[0])) * hd::small_u2f(b & 15u, 0);
    nm[p] = -((p ? hd::f16hi(dd[1]) : hd::f16lo(dd[1])) * hd::small_u2f(b >> 4, 0));
  }
}
QSP_HD inline void q3_scales(const uint32_t (&sc)[2], uint32_t dw, int s, float (&ds)[2]) {
QSP_HD_UNROLL
  for (int p = 0; p < 2; ++p)
    ds[p] = (p ? hd::f16hi(dw) : hd::f16lo(dw)) * hd::small_u2f((sc[p] >> (8 * s)) & 0xffu, 32);  // code - 32
}

}  // namespace qw
}  // namespace kern
}  // namespace qsp
