// Batched causal flash attention on wgmma (sm_90a), head_dim 128: the
// long-prompt path of kern::attention(). Same function and the same row
// decomposition as the mma.sync kernels of kernels/attention.cu (a block's
// rows are the `gp` query heads of one GQA group times 128 / gp consecutive
// tokens, token-major), built only as sm_90a machine code (CMakeLists.txt).
//
// Block: two consumer warpgroups of 64 rows and one producer warpgroup
// (384 threads; setmaxnreg moves registers from the producer, 40, to the
// consumers, 232). Or (Args::block_m = kBlockMOne) one consumer warpgroup and
// the producer (256 threads, no setmaxnreg: ptxas has 255 registers a
// thread): twice the blocks for short prompts, whose two-warpgroup grid
// leaves SMs idle while its last token blocks (the most keys) run; each
// such block is alone on its SM, so its tiles' S, softmax and P V run
// without the other warpgroup's share of the tensor cores.
//  - Producer: one thread streams K and V tiles of 128 keys through a
//    two-stage pipeline with TMA (two boxes of 64 columns each, 128-byte
//    swizzle), K and V completing on separate mbarriers so S = Q K^T starts
//    before V has landed. The consumers hand a stage back through its
//    "empty" mbarrier (one arrive per warp).
//  - Consumers: Q is copied once into shared memory in the swizzled layout
//    wgmma reads. Per tile: S = Q K^T, 8 x wgmma.m64n128k16 with A = the
//    warpgroup's 64 Q rows and B = the K tile, both K-major in shared memory
//    (SS; Q held as register A fragments across tiles gave wrong scores from
//    the second tile on, see docs/ARCHITECTURE.md); mask, online softmax in fp32 with
//    base-2 exponentials as in attention.cu; P goes back to fp16 A fragments
//    in registers (the accumulator layout of two n8 tiles is the A layout of
//    one k16 step) and O += P V, 8 x wgmma.m64n128k16 with B = the V tile
//    read MN-major (the transpose flag). The two warpgroups interleave: one
//    warpgroup's softmax runs under the other's wgmmas.
//  - Keys past the cache's valid range: TMA reads whatever the cache holds
//    there (it may be NaN, and 0 * NaN is NaN), so on the (one) tile that
//    crosses the end the consumers zero those V rows before P V; the
//    scores of those keys are masked to -inf.
// Grid: x = token blocks, the last tokens (which see the most keys) first;
// y = (KV head, slice of its group).
#include <cuda_fp16.h>

#include <cmath>

#include "kernels/attention_wgmma.h"
#include "kernels/pdl.h"
#include "kernels/per_device.h"
#include "kernels/ptx.cuh"
#include "kernels/sm90.cuh"

namespace qsp {
namespace kern {
namespace attn90 {
namespace {

using namespace sm90;

constexpr int D = kHeadDim;
constexpr int kProducerRegs = 40, kConsumerRegs = 232;
constexpr int kStages = 2;
constexpr int kBox = kBlockN * 128;                // one TMA box: [kBlockN keys][64 columns]
constexpr int kTile = 2 * kBox;                    // a K or V tile
constexpr int kOffK = 0, kOffV = kStages * kTile, kOffQ = 2 * kStages * kTile;
static_assert(D == 128 && kBlockN == 128, "the MMA shapes below are m64n128");

// The block of kConsumers consumer warpgroups (kBlockM rows, the default, or
// kBlockMOne): its threads and shared memory.
template <int kConsumers>
struct Shape {
  static constexpr int kRows = 64 * kConsumers;           // one m64 slice per consumer warpgroup
  static constexpr int kThreads = 128 * (kConsumers + 1);  // + the producer warpgroup
  static constexpr int kConsumerThreads = 128 * kConsumers;
  static constexpr int kQHalf = kRows * 128;               // Q: two halves [kRows rows][64 columns]
  static constexpr int kOffBar = kOffQ + 2 * kQHalf;
  static constexpr int kSmemBytes = 1024 + kOffBar + 3 * kStages * 8;  // alignment slack, K, V, Q, mbarriers
};
static_assert(Shape<2>::kRows == kBlockM && Shape<1>::kRows == kBlockMOne, "the header's block sizes");

// Byte offset of 16-byte chunk c (columns 8c .. 8c+7) of Q row r in the
// canonical 128-byte-swizzle K-major layout wgmma reads (the layout TMA
// writes for K and V): columns 0-63 and 64-127 in separate halves, rows of
// 128 bytes, chunk index XOR row % 8 inside each 1024-byte atom.
template <int kQHalf>
__device__ __forceinline__ uint32_t q_chunk(int r, int c) {
  return uint32_t((c >> 3) * kQHalf + r * 128 + (((c & 7) ^ (r & 7)) << 4));
}

template <int kConsumers>
__global__ void __launch_bounds__(Shape<kConsumers>::kThreads, 1)
    attn_wgmma_kernel(const __grid_constant__ CUtensorMap kmap, const __grid_constant__ CUtensorMap vmap, const Args a) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using S = Shape<kConsumers>;
  constexpr int kBlockM = S::kRows, kConsumerThreads = S::kConsumerThreads, kQHalf = S::kQHalf;
  pdl_wait();  // kernels/pdl.h
  pdl_launch_dependents();
  extern __shared__ uint8_t smem_raw[];
  const uint32_t base = (smem_u32(smem_raw) + 1023u) & ~1023u;  // swizzle atoms need 1024-byte alignment
  const uint32_t sK = base + kOffK, sV = base + kOffV, sQ = base + kOffQ;
  const uint32_t full_k = base + S::kOffBar, full_v = full_k + 8 * kStages, empty = full_v + 8 * kStages;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;

  // Block coordinates, the last token block first.
  const int tokens = kBlockM / a.gp;
  const int rows_used = tokens * a.gp;
  const int sub_groups = a.group / a.gp;
  const int t0 = (int(gridDim.x) - 1 - int(blockIdx.x)) * tokens;
  const int h0 = (int(blockIdx.y) / sub_groups) * a.group + (int(blockIdx.y) % sub_groups) * a.gp;
  const int kvh = h0 / a.group;
  const int past = *a.past;
  const int kv_len = min(past + a.M, a.max_seq);  // keys 0 .. kv_len-1 exist
  const int t_last = min(t0 + tokens, a.M) - 1;
  const int n_end = min(past + t_last + 1, kv_len);
  const int n_tiles = (n_end + kBlockN - 1) / kBlockN;

  if (threadIdx.x == 0) {
    mbar_init_stages(full_k, kStages, 1);
    mbar_init_stages(full_v, kStages, 1);
    mbar_init_stages(empty, kStages, 4 * kConsumers);  // one arrive per consumer warp
    mbar_init_fence();
  }
  __syncthreads();

  if (warp >= 4 * kConsumers) {
    // ---- Producer
    if constexpr (kConsumers > 1) setmaxnreg_dec<kProducerRegs>();
    if (warp != 4 * kConsumers || lane != 0) return;
    const int row0 = kvh * a.max_seq;
    for (int j = 0; j < n_tiles; ++j) {
      const int s = j % kStages;
      if (j >= kStages) mbar_wait(empty + 8 * s, ((j / kStages) - 1) & 1);
      const int row = row0 + j * kBlockN;
      mbar_expect_tx(full_k + 8 * s, kTile);
      tma_load_2d(sK + s * kTile, &kmap, 0, row, full_k + 8 * s);
      tma_load_2d(sK + s * kTile + kBox, &kmap, 64, row, full_k + 8 * s);
      mbar_expect_tx(full_v + 8 * s, kTile);
      tma_load_2d(sV + s * kTile, &vmap, 0, row, full_v + 8 * s);
      tma_load_2d(sV + s * kTile + kBox, &vmap, 64, row, full_v + 8 * s);
    }
    return;
  }

  // ---- Consumers
  if constexpr (kConsumers > 1) setmaxnreg_inc<kConsumerRegs>();  // one warpgroup: ptxas has 255 a thread
  const int ctid = threadIdx.x;  // 0 .. kConsumerThreads - 1
  const int warp_row0 = warp * 16;  // warpgroup warp / 4, its warp warp % 4: rows 64 (warp / 4) + 16 (warp % 4)
  const uint32_t sQs = sQ + (warp >> 2) * 64 * 128;  // this warpgroup's 64 Q rows (8 swizzle atoms)

  // Q -> shared (rows past the chunk or the packed heads zero-filled); every
  // tile's S = Q K^T reads it from there (SS wgmma).
  {
    const int chunk = ctid % 16;
    constexpr int kRowsPerPass = kConsumerThreads / 16;
#pragma unroll
    for (int i = 0; i < kBlockM / kRowsPerPass; ++i) {
      const int r = ctid / 16 + kRowsPerPass * i;
      const int t = t0 + r / a.gp;
      const bool ok = r < rows_used && t < a.M;
      const __half* src = a.q + (size_t(ok ? t : 0) * a.n_heads + h0 + r % a.gp) * D + chunk * 8;
      cp_async_cg_16<0, 0>(sQ + q_chunk<kQHalf>(r, chunk), src, ok);
    }
    cp_async_commit();
    cp_async_wait<0>();
    fence_proxy_async();  // Q is read by wgmma (the async proxy)
    named_sync(1, kConsumerThreads);
  }
  // The thread's two rows (lane / 4 and +8 of the warp's 16): the last key
  // each may see (padding rows: the last valid key, so they stay finite).
  int lim[2];
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    const int r = warp_row0 + (lane >> 2) + 8 * hr;
    const int t = t0 + r / a.gp;
    const bool ok = r < rows_used && t < a.M;
    lim[hr] = ok ? min(past + t, kv_len - 1) : kv_len - 1;
  }
  const int unmasked_last = min(past + t0, kv_len - 1);  // tiles ending at or before it need no mask

  float o[D / 2];  // O: 16 n8 tiles of 4 (accumulator layout)
#pragma unroll
  for (int i = 0; i < D / 2; ++i) o[i] = 0.0f;
  float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.0f, 0.0f};
  const float c = a.scale_log2;

  for (int j = 0; j < n_tiles; ++j) {
    const int s = j % kStages;
    const uint32_t parity = (j / kStages) & 1;
    const int n0 = j * kBlockN;
    const uint32_t sKs = sK + s * kTile, sVs = sV + s * kTile;

    // ---- S = Q K^T
    float sc[kBlockN / 2];
    mbar_wait(full_k + 8 * s, parity);
    wgmma_fence();
    static_for<D / 16>([&](auto kc) {
      constexpr int ks = decltype(kc)::value;
      mma_ss_n128(sc, smem_desc(sQs + (ks >> 2) * kQHalf + (ks & 3) * 32),
                  smem_desc(sKs + (ks >> 2) * kBox + (ks & 3) * 32), ks > 0);
    });
    wgmma_commit();
    wgmma_wait<0>();
    // The accumulators are written by the async proxy: pin every read of
    // them after the wait (the compiler sees no dependence on the asm).
#pragma unroll
    for (int i = 0; i < kBlockN / 2; ++i) fence_reg(sc[i]);

    // ---- Causal / range mask on tiles that cross some row's limit.
    if (n0 + kBlockN - 1 > unmasked_last) {
#pragma unroll
      for (int hr = 0; hr < 2; ++hr) {
        const int rel = lim[hr] - n0 - (lane & 3) * 2;  // key offset in the tile = 8 nt + (e & 1)
#pragma unroll
        for (int nt = 0; nt < kBlockN / 8; ++nt) {
          if (nt * 8 > rel) sc[nt * 4 + 2 * hr] = -INFINITY;
          if (nt * 8 + 1 > rel) sc[nt * 4 + 2 * hr + 1] = -INFINITY;
        }
      }
    }

    // ---- Online softmax (as attention.cu): P = 2^(s c - m c), alpha = 2^((m_old - m_new) c).
    float alpha[2];
    bool rescale = false;
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      float mx = row_max[hr];
#pragma unroll
      for (int nt = 0; nt < kBlockN / 8; ++nt) mx = fmaxf(mx, fmaxf(sc[nt * 4 + 2 * hr], sc[nt * 4 + 2 * hr + 1]));
      mx = quad_max(mx);
      const float m_scaled = mx == -INFINITY ? 0.0f : mx * c;
      alpha[hr] = ex2_approx(row_max[hr] * c - m_scaled);
      rescale |= mx != row_max[hr];
      row_max[hr] = mx;
      float sum = 0.0f;
#pragma unroll
      for (int nt = 0; nt < kBlockN / 8; ++nt)
#pragma unroll
        for (int e = 2 * hr; e < 2 * hr + 2; ++e) {
          const float pe = ex2_approx(fmaf(sc[nt * 4 + e], c, -m_scaled));
          sc[nt * 4 + e] = pe;
          sum += pe;
        }
      row_sum[hr] = row_sum[hr] * alpha[hr] + sum;
    }
    if (__any_sync(0xffffffffu, rescale)) {
#pragma unroll
      for (int i = 0; i < D / 2; ++i) o[i] *= alpha[(i >> 1) & 1];
    }
    uint32_t pa[kBlockN / 16][4];
#pragma unroll
    for (int kk = 0; kk < kBlockN / 16; ++kk) {
      pa[kk][0] = pack_half2(sc[8 * kk + 0], sc[8 * kk + 1]);
      pa[kk][1] = pack_half2(sc[8 * kk + 2], sc[8 * kk + 3]);
      pa[kk][2] = pack_half2(sc[8 * kk + 4], sc[8 * kk + 5]);
      pa[kk][3] = pack_half2(sc[8 * kk + 6], sc[8 * kk + 7]);
    }

    // ---- O += P V
    mbar_wait(full_v + 8 * s, parity);
    if (n0 + kBlockN > kv_len) {
      // Keys kv_len.. of this tile: zero their V rows (both boxes) before any
      // warpgroup reads them. Block-uniform branch.
      const int first = max(kv_len - n0, 0);
      for (int i = ctid; i < (kBlockN - first) * 16; i += kConsumerThreads) {
        const int r = first + i / 16, q = i % 16;
        const uint32_t addr = sVs + (q >> 3) * kBox + r * 128 + (q & 7) * 16;
        asm volatile("st.shared.v4.u32 [%0], {%1, %1, %1, %1};\n" ::"r"(addr), "r"(0u) : "memory");
      }
      fence_proxy_async();
      named_sync(2, kConsumerThreads);
    }
#pragma unroll
    for (int i = 0; i < D / 2; ++i) fence_reg(o[i]);  // the rescale done before the fence
#pragma unroll
    for (int kk = 0; kk < kBlockN / 16; ++kk)
#pragma unroll
      for (int r = 0; r < 4; ++r) fence_reg(pa[kk][r]);
    wgmma_fence();
    static_for<kBlockN / 16>([&](auto kc) {
      constexpr int kk = decltype(kc)::value;
      Mma<128, 1>::run(o, pa[kk], smem_desc_mn(sVs + kk * 16 * 128, kBox));
    });
    wgmma_commit();
    wgmma_wait<0>();
#pragma unroll
    for (int i = 0; i < D / 2; ++i) fence_reg(o[i]);
    __syncwarp();
    if (lane == 0) mbar_arrive(empty + 8 * s);
  }

  // ---- Epilogue: O / sum as fp16 through this warp's own Q rows, once the
  // warpgroup's last S wgmma (which reads all 64 of its rows) is done with
  // them, then 16-byte stores of whole rows.
  named_sync(3 + (warp >> 2), 128);
  float inv[2];
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    row_sum[hr] = quad_sum(row_sum[hr]);
    inv[hr] = row_sum[hr] > 0.0f ? 1.0f / row_sum[hr] : 0.0f;
  }
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    const int r = warp_row0 + (lane >> 2) + 8 * hr;
#pragma unroll
    for (int dt = 0; dt < D / 8; ++dt) {
      const uint32_t v = pack_half2(o[dt * 4 + 2 * hr] * inv[hr], o[dt * 4 + 2 * hr + 1] * inv[hr]);
      const uint32_t addr = sQ + q_chunk<kQHalf>(r, dt) + (lane & 3) * 4;
      asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(addr), "r"(v) : "memory");
    }
  }
  __syncwarp();
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const int r = warp_row0 + 2 * i + (lane >> 4), chunk = lane & 15;
    const int t = t0 + r / a.gp;
    if (r >= rows_used || t >= a.M) continue;
    uint4 v;
    asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "r"(sQ + q_chunk<kQHalf>(r, chunk))
                 : "memory");
    *reinterpret_cast<uint4*>(a.out + (size_t(t) * a.n_heads + h0 + r % a.gp) * D + chunk * 8) = v;
  }
#endif
}

}  // namespace

bool available(int dev) {
#if defined(QSP_WGMMA)
  static PerDevice once;
  return runs_on(once, dev, attn_wgmma_kernel<2>);  // both block sizes are sm_90a code of this file
#else
  (void)dev;
  return false;
#endif
}

#if defined(QSP_WGMMA)
namespace {
template <int kConsumers>
cudaError_t launch(const Args& a, const CUtensorMap& kmap, const CUtensorMap& vmap, int dev, cudaStream_t stream) {
  using S = Shape<kConsumers>;
  static PerDevice smem_once;
  if (set_smem_once(smem_once, dev, attn_wgmma_kernel<kConsumers>, S::kSmemBytes) != cudaSuccess) {
    (void)cudaGetLastError();
    return cudaErrorNotSupported;
  }
  const int tokens = S::kRows / a.gp;
  const dim3 grid(unsigned((a.M + tokens - 1) / tokens), unsigned(a.n_kv_heads * (a.group / a.gp)));
  return launch_pdl(PdlKernel::kAttnWgmma, attn_wgmma_kernel<kConsumers>, grid, dim3(S::kThreads), S::kSmemBytes,
                    stream, kmap, vmap, a);
}
}  // namespace
#endif

cudaError_t run(const Args& a, cudaStream_t stream) {
#if defined(QSP_WGMMA)
  const int64_t rows = int64_t(a.n_kv_heads) * a.max_seq;
  if ((a.block_m != kBlockM && a.block_m != kBlockMOne) || a.gp < 1 || a.group % a.gp != 0 || a.gp > a.block_m ||
      rows + kBlockN >= (int64_t(1) << 31)) {
    return cudaErrorInvalidValue;  // TMA coordinates are 32-bit
  }
  int dev = 0;
  cudaError_t e = cudaGetDevice(&dev);
  if (e != cudaSuccess) return e;
  CUtensorMap kmap, vmap;
  if (!encode_f16_2d(&kmap, a.k_cache, D, uint64_t(rows), D * 2, kBlockN) ||
      !encode_f16_2d(&vmap, a.v_cache, D, uint64_t(rows), D * 2, kBlockN)) {
    return cudaErrorInvalidValue;
  }
  return a.block_m == kBlockM ? launch<2>(a, kmap, vmap, dev, stream) : launch<1>(a, kmap, vmap, dev, stream);
#else
  (void)a, (void)stream;
  return cudaErrorNotSupported;
#endif
}

}  // namespace attn90
}  // namespace kern
}  // namespace qsp
