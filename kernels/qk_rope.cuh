// The per-head math of QK-norm + RoPE (kernels/qk_rope.cu's launch, and the
// decode attention that does it in its prologue, kernels/attention_mma.cu),
// written once so both give the same bits. A head vector of D fp32 values
// lives in one warp, E = D / 32 consecutive elements per lane: the QK-norm
// is one warp reduction, a NEOX pair (i, i + D/2) sits in lanes l and l + 16
// (one shuffle), an interleaved pair (2i, 2i+1) inside a lane.
//
// Angles: inv_freq_i = theta^(-2i/D) comes from the host in double, exactly
// as the CPU reference computes it; the device forms pos * inv_freq_i in
// double and reduces it modulo 2 pi in double before an accurate sincosf, so
// angles stay exact to fp32 rounding at any position (an fp32 product alone
// would be ~2e-3 rad off at pos = 32768).
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "qsp/qsp.h"

namespace qsp {
namespace kern {
namespace rope {

constexpr int kMaxHeadDim = 128;

// inv_freq_i = theta^(-2i/D) in double, as the CPU reference computes it.
// Cached per host thread: it only changes with (theta, head_dim).
inline const double* inv_freq_table(float theta, int head_dim) {
  thread_local float c_theta = 0.0f;
  thread_local int c_dim = 0;
  thread_local double c_tab[kMaxHeadDim / 2];
  if (c_theta != theta || c_dim != head_dim) {
    for (int i = 0; i < head_dim / 2; ++i)
      c_tab[i] = std::pow(double(theta), -2.0 * double(i) / double(head_dim));
    c_theta = theta;
    c_dim = head_dim;
  }
  return c_tab;
}

// cos / sin of position pos for the D/2 frequencies, into shared memory;
// thread tid of nt does entries tid, tid + nt, ...
template <int D>
__device__ __forceinline__ void angles(int pos, const double* inv_freq, float* s_cos, float* s_sin, int tid, int nt) {
  for (int i = tid; i < D / 2; i += nt) {
    const double ang = double(pos) * inv_freq[i];
    const double turns = rint(ang * 0.15915494309189535);  // 1 / (2 pi)
    const float r = float(fma(-turns, 6.283185307179586, ang));
    float sn, cs;
    sincosf(r, &sn, &cs);
    s_cos[i] = cs;
    s_sin[i] = sn;
  }
}

template <int E>
struct VecF;  // E consecutive floats
template <>
struct VecF<2> {
  using T = float2;
};
template <>
struct VecF<4> {
  using T = float4;
};

// The lane's E elements of a head vector at src (+ lane * E); kVec: one
// vector load (src and the row stride aligned to E floats).
template <int E, bool kVec>
__device__ __forceinline__ void load(float (&x)[E], const float* src) {
  if constexpr (kVec) {
    const typename VecF<E>::T v = *reinterpret_cast<const typename VecF<E>::T*>(src);
    const float* f = reinterpret_cast<const float*>(&v);
#pragma unroll
    for (int e = 0; e < E; ++e) x[e] = f[e];
  } else {
#pragma unroll
    for (int e = 0; e < E; ++e) x[e] = src[e];
  }
}

// QK-norm with weight nw (nullptr: none; RMS over the D elements, eps),
// then the rotation by the angles in s_cos / s_sin, in place.
template <int D, int kStyle>
__device__ __forceinline__ void norm_rotate(float (&x)[D / 32], const float* nw, float eps, const float* s_cos,
                                            const float* s_sin, int lane) {
  constexpr int E = D / 32;
  if (nw) {
    float ss = 0.0f;
#pragma unroll
    for (int e = 0; e < E; ++e) ss = fmaf(x[e], x[e], ss);
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, off);
    const float scale = 1.0f / sqrtf(ss / float(D) + eps);
#pragma unroll
    for (int e = 0; e < E; ++e) x[e] = x[e] * scale * nw[lane * E + e];
  }
  if constexpr (kStyle == QSP_ROPE_NEOX) {
    // Lanes 0-15 hold the first half (a), lanes 16-31 the second (b).
    const bool first = lane < 16;
#pragma unroll
    for (int e = 0; e < E; ++e) {
      const float other = __shfl_xor_sync(0xffffffffu, x[e], 16);
      const int i = (lane & 15) * E + e;
      const float c = s_cos[i], s = s_sin[i];
      x[e] = first ? x[e] * c - other * s   // a' = a cos - b sin
                   : other * s + x[e] * c;  // b' = a sin + b cos
    }
  } else {
#pragma unroll
    for (int e = 0; e < E; e += 2) {
      const int i = (lane * E + e) / 2;
      const float c = s_cos[i], s = s_sin[i];
      const float a = x[e], b = x[e + 1];
      x[e] = a * c - b * s;
      x[e + 1] = a * s + b * c;
    }
  }
}

// The E elements as fp16 at dst (E * 2-byte aligned).
template <int E>
__device__ __forceinline__ void store_half(__half* dst, const float (&x)[E]) {
  if constexpr (E == 4) {
    __half2 lo = __floats2half2_rn(x[0], x[1]), hi = __floats2half2_rn(x[2], x[3]);
    uint2 u;
    u.x = *reinterpret_cast<uint32_t*>(&lo);
    u.y = *reinterpret_cast<uint32_t*>(&hi);
    *reinterpret_cast<uint2*>(dst) = u;
  } else {
    *reinterpret_cast<__half2*>(dst) = __floats2half2_rn(x[0], x[1]);
  }
}

}  // namespace rope
}  // namespace kern
}  // namespace qsp
