// The QK-norm + RoPE + KV-write math of one head vector in a warp, used by
// kernels/qk_rope.cu (its narrow and wide kernels).
//
// A head vector of D fp32 values lies in one warp, E = D / 32 consecutive
// elements per lane, so the QK-norm is one warp reduction and a NEOX pair
// (i, i + D/2) sits in lanes l and l + 16 (one shuffle); an interleaved pair
// (2i, 2i+1) sits inside a lane.
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

#include "kernels/kernels.h"
#include "qsp/qsp.h"

namespace qsp {
namespace kern {
// The per-head math: a head vector of D fp32 values in one warp, E = D / 32
// consecutive elements per lane.
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

// Where a lane's element e finds its angle: pair i of the D / 2 (NEOX: i
// and i + D/2 in lanes l and l + 16; interleaved: 2i and 2i + 1 in a lane,
// read at even e).
template <int D, int kStyle>
__device__ __forceinline__ int angle_index(int lane, int e) {
  constexpr int E = D / 32;
  return kStyle == QSP_ROPE_NEOX ? (lane & 15) * E + e : (lane * E + e) / 2;
}

// The angles of a token in shared memory (qk_rope's kernels: the block's
// token), as norm_rotate reads them: ang(e, i, c, s).
struct SharedAngles {
  const float* s_cos;
  const float* s_sin;
  __device__ __forceinline__ void operator()(int, int i, float& c, float& s) const {
    c = s_cos[i];
    s = s_sin[i];
  }
};

// QK-norm with weight nw (nullptr: none; RMS over the D elements, eps),
// then the rotation by the angles ang gives, in place. nw_lane (or null):
// the lane's E weights nw[lane * E ..], already loaded.
template <int D, int kStyle, class Ang>
__device__ __forceinline__ void norm_rotate(float (&x)[D / 32], const float* nw, float eps, const Ang& ang, int lane,
                                            const float* nw_lane = nullptr) {
  constexpr int E = D / 32;
  if (nw) {
    float ss = 0.0f;
#pragma unroll
    for (int e = 0; e < E; ++e) ss = fmaf(x[e], x[e], ss);
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, off);
    const float scale = 1.0f / sqrtf(ss / float(D) + eps);
#pragma unroll
    for (int e = 0; e < E; ++e) x[e] = x[e] * scale * (nw_lane ? nw_lane[e] : nw[lane * E + e]);
  }
  if constexpr (kStyle == QSP_ROPE_NEOX) {
    // Lanes 0-15 hold the first half (a), lanes 16-31 the second (b).
    const bool first = lane < 16;
#pragma unroll
    for (int e = 0; e < E; ++e) {
      const float other = __shfl_xor_sync(0xffffffffu, x[e], 16);
      float c, s;
      ang(e, angle_index<D, kStyle>(lane, e), c, s);
      x[e] = first ? x[e] * c - other * s   // a' = a cos - b sin
                   : other * s + x[e] * c;  // b' = a sin + b cos
    }
  } else {
#pragma unroll
    for (int e = 0; e < E; e += 2) {
      float c, s;
      ang(e, angle_index<D, kStyle>(lane, e), c, s);
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

// Where a chunk's head vectors go (qk_rope()): q to q_out [M][n_heads][D],
// k and v into the cache at each token's position (a single context's layer
// from *past, or, in a batched pass (seqs), each piece's own cache of this
// layer).
struct Out {
  const float* q_norm;  // [D], or nullptr: no QK-norm
  const float* k_norm;
  __half* q_out;
  __half* k_cache;  // single context: this layer's [n_kv_heads][max_seq][D]
  __half* v_cache;
  const int32_t* past;  // single context (device)
  const SeqDesc* seqs;  // batched pass (else nullptr), with each token's piece
  const int32_t* token_seq;
  int layer;
  int n_heads, n_kv_heads, max_seq;
  float eps;
};

// Where token m goes: its position and its (context's, layer's) cache.
// From qk_rope()'s arguments.
inline Out make_out(const QkRopeArgs& a) {
  Out o;
  o.q_norm = a.q_norm;
  o.k_norm = a.k_norm;
  o.q_out = a.q_out;
  o.k_cache = a.k_cache;
  o.v_cache = a.v_cache;
  o.past = a.past;
  o.seqs = a.seqs;
  o.token_seq = a.token_seq;
  o.layer = a.layer;
  o.n_heads = a.n_heads;
  o.n_kv_heads = a.n_kv_heads;
  o.max_seq = a.max_seq;
  o.eps = a.eps;
  return o;
}

template <int D, bool kBatch>
__device__ __forceinline__ void token_target(const Out& p, int m, int& pos, int& max_seq, __half*& k_cache,
                                             __half*& v_cache) {
  if constexpr (kBatch) {
    const SeqDesc s = p.seqs[p.token_seq[m]];
    pos = s.past + (m - s.start);
    max_seq = s.max_seq;
    const size_t layer_off = size_t(p.layer) * p.n_kv_heads * size_t(s.max_seq) * D;
    k_cache = s.k_cache + layer_off;
    v_cache = s.v_cache + layer_off;
  } else {
    pos = *p.past + m;
    max_seq = p.max_seq;
    k_cache = p.k_cache;
    v_cache = p.v_cache;
  }
}

// The lane's E QK-norm weights of head vector vec into w (the model's
// constants: they may load before pdl_wait); false where vec has none (a
// value head, or no QK-norm).
template <int D>
__device__ __forceinline__ bool norm_weights(const Out& p, int vec, int lane, float (&w)[D / 32]) {
  constexpr int E = D / 32;
  const float* nw = vec < p.n_heads ? p.q_norm : vec < p.n_heads + p.n_kv_heads ? p.k_norm : nullptr;
  if (!nw) return false;
#pragma unroll
  for (int e = 0; e < E; ++e) w[e] = nw[lane * E + e];
  return true;
}

// Head vector `vec` of token m, its lane's E elements loaded in x: the
// QK-norm and rotation of q and k heads, then the store (q: q_out; k, v: the
// cache at pos, nothing where pos is out of the cache).
// nw_lane (or null): the lane's QK-norm weights of this vector (norm_weights).
template <int D, int kStyle, class Ang>
__device__ __forceinline__ void finish_vector(const Out& p, float (&x)[D / 32], int vec, int m, int pos,
                                              int max_seq, __half* k_cache, __half* v_cache, const Ang& ang,
                                              int lane, const float* nw_lane = nullptr) {
  // 0: query head, 1: key head, 2: value head
  const int kind = vec < p.n_heads ? 0 : vec < p.n_heads + p.n_kv_heads ? 1 : 2;
  const int h = kind == 0 ? vec : kind == 1 ? vec - p.n_heads : vec - p.n_heads - p.n_kv_heads;
  if (kind < 2) norm_rotate<D, kStyle>(x, kind == 0 ? p.q_norm : p.k_norm, p.eps, ang, lane, nw_lane);

  __half* dst;
  if (kind == 0) {
    dst = p.q_out + (size_t(m) * p.n_heads + h) * D;
  } else {
    if (pos < 0 || pos >= max_seq) return;  // out of the cache: nothing to write
    dst = (kind == 1 ? k_cache : v_cache) + (size_t(h) * max_seq + pos) * D;
  }
  store_half<D / 32>(dst + lane * (D / 32), x);
}

}  // namespace rope
}  // namespace kern
}  // namespace qsp
