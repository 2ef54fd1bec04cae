// Helpers shared by GGML's reference quantizers of the legacy and K-quant
// formats (src/formats/q*.cpp): nearest_int, the float -> int conversion C
// casts do, make_qkx2_quants / make_qx_quants (GGML's searches for a block's
// scale and min) with their four-lane SSE forms (the same bits, ~3x faster:
// where `qsp synth` spends its time), and the 6-bit scale/min packing of
// Q4_K and Q5_K.
//
// Everything here follows ggml-quants.c operation for operation in fp32: the
// bytes a quantizer writes depend on every rounding (a search compares errors
// that differ in the last bit), and the files we synthesize must match
// llama.cpp's bit for bit. So: no fused multiply-add (GGML's reference is
// plain C; its generic x86-64 build rounds every product and sum, and so do
// we, on every target), the same evaluation order, the same integer
// truncations. Include this header first in a format file: the pragma
// applies to the functions that follow it.
#pragma once

#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__SSE2__)
#include <emmintrin.h>
#define QSP_QUANT_SSE2 1  // make_qkx2_quants_x4 below (x86-64: always)
#endif

#include "common/quant.h"

namespace qsp {
namespace fmt {
namespace qutil {

constexpr int kQK = 256;  // elements per K-quant super-block (GGML's QK_K)

// GGML's nearest_int: rounds to nearest, ties to even, through the fp32 adder
// (exact for |v| < 2^22; beyond that GGML gets garbage, and so do we, the same).
inline int nearest_int(float v) {
  const float s = v + 12582912.0f;  // 1.5 * 2^23
  int32_t i;
  std::memcpy(&i, &s, sizeof i);
  return (i & 0x007fffff) - 0x00400000;
}

// A C cast of a float to an integer type as x86-64 compiles it (cvttss2si):
// truncation toward zero; NaN and values out of int32 range give INT32_MIN.
// Narrower casts ((int8_t)f, (uint8_t)f) keep the low bits of that.
inline int32_t trunc_i32(float v) {
  return (v >= -2147483648.0f && v < 2147483648.0f) ? int32_t(v) : INT32_MIN;
}

// GGML's GROUP_MAX_EPS: a group whose largest |x| is below it is all zero.
constexpr float kGroupMaxEps = 1e-15f;

// GGML's make_qkx2_quants: levels L[i] in [0, nmax] and (returned) scale,
// (*neg_min) = -min with x ~ scale * L + min, min <= 0, minimizing the
// weighted error (|.| when use_mad, else squared) over nstep + 1 trial scales
// (nmax + rmin + rdelta * is) / (max - min), each refit by least squares.
inline float make_qkx2_quants(int n, int nmax, const float* x, const float* weights, uint8_t* L, float* neg_min,
                              uint8_t* Laux, float rmin, float rdelta, int nstep, bool use_mad) {
  float min = x[0], max = x[0];
  float sum_w = weights[0];
  float sum_x = sum_w * x[0];
  for (int i = 1; i < n; ++i) {
    if (x[i] < min) min = x[i];
    if (x[i] > max) max = x[i];
    const float w = weights[i];
    sum_w += w;
    sum_x += w * x[i];
  }
  if (min > 0) min = 0;
  if (max == min) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    *neg_min = -min;
    return 0.0f;
  }
  float iscale = float(nmax) / (max - min);
  float scale = 1 / iscale;
  float best_error = 0;
  for (int i = 0; i < n; ++i) {
    const int l = nearest_int(iscale * (x[i] - min));
    L[i] = uint8_t(l < 0 ? 0 : l > nmax ? nmax : l);
    float diff = scale * float(L[i]) + min - x[i];
    diff = use_mad ? std::fabs(diff) : diff * diff;
    best_error += weights[i] * diff;
  }
  if (nstep < 1) {
    *neg_min = -min;
    return scale;
  }
  for (int is = 0; is <= nstep; ++is) {
    iscale = (rmin + rdelta * float(is) + float(nmax)) / (max - min);
    float sum_l = 0, sum_l2 = 0, sum_xl = 0;
    for (int i = 0; i < n; ++i) {
      int l = nearest_int(iscale * (x[i] - min));
      l = l < 0 ? 0 : l > nmax ? nmax : l;
      Laux[i] = uint8_t(l);
      const float w = weights[i];
      sum_l += w * float(l);
      sum_l2 += w * float(l) * float(l);
      sum_xl += w * float(l) * x[i];
    }
    const float D = sum_w * sum_l2 - sum_l * sum_l;
    if (D > 0) {
      float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
      float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
      if (this_min > 0) {
        this_min = 0;
        this_scale = sum_xl / sum_l2;
      }
      float cur_error = 0;
      for (int i = 0; i < n; ++i) {
        float diff = this_scale * float(Laux[i]) + this_min - x[i];
        diff = use_mad ? std::fabs(diff) : diff * diff;
        cur_error += weights[i] * diff;
      }
      if (cur_error < best_error) {
        for (int i = 0; i < n; ++i) L[i] = Laux[i];
        best_error = cur_error;
        scale = this_scale;
        min = this_min;
      }
    }
  }
  *neg_min = -min;
  return scale;
}

#if defined(QSP_QUANT_SSE2)
// Per-lane forms of the scalar code's pieces: `m ? a : b`, and nearest_int.
inline __m128 sse_blend(__m128 m, __m128 a, __m128 b) { return _mm_or_ps(_mm_and_ps(m, a), _mm_andnot_ps(m, b)); }
inline __m128i sse_blendi(__m128i m, __m128i a, __m128i b) {
  return _mm_or_si128(_mm_and_si128(m, a), _mm_andnot_si128(m, b));
}
inline __m128i sse_nearest_int(__m128 v) {
  const __m128 s = _mm_add_ps(v, _mm_set1_ps(12582912.0f));
  return _mm_sub_epi32(_mm_and_si128(_mm_castps_si128(s), _mm_set1_epi32(0x007fffff)), _mm_set1_epi32(0x00400000));
}

// make_qkx2_quants of four groups at once, one per SSE lane (the K-quant
// quantizers' hot loop: `qsp synth` and bench_prefill's weights spend most
// of their time there). Each lane runs the scalar function's operations in
// its order, the same IEEE single-precision adds, multiplies and divides,
// no fused multiply-add; the scalar branches are per-lane blends: so each
// group's levels, scale and min are the scalar function's bit for bit
// (tests/test_formats_blocks.cpp compares them on random and degenerate
// groups). For nstep >= 1. N: the group size (16 or 32).
template <int N>
inline void make_qkx2_quants_x4(int nmax, const float* const (&x)[4], const float* const (&weights)[4],
                                uint8_t* const (&L)[4], float (&scale_out)[4], float (&neg_min)[4], float rmin,
                                float rdelta, int nstep, bool use_mad) {
  __m128 xv[N], wv[N];
  for (int i = 0; i < N; ++i) {
    xv[i] = _mm_setr_ps(x[0][i], x[1][i], x[2][i], x[3][i]);
    wv[i] = _mm_setr_ps(weights[0][i], weights[1][i], weights[2][i], weights[3][i]);
  }
  const __m128 zero = _mm_setzero_ps(), abs_mask = _mm_castsi128_ps(_mm_set1_epi32(0x7fffffff));
  const __m128i inmax = _mm_set1_epi32(nmax);
  const auto blend = sse_blend;
  const auto blendi = sse_blendi;
  // nearest_int, then clamped to [0, nmax] (as ints; SSE2 has no min_epi32).
  const auto level = [&](__m128 v) {
    const __m128i l = sse_nearest_int(v);
    const __m128i z = _mm_setzero_si128();
    return blendi(_mm_cmpgt_epi32(l, inmax), inmax, blendi(_mm_cmplt_epi32(l, z), z, l));
  };
  const auto err = [&](__m128 d) { return use_mad ? _mm_and_ps(d, abs_mask) : _mm_mul_ps(d, d); };
  __m128 mn = xv[0], mx = xv[0], sum_w = wv[0], sum_x = _mm_mul_ps(wv[0], xv[0]);
  for (int i = 1; i < N; ++i) {
    mn = blend(_mm_cmplt_ps(xv[i], mn), xv[i], mn);
    mx = blend(_mm_cmpgt_ps(xv[i], mx), xv[i], mx);
    sum_w = _mm_add_ps(sum_w, wv[i]);
    sum_x = _mm_add_ps(sum_x, _mm_mul_ps(wv[i], xv[i]));
  }
  mn = blend(_mm_cmpgt_ps(mn, zero), zero, mn);
  // Flat lanes (max == min): all levels 0, scale 0, min as it is now.
  const __m128 flat = _mm_cmpeq_ps(mx, mn), flat_min = mn;
  __m128 iscale = _mm_div_ps(_mm_set1_ps(float(nmax)), _mm_sub_ps(mx, mn));
  __m128 scale = _mm_div_ps(_mm_set1_ps(1.0f), iscale);
  __m128i Lv[N], La[N];
  __m128 best = zero;
  for (int i = 0; i < N; ++i) {
    Lv[i] = level(_mm_mul_ps(iscale, _mm_sub_ps(xv[i], mn)));
    const __m128 diff = _mm_sub_ps(_mm_add_ps(_mm_mul_ps(scale, _mm_cvtepi32_ps(Lv[i])), mn), xv[i]);
    best = _mm_add_ps(best, _mm_mul_ps(wv[i], err(diff)));
  }
  for (int is = 0; is <= nstep; ++is) {
    // (max - min with the min of the best fit so far, as GGML does)
    iscale = _mm_div_ps(_mm_set1_ps(rmin + rdelta * float(is) + float(nmax)), _mm_sub_ps(mx, mn));
    __m128 sum_l = zero, sum_l2 = zero, sum_xl = zero;
    for (int i = 0; i < N; ++i) {
      La[i] = level(_mm_mul_ps(iscale, _mm_sub_ps(xv[i], mn)));
      const __m128 fl = _mm_cvtepi32_ps(La[i]), wl = _mm_mul_ps(wv[i], fl);
      sum_l = _mm_add_ps(sum_l, wl);
      sum_l2 = _mm_add_ps(sum_l2, _mm_mul_ps(wl, fl));
      sum_xl = _mm_add_ps(sum_xl, _mm_mul_ps(wl, xv[i]));
    }
    const __m128 D = _mm_sub_ps(_mm_mul_ps(sum_w, sum_l2), _mm_mul_ps(sum_l, sum_l));
    __m128 this_scale = _mm_div_ps(_mm_sub_ps(_mm_mul_ps(sum_w, sum_xl), _mm_mul_ps(sum_x, sum_l)), D);
    __m128 this_min = _mm_div_ps(_mm_sub_ps(_mm_mul_ps(sum_l2, sum_x), _mm_mul_ps(sum_l, sum_xl)), D);
    const __m128 pos = _mm_cmpgt_ps(this_min, zero);
    this_min = blend(pos, zero, this_min);
    this_scale = blend(pos, _mm_div_ps(sum_xl, sum_l2), this_scale);
    __m128 cur = zero;
    for (int i = 0; i < N; ++i) {
      const __m128 diff =
          _mm_sub_ps(_mm_add_ps(_mm_mul_ps(this_scale, _mm_cvtepi32_ps(La[i])), this_min), xv[i]);
      cur = _mm_add_ps(cur, _mm_mul_ps(wv[i], err(diff)));
    }
    const __m128 take = _mm_and_ps(_mm_cmpgt_ps(D, zero), _mm_cmplt_ps(cur, best));
    const __m128i takei = _mm_castps_si128(take);
    for (int i = 0; i < N; ++i) Lv[i] = blendi(takei, La[i], Lv[i]);
    best = blend(take, cur, best);
    scale = blend(take, this_scale, scale);
    mn = blend(take, this_min, mn);
  }
  alignas(16) float sc[4], m[4];
  alignas(16) int32_t l[4];
  _mm_store_ps(sc, blend(flat, zero, scale));
  _mm_store_ps(m, blend(flat, flat_min, mn));
  const int flat_bits = _mm_movemask_ps(flat);
  for (int j = 0; j < 4; ++j) {
    scale_out[j] = sc[j];
    neg_min[j] = -m[j];
  }
  for (int i = 0; i < N; ++i) {
    _mm_store_si128(reinterpret_cast<__m128i*>(l), Lv[i]);
    for (int j = 0; j < 4; ++j) L[j][i] = (flat_bits >> j & 1) ? 0 : uint8_t(l[j]);
  }
}
#endif

// GGML's make_qx_quants with rmse_type 1 and no importance weights (the form
// quantize_row_q6_K_ref uses): symmetric levels L[i] = l + nmax, l in
// [-nmax, nmax - 1], x ~ scale * l, weights x^2, trying 19 scales
// -(nmax + 0.1 is) / max around the first and keeping the best least-squares fit.
inline float make_qx_quants(int n, int nmax, const float* x, int8_t* L) {
  float max = 0, amax = 0;
  for (int i = 0; i < n; ++i) {
    const float ax = std::fabs(x[i]);
    if (ax > amax) { amax = ax; max = x[i]; }
  }
  if (amax < kGroupMaxEps) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    return 0.0f;
  }
  auto clamp = [nmax](int l) { return l < -nmax ? -nmax : l > nmax - 1 ? nmax - 1 : l; };
  float iscale = float(-nmax) / max;
  float sumlx = 0, suml2 = 0;
  for (int i = 0; i < n; ++i) {
    const int l = clamp(nearest_int(iscale * x[i]));
    L[i] = int8_t(l + nmax);
    const float w = x[i] * x[i];
    sumlx += w * x[i] * float(l);
    suml2 += w * float(l) * float(l);
  }
  float scale = suml2 != 0.0f ? sumlx / suml2 : 0.0f;
  float best = scale * sumlx;
  for (int is = -9; is <= 9; ++is) {
    if (is == 0) continue;
    iscale = -(float(nmax) + 0.1f * float(is)) / max;
    sumlx = suml2 = 0;
    for (int i = 0; i < n; ++i) {
      const int l = clamp(nearest_int(iscale * x[i]));
      const float w = x[i] * x[i];
      sumlx += w * x[i] * float(l);
      suml2 += w * float(l) * float(l);
    }
    if (suml2 > 0 && sumlx * sumlx > best * suml2) {
      for (int i = 0; i < n; ++i) L[i] = int8_t(nmax + clamp(nearest_int(iscale * x[i])));
      scale = sumlx / suml2;
      best = scale * sumlx;
    }
  }
  return scale;
}

#if defined(QSP_QUANT_SSE2)
// make_qx_quants of four groups at once, one per SSE lane, bit for bit the
// scalar function's (as make_qkx2_quants_x4; Q6_K's search).
template <int N>
inline void make_qx_quants_x4(int nmax, const float* const (&x)[4], int8_t* const (&L)[4], float (&scale_out)[4]) {
  __m128 xv[N], wx[N];
  for (int i = 0; i < N; ++i) {
    xv[i] = _mm_setr_ps(x[0][i], x[1][i], x[2][i], x[3][i]);
    wx[i] = _mm_mul_ps(_mm_mul_ps(xv[i], xv[i]), xv[i]);  // w * x, w = x * x
  }
  const __m128 zero = _mm_setzero_ps(), abs_mask = _mm_castsi128_ps(_mm_set1_epi32(0x7fffffff));
  const __m128i lo = _mm_set1_epi32(-nmax), hi = _mm_set1_epi32(nmax - 1);
  const auto blend = sse_blend;
  const auto blendi = sse_blendi;
  const auto level = [&](__m128 v) {  // clamp(nearest_int(v))
    const __m128i l = sse_nearest_int(v);
    return blendi(_mm_cmpgt_epi32(l, hi), hi, blendi(_mm_cmplt_epi32(l, lo), lo, l));
  };
  __m128 amax = zero, mx = zero;
  for (int i = 0; i < N; ++i) {
    const __m128 ax = _mm_and_ps(xv[i], abs_mask), up = _mm_cmpgt_ps(ax, amax);
    amax = blend(up, ax, amax);
    mx = blend(up, xv[i], mx);
  }
  const __m128 flat = _mm_cmplt_ps(amax, _mm_set1_ps(kGroupMaxEps));
  __m128 iscale = _mm_div_ps(_mm_set1_ps(float(-nmax)), mx);
  __m128i Lv[N];
  __m128 sumlx = zero, suml2 = zero;
  for (int i = 0; i < N; ++i) {
    Lv[i] = level(_mm_mul_ps(iscale, xv[i]));
    const __m128 fl = _mm_cvtepi32_ps(Lv[i]);
    sumlx = _mm_add_ps(sumlx, _mm_mul_ps(wx[i], fl));
    suml2 = _mm_add_ps(suml2, _mm_mul_ps(_mm_mul_ps(_mm_mul_ps(xv[i], xv[i]), fl), fl));
  }
  __m128 scale = blend(_mm_cmpneq_ps(suml2, zero), _mm_div_ps(sumlx, suml2), zero);
  __m128 best = _mm_mul_ps(scale, sumlx);
  for (int is = -9; is <= 9; ++is) {
    if (is == 0) continue;
    iscale = _mm_div_ps(_mm_set1_ps(-(float(nmax) + 0.1f * float(is))), mx);
    __m128i La[N];
    sumlx = suml2 = zero;
    for (int i = 0; i < N; ++i) {
      La[i] = level(_mm_mul_ps(iscale, xv[i]));
      const __m128 fl = _mm_cvtepi32_ps(La[i]);
      sumlx = _mm_add_ps(sumlx, _mm_mul_ps(wx[i], fl));
      suml2 = _mm_add_ps(suml2, _mm_mul_ps(_mm_mul_ps(_mm_mul_ps(xv[i], xv[i]), fl), fl));
    }
    const __m128 take = _mm_and_ps(_mm_cmpgt_ps(suml2, zero),
                                   _mm_cmpgt_ps(_mm_mul_ps(sumlx, sumlx), _mm_mul_ps(best, suml2)));
    const __m128i takei = _mm_castps_si128(take);
    for (int i = 0; i < N; ++i) Lv[i] = blendi(takei, La[i], Lv[i]);
    scale = blend(take, _mm_div_ps(sumlx, suml2), scale);
    best = blend(take, _mm_mul_ps(scale, sumlx), best);
  }
  alignas(16) float sc[4];
  alignas(16) int32_t l[4];
  _mm_store_ps(sc, blend(flat, zero, scale));
  const int flat_bits = _mm_movemask_ps(flat);
  for (int j = 0; j < 4; ++j) scale_out[j] = sc[j];
  for (int i = 0; i < N; ++i) {
    _mm_store_si128(reinterpret_cast<__m128i*>(l), Lv[i]);
    for (int j = 0; j < 4; ++j) L[j][i] = (flat_bits >> j & 1) ? int8_t(0) : int8_t(l[j] + nmax);
  }
}
#endif

// Q4_K / Q5_K: eight 6-bit scales and eight 6-bit mins in 12 bytes. Bytes 0-3
// hold scales 0-3 (bits 0-5) and the top two bits of scales 4-7 (bits 6-7);
// bytes 4-7 the same for the mins; bytes 8-11 the low nibbles of scale j
// (bits 0-3) and min j (bits 4-7) for j = 4..7 (GGML's get_scale_min_k4).
inline void unpack_scale_min_k4(int j, const uint8_t* q, uint8_t* sc, uint8_t* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = uint8_t((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
    *m = uint8_t((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

// The sub-block scales and mins of a Q4_K / Q5_K super-block as GGML's
// reference quantizers choose them: make_qkx2_quants per 32 (weights
// rms(x) + |x|), then 6-bit codes of scale / max_scale and min / max_min.
// Writes the 12 packed bytes, d and dmin (fp16 bits) and the final levels
// L[0..255] in [0, nmax]. (GGML's quantize_row_q4_K_ref / q5_K_ref share this
// part word for word; only nmax and the search parameters differ.)
inline void quantize_scale_min_k4(const float* x, int nmax, float rmin, float rdelta, int nstep, uint8_t* scales12,
                                  uint16_t* d, uint16_t* dmin, uint8_t* L) {
  float scales[8], mins[8], weights[32];
  uint8_t Laux[32];
  float max_scale = 0, max_min = 0;  // the mins are deducted, so scales are positive
  // GGML's weights of sub-block j: av_x + |x|.
  const auto weigh = [&](int j, float* w) {
    const float* xj = x + 32 * j;
    float sum_x2 = 0;
    for (int l = 0; l < 32; ++l) sum_x2 += xj[l] * xj[l];
    const float av_x = std::sqrt(sum_x2 / 32);
    for (int l = 0; l < 32; ++l) w[l] = av_x + std::fabs(xj[l]);
  };
#if defined(QSP_QUANT_SSE2)
  (void)weights, (void)Laux;
  float w4[8][32];
  for (int j = 0; j < 8; ++j) weigh(j, w4[j]);
  for (int j0 = 0; j0 < 8; j0 += 4) {
    const float* const xs[4] = {x + 32 * j0, x + 32 * (j0 + 1), x + 32 * (j0 + 2), x + 32 * (j0 + 3)};
    const float* const ws[4] = {w4[j0], w4[j0 + 1], w4[j0 + 2], w4[j0 + 3]};
    uint8_t* const Ls[4] = {L + 32 * j0, L + 32 * (j0 + 1), L + 32 * (j0 + 2), L + 32 * (j0 + 3)};
    float sc[4], mi[4];
    make_qkx2_quants_x4<32>(nmax, xs, ws, Ls, sc, mi, rmin, rdelta, nstep, false);
    for (int k = 0; k < 4; ++k) scales[j0 + k] = sc[k], mins[j0 + k] = mi[k];
  }
#else
  for (int j = 0; j < 8; ++j) {
    weigh(j, weights);
    scales[j] = make_qkx2_quants(32, nmax, x + 32 * j, weights, L + 32 * j, &mins[j], Laux, rmin, rdelta, nstep,
                                 false);
  }
#endif
  for (int j = 0; j < 8; ++j) {
    if (scales[j] > max_scale) max_scale = scales[j];
    if (mins[j] > max_min) max_min = mins[j];
  }
  const float inv_scale = max_scale > 0 ? 63.0f / max_scale : 0.0f;
  const float inv_min = max_min > 0 ? 63.0f / max_min : 0.0f;
  for (int j = 0; j < 8; ++j) {
    uint8_t ls = uint8_t(nearest_int(inv_scale * scales[j]));
    uint8_t lm = uint8_t(nearest_int(inv_min * mins[j]));
    if (ls > 63) ls = 63;
    if (lm > 63) lm = 63;
    if (j < 4) {
      scales12[j] = ls;
      scales12[j + 4] = lm;
    } else {
      scales12[j + 4] = uint8_t((ls & 0xF) | ((lm & 0xF) << 4));
      scales12[j - 4] |= uint8_t((ls >> 4) << 6);
      scales12[j] |= uint8_t((lm >> 4) << 6);
    }
  }
  *d = fp32_to_fp16(max_scale / 63.0f);
  *dmin = fp32_to_fp16(max_min / 63.0f);
  // Requantize with the scales as stored; a sub-block whose scale code is 0
  // keeps make_qkx2_quants' levels, as in GGML.
  for (int j = 0; j < 8; ++j) {
    uint8_t sc, m;
    unpack_scale_min_k4(j, scales12, &sc, &m);
    const float dj = fp16_to_fp32(*d) * float(sc);
    if (dj == 0.0f) continue;
    const float dm = fp16_to_fp32(*dmin) * float(m);
    for (int i = 0; i < 32; ++i) {
      const int l = nearest_int((x[32 * j + i] + dm) / dj);
      L[32 * j + i] = uint8_t(l < 0 ? 0 : l > nmax ? nmax : l);
    }
  }
}

}  // namespace qutil
}  // namespace fmt
}  // namespace qsp
