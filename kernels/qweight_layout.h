// The device layout of GEMM weights ("tiled" layout), documented once, and its
// index arithmetic, usable from host and device code: the host repacking of
// each format (kernels/formats/<name>.cuh, repack_tiles()) writes it, the format
// decoders (the same headers) and kernels/qweight.cuh read it.
//
// W is rows (N, outputs) x cols (K, inputs), K contiguous in GGUF.
//
// ---- Why this layout ---------------------------------------------------------
// The GEMMs multiply with mma.sync.m16n8k16 (sm_80+) and wgmma.m64nNk16
// (sm_90a). Both give thread (lane = 4*g + t) of a warp the k-indices
// {2t, 2t+1, 2t+8, 2t+9} of each 16-wide k step of its A fragment (rows g and
// g+8 of a 16-row slice; mma.sync's B fragment holds the same k-indices of
// column g). The layout stores, for every 16-row x 64-column unit, each
// lane's weights of all four k steps in one 16-byte word (Q4_0; two for
// Q8_0), in natural column order:
//     col(s, t, e) = 16*s + 2*t + (e & 1) + 8*(e >> 1)      k step s = 0..3
// (e = 0,1 are the {2t, 2t+1} register, e = 2,3 the {2t+8, 2t+9} one).
// Consequences:
//  - Activations need no permutation anywhere: the wgmma kernel reads them
//    through TMA in the canonical 128-byte swizzle, the mma.sync kernel with
//    ldmatrix, the GEMV with 4-byte loads.
//  - A lane's quantized weights for one 16x64 unit are one 16-byte word
//    (Q4_0) or two (Q8_0), decoded in registers straight into fragments:
//    weights are the wgmma A operand (from registers) or the mma.sync B one.
//  - Both 32-wide quant blocks of a chunk are uniform per k-step pair: steps
//    0,1 lie in block 2c, steps 2,3 in block 2c+1 for every lane.
//
// ---- Q4_0 and Q8_0 ------------------------------------------------------------
// Rows are padded to a multiple of 16 (tiles), cols to a multiple of 64
// (chunks); padding decodes to 0. The buffer is
//     quants [n_tiles][n_chunks][unit_bytes]     unit_bytes = 512 (Q4_0) / 1024 (Q8_0)
//     scales [n_tiles][n_chunks][64]             fp16 GGUF d of the 32-blocks
// so the units of one 16-row tile are contiguous along K.
// Inside a unit, row r of the tile is (g = r & 7, p = r >> 3): p selects the
// fragment half (rows g or g+8 of an m16 A tile / the two n8 B tiles).
//  Q4_0: byte lane*16 + 4*s holds the 32-bit word of (lane, step s): the 8
//        nibbles (raw GGUF q, value d*(q-8)) of rows g and g+8 at col(s,t,e),
//        nibble shift 8*p + 16*(e&1) + 4*(e>>1). That order is what the
//        Marlin-style lop3 decode (0x000f000f / 0x00f000f0 masks, then >>8)
//        turns into the four fragment registers with no shuffling.
//  Q8_0: byte 512*(s>>1) + 16*lane + 8*p + 4*(s&1) + e holds q + 128 (uint8)
//        of row 8p+g at col(s,t,e): a lane's 16 bytes of one half cover k
//        steps 2h, 2h+1 of both row halves, i.e. one LDS.128 per half-stage.
//        prmt places the bytes under an fp16 exponent (0x64xx = 1024 + x).
//  Scales: byte 8*g + 2*(2*h + p) of a unit's 64 holds d of row 8p+g, block
//        2c+h: a lane reads its 8 bytes once per unit (LDS.64 / LDG.64).
// ---- F16 -------------------------------------------------------------------------
// Plain row-major fp16 [rows][cols] (GGUF F16 / BF16 / F32 converted), no
// padding: the permutation above is applied on the fly by the loads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#if defined(__SSE2__) && !defined(__CUDA_ARCH__)
#include <emmintrin.h>
#define QSP_REPACK_SSE2 1  // the host repacks' vector forms (x86-64: always)
#endif

#if defined(__CUDACC__)
#define QSP_HD __host__ __device__
#else
#define QSP_HD
#endif

namespace qsp {
namespace kern {
namespace qw {

constexpr int kTileRows = 16;       // rows per tile (m16 of the GEMV's A, two n8 of the GEMM's B)
constexpr int kChunkCols = 64;      // cols per chunk (four k16 mma steps)
constexpr int kScaleUnitBytes = 64; // 16 rows x 2 blocks x fp16
constexpr int kQ4UnitBytes = 512;   // 16 x 64 nibbles
constexpr int kQ8UnitBytes = 1024;  // 16 x 64 bytes

// Plain 32-bit read of a little-endian word (host test and device side loads alike).
QSP_HD inline uint32_t rd32(const uint8_t* p) {
  uint32_t v;
  memcpy(&v, p, 4);
  return v;
}

QSP_HD constexpr int64_t n_tiles(int64_t rows) { return (rows + kTileRows - 1) / kTileRows; }
QSP_HD constexpr int64_t n_chunks(int64_t cols) { return (cols + kChunkCols - 1) / kChunkCols; }
// Bytes of one per-unit array of a rows x cols matrix, `unit` bytes per
// 16 x 64 unit: a tiled format's quant array, i.e. its scale array's offset.
QSP_HD constexpr size_t unit_array_bytes(int unit, int64_t rows, int64_t cols) {
  return size_t(n_tiles(rows)) * size_t(n_chunks(cols)) * size_t(unit);
}

// Physical column (within a 64-chunk) of lane-quad t, k step s, element e.
QSP_HD constexpr int chunk_col(int s, int t, int e) { return 16 * s + 2 * t + (e & 1) + 8 * (e >> 1); }
// Q4_0 nibble shift inside a lane word for fragment half p, element e.
QSP_HD constexpr int q4_shift(int p, int e) { return 8 * p + 16 * (e & 1) + 4 * (e >> 1); }

// Byte of (lane, k step s, fragment half p, element e) inside a Q8_0 unit.
QSP_HD constexpr int q8_byte(int lane, int s, int p, int e) {
  return 512 * (s >> 1) + 16 * lane + 8 * p + 4 * (s & 1) + e;
}

// Where element (row, col) lives: the inverse of chunk_col plus the unit.
struct Coord {
  int64_t unit;  // tile * n_chunks + chunk
  int lane;      // 4*g + t
  int s, e, p, h, g;
};
QSP_HD inline Coord coord_of(int64_t row, int64_t col, int64_t cols) {
  Coord c;
  const int r = int(row & 15), j = int(col & 63);
  c.unit = (row >> 4) * n_chunks(cols) + (col >> 6);
  c.g = r & 7;
  c.p = r >> 3;
  c.h = j >> 5;
  c.s = j >> 4;
  c.e = (j & 1) + 2 * ((j >> 3) & 1);
  c.lane = 4 * c.g + ((j >> 1) & 3);
  return c;
}
// Byte offset of a scale inside the scale array.
QSP_HD inline size_t scale_byte(const Coord& c) {
  return size_t(c.unit) * kScaleUnitBytes + 8 * c.g + 2 * (2 * c.h + c.p);
}

// ---- Host repacking: one row's 16 values of one k step ------------------------
// v[x] is the value at column 16 s + x of tile row 8 p + g (x = 0..15): lane
// 4 g + t holds columns 2t, 2t + 1 (e = 0, 1) and 2t + 8, 2t + 9 (e = 2, 3).
// The repacks of every tiled format place their codes through these (the
// per-element coord_of walk they replace cost ~10x the time at upload).
// Q4 nibble words [lane][4] (q4_shift), ORed into zeroed words; v < 16.
inline void put_q4(uint32_t* q, int g, int p, int s, const uint8_t* v) {
  for (int t = 0; t < 4; ++t)
    q[(4 * g + t) * 4 + s] |= (uint32_t(v[2 * t]) | uint32_t(v[2 * t + 8]) << 4 | uint32_t(v[2 * t + 1]) << 16 |
                               uint32_t(v[2 * t + 9]) << 20)
                              << (8 * p);
}
// Both rows g (v0) and g + 8 (v1) at once: whole words, nothing to zero first.
inline void put_q4_rows(uint32_t* q, int g, int s, const uint8_t* v0, const uint8_t* v1) {
  for (int t = 0; t < 4; ++t)
    q[(4 * g + t) * 4 + s] = uint32_t(v0[2 * t]) | uint32_t(v0[2 * t + 8]) << 4 | uint32_t(v1[2 * t]) << 8 |
                             uint32_t(v1[2 * t + 8]) << 12 | uint32_t(v0[2 * t + 1]) << 16 |
                             uint32_t(v0[2 * t + 9]) << 20 | uint32_t(v1[2 * t + 1]) << 24 |
                             uint32_t(v1[2 * t + 9]) << 28;
}
// One bit per element in a lane word [lane] at 4 s + 2 p + (e >> 1) + 16 (e & 1)
// (Q5_x's qh_bit, Q3_K's q3h_bit), ORed; v < 2.
inline void put_bit(uint32_t* w, int g, int p, int s, const uint8_t* v) {
  for (int t = 0; t < 4; ++t)
    w[4 * g + t] |= (uint32_t(v[2 * t]) | uint32_t(v[2 * t + 8]) << 1 | uint32_t(v[2 * t + 1]) << 16 |
                     uint32_t(v[2 * t + 9]) << 17)
                    << (4 * s + 2 * p);
}
// Two bits per element in lane words [lane][2] at word s >> 1, bit
// 2 (4 (s & 1) + 2 p + (e >> 1)) + 16 (e & 1) (the K-quants' q2_bit), ORed; v < 4.
inline void put_q2(uint32_t* w, int g, int p, int s, const uint8_t* v) {
  for (int t = 0; t < 4; ++t)
    w[(4 * g + t) * 2 + (s >> 1)] |= (uint32_t(v[2 * t]) | uint32_t(v[2 * t + 8]) << 2 |
                                      uint32_t(v[2 * t + 1]) << 16 | uint32_t(v[2 * t + 9]) << 18)
                                     << (8 * (s & 1) + 4 * p);
}
// Both rows g (v0) and g + 8 (v1) of put_q2, ORed (the word's other k step
// shares it).
inline void put_q2_rows(uint32_t* w, int g, int s, const uint8_t* v0, const uint8_t* v1) {
  for (int t = 0; t < 4; ++t)
    w[(4 * g + t) * 2 + (s >> 1)] |= (uint32_t(v0[2 * t]) | uint32_t(v0[2 * t + 8]) << 2 | uint32_t(v1[2 * t]) << 4 |
                                      uint32_t(v1[2 * t + 8]) << 6 | uint32_t(v0[2 * t + 1]) << 16 |
                                      uint32_t(v0[2 * t + 9]) << 18 | uint32_t(v1[2 * t + 1]) << 20 |
                                      uint32_t(v1[2 * t + 9]) << 22)
                                     << (8 * (s & 1));
}
#if defined(QSP_REPACK_SSE2)
// put_q4_rows in SSE2: v0, v1 hold the 16 codes (< 16) of rows g and g + 8
// for one k step; the result holds the four lane words of that step (lane
// 4g + t in word t).
inline __m128i q4_rows_sse(__m128i v0, __m128i v1) {
  const auto pairs = [](__m128i x) { return _mm_or_si128(x, _mm_slli_epi16(_mm_srli_si128(x, 8), 4)); };
  return _mm_unpacklo_epi8(pairs(v0), pairs(v1));
}
// The words of steps 0..3 (w[s] from q4_rows_sse) stored as lanes 4g..4g+3's
// 16-byte rows of a Q4 word array [lane][4]: a 4 x 4 transpose.
inline void store_q4_lanes(uint32_t* q, int g, const __m128i (&w)[4]) {
  const __m128i t0 = _mm_unpacklo_epi32(w[0], w[1]), t1 = _mm_unpacklo_epi32(w[2], w[3]);
  const __m128i t2 = _mm_unpackhi_epi32(w[0], w[1]), t3 = _mm_unpackhi_epi32(w[2], w[3]);
  __m128i* lane = reinterpret_cast<__m128i*>(q + 16 * g);
  _mm_storeu_si128(lane + 0, _mm_unpacklo_epi64(t0, t1));
  _mm_storeu_si128(lane + 1, _mm_unpackhi_epi64(t0, t1));
  _mm_storeu_si128(lane + 2, _mm_unpacklo_epi64(t2, t3));
  _mm_storeu_si128(lane + 3, _mm_unpackhi_epi64(t2, t3));
}
// put_q2_rows for all four k steps in SSE2, stored whole: v0[s], v1[s] hold
// the 16 codes (< 4) of rows g and g + 8 for step s; lanes 4g..4g+3's two
// words each of a [lane][2] array.
inline void store_q2_lanes(uint32_t* w, int g, const __m128i (&v0)[4], const __m128i (&v1)[4]) {
  const auto pairs = [](__m128i x) { return _mm_or_si128(x, _mm_slli_epi16(_mm_srli_si128(x, 8), 2)); };
  __m128i x[4];
  for (int s = 0; s < 4; ++s) x[s] = _mm_or_si128(pairs(v0[s]), _mm_slli_epi16(pairs(v1[s]), 4));
  const __m128i u0 = _mm_unpacklo_epi8(x[0], x[1]), u1 = _mm_unpacklo_epi8(x[2], x[3]);  // words s >> 1 = 0, 1
  __m128i* lane = reinterpret_cast<__m128i*>(w + 8 * g);
  _mm_storeu_si128(lane + 0, _mm_unpacklo_epi32(u0, u1));
  _mm_storeu_si128(lane + 1, _mm_unpackhi_epi32(u0, u1));
}
#endif
// Q8_0 bytes (q8_byte) of the unit, stored.
inline void put_q8(uint8_t* q, int g, int p, int s, const uint8_t* v) {
  for (int t = 0; t < 4; ++t) {
    uint8_t* o = q + 512 * (s >> 1) + 16 * (4 * g + t) + 8 * p + 4 * (s & 1);
    o[0] = v[2 * t];
    o[1] = v[2 * t + 1];
    o[2] = v[2 * t + 8];
    o[3] = v[2 * t + 9];
  }
}

}  // namespace qw
}  // namespace kern
}  // namespace qsp

// ---- Q4_1, Q5_0, Q5_1, Q2_K, Q3_K ---------------------------------------------------
// Same tiles, chunks, units and lane / k-step / fragment order as above; each
// format's header documents its unit and side data with the bits per weight
// (kernels/formats/<name>.cuh), the shared decoders are at the end of
// kernels/qweight.cuh.
//  Q4_1, Q5_0, Q5_1: Q4_0's nibble words (+ one 32-bit high-bit word per lane
//        for Q5_x, bit qh_bit); Q4_0's d array (+ an m array for Q4_1 / Q5_1).
//        5.0 / 5.5 / 6.0 bits per weight, as in GGUF.
//  Q2_K, Q3_K: the four k steps of a unit are four 16-weight sub-blocks of one
//        256-weight super-block; per row and step one sub-block scale byte,
//        per row the super-block's fp16 d (and dmin), repeated in each of its
//        four units. 3.0 / 3.75 bits per weight (GGUF: 2.625 / 3.4375).
