// QK-norm + RoPE + KV-cache write: turns the fp32 QKV GEMM output of a chunk
// into fp16 queries and writes the chunk's keys and values into the cache.
//
// One warp per head vector (q heads, then k heads, then v heads), D / 32
// consecutive elements per lane, so the QK-norm is one warp reduction and a
// NEOX pair (i, i + D/2) sits in lanes l and l + 16 (one shuffle); an
// interleaved pair (2i, 2i+1) sits inside a lane. A block covers one token
// and kWarps head vectors; it first builds that token's cos/sin table
// (D/2 entries) in shared memory, shared by all its heads.
//
// Position p = *past + m is read on the device (in a batched pass: the
// token's piece's past + its index in the piece). Angles: inv_freq_i =
// theta^(-2i/D) comes from the host in double, exactly as the CPU reference
// computes it; the device forms pos * inv_freq_i in double and reduces it
// modulo 2 pi in double before an accurate sincosf, so angles stay exact to
// fp32 rounding at any position (an fp32 product alone would be ~2e-3 rad
// off at pos = 32768).
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "kernels/env.h"
#include "kernels/kernels.h"
#include "kernels/pdl.h"
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

namespace {

using rope::kMaxHeadDim;
constexpr int kWarps = 8;  // warps per block
// Head vectors per warp of the wide kernel (QkRopeArgs::wide; the default
// for chunks of more than 16 tokens): a block then covers 32 of a token's
// head vectors (the 0.6B's q | k | v: all of them), its warps' loads issued
// before the angles, the angles made once per 32 vectors instead of 8.
// Measured against the narrow kernel (H100, twenty-fourth session, two
// alternating rounds): 0.6B 2048 tokens -1.8%, 512 -0.4%, 8B 512 -1.2%,
// the rest within noise. The narrow kernel's 9 us a layer of the 0.6B's
// 512-token pass (ncu) was not mostly its angles then: ncu flushes the
// caches, and the fp32 q | k | v it reads comes from L2 in a real pass.
constexpr int kWideVecs = 4;

struct RopeParams {
  const float* qkv;
  const float* q_norm;
  const float* k_norm;
  __half* q_out;
  __half* k_cache;
  __half* v_cache;
  const int32_t* past;
  const SeqDesc* seqs;       // batched pass only (kBatch)
  const int32_t* token_seq;
  int layer;
  int ld, M, n_heads, n_kv_heads, max_seq;
  float eps;
  double inv_freq[kMaxHeadDim / 2];
};

// Where token m goes: its position and its (context's, layer's) cache.
template <int D, bool kBatch>
__device__ __forceinline__ void token_target(const RopeParams& p, int m, int& pos, int& max_seq, __half*& k_cache,
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

// Head vector `vec` of token m, its lane's E elements loaded in x: the
// QK-norm and rotation of q and k heads, then the store (q: q_out; k, v: the
// cache at pos, nothing where pos is out of the cache).
template <int D, int kStyle>
__device__ __forceinline__ void finish_vector(const RopeParams& p, float (&x)[D / 32], int vec, int m, int pos,
                                              int max_seq, __half* k_cache, __half* v_cache, const float* s_cos,
                                              const float* s_sin, int lane) {
  // 0: query head, 1: key head, 2: value head
  const int kind = vec < p.n_heads ? 0 : vec < p.n_heads + p.n_kv_heads ? 1 : 2;
  const int h = kind == 0 ? vec : kind == 1 ? vec - p.n_heads : vec - p.n_heads - p.n_kv_heads;
  if (kind < 2) rope::norm_rotate<D, kStyle>(x, kind == 0 ? p.q_norm : p.k_norm, p.eps, s_cos, s_sin, lane);

  __half* dst;
  if (kind == 0) {
    dst = p.q_out + (size_t(m) * p.n_heads + h) * D;
  } else {
    if (pos < 0 || pos >= max_seq) return;  // out of the cache: nothing to write
    dst = (kind == 1 ? k_cache : v_cache) + (size_t(h) * max_seq + pos) * D;
  }
  rope::store_half<D / 32>(dst + lane * (D / 32), x);
}

// The narrow kernel: one head vector per warp (chunks of up to 16 tokens:
// decode steps), the token's angles first.
template <int D, int kStyle, bool kVecLoad, bool kBatch>
__global__ void __launch_bounds__(kWarps * 32) qk_rope_kernel(const RopeParams p) {
  pdl_wait();  // kernels/pdl.h
  pdl_launch_dependents();
  constexpr int E = D / 32;  // elements per lane
  __shared__ float s_cos[D / 2], s_sin[D / 2];

  const int m = int(blockIdx.x);
  int pos, max_seq;
  __half *k_cache, *v_cache;
  token_target<D, kBatch>(p, m, pos, max_seq, k_cache, v_cache);
  rope::angles<D>(pos, p.inv_freq, s_cos, s_sin, int(threadIdx.x), kWarps * 32);
  __syncthreads();

  const int lane = int(threadIdx.x) & 31;
  const int vec = int(blockIdx.y) * kWarps + int(threadIdx.x >> 5);
  if (vec >= p.n_heads + 2 * p.n_kv_heads) return;
  // q at column 0, k at q_dim, v at q_dim + kv_dim: vec * D in every case.
  float x[E];
  rope::load<E, kVecLoad>(x, p.qkv + size_t(m) * p.ld + size_t(vec) * D + lane * E);
  finish_vector<D, kStyle>(p, x, vec, m, pos, max_seq, k_cache, v_cache, s_cos, s_sin, lane);
}

// The wide kernel (QkRopeArgs::wide): kWideVecs head vectors per warp (warp
// w's: (blockIdx.y * kWideVecs + j) * kWarps + w, consecutive warps on
// consecutive vectors), all loaded before the token's angles are made.
template <int D, int kStyle, bool kVecLoad, bool kBatch>
__global__ void __launch_bounds__(kWarps * 32) qk_rope_wide_kernel(const RopeParams p) {
  pdl_wait();  // kernels/pdl.h
  pdl_launch_dependents();
  constexpr int E = D / 32;  // elements per lane
  __shared__ float s_cos[D / 2], s_sin[D / 2];

  const int m = int(blockIdx.x);
  int pos, max_seq;
  __half *k_cache, *v_cache;
  token_target<D, kBatch>(p, m, pos, max_seq, k_cache, v_cache);
  const int lane = int(threadIdx.x) & 31;
  const int n_vec = p.n_heads + 2 * p.n_kv_heads;
  const auto vec_of = [&](int j) { return (int(blockIdx.y) * kWideVecs + j) * kWarps + int(threadIdx.x >> 5); };
  // q at column 0, k at q_dim, v at q_dim + kv_dim: vec * D in every case.
  const float* row = p.qkv + size_t(m) * p.ld + lane * E;
  float x[kWideVecs][E];
#pragma unroll
  for (int j = 0; j < kWideVecs; ++j)
    if (vec_of(j) < n_vec) rope::load<E, kVecLoad>(x[j], row + size_t(vec_of(j)) * D);
  rope::angles<D>(pos, p.inv_freq, s_cos, s_sin, int(threadIdx.x), kWarps * 32);
  __syncthreads();
#pragma unroll
  for (int j = 0; j < kWideVecs; ++j)
    if (vec_of(j) < n_vec)
      finish_vector<D, kStyle>(p, x[j], vec_of(j), m, pos, max_seq, k_cache, v_cache, s_cos, s_sin, lane);
}

template <int D, int kStyle, bool kVecLoad, bool kBatch>
cudaError_t launch(const RopeParams& p, bool wide, cudaStream_t stream) {
  const int n_vec = p.n_heads + 2 * p.n_kv_heads, per_block = kWarps * (wide ? kWideVecs : 1);
  const dim3 grid(unsigned(p.M), unsigned((n_vec + per_block - 1) / per_block));
  if (wide)
    return launch_pdl(PdlKernel::kQkRope, qk_rope_wide_kernel<D, kStyle, kVecLoad, kBatch>, grid, dim3(kWarps * 32),
                      0, stream, p);
  return launch_pdl(PdlKernel::kQkRope, qk_rope_kernel<D, kStyle, kVecLoad, kBatch>, grid, dim3(kWarps * 32), 0,
                    stream, p);
}

template <int D, bool kBatch>
cudaError_t dispatch(const RopeParams& p, int style, bool vec, bool wide, cudaStream_t stream) {
  if (style == QSP_ROPE_NEOX)
    return vec ? launch<D, QSP_ROPE_NEOX, true, kBatch>(p, wide, stream)
               : launch<D, QSP_ROPE_NEOX, false, kBatch>(p, wide, stream);
  return vec ? launch<D, QSP_ROPE_INTERLEAVED, true, kBatch>(p, wide, stream)
             : launch<D, QSP_ROPE_INTERLEAVED, false, kBatch>(p, wide, stream);
}

bool aligned(const void* ptr, size_t a) { return (reinterpret_cast<uintptr_t>(ptr) % a) == 0; }

// Whether qk_rope() takes these arguments.
bool args_ok(const QkRopeArgs& a) {
  const bool batch = a.seqs != nullptr;
  if (!a.qkv || !a.q_out) return false;
  if (batch ? !a.token_seq || a.layer < 0 : !a.k_cache || !a.v_cache || !a.past || a.max_seq < 1) return false;
  if (a.head_dim != 64 && a.head_dim != 128) return false;
  if (a.M < 1 || a.n_heads < 1 || a.n_kv_heads < 1) return false;
  if (a.rope_style != QSP_ROPE_NEOX && a.rope_style != QSP_ROPE_INTERLEAVED) return false;
  if (a.wide < 0 || a.wide > 2) return false;
  if (!(a.theta > 0.0f) || !std::isfinite(a.theta) || !(a.eps >= 0.0f)) return false;
  const int64_t qkv_cols = int64_t(a.n_heads + 2 * a.n_kv_heads) * a.head_dim;
  if (a.ld < qkv_cols) return false;
  if (int64_t(a.n_heads + 2 * a.n_kv_heads + kWarps - 1) / kWarps > 65535) return false;
  // fp16 stores of D/32 elements per lane.
  const size_t st_align = size_t(a.head_dim / 32) * sizeof(__half);
  if (!aligned(a.q_out, st_align) || !aligned(a.k_cache, st_align) || !aligned(a.v_cache, st_align)) return false;
  return aligned(a.qkv, sizeof(float));
}

}  // namespace

cudaError_t qk_rope(const QkRopeArgs& a, cudaStream_t stream) {
  if (!args_ok(a)) return cudaErrorInvalidValue;
  const bool batch = a.seqs != nullptr;
  const size_t ld_align = size_t(a.head_dim / 32) * sizeof(float);
  const bool vec = aligned(a.qkv, ld_align) && (size_t(a.ld) * sizeof(float)) % ld_align == 0;

  RopeParams p;
  p.qkv = a.qkv;
  p.q_norm = a.q_norm;
  p.k_norm = a.k_norm;
  p.q_out = a.q_out;
  p.k_cache = a.k_cache;
  p.v_cache = a.v_cache;
  p.past = a.past;
  p.seqs = a.seqs;
  p.token_seq = a.token_seq;
  p.layer = a.layer;
  p.ld = a.ld;
  p.M = a.M;
  p.n_heads = a.n_heads;
  p.n_kv_heads = a.n_kv_heads;
  p.max_seq = a.max_seq;
  p.eps = a.eps;
  const double* tab = rope::inv_freq_table(a.theta, a.head_dim);
  for (int i = 0; i < a.head_dim / 2; ++i) p.inv_freq[i] = tab[i];
  for (int i = a.head_dim / 2; i < kMaxHeadDim / 2; ++i) p.inv_freq[i] = 0.0;
  // The wide kernel for chunks of more than 16 tokens ($QSP_ROPE_WIDE=0:
  // never), or as the caller forces it.
  static const bool wide_env = env_default_on("QSP_ROPE_WIDE");
  const bool wide = a.wide == 0 ? wide_env && a.M > 16 : a.wide == 2;
  if (batch)
    return a.head_dim == 128 ? dispatch<128, true>(p, a.rope_style, vec, wide, stream)
                             : dispatch<64, true>(p, a.rope_style, vec, wide, stream);
  return a.head_dim == 128 ? dispatch<128, false>(p, a.rope_style, vec, wide, stream)
                           : dispatch<64, false>(p, a.rope_style, vec, wide, stream);
}

}  // namespace kern
}  // namespace qsp
