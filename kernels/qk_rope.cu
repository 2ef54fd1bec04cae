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
// token's piece's past + its index in the piece); the per-head math (norm,
// angles, rotation) is kernels/qk_rope.cuh, shared with the decode
// attention that does it in its own prologue.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "kernels/kernels.h"
#include "kernels/pdl.h"
#include "kernels/qk_rope.cuh"
#include "qsp/qsp.h"

namespace qsp {
namespace kern {
namespace {

using rope::kMaxHeadDim;
constexpr int kWarps = 8;  // head vectors per block

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

template <int D, int kStyle, bool kVecLoad, bool kBatch>
__global__ void __launch_bounds__(kWarps * 32) qk_rope_kernel(const RopeParams p) {
  pdl_wait();  // kernels/pdl.h
  pdl_launch_dependents();
  constexpr int E = D / 32;  // elements per lane
  constexpr int kHalf = D / 2;
  __shared__ float s_cos[kHalf], s_sin[kHalf];

  const int m = int(blockIdx.x);
  // Where token m goes: its position and its (context's, layer's) cache.
  int pos, max_seq;
  __half *k_cache, *v_cache;
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
  rope::angles<D>(pos, p.inv_freq, s_cos, s_sin, int(threadIdx.x), kWarps * 32);
  __syncthreads();

  const int lane = int(threadIdx.x) & 31;
  const int vec = int(blockIdx.y) * kWarps + int(threadIdx.x >> 5);
  const int n_vec = p.n_heads + 2 * p.n_kv_heads;
  if (vec >= n_vec) return;
  // 0: query head, 1: key head, 2: value head
  const int kind = vec < p.n_heads ? 0 : vec < p.n_heads + p.n_kv_heads ? 1 : 2;
  const int h = kind == 0 ? vec : kind == 1 ? vec - p.n_heads : vec - p.n_heads - p.n_kv_heads;
  // q at column 0, k at q_dim, v at q_dim + kv_dim: vec * D in every case.
  const float* src = p.qkv + size_t(m) * p.ld + size_t(vec) * D + lane * E;

  float x[E];
  rope::load<E, kVecLoad>(x, src);
  if (kind < 2) rope::norm_rotate<D, kStyle>(x, kind == 0 ? p.q_norm : p.k_norm, p.eps, s_cos, s_sin, lane);

  __half* dst;
  if (kind == 0) {
    dst = p.q_out + (size_t(m) * p.n_heads + h) * D;
  } else {
    if (pos < 0 || pos >= max_seq) return;  // out of the cache: nothing to write
    dst = (kind == 1 ? k_cache : v_cache) + (size_t(h) * max_seq + pos) * D;
  }
  rope::store_half<E>(dst + lane * E, x);
}

template <int D, int kStyle, bool kVecLoad, bool kBatch>
cudaError_t launch(const RopeParams& p, cudaStream_t stream) {
  const int n_vec = p.n_heads + 2 * p.n_kv_heads;
  const dim3 grid(unsigned(p.M), unsigned((n_vec + kWarps - 1) / kWarps));
  return launch_pdl(PdlKernel::kQkRope, qk_rope_kernel<D, kStyle, kVecLoad, kBatch>, grid, dim3(kWarps * 32), 0,
                    stream, p);
}

template <int D, bool kBatch>
cudaError_t dispatch(const RopeParams& p, int style, bool vec, cudaStream_t stream) {
  if (style == QSP_ROPE_NEOX)
    return vec ? launch<D, QSP_ROPE_NEOX, true, kBatch>(p, stream) : launch<D, QSP_ROPE_NEOX, false, kBatch>(p, stream);
  return vec ? launch<D, QSP_ROPE_INTERLEAVED, true, kBatch>(p, stream)
             : launch<D, QSP_ROPE_INTERLEAVED, false, kBatch>(p, stream);
}

bool aligned(const void* ptr, size_t a) { return (reinterpret_cast<uintptr_t>(ptr) % a) == 0; }

}  // namespace

bool qk_rope_args_ok(const QkRopeArgs& a) {
  const bool batch = a.seqs != nullptr;
  if (!a.qkv || !a.q_out) return false;
  if (batch ? !a.token_seq || a.layer < 0 : !a.k_cache || !a.v_cache || !a.past || a.max_seq < 1) return false;
  if (a.head_dim != 64 && a.head_dim != 128) return false;
  if (a.M < 1 || a.n_heads < 1 || a.n_kv_heads < 1) return false;
  if (a.rope_style != QSP_ROPE_NEOX && a.rope_style != QSP_ROPE_INTERLEAVED) return false;
  if (!(a.theta > 0.0f) || !std::isfinite(a.theta) || !(a.eps >= 0.0f)) return false;
  const int64_t qkv_cols = int64_t(a.n_heads + 2 * a.n_kv_heads) * a.head_dim;
  if (a.ld < qkv_cols) return false;
  if (int64_t(a.n_heads + 2 * a.n_kv_heads + kWarps - 1) / kWarps > 65535) return false;
  // fp16 stores of D/32 elements per lane.
  const size_t st_align = size_t(a.head_dim / 32) * sizeof(__half);
  if (!aligned(a.q_out, st_align) || !aligned(a.k_cache, st_align) || !aligned(a.v_cache, st_align)) return false;
  return aligned(a.qkv, sizeof(float));
}

cudaError_t qk_rope(const QkRopeArgs& a, cudaStream_t stream) {
  if (!qk_rope_args_ok(a)) return cudaErrorInvalidValue;
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
  if (batch)
    return a.head_dim == 128 ? dispatch<128, true>(p, a.rope_style, vec, stream)
                             : dispatch<64, true>(p, a.rope_style, vec, stream);
  return a.head_dim == 128 ? dispatch<128, false>(p, a.rope_style, vec, stream)
                           : dispatch<64, false>(p, a.rope_style, vec, stream);
}

}  // namespace kern
}  // namespace qsp
