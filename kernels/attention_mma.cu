// The mma.sync flash-attention kernel (FlashAttention-2 style, every
// architecture, head_dim 64 and 128): see kernels/attention.cu for the work
// decomposition and the choice of configuration and split. A single kernel
// template; the file is long because the kernel is (its main loop, masking
// and the split-KV epilogue belong together).
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <type_traits>
#include <utility>

#include "kernels/attention_internal.cuh"
#include "kernels/pdl.h"
#include "kernels/per_device.h"
#include "kernels/ptx.cuh"

namespace qsp {
namespace kern {
namespace attn {
namespace {

// Byte offset of 16-byte chunk `chunk` of row `row` in a swizzled tile.
template <int kRowBytes>
__device__ __forceinline__ uint32_t swizzle(int row, int chunk) {
  return uint32_t(row * kRowBytes + ((chunk ^ (row & 7)) << 4));
}

struct FwdParams {
  const __half* q;
  const __half* k;
  const __half* v;
  __half* out;
  float* o_part;    // split-KV only: [n_splits][M * n_heads][head_dim]
  float* lse_part;  // split-KV only: [n_splits][M * n_heads], base-2
  const int32_t* past;
  int M, n_heads, max_seq;
  int group;       // n_heads / n_kv_heads
  int gp;          // query heads per block (divides group)
  int tokens;      // tokens per block: kBlockM / gp
  int n_splits;
  float scale_log2;  // scale * log2(e)
  // A batched pass (kBatch): the pieces, the query tiles (tiles[blockIdx.x]
  // = {piece, first token in it}), the layer and the KV head count.
  const SeqDesc* seqs;
  const int2* tiles;
  int layer, n_kv_heads;
  // AttnArgs::prefetch: the K / V tiles of keys below past are copied before
  // pdl_wait (qk_rope, the launch before, writes keys past.. only; every
  // launch before that has completed: each kernel lets its dependents start
  // only after its own pdl_wait).
  int prefetch;
};

// Which rows and keys a block owns. The epilogue calls this again instead of
// keeping the values live across the main loop (where every register is
// taken); the volatile %ctaid reads stop the compiler from merging the two.
struct BlockCoords {
  int t0;     // first token
  int h0;     // first query head
  int split;  // split-KV index
};
__device__ __forceinline__ BlockCoords block_coords(const FwdParams& p) {
  uint32_t bx, by, bz, nbx;
  asm volatile("mov.u32 %0, %%ctaid.x;" : "=r"(bx));
  asm volatile("mov.u32 %0, %%ctaid.y;" : "=r"(by));
  asm volatile("mov.u32 %0, %%ctaid.z;" : "=r"(bz));
  asm volatile("mov.u32 %0, %%nctaid.x;" : "=r"(nbx));
  const int sub_groups = p.group / p.gp;
  BlockCoords c;
  // Reverse order: the last tokens see the most keys; start them first.
  c.t0 = (int(nbx) - 1 - int(bx)) * p.tokens;
  c.h0 = (int(by) / sub_groups) * p.group + (int(by) % sub_groups) * p.gp;
  c.split = int(bz);
  return c;
}

// ============================================================================
// The kernel
// ============================================================================
// What a block attends over: the whole chunk (its queries q / out, M tokens
// at positions past.., one cache), or in a batched pass the piece of its
// query tile (the piece's rows of q / out, its own cache at this layer, its
// position). The epilogue asks again rather than keep it live.
struct Span {
  const __half* q;
  const __half* k;
  const __half* v;
  __half* out;
  int M, max_seq, past;
  int t0;  // the block's first token within q
};
template <bool kBatch, int D>
__device__ __forceinline__ Span block_span(const FwdParams& p, int t0) {
  Span s;
  if constexpr (kBatch) {
    uint32_t bx;
    asm volatile("mov.u32 %0, %%ctaid.x;" : "=r"(bx));
    const int2 tile = p.tiles[bx];
    const SeqDesc d = p.seqs[tile.x];
    const size_t rows = size_t(d.start) * p.n_heads * D;
    const size_t layer = size_t(p.layer) * p.n_kv_heads * size_t(d.max_seq) * D;
    s.q = p.q + rows;
    s.out = p.out + rows;
    s.k = d.k_cache + layer;
    s.v = d.v_cache + layer;
    s.M = d.n;
    s.max_seq = d.max_seq;
    s.past = d.past;
    s.t0 = tile.y;
  } else {
    s.q = p.q;
    s.out = p.out;
    s.k = p.k;
    s.v = p.v;
    s.M = p.M;
    s.max_seq = p.max_seq;
    s.past = *p.past;
    s.t0 = t0;
  }
  return s;
}

template <class Kt, bool kBatch>
__global__ void __launch_bounds__(Kt::kNThreads, Kt::kMinBlocksPerSm) attn_fwd_kernel(const FwdParams p) {
  // kernels/pdl.h. With p.prefetch the wait comes after the copies of the
  // tiles of old keys (below): past, the pieces and the tiles are set before
  // the pass begins, so they may be read first. Only the decode-sized
  // configuration has the path (in the 128-row one it cost spills).
  const bool prefetch = Kt::kBlockM <= 16 && p.prefetch;
  if (!prefetch) {
    pdl_wait();
    pdl_launch_dependents();
  }
  constexpr int D = Kt::kHeadDim;
  constexpr int kBlockM = Kt::kBlockM, kBlockN = Kt::kBlockN;
  constexpr int kMTiles = Kt::kMTiles, kNTiles = Kt::kNTiles, kDTiles = Kt::kDTiles;
  constexpr int kRowBytes = Kt::kRowBytes;

  extern __shared__ __align__(128) unsigned char smem[];
  const uint32_t sQ = smem_u32(smem);
  const uint32_t sK = sQ + Kt::kSmemQ;
  const uint32_t sV = sK + 2 * Kt::kSmemKV;

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const BlockCoords bc = block_coords(p);
  const Span sp = block_span<kBatch, D>(p, bc.t0);
  int t0 = sp.t0, h0 = bc.h0, split = bc.split;
  const int kvh = h0 / p.group;
  const int rows_used = p.tokens * p.gp;

  const int past = sp.past;
  const int kv_len = min(past + sp.M, sp.max_seq);  // keys 0 .. kv_len-1 exist
  const int t_last = min(t0 + p.tokens, sp.M) - 1;
  int n_begin = 0;
  int n_end = min(past + t_last + 1, kv_len);  // last key any row of the block sees, + 1
  if (p.n_splits > 1) {
    const int per = (kv_len + p.n_splits - 1) / p.n_splits;
    const int chunk = (per + kBlockN - 1) / kBlockN * kBlockN;
    n_begin = split * chunk;
    n_end = min(n_end, n_begin + chunk);
  }

  if (n_begin >= n_end) {
    if (prefetch) pdl_wait();  // (the partials' last readers, the previous combine, are done)
    // Nothing visible in this split: tell the combine step so.
    if (p.n_splits > 1) {
      for (int r = tid; r < rows_used; r += Kt::kNThreads) {
        const int t = t0 + r / p.gp;
        if (t < sp.M)
          p.lse_part[(size_t(split) * sp.M + t) * p.n_heads + h0 + r % p.gp] = -INFINITY;
      }
    }
    return;
  }
  const int n_tiles = (n_end - n_begin + kBlockN - 1) / kBlockN;

  // ---- Global -> shared loaders: a thread always copies chunk column
  // tid % kChunksPerRow of rows ld_row + i * kRowsPerPass, so pass i is a
  // per-thread base plus compile-time offsets: i * kRowsPerPass rows further
  // in both places, and swizzle phase (ld_row + i * kRowsPerPass) & 7, which
  // takes at most 8 / gcd(kRowsPerPass, 8) values (ld_base[phase shift]).
  // Rows past the valid range are zero-filled (src-size 0 reads nothing, so
  // their addresses need not be valid).
  const int ld_chunk = tid % Kt::kChunksPerRow;
  const int ld_row = tid / Kt::kChunksPerRow;
  uint32_t ld_base[8];
#pragma unroll
  for (int q = 0; q < 8; ++q)
    ld_base[q] = uint32_t(ld_row * kRowBytes + ((ld_chunk ^ ((ld_row + q) & 7)) << 4));

  // This thread's element of key 0 of the KV head; kept as one offset (not
  // two pointers) to save registers, the bases come from the parameters.
  const size_t kv_off = size_t(kvh) * sp.max_seq * D + size_t(ld_row) * D + ld_chunk * 8;
  auto load_tile = [&](const __half* src, uint32_t s_stage, int n0) {
    const __half* tile = src + kv_off + size_t(n0) * D;
    const int valid_rows = n_end - n0 - ld_row;  // this thread's row i is valid iff i * kRowsPerPass < valid_rows
    static_for<kBlockN / Kt::kRowsPerPass>([&](auto ic) {
      constexpr int i = decltype(ic)::value;
      constexpr int kRow = i * Kt::kRowsPerPass;
      cp_async_cg_16<kRow * kRowBytes, kRow * kRowBytes>(s_stage + ld_base[kRow & 7], tile, kRow < valid_rows);
    });
  };
  // Prefetch (p.prefetch): tile j's K and V before the wait when all its
  // keys are below past (tile 1 only if tile 0 is). They join the first
  // commit group, whose wait below then covers them too.
  const bool pre0 = prefetch && n_begin + kBlockN <= past;
  const bool pre1 = pre0 && n_tiles > 1 && n_begin + 2 * kBlockN <= past;
  if (pre0) {
    load_tile(sp.k, sK, n_begin);
    load_tile(sp.v, sV, n_begin);
  }
  if (pre1) {
    load_tile(sp.k, sK + Kt::kSmemKV, n_begin + kBlockN);
    load_tile(sp.v, sV + Kt::kSmemKV, n_begin + kBlockN);
  }
  if (prefetch) {
    pdl_wait();
    pdl_launch_dependents();
  }
  // Q: rows beyond the chunk (or the packed heads) are zero-filled.
  static_for<kBlockM / Kt::kRowsPerPass>([&](auto ic) {
    constexpr int i = decltype(ic)::value;
    const int r = ld_row + i * Kt::kRowsPerPass;
    const int t = t0 + r / p.gp;
    const bool ok = r < rows_used && t < sp.M;
    const __half* src = sp.q + (size_t(t) * p.n_heads + h0 + r % p.gp) * D + ld_chunk * 8;
    cp_async_cg_16<i * Kt::kRowsPerPass * kRowBytes, 0>(sQ + ld_base[(i * Kt::kRowsPerPass) & 7], src, ok);
  });
  // Commit groups, in order: {Q, K0}, {V0}, {K1}, {V1}, then per iteration j
  // {K_j+2}, {V_j+2} (empty groups past the end keep the count uniform, so
  // the wait depths below are constants; prefetched tiles are in the first).
  if (!pre0) load_tile(sp.k, sK, n_begin);
  cp_async_commit();
  if (!pre0) load_tile(sp.v, sV, n_begin);
  cp_async_commit();
  if (n_tiles > 1 && !pre1) load_tile(sp.k, sK + Kt::kSmemKV, n_begin + kBlockN);
  cp_async_commit();
  if (n_tiles > 1 && !pre1) load_tile(sp.v, sV + Kt::kSmemKV, n_begin + kBlockN);
  cp_async_commit();

  // Rows this thread holds in the accumulator layout: lane/4 (+8) of each of
  // its m16 tiles. lim = the last key the row may see (padding rows: the
  // last valid key, so they stay finite and harmless).
  const int warp_row0 = warp * Kt::kRowsPerWarp;
  int lim[kMTiles][2];
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      const int r = warp_row0 + mt * 16 + (lane >> 2) + hr * 8;
      const int t = t0 + r / p.gp;
      const bool ok = r < rows_used && t < sp.M;
      lim[mt][hr] = ok ? min(past + t, kv_len - 1) : kv_len - 1;
    }
  // Tiles that end at or before this key need no mask for any row.
  const int unmasked_last = min(past + t0, kv_len - 1);

  // ---- ldmatrix lane addresses. Q (A operand), K (B, non-trans) and V (B,
  // trans) are all fetched with the same lane pattern: lane i addresses row
  // i % 16 of a 16-row slab, chunk 2c + i / 16 of k16 / d16 step c. For Q and
  // V that is the operand order directly; for K it yields {b0 of n-tile 0,
  // b0 of n-tile 1, b1 of n-tile 0, b1 of n-tile 1}.
  // Slab bases are multiples of 8 rows, so the swizzle phase is lane & 7,
  // and since 2c only sets chunk bits above bit 0,
  //   chunk = (2c + hi) ^ phase = (hi ^ phase) ^ 2c,
  // where (hi ^ phase) < 8, so the byte offset is
  //   off(c) = (off0 ^ ((c & 3) << 5)) + ((c >> 2) << 7):
  // four XORed bases shared by all operands, the rest immediates.
  uint32_t lane_base[4];
#pragma unroll
  for (int c = 0; c < 4; ++c)
    lane_base[c] = ((lane & 15) * kRowBytes + (((lane >> 4) ^ (lane & 7)) << 4)) ^ (c << 5);
  const uint32_t sQw = sQ + warp_row0 * kRowBytes;  // this warp's Q rows

  float o[kMTiles][kDTiles][4];
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
    for (int dt = 0; dt < kDTiles; ++dt)
#pragma unroll
      for (int e = 0; e < 4; ++e) o[mt][dt][e] = 0.0f;
  float row_max[kMTiles][2], row_sum[kMTiles][2];
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      row_max[mt][hr] = -INFINITY;
      row_sum[mt][hr] = 0.0f;  // this thread's partial; reduced over the quad at the end
    }

  uint32_t qf[Kt::kQInRegs ? Kt::kKSteps : 1][4];
  if constexpr (Kt::kQInRegs) {
    cp_async_wait<3>();  // {Q, K0} landed
    __syncthreads();
    static_for<Kt::kKSteps>([&](auto kc) {
      constexpr int ks = decltype(kc)::value;
      ldmatrix_x4<(ks >> 2) << 7>(qf[ks], sQw + lane_base[ks & 3]);
    });
  }

  for (int j = 0; j < n_tiles; ++j) {
    const int stage = j & 1;
    const int n0 = n_begin + j * kBlockN;
    const uint32_t sKs = sK + stage * Kt::kSmemKV;
    const uint32_t sVs = sV + stage * Kt::kSmemKV;

    cp_async_wait<3>();  // K_j landed (pending: V_j, K_j+1, V_j+1)
    __syncthreads();

    // ---- S = Q K^T (raw scores, fp32)
    float s[kMTiles][kNTiles][4];
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
      for (int nt = 0; nt < kNTiles; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) s[mt][nt][e] = 0.0f;
    static_for<Kt::kKSteps>([&](auto kc) {
      constexpr int ks = decltype(kc)::value;
      uint32_t a[kMTiles][4];
      static_for<kMTiles>([&](auto mc) {
        constexpr int mt = decltype(mc)::value;
        if constexpr (Kt::kQInRegs) {
#pragma unroll
          for (int e = 0; e < 4; ++e) a[mt][e] = qf[ks][e];
        } else {
          ldmatrix_x4<mt * 16 * kRowBytes + ((ks >> 2) << 7)>(a[mt], sQw + lane_base[ks & 3]);
        }
      });
      const uint32_t kb = sKs + lane_base[ks & 3];
      static_for<kNTiles / 2>([&](auto nc) {
        constexpr int np = decltype(nc)::value;
        uint32_t b[4];
        ldmatrix_x4<np * 16 * kRowBytes + ((ks >> 2) << 7)>(b, kb);
#pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt) {
          mma_m16n8k16(s[mt][2 * np], a[mt], b[0], b[2]);
          mma_m16n8k16(s[mt][2 * np + 1], a[mt], b[1], b[3]);
        }
      });
    });

    // ---- Causal / range mask, only on the (few) tiles that cross some
    // row's limit: the diagonal, the end of the cache or of the split.
    if (n0 + kBlockN - 1 > unmasked_last) {
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
        for (int hr = 0; hr < 2; ++hr) {
          const int rel = lim[mt][hr] - n0 - (lane & 3) * 2;  // key offset within the tile = nt * 8 + (e & 1)
#pragma unroll
          for (int nt = 0; nt < kNTiles; ++nt) {
            if (nt * 8 > rel) s[mt][nt][2 * hr] = -INFINITY;
            if (nt * 8 + 1 > rel) s[mt][nt][2 * hr + 1] = -INFINITY;
          }
        }
    }

    // ---- Online softmax: new running max, P = 2^(s*c - m*c), rescale the
    // sums and O by alpha = 2^((m_old - m_new)*c).
    float alpha[kMTiles][2];
    bool rescale = false;
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
      for (int hr = 0; hr < 2; ++hr) {
        float mx = row_max[mt][hr];
#pragma unroll
        for (int nt = 0; nt < kNTiles; ++nt) mx = fmaxf(mx, fmaxf(s[mt][nt][2 * hr], s[mt][nt][2 * hr + 1]));
        mx = quad_max(mx);
        // A row with nothing visible yet keeps max -inf; subtract 0 then so
        // that -inf - -inf never makes a NaN (its p and alpha are 0 anyway).
        const float m_scaled = mx == -INFINITY ? 0.0f : mx * p.scale_log2;
        alpha[mt][hr] = ex2_approx(row_max[mt][hr] * p.scale_log2 - m_scaled);  // exactly 1 if unchanged
        rescale |= mx != row_max[mt][hr];
        row_max[mt][hr] = mx;
        float sum = 0.0f;
#pragma unroll
        for (int nt = 0; nt < kNTiles; ++nt)
#pragma unroll
          for (int e = 2 * hr; e < 2 * hr + 2; ++e) {
            const float pe = ex2_approx(fmaf(s[mt][nt][e], p.scale_log2, -m_scaled));
            s[mt][nt][e] = pe;
            sum += pe;
          }
        row_sum[mt][hr] = row_sum[mt][hr] * alpha[mt][hr] + sum;
      }
    // Once the running maxima settle (after the first few tiles of a long
    // row) no row of the warp changes and the O rescale, a multiply per
    // accumulator, is skipped; the branch is warp-uniform.
    if (__any_sync(0xffffffffu, rescale)) {
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
        for (int dt = 0; dt < kDTiles; ++dt)
#pragma unroll
          for (int e = 0; e < 4; ++e) o[mt][dt][e] *= alpha[mt][e >> 1];
    }

    cp_async_wait<2>();  // V_j landed
    __syncthreads();           // ...and every warp is done with K stage `stage`
    if (j + 2 < n_tiles) load_tile(sp.k, sKs, n0 + 2 * kBlockN);
    cp_async_commit();

    // ---- O += P V: P (fp16) straight from the S accumulators, which have
    // the A-operand layout once two n8 tiles are paired per k16 step.
    static_for<Kt::kPSteps>([&](auto pc) {
      constexpr int kk = decltype(pc)::value;
      uint32_t pa[kMTiles][4];
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt) {
        pa[mt][0] = pack_half2(s[mt][2 * kk][0], s[mt][2 * kk][1]);
        pa[mt][1] = pack_half2(s[mt][2 * kk][2], s[mt][2 * kk][3]);
        pa[mt][2] = pack_half2(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
        pa[mt][3] = pack_half2(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
      }
      static_for<kDTiles / 2>([&](auto dc) {
        constexpr int dp = decltype(dc)::value;
        uint32_t b[4];
        ldmatrix_x4_trans<kk * 16 * kRowBytes + ((dp >> 2) << 7)>(b, sVs + lane_base[dp & 3]);
#pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt) {
          mma_m16n8k16(o[mt][2 * dp], pa[mt], b[0], b[1]);
          mma_m16n8k16(o[mt][2 * dp + 1], pa[mt], b[2], b[3]);
        }
      });
    });

    __syncthreads();  // every warp is done with V stage `stage`
    if (j + 2 < n_tiles) load_tile(sp.v, sVs, n0 + 2 * kBlockN);
    cp_async_commit();
  }
  cp_async_wait<0>();  // nothing may land in shared memory after exit

  // ---- Epilogue
  const BlockCoords ec = block_coords(p);
  const Span se = block_span<kBatch, D>(p, ec.t0);
  t0 = se.t0;
  h0 = ec.h0;
  split = ec.split;
  float inv[kMTiles][2];
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      row_sum[mt][hr] = quad_sum(row_sum[mt][hr]);
      inv[mt][hr] = row_sum[mt][hr] > 0.0f ? 1.0f / row_sum[mt][hr] : 0.0f;
    }

  if (p.n_splits > 1) {
    // fp32 partial O (normalized) through the K/V tiles, free since the
    // loop's last barrier: this warp's rows at sK + warp * kRowsPerWarp rows
    // of D floats, 16-byte chunk c of row r stored at c ^ ((r & 7) << 1).
    const uint32_t stage_base = sK + warp * Kt::kRowsPerWarp * D * 4;
    const int q = lane & 3;
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
      for (int hr = 0; hr < 2; ++hr) {
        const int rl = mt * 16 + (lane >> 2) + hr * 8;
#pragma unroll
        for (int dt = 0; dt < kDTiles; ++dt) {
          const int c = dt * 2 + (q >> 1);
          const uint32_t addr = stage_base + rl * D * 4 + ((c ^ ((rl & 7) << 1)) << 4) + (q & 1) * 8;
          asm volatile("st.shared.v2.f32 [%0], {%1, %2};\n" ::"r"(addr), "f"(o[mt][dt][2 * hr] * inv[mt][hr]),
                       "f"(o[mt][dt][2 * hr + 1] * inv[mt][hr])
                       : "memory");
        }
        const int r = warp_row0 + rl;
        const int t = t0 + r / p.gp;
        if (q == 0 && r < rows_used && t < se.M)
          p.lse_part[(size_t(split) * se.M + t) * p.n_heads + h0 + r % p.gp] =
              row_sum[mt][hr] > 0.0f ? row_max[mt][hr] * p.scale_log2 + __log2f(row_sum[mt][hr]) : -INFINITY;
      }
    __syncwarp();
    constexpr int kChunks = D / 4;
    constexpr int kRowsPerPass = 32 / kChunks;
    const int c = lane % kChunks;
#pragma unroll
    for (int i = 0; i < Kt::kRowsPerWarp / kRowsPerPass; ++i) {
      const int rl = i * kRowsPerPass + lane / kChunks;
      const int r = warp_row0 + rl;
      const int t = t0 + r / p.gp;
      if (r >= rows_used || t >= se.M) continue;
      float4 v;
      asm volatile("ld.shared.v4.f32 {%0, %1, %2, %3}, [%4];\n"
                   : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
                   : "r"(stage_base + rl * D * 4 + ((c ^ ((rl & 7) << 1)) << 4))
                   : "memory");
      *reinterpret_cast<float4*>(p.o_part + ((size_t(split) * se.M + t) * p.n_heads + h0 + r % p.gp) * D + c * 4) = v;
    }
    return;
  }

  // fp16 O through this warp's own rows of the Q tile (only this warp ever
  // read them), then 16-byte coalesced stores of whole rows.
  __syncwarp();
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      const int r = warp_row0 + mt * 16 + (lane >> 2) + hr * 8;
#pragma unroll
      for (int dt = 0; dt < kDTiles; ++dt) {
        const uint32_t v = pack_half2(o[mt][dt][2 * hr] * inv[mt][hr], o[mt][dt][2 * hr + 1] * inv[mt][hr]);
        const uint32_t addr = sQ + swizzle<kRowBytes>(r, dt) + (lane & 3) * 4;
        asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(addr), "r"(v) : "memory");
      }
    }
  __syncwarp();
  constexpr int kStoreRows = 32 / Kt::kChunksPerRow;  // rows per warp-wide pass
  const int st_chunk = lane % Kt::kChunksPerRow;
#pragma unroll
  for (int i = 0; i < Kt::kRowsPerWarp / kStoreRows; ++i) {
    const int r = warp_row0 + i * kStoreRows + lane / Kt::kChunksPerRow;
    const int t = t0 + r / p.gp;
    if (r >= rows_used || t >= se.M) continue;
    uint4 v;
    asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "r"(sQ + swizzle<kRowBytes>(r, st_chunk))
                 : "memory");
    *reinterpret_cast<uint4*>(se.out + (size_t(t) * p.n_heads + h0 + r % p.gp) * D + st_chunk * 8) = v;
  }
}

// ============================================================================
// Launch
// ============================================================================
template <class Kt, bool kBatch>
cudaError_t launch_fwd(const FwdParams& p, const Plan& pl, cudaStream_t stream) {
  if (Kt::kSmemBytes > 48 * 1024) {  // the default limit; above it the attribute must be raised
    int dev = 0;
    cudaError_t e = cudaGetDevice(&dev);
    if (e != cudaSuccess) return e;
    static PerDevice smem_once;
    e = set_smem_once(smem_once, dev, attn_fwd_kernel<Kt, kBatch>, Kt::kSmemBytes);
    if (e != cudaSuccess) return e;
  }
  const dim3 grid(unsigned(pl.m_blocks), unsigned(pl.head_blocks), unsigned(pl.n_splits));
  return launch_pdl(PdlKernel::kAttention, attn_fwd_kernel<Kt, kBatch>, grid, dim3(Kt::kNThreads), Kt::kSmemBytes,
                    stream, p);
}

template <int D>
cudaError_t run_d(const AttnArgs& a, const Plan& pl, cudaStream_t stream) {
  FwdParams p;
  p.q = a.q;
  p.k = a.k_cache;
  p.v = a.v_cache;
  p.out = a.out;
  p.past = a.past;
  p.M = a.M;
  p.n_heads = a.n_heads;
  p.max_seq = a.max_seq;
  p.group = a.n_heads / a.n_kv_heads;
  p.gp = pl.gp;
  p.tokens = pl.tokens;
  p.n_splits = pl.n_splits;
  p.scale_log2 = a.scale * 1.4426950408889634f;
  const size_t rows = size_t(a.M) * a.n_heads;
  p.o_part = pl.n_splits > 1 ? static_cast<float*>(a.scratch) : nullptr;
  p.lse_part = pl.n_splits > 1 ? p.o_part + size_t(pl.n_splits) * rows * D : nullptr;
  p.seqs = a.seqs;
  p.tiles = a.tiles;
  p.layer = a.layer;
  p.n_kv_heads = a.n_kv_heads;
  static const bool prefetch_env = [] {  // on unless $QSP_ATTN_PREFETCH=0
    const char* v = std::getenv("QSP_ATTN_PREFETCH");
    return !(v && std::strcmp(v, "0") == 0);
  }();
  p.prefetch = a.prefetch == AttnPrefetch::kOn || (a.prefetch == AttnPrefetch::kAuto && prefetch_env);

  cudaError_t e;
  if (a.seqs) {  // a batched pass: never split (make_batch_plan)
    switch (pl.cfg) {
      case kSmall: return launch_fwd<SmallTraits<D>, true>(p, pl, stream);
      case kMid: return launch_fwd<MidTraits<D>, true>(p, pl, stream);
      default: return launch_fwd<BigTraits<D>, true>(p, pl, stream);
    }
  }
  switch (pl.cfg) {
    case kSmall: e = launch_fwd<SmallTraits<D>, false>(p, pl, stream); break;
    case kMid: e = launch_fwd<MidTraits<D>, false>(p, pl, stream); break;
    default: e = launch_fwd<BigTraits<D>, false>(p, pl, stream); break;
  }
  if (e != cudaSuccess || pl.n_splits <= 1) return e;
  return launch_combine(p.o_part, p.lse_part, a.out, int(rows), pl.n_splits, D, stream);
}

}  // namespace

cudaError_t run_mma(const AttnArgs& a, const Plan& pl, cudaStream_t stream) {
  return a.head_dim == 128 ? run_d<128>(a, pl, stream) : run_d<64>(a, pl, stream);
}

}  // namespace attn
}  // namespace kern
}  // namespace qsp
