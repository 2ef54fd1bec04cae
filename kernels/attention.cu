// Batched causal flash attention (FlashAttention-2 style) for the prefill and
// decode of GQA models: one launch per layer covers the whole chunk of M query
// tokens, whatever M (1 .. 8192) and whatever the cache position.
//
// Work decomposition
//  - A thread block owns a tile of kBlockM "rows". A row is one (query token,
//    query head) pair; the rows of a block all belong to ONE KV head: the
//    `gp` query heads of a GQA group (or a slice of it) times kBlockM / gp
//    consecutive tokens, token-major (row r = token r / gp, head r % gp). Each
//    K/V tile is then loaded once for every query head that reads it, which
//    is what keeps decode (M = 1, only `group` useful rows) from re-reading
//    the cache once per query head.
//  - K/V tiles of kBlockN keys stream through shared memory with cp.async,
//    two stages each for K and V, so the next tile's load overlaps this
//    tile's math. S = Q K^T and O += P V run on tensor cores
//    (mma.sync m16n8k16, fp16 in, fp32 accumulate), operands fetched with
//    ldmatrix (.trans for V). Shared memory rows are XOR-swizzled in 16-byte
//    chunks so that ldmatrix and the cp.async stores are bank-conflict free.
//  - Online softmax in fp32 registers with base-2 exponentials: scores are
//    kept raw and scaled by scale*log2(e) inside one FMA per element.
//  - Causality: query m sits at position past + m and sees keys 0 .. past+m.
//    `past` is read on the device; the grid depends only on (M, heads,
//    max_seq, device), so a CUDA graph captured once stays valid at every
//    position. Tiles past the block's last visible key are never visited;
//    only tiles crossing the diagonal pay for the mask.
//  - Split-KV (flash-decoding): when (M, heads) alone cannot fill the GPU,
//    blockIdx.z splits the key range [0, past + M) into n_splits equal,
//    tile-aligned chunks (sized on the device from `past`); each split writes
//    an fp32 partial O (normalized) and its base-2 log-sum-exp to scratch and
//    a second kernel merges them. Splits with nothing to do write lse = -inf.
//
// Three tile configurations (see make_plan): kBig (128 rows, 4 warps of 32
// rows: every K/V fragment read from shared memory feeds two MMAs, needed to
// be tensor-core rather than shared-memory bound on long prefills), kMid (64
// rows, 4 warps of 16 rows, Q kept in registers) and kSmall (16 rows, one
// warp: decode and tiny chunks, where the cache read is the whole cost).
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <type_traits>
#include <utility>

#include "kernels/attention_wgmma.h"
#include "kernels/kernels.h"
#include "kernels/ptx.cuh"

namespace qsp {
namespace kern {
namespace {

// ============================================================================
// PTX wrappers
// ============================================================================
// ============================================================================
// Tile configuration
// ============================================================================
template <int kHeadDim_, int kBlockM_, int kBlockN_, int kNWarps_, int kMinBlocksPerSm_>
struct FwdTraits {
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kBlockM = kBlockM_;  // rows (token x head) per block
  static constexpr int kBlockN = kBlockN_;  // keys per K/V tile
  static constexpr int kNWarps = kNWarps_;
  static constexpr int kMinBlocksPerSm = kMinBlocksPerSm_;
  static constexpr int kNThreads = 32 * kNWarps;

  static constexpr int kRowsPerWarp = kBlockM / kNWarps;
  static constexpr int kMTiles = kRowsPerWarp / 16;  // m16 tiles per warp
  static constexpr int kNTiles = kBlockN / 8;        // n8 tiles of S
  static constexpr int kDTiles = kHeadDim / 8;       // n8 tiles of O
  static constexpr int kKSteps = kHeadDim / 16;      // k16 steps of Q K^T
  static constexpr int kPSteps = kBlockN / 16;       // k16 steps of P V
  // One m-tile per warp: Q fragments (kKSteps x 4 regs) fit in registers;
  // with two they would not, and are re-read from shared memory per tile.
  static constexpr bool kQInRegs = kMTiles == 1;

  static constexpr int kChunksPerRow = kHeadDim / 8;  // 16-byte chunks per row
  static constexpr int kRowsPerPass = kNThreads / kChunksPerRow;
  static constexpr int kRowBytes = kHeadDim * 2;
  static constexpr int kSmemQ = kBlockM * kRowBytes;
  static constexpr int kSmemKV = kBlockN * kRowBytes;      // one stage of K (or V)
  static constexpr int kSmemBytes = kSmemQ + 4 * kSmemKV;  // Q, K x2, V x2

  static_assert(kHeadDim == 64 || kHeadDim == 128, "head_dim 64 or 128");
  static_assert(kBlockM % (16 * kNWarps) == 0, "whole m16 tiles per warp");
  static_assert(kBlockN % 16 == 0 && kNTiles % 2 == 0, "K tiles feed ldmatrix.x4 in pairs of n8");
  static_assert(kDTiles % 2 == 0, "V tiles feed ldmatrix.x4.trans in pairs of n8");
  static_assert(kNThreads % kChunksPerRow == 0, "a thread keeps one chunk column");
  static_assert(kBlockM % kRowsPerPass == 0 && kBlockN % kRowsPerPass == 0, "whole load passes");
  static_assert(32 % kChunksPerRow == 0 && kRowsPerWarp % (32 / kChunksPerRow) == 0, "whole store passes");
  static_assert(kRowsPerWarp % (32 * 4 / kHeadDim) == 0, "whole fp32 store passes");
  static_assert(kBlockM * kHeadDim * 4 <= 4 * kSmemKV, "fp32 split-KV partials fit in the K/V tiles");
};

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
template <class Kt>
__global__ void __launch_bounds__(Kt::kNThreads, Kt::kMinBlocksPerSm) attn_fwd_kernel(const FwdParams p) {
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
  int t0 = bc.t0, h0 = bc.h0, split = bc.split;
  const int kvh = h0 / p.group;
  const int rows_used = p.tokens * p.gp;

  const int past = *p.past;
  const int kv_len = min(past + p.M, p.max_seq);  // keys 0 .. kv_len-1 exist
  const int t_last = min(t0 + p.tokens, p.M) - 1;
  int n_begin = 0;
  int n_end = min(past + t_last + 1, kv_len);  // last key any row of the block sees, + 1
  if (p.n_splits > 1) {
    const int per = (kv_len + p.n_splits - 1) / p.n_splits;
    const int chunk = (per + kBlockN - 1) / kBlockN * kBlockN;
    n_begin = split * chunk;
    n_end = min(n_end, n_begin + chunk);
  }

  if (n_begin >= n_end) {
    // Nothing visible in this split: tell the combine step so.
    if (p.n_splits > 1) {
      for (int r = tid; r < rows_used; r += Kt::kNThreads) {
        const int t = t0 + r / p.gp;
        if (t < p.M)
          p.lse_part[(size_t(split) * p.M + t) * p.n_heads + h0 + r % p.gp] = -INFINITY;
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

  // Q: rows beyond the chunk (or the packed heads) are zero-filled.
  static_for<kBlockM / Kt::kRowsPerPass>([&](auto ic) {
    constexpr int i = decltype(ic)::value;
    const int r = ld_row + i * Kt::kRowsPerPass;
    const int t = t0 + r / p.gp;
    const bool ok = r < rows_used && t < p.M;
    const __half* src = p.q + (size_t(t) * p.n_heads + h0 + r % p.gp) * D + ld_chunk * 8;
    cp_async_cg_16<i * Kt::kRowsPerPass * kRowBytes, 0>(sQ + ld_base[(i * Kt::kRowsPerPass) & 7], src, ok);
  });
  // This thread's element of key 0 of the KV head; kept as one offset (not
  // two pointers) to save registers, the bases come from the parameters.
  const size_t kv_off = size_t(kvh) * p.max_seq * D + size_t(ld_row) * D + ld_chunk * 8;
  auto load_tile = [&](const __half* src, uint32_t s_stage, int n0) {
    const __half* tile = src + kv_off + size_t(n0) * D;
    const int valid_rows = n_end - n0 - ld_row;  // this thread's row i is valid iff i * kRowsPerPass < valid_rows
    static_for<kBlockN / Kt::kRowsPerPass>([&](auto ic) {
      constexpr int i = decltype(ic)::value;
      constexpr int kRow = i * Kt::kRowsPerPass;
      cp_async_cg_16<kRow * kRowBytes, kRow * kRowBytes>(s_stage + ld_base[kRow & 7], tile, kRow < valid_rows);
    });
  };
  // Commit groups, in order: {Q, K0}, {V0}, {K1}, {V1}, then per iteration j
  // {K_j+2}, {V_j+2} (empty groups past the end keep the count uniform, so
  // the wait depths below are constants).
  load_tile(p.k, sK, n_begin);
  cp_async_commit();
  load_tile(p.v, sV, n_begin);
  cp_async_commit();
  if (n_tiles > 1) load_tile(p.k, sK + Kt::kSmemKV, n_begin + kBlockN);
  cp_async_commit();
  if (n_tiles > 1) load_tile(p.v, sV + Kt::kSmemKV, n_begin + kBlockN);
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
      const bool ok = r < rows_used && t < p.M;
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
    if (j + 2 < n_tiles) load_tile(p.k, sKs, n0 + 2 * kBlockN);
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
    if (j + 2 < n_tiles) load_tile(p.v, sVs, n0 + 2 * kBlockN);
    cp_async_commit();
  }
  cp_async_wait<0>();  // nothing may land in shared memory after exit

  // ---- Epilogue
  {
    const BlockCoords ec = block_coords(p);
    t0 = ec.t0;
    h0 = ec.h0;
    split = ec.split;
  }
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
        if (q == 0 && r < rows_used && t < p.M)
          p.lse_part[(size_t(split) * p.M + t) * p.n_heads + h0 + r % p.gp] =
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
      if (r >= rows_used || t >= p.M) continue;
      float4 v;
      asm volatile("ld.shared.v4.f32 {%0, %1, %2, %3}, [%4];\n"
                   : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
                   : "r"(stage_base + rl * D * 4 + ((c ^ ((rl & 7) << 1)) << 4))
                   : "memory");
      *reinterpret_cast<float4*>(p.o_part + ((size_t(split) * p.M + t) * p.n_heads + h0 + r % p.gp) * D + c * 4) = v;
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
    if (r >= rows_used || t >= p.M) continue;
    uint4 v;
    asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "r"(sQ + swizzle<kRowBytes>(r, st_chunk))
                 : "memory");
    *reinterpret_cast<uint4*>(p.out + (size_t(t) * p.n_heads + h0 + r % p.gp) * D + st_chunk * 8) = v;
  }
}

// Merges the split-KV partials of one (token, head) row per block:
//   out = sum_s 2^(lse_s - max) O_s / sum_s 2^(lse_s - max).
// The splits are spread over the threads (kSplitsPerStep at a time, each
// split's row over kLanesPerSplit threads as float4s) and the loads are
// unrolled, so a row costs a few dependent global round trips rather than
// one per split.
constexpr int kCombineThreads = 256;
constexpr int kCombineMaxSplits = kCombineThreads;  // one lse per thread

template <int D>
__global__ void __launch_bounds__(kCombineThreads) attn_combine_kernel(const float* __restrict__ o_part,
                                                                       const float* __restrict__ lse_part,
                                                                       __half* __restrict__ out, int rows,
                                                                       int n_splits) {
  constexpr int kLanesPerSplit = D / 4;
  constexpr int kSplitsPerStep = kCombineThreads / kLanesPerSplit;
  constexpr int kUnroll = 4;
  static_assert(kCombineThreads % kLanesPerSplit == 0 && 32 % kLanesPerSplit == 0, "splits map to warp slices");
  __shared__ float s_w[kCombineMaxSplits];
  __shared__ float s_red[kCombineThreads / 32];
  __shared__ float4 s_acc[kSplitsPerStep][kLanesPerSplit];

  const int row = int(blockIdx.x);
  const int tid = int(threadIdx.x), lane = tid & 31, warp = tid >> 5;

  // 1. max over the splits' log-sum-exps (base 2)
  const float lse = tid < n_splits ? lse_part[size_t(tid) * rows + row] : -INFINITY;
  float mx = lse;
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
  if (lane == 0) s_red[warp] = mx;
  __syncthreads();
  mx = s_red[0];
#pragma unroll
  for (int w = 1; w < kCombineThreads / 32; ++w) mx = fmaxf(mx, s_red[w]);
  // Weights; an empty split (lse -inf) gets 0 and its O is never read.
  const float w = lse == -INFINITY ? 0.0f : exp2f(lse - mx);
  if (tid < n_splits) s_w[tid] = w;
  float wsum = w;
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) wsum += __shfl_xor_sync(0xffffffffu, wsum, off);
  __syncthreads();  // s_w complete, everyone has read s_red
  if (lane == 0) s_red[warp] = wsum;

  // 2. weighted sum of the partial O rows
  const int sub = tid / kLanesPerSplit, c = tid % kLanesPerSplit;
  float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  for (int s0 = sub; s0 < n_splits; s0 += kSplitsPerStep * kUnroll) {
    float4 v[kUnroll];
    float ws[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int s = s0 + u * kSplitsPerStep;
      ws[u] = s < n_splits ? s_w[s] : 0.0f;
      v[u] = ws[u] != 0.0f ? *reinterpret_cast<const float4*>(o_part + (size_t(s) * rows + row) * D + c * 4)
                           : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      acc.x += ws[u] * v[u].x;
      acc.y += ws[u] * v[u].y;
      acc.z += ws[u] * v[u].z;
      acc.w += ws[u] * v[u].w;
    }
  }
  s_acc[sub][c] = acc;
  __syncthreads();

  // 3. reduce over the thread slices, normalize, store fp16
  if (tid < kLanesPerSplit) {
    float total = 0.0f;
#pragma unroll
    for (int w2 = 0; w2 < kCombineThreads / 32; ++w2) total += s_red[w2];
    float4 r = s_acc[0][tid];
#pragma unroll
    for (int k = 1; k < kSplitsPerStep; ++k) {
      const float4 t = s_acc[k][tid];
      r.x += t.x, r.y += t.y, r.z += t.z, r.w += t.w;
    }
    const float inv = total > 0.0f ? 1.0f / total : 0.0f;
    uint2 h;
    h.x = pack_half2(r.x * inv, r.y * inv);
    h.y = pack_half2(r.z * inv, r.w * inv);
    *reinterpret_cast<uint2*>(out + size_t(row) * D + tid * 4) = h;
  }
}

// ============================================================================
// Host side: configurations, planning, launch
// ============================================================================
enum Config : int { kSmall = 0, kMid = 1, kBig = 2 };

//                                                  D  rows keys warps CTAs/SM
template <int D> using SmallTraits = FwdTraits<D, 16, 32, 1, 4>;
template <int D> using MidTraits = FwdTraits<D, 64, 64, 4, 2>;
// kBig: 4 warps of 32 rows (2 CTAs/SM, 255 registers, every K/V fragment
// feeds two MMAs). Build with -DQSP_ATTN_BIG_WARPS=8 for the alternative
// 8 warps of 16 rows (Q in registers, ~194 registers, 1 CTA/SM) to compare.
#ifndef QSP_ATTN_BIG_WARPS
#define QSP_ATTN_BIG_WARPS 4
#endif
static_assert(QSP_ATTN_BIG_WARPS == 4 || QSP_ATTN_BIG_WARPS == 8, "kBig runs 4 or 8 warps");
template <int D> using BigTraits = FwdTraits<D, 128, 64, QSP_ATTN_BIG_WARPS, 8 / QSP_ATTN_BIG_WARPS>;

// Tuning knobs (per KV head, rows = M x group):
//  - rows <= kSmallMaxRows: decode-like; a bigger tile would be mostly
//    padding and the cache read is the whole cost.
//  - rows <= kMidMaxRows: 16-row warps with Q in registers; more blocks for
//    the short-to-medium chunks that cannot fill the GPU with 128-row tiles.
//  - beyond: kBig, 32-row warps, the long-prefill workhorse.
constexpr int64_t kSmallMaxRows = 16;
constexpr int64_t kMidMaxRows = 1024;
// Split-KV: split when the blocks fill less than 80% of one wave of
// (SMs x CTAs/SM), into at most kMaxSplits splits of >= kMinKeysPerSplit
// keys (of max_seq: the real length is only known on the device), with at
// most kMaxPartialRows (row, split) partials, which bounds the scratch.
constexpr int kMaxSplits = 128;
constexpr int kMinKeysPerSplit = 64;
constexpr int64_t kMaxPartialRows = 32768;
static_assert(kMaxSplits <= kCombineMaxSplits, "the combine kernel holds one lse per thread");

struct ConfigInfo {
  int block_m, ctas_per_sm;
};
template <class Kt>
constexpr ConfigInfo info_of() {
  return {Kt::kBlockM, Kt::kMinBlocksPerSm};
}
ConfigInfo config_info(Config c) {
  // The tile shapes do not depend on head_dim.
  static_assert(SmallTraits<64>::kBlockM == SmallTraits<128>::kBlockM && MidTraits<64>::kBlockM == MidTraits<128>::kBlockM &&
                    BigTraits<64>::kBlockM == BigTraits<128>::kBlockM,
                "plans are head_dim independent");
  switch (c) {
    case kSmall: return info_of<SmallTraits<128>>();
    case kMid: return info_of<MidTraits<128>>();
    default: return info_of<BigTraits<128>>();
  }
}

struct Plan {
  Config cfg = kBig;
  int gp = 1, tokens = 1, m_blocks = 1, head_blocks = 1, n_splits = 1;
};

int largest_divisor_at_most(int n, int cap) {
  for (int d = std::min(n, cap); d > 1; --d)
    if (n % d == 0) return d;
  return 1;
}

// Everything here is a function of shapes and the device only, never of
// `past` (a device value), so captured graphs stay valid.
Plan make_plan(int M, int n_heads, int n_kv_heads, int head_dim, int max_seq, int n_sms, size_t scratch_bytes) {
  Plan pl;
  const int group = n_heads / n_kv_heads;
  const int64_t rows = int64_t(M) * group;
  pl.cfg = rows <= kSmallMaxRows ? kSmall : rows <= kMidMaxRows ? kMid : kBig;
  const ConfigInfo ci = config_info(pl.cfg);
  pl.gp = largest_divisor_at_most(group, ci.block_m);
  pl.tokens = ci.block_m / pl.gp;
  pl.m_blocks = (M + pl.tokens - 1) / pl.tokens;
  pl.head_blocks = n_kv_heads * (group / pl.gp);
  const int64_t blocks = int64_t(pl.m_blocks) * pl.head_blocks;
  const int64_t target = int64_t(n_sms) * ci.ctas_per_sm;
  if (blocks * 5 >= target * 4) return pl;  // >= 80% of a full wave: no split
  int64_t s = (target + blocks - 1) / blocks;
  s = std::min<int64_t>(s, kMaxSplits);
  s = std::min<int64_t>(s, std::max(1, max_seq / kMinKeysPerSplit));
  s = std::min<int64_t>(s, kMaxPartialRows / (int64_t(M) * n_heads));
  const size_t per_split = size_t(M) * n_heads * (size_t(head_dim) + 1) * sizeof(float);
  s = std::min<int64_t>(s, int64_t(scratch_bytes / per_split));
  pl.n_splits = s > 1 ? int(s) : 1;
  return pl;
}

size_t plan_scratch_bytes(const Plan& pl, int M, int n_heads, int head_dim) {
  if (pl.n_splits <= 1) return 0;
  return size_t(pl.n_splits) * M * n_heads * (size_t(head_dim) + 1) * sizeof(float);
}

// Per-device caches of the SM count and of "the smem attribute is set", so
// the launcher does no driver queries on the hot path.
constexpr int kMaxDevices = 64;
std::atomic<int> g_sm_count[kMaxDevices];

cudaError_t device_sm_count(int* n) {
  int dev = 0;
  cudaError_t e = cudaGetDevice(&dev);
  if (e != cudaSuccess) return e;
  if (dev >= 0 && dev < kMaxDevices) {
    const int c = g_sm_count[dev].load(std::memory_order_relaxed);
    if (c > 0) {
      *n = c;
      return cudaSuccess;
    }
  }
  e = cudaDeviceGetAttribute(n, cudaDevAttrMultiProcessorCount, dev);
  if (e != cudaSuccess) return e;
  if (dev >= 0 && dev < kMaxDevices) g_sm_count[dev].store(*n, std::memory_order_relaxed);
  return cudaSuccess;
}

template <class Kt>
cudaError_t ensure_smem_attribute() {
  static std::atomic<uint64_t> done_mask{0};
  if (Kt::kSmemBytes <= 48 * 1024) return cudaSuccess;
  int dev = 0;
  cudaError_t e = cudaGetDevice(&dev);
  if (e != cudaSuccess) return e;
  const uint64_t bit = dev < 64 ? (uint64_t(1) << dev) : 0;
  if (bit && (done_mask.load(std::memory_order_acquire) & bit)) return cudaSuccess;
  e = cudaFuncSetAttribute(attn_fwd_kernel<Kt>, cudaFuncAttributeMaxDynamicSharedMemorySize, Kt::kSmemBytes);
  if (e != cudaSuccess) return e;
  if (bit) done_mask.fetch_or(bit, std::memory_order_acq_rel);
  return cudaSuccess;
}

template <class Kt>
cudaError_t launch_fwd(const FwdParams& p, const Plan& pl, cudaStream_t stream) {
  cudaError_t e = ensure_smem_attribute<Kt>();
  if (e != cudaSuccess) return e;
  const dim3 grid(unsigned(pl.m_blocks), unsigned(pl.head_blocks), unsigned(pl.n_splits));
  attn_fwd_kernel<Kt><<<grid, Kt::kNThreads, Kt::kSmemBytes, stream>>>(p);
  return cudaGetLastError();
}

template <int D>
cudaError_t run_attention(const AttnArgs& a, const Plan& pl, cudaStream_t stream) {
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

  cudaError_t e;
  switch (pl.cfg) {
    case kSmall: e = launch_fwd<SmallTraits<D>>(p, pl, stream); break;
    case kMid: e = launch_fwd<MidTraits<D>>(p, pl, stream); break;
    default: e = launch_fwd<BigTraits<D>>(p, pl, stream); break;
  }
  if (e != cudaSuccess || pl.n_splits <= 1) return e;
  attn_combine_kernel<D><<<unsigned(rows), kCombineThreads, 0, stream>>>(p.o_part, p.lse_part, a.out, int(rows),
                                                                        pl.n_splits);
  return cudaGetLastError();
}

bool aligned16(const void* ptr) { return (reinterpret_cast<uintptr_t>(ptr) & 15) == 0; }

}  // namespace

bool attention_supported(int32_t head_dim) { return head_dim == 64 || head_dim == 128; }

size_t attention_scratch_bytes(int32_t max_M, int32_t n_heads, int32_t head_dim, int32_t max_seq) {
  if (max_M < 1 || n_heads < 1 || !attention_supported(head_dim) || max_seq < 1) return 0;
  int n_sms = 0;
  if (device_sm_count(&n_sms) != cudaSuccess) {
    cudaGetLastError();
    n_sms = 132;  // no device to ask: size for an H100/H200
  }
  // The largest need over every chunk length and every GQA shape with this
  // many query heads (the KV head count is not an argument).
  size_t need = 0;
  for (int kv = 1; kv <= n_heads; ++kv) {
    if (n_heads % kv) continue;
    for (int M = 1; M <= max_M; ++M) {
      const Plan pl = make_plan(M, n_heads, kv, head_dim, max_seq, n_sms, SIZE_MAX);
      need = std::max(need, plan_scratch_bytes(pl, M, n_heads, head_dim));
    }
  }
  return need;
}

cudaError_t attention(const AttnArgs& a, cudaStream_t stream) {
  if (!a.q || !a.k_cache || !a.v_cache || !a.out || !a.past) return cudaErrorInvalidValue;
  if (!attention_supported(a.head_dim)) return cudaErrorInvalidValue;
  if (a.M < 1 || a.n_heads < 1 || a.n_kv_heads < 1 || a.n_heads % a.n_kv_heads != 0) return cudaErrorInvalidValue;
  if (a.max_seq < a.M || a.n_heads > 65535) return cudaErrorInvalidValue;  // gridDim.y <= n_heads
  if (!(a.scale > 0.0f) || !std::isfinite(a.scale)) return cudaErrorInvalidValue;
  // Row-granular 16-byte copies need 16-byte aligned rows (head_dim is a
  // multiple of 8, so aligned bases suffice).
  if (!aligned16(a.q) || !aligned16(a.k_cache) || !aligned16(a.v_cache) || !aligned16(a.out))
    return cudaErrorInvalidValue;
  if (int64_t(a.n_kv_heads) * a.max_seq * a.head_dim > (int64_t(1) << 40)) return cudaErrorInvalidValue;

  int n_sms = 0;
  cudaError_t e = device_sm_count(&n_sms);
  if (e != cudaSuccess) return e;
  // Without (enough) scratch the plan simply splits less, down to not at all.
  const size_t scratch = a.scratch && aligned16(a.scratch) ? a.scratch_bytes : 0;
  const Plan pl = make_plan(a.M, a.n_heads, a.n_kv_heads, a.head_dim, a.max_seq, n_sms, scratch);
  if (a.path != AttnPath::kAuto && a.path != AttnPath::kMma && a.path != AttnPath::kWgmma) return cudaErrorInvalidValue;
  // On Hopper the wgmma kernel (one 128-row block per SM, no split-KV)
  // whenever its grid fills >= 20% of a wave: measured 1.7-2.6x the mma.sync
  // kernels from 128 to 8192 tokens (bench/RESULTS.md). Short chunks and
  // decode steps keep the split-KV mma.sync kernels.
  const int group = a.n_heads / a.n_kv_heads;
  const int wg_gp = largest_divisor_at_most(group, attn90::kBlockM);
  const int64_t wg_blocks = int64_t((a.M + attn90::kBlockM / wg_gp - 1) / (attn90::kBlockM / wg_gp)) *
                            a.n_kv_heads * (group / wg_gp);
  const bool want_wgmma =
      a.path == AttnPath::kWgmma || (a.path == AttnPath::kAuto && wg_blocks * 5 >= int64_t(n_sms));
  if (want_wgmma) {
    int dev = 0;
    e = cudaGetDevice(&dev);
    if (e != cudaSuccess) return e;
    if (a.head_dim == attn90::kHeadDim && attn90::available(dev)) {
      attn90::Args w;
      w.q = a.q;
      w.k_cache = a.k_cache;
      w.v_cache = a.v_cache;
      w.out = a.out;
      w.past = a.past;
      w.M = a.M;
      w.n_heads = a.n_heads;
      w.n_kv_heads = a.n_kv_heads;
      w.max_seq = a.max_seq;
      w.group = group;
      w.gp = wg_gp;
      w.scale_log2 = a.scale * 1.4426950408889634f;
      return attn90::run(w, stream);
    }
    if (a.path == AttnPath::kWgmma) return cudaErrorNotSupported;
  }
  return a.head_dim == 128 ? run_attention<128>(a, pl, stream) : run_attention<64>(a, pl, stream);
}

}  // namespace kern
}  // namespace qsp
