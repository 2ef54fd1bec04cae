// The decode step's attention (M = 1) in one launch: split-KV whose merge is
// done inside the launch by a thread-block cluster, in parallel, instead of
// by a second kernel (kernels/attention_combine.cu). AttnPath::kCluster
// forces it; kAuto takes it (unless $QSP_ATTN_CLUSTER=0) for a decode step
// whose caller bounds the cache short (AttnArgs::max_past, kernels/attention.cu's
// attention_cluster_keys): it wins on short caches (H100, twenty-ninth
// session: the 0.6B step -10% up to 1024 cached keys, the 8B's -2% on an
// empty cache) and loses on long ones (+4-10% at 2048-4096 keys, where its
// 64 SMs of fp32 softmax fall behind mma.sync's tensor cores on 132).
//
// Work decomposition (one cluster per KV head)
//  - grid (1, n_kv_heads, CTAS), cluster (1, 1, CTAS): the CTAS blocks of
//    a KV head, kWarps warps each, split its keys 0 .. past (kv_len of them)
//    into CTAS * kWarps contiguous ranges, one a warp. A warp serves all GP
//    query heads of the GQA group: each cache row is read once.
//  - A warp copies its range's K and V rows into its own shared memory by
//    cp.async, up to DecLayout::kKeys rows a round (one round up to kKeys *
//    CTAS * kWarps cached keys: 3072 or 6144 for GQA groups up to 4, 2560
//    or 5120 for 8), all in flight at once; the rows of keys below `past`
//    before the PDL wait (the previous kernel, qk_rope, writes only row
//    `past`), the rest after it.
//  - Scores and the online softmax on the CUDA cores, fp32: a key row is
//    D / 8 lanes (16 bytes each: LDS.128), so a warp takes 32 / (D / 8) keys
//    a step, each lane group keeping its own running max, sum and 8 output
//    columns per head, updated once every kSteps steps; the groups merge by
//    shuffles at the end.
//  - Merge: the warps of a block in shared memory (after __syncthreads),
//    then, after a cluster barrier, block r merges slice r of the GP x D
//    outputs from the CTAS blocks' partials through distributed shared
//    memory, normalizes and stores fp16. A second cluster barrier keeps every
//    block's shared memory alive until all have read it.
// The partials are base-2: m (max of score * scale * log2 e), l (sum of
// 2^(s - m)), o (sum of 2^(s - m) v, unnormalized), as the split-KV kernel's.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <type_traits>

#include "kernels/attention_internal.cuh"
#include "kernels/pdl.h"
#include "kernels/per_device.h"
#include "kernels/ptx.cuh"
#include "kernels/rope.cuh"

namespace qsp {
namespace kern {
namespace attn {
namespace {

// Blocks a cluster (a KV head): CTAS, a template parameter: 8 (the portable
// cluster size; the 8 KV heads of the 8B and the 0.6B take 64 SMs) or 16
// (non-portable, sm_90: 128 SMs, twice the bandwidth and the CUDA cores for
// a long cache, where every 16-block cluster must find a GPC with 16 free
// SMs; launch_cluster checks that the GPU holds n_kv_heads of them at
// once). AttnArgs::cluster_ctas / $QSP_ATTN_CLUSTER_CTAS pick; 8 by default.
// On the H100 (twenty-ninth session) 8 KV heads' 16-block clusters do not
// fit at once (cudaOccupancyMaxActiveClusters), so 16 falls back to 8 there.
// Warps a block (the cache rows a warp holds a round: DecLayout::kKeys).
// The first version (4 warps x 64 rows) measured (H100, twenty-eighth
// session) 10% faster than mma.sync + combine on the 0.6B's decode step
// with an empty cache and 19-24% slower at 2048 cached keys, where each
// warp's 64 keys of fp32 online softmax (one warp per scheduler) are the
// cost: 8 x 32 halves the keys a warp walks and doubles the warps that
// hide each other's latency (the same bytes in flight). 16 warps of half
// the rows each (thirtieth session, groups 1-4, 64-127 registers) went no
// faster: equal to 3.5% slower on the 0.6B and the 8B steps from an empty
// cache to 4096 keys (bench/RESULTS.md), so the time a long cache adds is
// its copies, not a warp's walk of its keys.
constexpr int kWarps = 8;
// Key steps a lane group scores before it updates its running max and
// rescales its output once (the first version did both every key).
constexpr int kSteps = 4;

struct DecParams {
  const __half* q;
  const __half* k;
  const __half* v;
  __half* out;
  const int32_t* past;
  int max_seq, group;
  float scale_log2;
  // AttnArgs::rope (fused != 0): the QK-norm / RoPE / KV write folded in.
  // The queries come from qkv (not q), the new K / V row is written here.
  int fused, style, n_heads, n_kv_heads;
  const float* qkv;
  const float* q_norm;  // nullptr: no QK-norm
  const float* k_norm;
  __half* k_w;  // = k, v: where the new row goes
  __half* v_w;
  float eps;
  double inv_freq[rope::kMaxHeadDim / 2];
};

// The 8 fp16 of 16 bytes of shared memory at addr, widened to fp32.
__device__ __forceinline__ void lds_f16x8(uint32_t addr, float (&f)[8]) {
  uint32_t w[4];
  lds128(w[0], w[1], w[2], w[3], addr);
#pragma unroll
  for (int t = 0; t < 4; ++t) {
    const float2 a = __half22float2(*reinterpret_cast<const __half2*>(&w[t]));
    f[2 * t] = a.x, f[2 * t + 1] = a.y;
  }
}

template <int D, int GP>
struct DecLayout {
  // Cache rows a warp holds per round: as many as the shared memory takes
  // (the 8B / 0.6B shapes: 213 KB at GQA 4, 201 KB at 8, of the 227 KB a
  // block may have), so that a cache of up to kKeys * 64 keys is one round
  // of copies: a second round costs a whole copy latency, even for one row
  // (32 rows until the thirtieth session: the bench's 2048 cached keys,
  // 2049 with the new one, took two rounds).
  static constexpr int kKeys = GP <= 4 ? 48 : 40;
  static constexpr int kRow = D * 2;                  // bytes of a cache row
  static constexpr int kWarpKV = 2 * kKeys * kRow;    // a warp's K then V rows
  static constexpr int kPart = GP * (D + 2);          // floats of a partial: o [GP][D], m [GP], l [GP]
  static constexpr int kWarpParts = kWarps * kPart;   // the block's warps' partials
  // fp32 floats after the partials: the fused path's fp16-rounded queries
  // [GP][D] and the position's cos / sin [D / 2] each.
  static constexpr int kFused = GP * D + D;
  static constexpr int kBytes = kWarps * kWarpKV + (kWarpParts + kPart + kFused) * 4;
  static_assert(kBytes <= 227 * 1024, "a block's shared memory on sm_90");
};

// The fused path (DecParams::fused): what qk_rope would have done for this
// block, with its math (kernels/rope.cuh), so the bits are the same: the
// angles of position `past`, the block's GP query heads roped into q_s (as
// the fp16 values qk_rope would store), and, by the warp whose keys include
// `past`, the KV head's new K and V rows into the cache, visible to that
// warp's cp.async copies that follow.
template <int D, int GP>
__device__ __forceinline__ void fused_rope(const DecParams& p, int past, int kvh, int h0, bool has_new_row,
                                           size_t head_off, float* q_s, float* ang, int tid, int warp,
                                           int lane) {
  constexpr int E = D / 32;
  rope::angles<D>(past, p.inv_freq, ang, ang + D / 2, tid, 32 * kWarps);
  __syncthreads();
  const rope::SharedAngles sa{ang, ang + D / 2};
  auto norm_rotate = [&](float(&x)[E], const float* nw) {
    if (p.style == QSP_ROPE_NEOX)
      rope::norm_rotate<D, QSP_ROPE_NEOX>(x, nw, p.eps, sa, lane);
    else
      rope::norm_rotate<D, QSP_ROPE_INTERLEAVED>(x, nw, p.eps, sa, lane);
  };
  if (warp < GP) {
    float x[E];
    rope::load<E, false>(x, p.qkv + size_t(h0 + warp) * D + lane * E);
    norm_rotate(x, p.q_norm);
#pragma unroll
    for (int e = 0; e < E; ++e) q_s[warp * D + lane * E + e] = __half2float(__float2half_rn(x[e]));
  }
  if (has_new_row) {  // warp-uniform
    float k[E], v[E];
    rope::load<E, false>(k, p.qkv + size_t(p.n_heads + kvh) * D + lane * E);
    rope::load<E, false>(v, p.qkv + size_t(p.n_heads + p.n_kv_heads + kvh) * D + lane * E);
    norm_rotate(k, p.k_norm);
    const size_t row = head_off + size_t(past) * D + lane * E;
    rope::store_half<E>(p.k_w + row, k);
    rope::store_half<E>(p.v_w + row, v);
    __threadfence();  // the row reaches L2 before this warp's cp.async (L2) copies read it
    __syncwarp();
  }
  __syncthreads();  // q_s complete
}

template <int D, int GP, int CTAS>
__global__ void __launch_bounds__(32 * kWarps, 1) attn_decode_cluster_kernel(const DecParams p) {
  static_assert(CTAS == 8 || CTAS == 16, "clusters of 8 or 16 blocks");
  static_assert(GP * D % CTAS == 0, "the outputs split evenly over the cluster's blocks");
  static_assert(GP * D / CTAS <= 32 * kWarps, "a thread per output of a block's slice");
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  using L = DecLayout<D, GP>;
  // A partial's weight in a merge: 2^(m_i - m) for its max m_i under the
  // merged max m; 0 for an empty partial (m_i = -inf), never NaN.
  auto weight_of = [](float mi, float m) { return mi == -INFINITY ? 0.0f : ex2_approx(mi - m); };
  constexpr int kLanesPerKey = D / 8;            // 16-byte chunks of a row
  constexpr int kKeysPerStep = 32 / kLanesPerKey;  // 2 (D = 128) or 4 (D = 64)
  extern __shared__ __align__(128) unsigned char smem[];
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int kvh = blockIdx.y, rank = blockIdx.z;
  const int sub = lane / kLanesPerKey, c = lane % kLanesPerKey;
  const uint32_t sK = smem_u32(smem) + uint32_t(warp * L::kWarpKV), sV = sK + L::kKeys * L::kRow;
  float* const parts = reinterpret_cast<float*>(smem + kWarps * L::kWarpKV);  // [kWarps][kPart]
  float* const cta = parts + L::kWarpParts;                                    // [kPart]

  // `past` is set before the pass (never written by a kernel of it).
  const int past = *p.past;
  const int kv_len = min(past + 1, p.max_seq);
  const int n_ranges = CTAS * kWarps;
  const int per = (kv_len + n_ranges - 1) / n_ranges;
  const int begin = min(kv_len, (rank * kWarps + warp) * per), end = min(kv_len, begin + per);
  const size_t head_off = size_t(kvh) * p.max_seq * D;

  // Rows [r0, r0 + n) of the range into the warp's slots 0 .. n-1, the
  // chunks for which `pick(key)` holds (keys past the cache end are never
  // asked for: n stops at end).
  auto copy_rows = [&](int r0, int n, auto pick) {
    for (int i = lane; i < n * kLanesPerKey; i += 32) {
      const int row = i / kLanesPerKey, ch = i % kLanesPerKey, key = r0 + row;
      if (!pick(key)) continue;
      const size_t off = head_off + size_t(key) * D + ch * 8;
      const uint32_t dst = uint32_t(row * L::kRow + ch * 16);
      cp_async_cg_16<0, 0>(sK + dst, p.k + off, true);
      cp_async_cg_16<0, 0>(sV + dst, p.v + off, true);
    }
  };
  const int n0 = min(L::kKeys, end - begin);
  if (n0 > 0) copy_rows(begin, n0, [&](int key) { return key < past; });
  pdl_wait();
  pdl_launch_dependents();
  const int h0 = kvh * p.group;
  float* const q_s = cta + L::kPart;  // the fused path's queries, then its angles
  if (p.fused)
    fused_rope<D, GP>(p, past, kvh, h0, past < p.max_seq && begin <= past && past < end, head_off, q_s,
                      q_s + GP * D, tid, warp, lane);
  if (n0 > 0) copy_rows(begin, n0, [&](int key) { return key >= past; });
  cp_async_commit();

  // The lane's 8 columns c * 8 .. c * 8 + 7 of each query head's row.
  float q[GP][8];
#pragma unroll
  for (int h = 0; h < GP; ++h) {
    if (p.fused) {
#pragma unroll
      for (int t = 0; t < 8; ++t) q[h][t] = q_s[h * D + c * 8 + t] * p.scale_log2;
      continue;
    }
    uint32_t w[4];
    ldg128_dep(w[0], w[1], w[2], w[3], p.q + size_t(h0 + h) * D + c * 8);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&w[j]));
      q[h][2 * j] = f.x * p.scale_log2;
      q[h][2 * j + 1] = f.y * p.scale_log2;
    }
  }
  float m[GP], l[GP], o[GP][8];
#pragma unroll
  for (int h = 0; h < GP; ++h) {
    m[h] = -INFINITY;
    l[h] = 0.0f;
#pragma unroll
    for (int j = 0; j < 8; ++j) o[h][j] = 0.0f;
  }

  for (int r0 = begin; r0 < end; r0 += L::kKeys) {
    const int n = min(L::kKeys, end - r0);
    if (r0 != begin) {
      __syncwarp();  // every lane is done with the previous round's rows
      copy_rows(r0, n, [](int) { return true; });
      cp_async_commit();
    }
    cp_async_wait<0>();
    __syncwarp();  // every lane's copies landed and are visible to the warp
    // Keys sub, sub + kKeysPerStep, ... of the round, kSteps steps a chunk:
    // the chunk's scores first (the shuffles run over the whole warp, so a
    // lane group's missing keys score -inf), then one max and one rescale of
    // the running output a chunk instead of one a key, then P V (a missing
    // key's weight is 0, its V row read as row 0's, which every round has).
    for (int j0 = 0; j0 < n; j0 += kKeysPerStep * kSteps) {
      float sc[kSteps][GP];
#pragma unroll
      for (int st = 0; st < kSteps; ++st) {
        const int j = j0 + st * kKeysPerStep + sub;
        const bool ok = j < n;
        float kf[8];
        lds_f16x8(sK + uint32_t((ok ? j : 0) * L::kRow + c * 16), kf);
#pragma unroll
        for (int h = 0; h < GP; ++h) {
          float x = 0.0f;
#pragma unroll
          for (int t = 0; t < 8; ++t) x = fmaf(q[h][t], kf[t], x);
#pragma unroll
          for (int off = kLanesPerKey / 2; off > 0; off >>= 1) x += __shfl_xor_sync(0xffffffffu, x, off);
          sc[st][h] = ok ? x : -INFINITY;
        }
      }
      // Scores -> weights under the new running max (a lane group with no
      // key in the chunk keeps its state: its weights are all 0).
#pragma unroll
      for (int h = 0; h < GP; ++h) {
        float cm = sc[0][h];
#pragma unroll
        for (int st = 1; st < kSteps; ++st) cm = fmaxf(cm, sc[st][h]);
        const float mn = fmaxf(m[h], cm);
        const float corr = mn == -INFINITY ? 1.0f : weight_of(m[h], mn);
        float sum = 0.0f;
#pragma unroll
        for (int st = 0; st < kSteps; ++st) {
          sc[st][h] = weight_of(sc[st][h], mn);
          sum += sc[st][h];
        }
        m[h] = mn;
        l[h] = l[h] * corr + sum;
#pragma unroll
        for (int t = 0; t < 8; ++t) o[h][t] *= corr;
      }
#pragma unroll
      for (int st = 0; st < kSteps; ++st) {
        const int j = j0 + st * kKeysPerStep + sub;
        float vf[8];
        lds_f16x8(sV + uint32_t((j < n ? j : 0) * L::kRow + c * 16), vf);
#pragma unroll
        for (int h = 0; h < GP; ++h)
#pragma unroll
          for (int t = 0; t < 8; ++t) o[h][t] = fmaf(sc[st][h], vf[t], o[h][t]);
      }
    }
  }

  // The lane groups (same c, other sub) merge by shuffles: every lane ends
  // with the warp's partial of its 8 columns.
#pragma unroll
  for (int off = kLanesPerKey; off < 32; off <<= 1) {
#pragma unroll
    for (int h = 0; h < GP; ++h) {
      const float m2 = __shfl_xor_sync(0xffffffffu, m[h], off);
      const float l2 = __shfl_xor_sync(0xffffffffu, l[h], off);
      const float mn = fmaxf(m[h], m2);
      const float a = weight_of(m[h], mn), b = weight_of(m2, mn);
      m[h] = mn;
      l[h] = l[h] * a + l2 * b;
#pragma unroll
      for (int t = 0; t < 8; ++t) o[h][t] = o[h][t] * a + __shfl_xor_sync(0xffffffffu, o[h][t], off) * b;
    }
  }
  float* const mine = parts + warp * L::kPart;
  if (sub == 0) {
#pragma unroll
    for (int h = 0; h < GP; ++h) {
#pragma unroll
      for (int t = 0; t < 8; ++t) mine[h * D + c * 8 + t] = o[h][t];
      if (c == 0) mine[GP * D + h] = m[h], mine[GP * D + GP + h] = l[h];
    }
  }
  __syncthreads();

  // The block's partial: its warps merged.
  for (int i = tid; i < GP * D + GP; i += 32 * kWarps) {
    const int h = i < GP * D ? i / D : i - GP * D;
    float mx = -INFINITY;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) mx = fmaxf(mx, parts[w * L::kPart + GP * D + h]);
    float acc = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      const float* pw = parts + w * L::kPart;
      const float wt = weight_of(pw[GP * D + h], mx);
      acc += wt * (i < GP * D ? pw[i] : pw[GP * D + GP + h]);
    }
    if (i < GP * D)
      cta[i] = acc;
    else
      cta[GP * D + h] = mx, cta[GP * D + GP + h] = acc;
  }
  cluster_sync();  // every block's partial written (release) and visible (acquire)

  // Slice `rank` of the outputs from the cluster's CTAS partials.
  constexpr int kSlice = GP * D / CTAS;
  if (tid < kSlice) {
    const int i = rank * kSlice + tid, h = i / D;
    float ms[CTAS], mx = -INFINITY;
#pragma unroll
    for (int r = 0; r < CTAS; ++r) {
      ms[r] = *cluster_peer(cta + GP * D + h, uint32_t(r));
      mx = fmaxf(mx, ms[r]);
    }
    float num = 0.0f, den = 0.0f;
#pragma unroll
    for (int r = 0; r < CTAS; ++r) {
      const float wt = weight_of(ms[r], mx);
      num += wt * *cluster_peer(cta + i, uint32_t(r));
      den += wt * *cluster_peer(cta + GP * D + GP + h, uint32_t(r));
    }
    // den > 0: key 0 is always visible, so one partial is not empty.
    p.out[size_t(h0) * D + i] = __float2half_rn(num / den);
  }
  cluster_sync();  // no block leaves while another may still read its partial
#endif
}

// The cluster size AttnArgs asks for (0: $QSP_ATTN_CLUSTER_CTAS if it is 8
// or 16, else 8); 0 for a forced value that is neither.
int requested_ctas(const AttnArgs& a) {
  static const int env = [] {
    const char* e = std::getenv("QSP_ATTN_CLUSTER_CTAS");
    return e && std::atoi(e) == 16 ? 16 : 8;
  }();
  const int c = a.cluster_ctas ? a.cluster_ctas : env;
  return c == 8 || c == 16 ? c : 0;
}

// How many clusters of this kernel device `dev` holds at once (asked once a
// device; 0 where the driver cannot say): a launch of more clusters would
// run them in waves, each KV head's after another's. (A full H100 holds
// the 8 clusters of 8 blocks of the 8-KV-head models, not 8 of 16; a MIG
// slice or a smaller part may hold fewer.)
template <int D, int GP, int CTAS>
int resident_clusters(int dev) {
  using L = DecLayout<D, GP>;
  constexpr auto kernel = attn_decode_cluster_kernel<D, GP, CTAS>;
  static PerDevice smem_set, fits;
  if (set_smem_once(smem_set, dev, kernel, L::kBytes) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return fits.get(dev, [&] {
    const ClusterZLaunch plain(dim3(1, 1, CTAS), 32 * kWarps, size_t(L::kBytes), nullptr);
    int c = 0;
    if ((CTAS > 8 && cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1) != cudaSuccess) ||
        cudaOccupancyMaxActiveClusters(&c, kernel, &plain.cfg) != cudaSuccess) {
      (void)cudaGetLastError();
      return 0;
    }
    return c;
  });
}

// resident_clusters of the clusters of 8 for a's shape.
int resident_clusters8(const AttnArgs& a, int dev) {
  const int group = a.n_heads / a.n_kv_heads;
  auto by_group = [&](auto d) {
    constexpr int D = decltype(d)::value;
    switch (group) {
      case 1: return resident_clusters<D, 1, 8>(dev);
      case 2: return resident_clusters<D, 2, 8>(dev);
      case 4: return resident_clusters<D, 4, 8>(dev);
      case 8: return resident_clusters<D, 8, 8>(dev);
      default: return 0;
    }
  };
  return a.head_dim == 128 ? by_group(std::integral_constant<int, 128>{})
                           : by_group(std::integral_constant<int, 64>{});
}

template <int D, int GP, int CTAS>
cudaError_t launch_cluster(const AttnArgs& a, cudaStream_t stream) {
  using L = DecLayout<D, GP>;
  constexpr auto kernel = attn_decode_cluster_kernel<D, GP, CTAS>;
  int dev = 0;
  cudaError_t e = cudaGetDevice(&dev);
  if (e != cudaSuccess) return e;
  // Whether the clusters fit at once (for 8 blocks cluster_decode_runs
  // asked already: a cached lookup); resident_clusters also raised the
  // kernel's shared-memory limit.
  if (resident_clusters<D, GP, CTAS>(dev) < a.n_kv_heads) return cudaErrorNotSupported;
  const dim3 grid(1, unsigned(a.n_kv_heads), unsigned(CTAS));
  ClusterZLaunch launch(grid, 32 * kWarps, size_t(L::kBytes), stream, pdl_enabled(stream, PdlKernel::kAttention));
  DecParams p{};  // zeroed: the unfused launch leaves the rope fields at 0 / nullptr
  p.q = a.q;
  p.k = a.k_cache;
  p.v = a.v_cache;
  p.out = a.out;
  p.past = a.past;
  p.max_seq = a.max_seq;
  p.group = a.n_heads / a.n_kv_heads;
  p.scale_log2 = a.scale * 1.4426950408889634f;
  p.fused = a.rope != nullptr;
  p.n_heads = a.n_heads;
  p.n_kv_heads = a.n_kv_heads;
  if (a.rope) {
    const QkRopeArgs& r = *a.rope;
    p.style = r.rope_style;
    p.qkv = r.qkv;
    p.q_norm = r.q_norm;
    p.k_norm = r.k_norm;
    p.k_w = r.k_cache;
    p.v_w = r.v_cache;
    p.eps = r.eps;
    const double* tab = rope::inv_freq_table(r.theta, D);
    for (int i = 0; i < D / 2; ++i) p.inv_freq[i] = tab[i];
  }
  const prof::Scope timed(pdl_name(PdlKernel::kAttention), grid, dim3(32 * kWarps), stream);
  return cudaLaunchKernelEx(&launch.cfg, kernel, p);
}

template <int D, int CTAS>
cudaError_t launch_cluster_d(const AttnArgs& a, int group, cudaStream_t stream) {
  switch (group) {
    case 1: return launch_cluster<D, 1, CTAS>(a, stream);
    case 2: return launch_cluster<D, 2, CTAS>(a, stream);
    case 4: return launch_cluster<D, 4, CTAS>(a, stream);
    case 8: return launch_cluster<D, 8, CTAS>(a, stream);
    default: return cudaErrorNotSupported;
  }
}

template <int CTAS>
cudaError_t launch_cluster_ctas(const AttnArgs& a, int group, cudaStream_t stream) {
  return a.head_dim == 128 ? launch_cluster_d<128, CTAS>(a, group, stream)
                           : launch_cluster_d<64, CTAS>(a, group, stream);
}

}  // namespace

bool cluster_decode_runs(const AttnArgs& a) {
  if (a.M != 1 || a.seqs || (a.head_dim != 64 && a.head_dim != 128)) return false;
  const int group = a.n_heads / a.n_kv_heads;
  if (group != 1 && group != 2 && group != 4 && group != 8) return false;
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  // The kernel is sm_90 code, and its clusters of 8 must all fit at once.
  return cc_major(dev) >= 9 && resident_clusters8(a, dev) >= a.n_kv_heads;
}

cudaError_t run_cluster_decode(const AttnArgs& a, cudaStream_t stream) {
  const int ctas = requested_ctas(a);
  if (ctas == 0) return cudaErrorInvalidValue;
  if (!cluster_decode_runs(a)) return cudaErrorNotSupported;
  const int group = a.n_heads / a.n_kv_heads;
  if (ctas == 16) {
    const cudaError_t e = launch_cluster_ctas<16>(a, group, stream);
    // Where 16-block clusters do not fit at once: 8, unless 16 was forced.
    if (e != cudaErrorNotSupported || a.cluster_ctas == 16) return e;
  }
  return launch_cluster_ctas<8>(a, group, stream);
}

}  // namespace attn
}  // namespace kern
}  // namespace qsp
