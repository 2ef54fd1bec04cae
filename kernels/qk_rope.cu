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
// token's piece's past + its index in the piece). The per-head math and the
// angles: kernels/rope.cuh.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "kernels/env.h"
#include "kernels/kernels.h"
#include "kernels/pdl.h"
#include "kernels/rope.cuh"
#include "qsp/qsp.h"

namespace qsp {
namespace kern {
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
  int ld, M;
  // The token's position and angles before pdl_wait (QSP_ROPE_EARLY, on
  // unless "0"): past and a batched pass's pieces are set before the pass
  // begins (the attention's prefetch reads them early too, kernels/pdl.h),
  // so the angles' double-precision reduction and sincosf overlap the QKV
  // GEMV's tail instead of following it.
  int early;
  // QSP_ROPE_PRE (on unless "0"; the narrow kernel): the vector's QK-norm
  // weights (constants) loaded before pdl_wait and its q | k | v elements
  // right after it, ahead of the angles' block barrier, instead of after
  // that barrier and the norm's sum. H100, thirty-third session, three
  // runs: the 8B step 2.312 / 2.320 / 2.317 ms against 2.323 / 2.328 /
  // 2.327 without, the 0.6B's equal; the decode, GEMV and fusion tests
  // with it on passed in the thirty-fifth (19 cases), so it is the default.
  int pre;
  rope::Out o;
  double inv_freq[kMaxHeadDim / 2];
};

// The narrow kernel: one head vector per warp (chunks of up to 16 tokens:
// decode steps), the token's angles first.
template <int D, int kStyle, bool kVecLoad, bool kBatch>
__global__ void __launch_bounds__(kWarps * 32) qk_rope_kernel(const RopeParams p) {
  constexpr int E = D / 32;  // elements per lane
  __shared__ float s_cos[D / 2], s_sin[D / 2];

  const int m = int(blockIdx.x);
  const int lane = int(threadIdx.x) & 31;
  const int vec = int(blockIdx.y) * kWarps + int(threadIdx.x >> 5);
  const bool active = vec < p.o.n_heads + 2 * p.o.n_kv_heads;
  // q at column 0, k at q_dim, v at q_dim + kv_dim: vec * D in every case.
  const float* src = p.qkv + size_t(m) * p.ld + size_t(vec) * D + lane * E;
  int pos, max_seq;
  __half *k_cache, *v_cache;
  float nw[E];
  const bool has_nw = p.pre && active && rope::norm_weights<D>(p.o, vec, lane, nw);
  if (p.early) {
    rope::token_target<D, kBatch>(p.o, m, pos, max_seq, k_cache, v_cache);
    rope::angles<D>(pos, p.inv_freq, s_cos, s_sin, int(threadIdx.x), kWarps * 32);
  }
  pdl_wait();  // kernels/pdl.h
  pdl_launch_dependents();
  float x[E];
  if (p.pre && active) rope::load<E, kVecLoad>(x, src);
  if (!p.early) {
    rope::token_target<D, kBatch>(p.o, m, pos, max_seq, k_cache, v_cache);
    rope::angles<D>(pos, p.inv_freq, s_cos, s_sin, int(threadIdx.x), kWarps * 32);
  }
  __syncthreads();

  if (!active) return;
  if (!p.pre) rope::load<E, kVecLoad>(x, src);
  rope::finish_vector<D, kStyle>(p.o, x, vec, m, pos, max_seq, k_cache, v_cache, rope::SharedAngles{s_cos, s_sin},
                                 lane, has_nw ? nw : nullptr);
}

// The wide kernel (QkRopeArgs::wide): kWideVecs head vectors per warp (warp
// w's: (blockIdx.y * kWideVecs + j) * kWarps + w, consecutive warps on
// consecutive vectors), all loaded before the token's angles are made.
template <int D, int kStyle, bool kVecLoad, bool kBatch>
__global__ void __launch_bounds__(kWarps * 32) qk_rope_wide_kernel(const RopeParams p) {
  constexpr int E = D / 32;  // elements per lane
  __shared__ float s_cos[D / 2], s_sin[D / 2];

  const int m = int(blockIdx.x);
  int pos, max_seq;
  __half *k_cache, *v_cache;
  rope::token_target<D, kBatch>(p.o, m, pos, max_seq, k_cache, v_cache);
  if (p.early) rope::angles<D>(pos, p.inv_freq, s_cos, s_sin, int(threadIdx.x), kWarps * 32);
  pdl_wait();  // kernels/pdl.h
  pdl_launch_dependents();
  const int lane = int(threadIdx.x) & 31;
  const int n_vec = p.o.n_heads + 2 * p.o.n_kv_heads;
  const auto vec_of = [&](int j) { return (int(blockIdx.y) * kWideVecs + j) * kWarps + int(threadIdx.x >> 5); };
  // q at column 0, k at q_dim, v at q_dim + kv_dim: vec * D in every case.
  const float* row = p.qkv + size_t(m) * p.ld + lane * E;
  float x[kWideVecs][E];
#pragma unroll
  for (int j = 0; j < kWideVecs; ++j)
    if (vec_of(j) < n_vec) rope::load<E, kVecLoad>(x[j], row + size_t(vec_of(j)) * D);
  if (!p.early) rope::angles<D>(pos, p.inv_freq, s_cos, s_sin, int(threadIdx.x), kWarps * 32);
  __syncthreads();
#pragma unroll
  for (int j = 0; j < kWideVecs; ++j)
    if (vec_of(j) < n_vec)
      rope::finish_vector<D, kStyle>(p.o, x[j], vec_of(j), m, pos, max_seq, k_cache, v_cache,
                                     rope::SharedAngles{s_cos, s_sin}, lane);
}

template <int D, int kStyle, bool kVecLoad, bool kBatch>
cudaError_t launch(const RopeParams& p, bool wide, cudaStream_t stream) {
  const int n_vec = p.o.n_heads + 2 * p.o.n_kv_heads, per_block = kWarps * (wide ? kWideVecs : 1);
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

// qk_rope()'s kernel parameters for a (args_ok).
RopeParams params(const QkRopeArgs& a) {
  RopeParams p;
  p.qkv = a.qkv;
  p.ld = a.ld;
  p.M = a.M;
  p.o = rope::make_out(a);
  static const bool early = env_default_on("QSP_ROPE_EARLY");
  p.early = early ? 1 : 0;
  static const bool pre = env_default_on("QSP_ROPE_PRE");
  p.pre = pre ? 1 : 0;
  const double* tab = rope::inv_freq_table(a.theta, a.head_dim);
  for (int i = 0; i < a.head_dim / 2; ++i) p.inv_freq[i] = tab[i];
  for (int i = a.head_dim / 2; i < kMaxHeadDim / 2; ++i) p.inv_freq[i] = 0.0;
  return p;
}

}  // namespace

cudaError_t qk_rope(const QkRopeArgs& a, cudaStream_t stream) {
  if (!args_ok(a)) return cudaErrorInvalidValue;
  const bool batch = a.seqs != nullptr;
  const size_t ld_align = size_t(a.head_dim / 32) * sizeof(float);
  const bool vec = aligned(a.qkv, ld_align) && (size_t(a.ld) * sizeof(float)) % ld_align == 0;
  const RopeParams p = params(a);
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
