// The Hopper prefill GEMM: Y = X W^T for Q4_0 / Q8_0 weights on wgmma
// (sm_90a), weights dequantized in registers as the A operand, activations
// streamed by TMA as the B operand. Built only as sm_90a machine code (see
// CMakeLists.txt); kernels/gemm.cu calls it through kernels/gemm_wgmma.h.
// The per-format part (a stage's smem -> A fragments) is the format's
// WTraits::wg_raw + wg_decode (kernels/formats/); formats without kWgmma never get here.
//
// Block: two consumer warpgroups and one producer warpgroup (384 threads;
// setmaxnreg moves registers from the producer, 40, to the consumers, 232).
//  - The block owns 128 weight rows ("virtual" rows: for kSwiGLU, 64 gate
//    rows in warpgroup 0 and the same 64 up rows in warpgroup 1) and BT
//    token rows (256 or 128; 64 forced only). Warp q of warpgroup w owns the 16-row weight
//    tile 4w + q, which is exactly one tile of the layout of qweight.cuh.
//  - Per 64-wide K chunk (one pipeline stage): one producer thread issues
//    one TMA copy of the X tile [BT][64] fp16 (128-byte swizzle) and 16 bulk
//    copies of the weight tiles' quant units and scales (or, with
//    Args::tma_w, one tensor-map copy of each array per matrix: WMaps), all
//    completing on the stage's "full" mbarrier.
//  - A consumer warp reads its lane word (one LDS.128 for Q4_0, two for Q8_0)
//    and its scales (WTraits::wg_raw), decodes the four k steps' A fragments (the mma.sync A
//    fragment layout is wgmma's per-warp A layout) and issues four
//    wgmma.m64nBTk16 with B from the swizzled X tile, waits for them and
//    hands the slot back through its "empty" mbarrier (one arrive per warp).
//    The 64-token tile always takes two chunks per round (an odd count's
//    last alone): both decoded, their eight wgmmas in one group, one wait.
//    The two consumer warpgroups interleave: one decodes while the other's
//    wgmmas run.
//  - Epilogue: the fp32 accumulators (D = W X^T, weight rows x tokens) go
//    through shared memory transposed to [token][row], then every consumer
//    thread stores 4 consecutive output columns of a token row (store2).
// Grid: x = token blocks (fastest, so co-resident blocks share weight tiles
// in L2 and walk the same K slice of X), y = weight-row blocks, z = K splits.
// Split K (kSplit; grids below a wave: short prompts, small N): the z blocks
// of a (1, 1, splits) cluster each take a contiguous range of K chunks;
// after the main loop each writes its partial tile to its own shared memory
// and, after a cluster barrier, sums BT / splits token rows of every rank's
// tile through distributed shared memory and stores them. The producer
// warpgroup stays alive for the cluster barriers. A separate instantiation:
// the split code in the one kernel cost the unsplit path ~5-15% at M = 2048.
#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "kernels/formats/formats.cuh"
#include "kernels/gemm_wgmma.h"
#include "kernels/pdl.h"
#include "kernels/per_device.h"
#include "kernels/ptx.cuh"
#include "kernels/qweight.cuh"
#include "kernels/sm90.cuh"

namespace qsp {
namespace kern {
namespace wgmma {
namespace {

using namespace sm90;

constexpr int kConsumers = 2;                     // warpgroups
constexpr int kThreads = 128 * (kConsumers + 1);  // + the producer warpgroup
// Registers after setmaxnreg, for MinB blocks per SM: the kernel is compiled
// to 65536 / (384 MinB) rounded down to 8 (168, or 80 for two blocks), and
// the producer's release pays the consumers' growth within that:
// 128 * 40 + 256 * 232 = 384 * 168, 128 * 32 + 256 * 104 = 384 * 80.
// ptxas compiles the producer's code within what setmaxnreg.dec leaves it:
// at 40 / 32 the producer thread spills 48-60 bytes in every split-K kernel
// at one block per SM and 104-120 in 60 of the 80 kernels at two. 56 / 224
// and 64 / 88 (the same totals) spill nothing: commit ff5f17c, reverted
// until a GPU runs it (bench/RESULTS.md, twentieth session).
template <int MinB>
constexpr int kProducerRegs = MinB == 1 ? 40 : 32;
template <int MinB>
constexpr int kConsumerRegs = MinB == 1 ? 232 : 104;
static_assert(128 * kProducerRegs<1> + 256 * kConsumerRegs<1> <= kThreads * 168 &&
                  128 * kProducerRegs<2> + 256 * kConsumerRegs<2> <= kThreads * 80,
              "setmaxnreg stays within the launch's registers");
constexpr int kVT = kBlockRows / qw::kTileRows;   // weight tiles per block
constexpr int kLdr = kBlockRows + 4;              // epilogue smem row (floats): conflict-free transposed writes
// Pipeline stages take at most this: one block per SM, or two (each with
// its epilogue tile, alignment slack and mbarriers, within 228 KB).
template <int MinB>
constexpr int kSmemBudget = MinB == 1 ? 200 * 1024 : 100 * 1024;
static_assert(kBlockRows == 64 * kConsumers, "one m64 weight slice per consumer warpgroup");

constexpr int round_up(int x, int m) { return (x + m - 1) / m * m; }

template <WFormat F, int BT, int MinB = 1>
struct Layout {
  static constexpr int kUnit = WTraits<F>::kUnit;
  static constexpr int kXBytes = BT * 128;                       // [BT][64] fp16, 1024-aligned
  static constexpr int kQBytes = kVT * kUnit;                    // quant units of the 8 tiles
  static constexpr int kSUnit = WTraits<F>::kScaleUnit;
  static constexpr int kSBytes = kVT * kSUnit;                   // their scales
  static constexpr int kStage = round_up(kXBytes + kQBytes + kSBytes, 1024);
  static constexpr int kStages = std::min(8, kSmemBudget<MinB> / kStage);
  static constexpr int kTx = kXBytes + kQBytes + kSBytes;        // bytes landing per stage
  static constexpr int kEpi = BT * kLdr * 4;
  static constexpr int kRegion = std::max(kStages * kStage, kEpi);
  static constexpr int kBytes = 1024 + kRegion + 2 * 8 * kStages;  // alignment slack + mbarriers
  static_assert(kStages >= 2, "pipeline needs two stages");
  static_assert(MinB == 1 || 2 * (kBytes + 1024) <= 228 * 1024, "two blocks fit an SM's shared memory");
};

// The weights of a stage by tensor-map copies (Args::tma_w): per matrix
// (kSwiGLU: gate, up; otherwise the row groups of W, unused ones zero) a map
// of its quant units and one of its scales (sm90::encode_units_3d), a box
// being one K chunk of the block's tiles (kVT, or kVT / 2 of gate and of up),
// so a stage takes 3 (5 for kSwiGLU) copies instead of 1 + 2 * kVT. A block
// across two matrices of a row group keeps the copies per tile. Tiles past a
// matrix's end read as zero (their rows are not stored).
struct WMaps {
  CUtensorMap q[3], s[3];
};

// Whether format F's units fit the maps: 16-byte multiples of at most 1024
// bytes (a box dimension of 32-bit elements holds at most 256), each box
// landing 128-byte aligned in the stage (up's half of a kSwiGLU stage too).
template <WFormat F>
constexpr bool tma_w_fits() {
  using T = WTraits<F>;
  return T::kUnit % 16 == 0 && T::kUnit <= 1024 && T::kScaleUnit % 16 == 0 && T::kScaleUnit <= 1024 &&
         (kVT / 2 * T::kUnit) % 128 == 0 && (kVT / 2 * T::kScaleUnit) % 128 == 0;
}

// ---- Where a block's time goes (debug builds: cmake -DQSP_WGMMA_PROBE=ON) ---------------
// Cycles (clock64) summed over the consumer warps' lane 0 and the producer
// thread of every block into g_probe (wgmma::probe_take): kProbe* below.
// Off (the release build), QSP_PROBE(slot, statement) is the statement.
#if defined(QSP_WGMMA_PROBE)
__device__ unsigned long long g_probe[kProbeSlots];
// Ablations ($QSP_WGMMA_ABLATE, a bit mask; probe builds only; the results
// are garbage): which part of the loop bounds it, by taking it away.
//   1: no decode (the A fragments are the lane's raw words)
//   4: no weight copies (the consumers decode whatever the slot holds)
//   8: no activation copies (the wgmmas read whatever the slot holds)
// (No bit takes the wgmmas away: a run-time branch around their issue made
// ptxas serialize every wgmma of the build, C7511 in all 320 kernels.)
__device__ int g_ablate;
#define QSP_ABLATE(bit) ((ablate & (bit)) != 0)
#define QSP_PROBE(slot, ...)               \
  do {                                     \
    const long long probe_t0 = clock64();  \
    __VA_ARGS__;                           \
    probe[slot] += clock64() - probe_t0;   \
  } while (0)
#else
#define QSP_ABLATE(bit) false
#define QSP_PROBE(slot, ...) \
  do {                       \
    __VA_ARGS__;             \
  } while (0)
#endif

// ---- The kernel ------------------------------------------------------------------------------
// MinB: blocks per SM the registers and shared memory are budgeted for (2:
// the 64-token tile only, Args::per_sm).
template <WFormat F, int BT, Epilogue EP, bool kSplit, int MinB>
__global__ void __launch_bounds__(kThreads, MinB)
    wgmma_kernel(const __grid_constant__ CUtensorMap xmap, const __grid_constant__ WMaps wm, const Args a) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  // PDL (kernels/pdl.h): the producer issues the weights of its first kS
  // stages before it waits for the previous kernel (weights are never
  // written by a pass), then the activations; the consumers wait at once.
  // So under PDL a block that starts on an SM the previous kernel's tail
  // left idle has its pipeline filling while that kernel finishes.
  using L = Layout<F, BT, MinB>;
  constexpr bool kDual = EP == Epilogue::kSwiGLU;
  constexpr int kS = L::kStages;
  extern __shared__ uint8_t smem_raw[];
  const uint32_t raw0 = smem_u32(smem_raw);
  const uint32_t base = (raw0 + 1023u) & ~1023u;  // TMA swizzle atoms need 1024-byte alignment
  const uint32_t full0 = base + L::kRegion, empty0 = full0 + 8 * kS;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int m0 = blockIdx.x * BT;
#if defined(QSP_WGMMA_PROBE)
  long long probe[kProbeSlots] = {};
  const long long probe_start = clock64();
  const int ablate = g_ablate;
  // Lane 0 of each consumer warp and the producer thread add theirs to g_probe.
  auto probe_flush = [&] {
    for (int i = 0; i < kProbeSlots; ++i)
      if (probe[i]) atomicAdd(&g_probe[i], static_cast<unsigned long long>(probe[i]));
  };
#endif
  // K chunks c0 .. c0 + nk: all of K, or this cluster rank's range.
  const int c0 = kSplit ? int(blockIdx.z) * a.chunks_per_split : 0;
  const int nk = kSplit ? max(0, min(a.KC - c0, a.chunks_per_split)) : a.KC;

  if (threadIdx.x == 0) {
    mbar_init_stages(full0, kS, 1);
#if defined(QSP_RACECHECK_ARRIVE)
    mbar_init_stages(empty0, kS, 128 * kConsumers);  // one arrive per consumer thread
#else
    mbar_init_stages(empty0, kS, 4 * kConsumers);  // one arrive per consumer warp
#endif
    mbar_init_fence();
  }
  __syncthreads();

  if (warp >= 4 * kConsumers) {
    // ---- Producer: one thread keeps kS stages in flight.
    setmaxnreg_dec<kProducerRegs<MinB>>();
    if (warp == 4 * kConsumers && lane == 0) {
      // The block's weight tile v: its matrix, scale offset and tile index
      // there. Past the last tile a real one is loaded (its rows are not stored).
      const int by = int(blockIdx.y) + a.y0;
      const int r0 = kDual ? by * 4 : by * kVT;
      // Stage by stage: the X tile, then load_w(quants, scales, chunk, bar);
      // the first kS stages' weights before pdl_wait(), their X tiles after.
      auto produce = [&](auto load_w) {
        const int pre = min(nk, kS);
        // (Ablations 4 / 8: those copies not made, the bytes not expected.)
        const bool no_w = QSP_ABLATE(4), no_x = QSP_ABLATE(8);
        const uint32_t tx = uint32_t(L::kTx) - (no_w ? L::kQBytes + L::kSBytes : 0) - (no_x ? L::kXBytes : 0);
        for (int kt = 0; kt < pre; ++kt) {
          const uint32_t st = base + kt * L::kStage, bar = full0 + 8 * kt;
          mbar_expect_tx(bar, tx);
          if (!no_w) load_w(st + L::kXBytes, st + L::kXBytes + L::kQBytes, c0 + kt, bar);
        }
        pdl_wait();
        for (int kt = 0; kt < pre && !no_x; ++kt)
          tma_load_2d(base + kt * L::kStage, &xmap, (c0 + kt) * 64, m0, full0 + 8 * kt);
        for (int kt = pre; kt < nk; ++kt) {
          const int slot = kt % kS;
          if (kt >= kS) QSP_PROBE(kProbeEmpty, mbar_wait(empty0 + 8 * slot, ((kt / kS) - 1) & 1));
          const uint32_t st = base + slot * L::kStage, bar = full0 + 8 * slot;
          mbar_expect_tx(bar, tx);
          if (!no_x) tma_load_2d(st, &xmap, (c0 + kt) * 64, m0, bar);
          if (!no_w) load_w(st + L::kXBytes, st + L::kXBytes + L::kQBytes, c0 + kt, bar);
        }
      };
      // One bulk copy per tile and array; loc(v): tile v's WLoc.
      auto per_tile = [&](auto loc) {
        return [&, loc](uint32_t sq, uint32_t ss, int c, uint32_t bar) {
#pragma unroll
          for (int v = 0; v < kVT; ++v) {
            const WLoc w = loc(v);
            const uint32_t unit = uint32_t(w.tile) * uint32_t(a.KC) + uint32_t(c);
            bulk_load(sq + v * L::kUnit, w.base + size_t(unit) * L::kUnit, L::kUnit, bar);
            bulk_load(ss + v * L::kSUnit, w.base + w.soff + size_t(unit) * L::kSUnit, L::kSUnit, bar);
          }
        };
      };
      constexpr bool kTmaW = tma_w_fits<F>();
      if (kDual) {
        if (kTmaW && a.tma_w) {
          produce([&](uint32_t sq, uint32_t ss, int c, uint32_t bar) {
            tma_load_3d(sq, &wm.q[0], 0, c, r0, bar);
            tma_load_3d(sq + (kVT / 2) * L::kUnit, &wm.q[1], 0, c, r0, bar);
            tma_load_3d(ss, &wm.s[0], 0, c, r0, bar);
            tma_load_3d(ss + (kVT / 2) * L::kSUnit, &wm.s[1], 0, c, r0, bar);
          });
        } else {
          produce(per_tile([&](int v) { return WLoc{v / 4 ? a.w[1] : a.w[0], a.scale_off, min(r0 + v % 4, a.tiles - 1)}; }));
        }
      } else {
        // One thread with 40 (or 32) registers (setmaxnreg.dec) issues every copy:
        // the lookup must not run per copy. A block inside one matrix of the
        // row group (always for Q | K | V, whose boundaries are multiples of
        // 128 rows) finds it once; a block across a boundary looks each tile up.
        const int rl = min(r0 + kVT - 1, a.tiles - 1);
        const WLoc w0 = locate(a.grp, r0), wl = locate(a.grp, rl);
        if (wl.base == w0.base && wl.tile - w0.tile == rl - r0) {
          if (kTmaW && a.tma_w) {
            const int mi = (r0 >= a.grp.tend[0]) + (r0 >= a.grp.tend[1]);  // locate's matrix
            const CUtensorMap* qm = mi == 0 ? &wm.q[0] : mi == 1 ? &wm.q[1] : &wm.q[2];
            const CUtensorMap* sm = mi == 0 ? &wm.s[0] : mi == 1 ? &wm.s[1] : &wm.s[2];
            const int t0 = w0.tile;
            produce([&](uint32_t sq, uint32_t ss, int c, uint32_t bar) {
              tma_load_3d(sq, qm, 0, c, t0, bar);
              tma_load_3d(ss, sm, 0, c, t0, bar);
            });
          } else {
            produce(per_tile([&](int v) { return WLoc{w0.base, w0.soff, w0.tile + min(r0 + v, a.tiles - 1) - r0}; }));
          }
        } else {
          produce(per_tile([&](int v) { return locate(a.grp, min(r0 + v, a.tiles - 1)); }));
        }
      }
    }
    if (kSplit) {  // the consumers' two cluster barriers (partials written; partials read)
      cluster_sync();
      cluster_sync();
    }
#if defined(QSP_WGMMA_PROBE)
    if (warp == 4 * kConsumers && lane == 0) {
      probe[kProbeProducer] = clock64() - probe_start;
      probe_flush();
    }
#endif
    return;
  }

  // ---- Consumers.
  pdl_wait();
  pdl_launch_dependents();
  setmaxnreg_inc<kConsumerRegs<MinB>>();
  const int v = warp;  // the warp's weight tile in the block (4 * warpgroup + warp % 4)
  float acc[BT / 2];
#pragma unroll
  for (int i = 0; i < BT / 2; ++i) acc[i] = 0.0f;
  // Chunk kt's slot: the lane's words of it (WTraits::wg_raw; waits for the
  // slot to land), and its A fragments decoded from them.
  using Traits = WTraits<F>;
  using Raw = typename Traits::Raw;
  auto load = [&](int kt, Raw& r) {
    const int slot = kt % kS;
#if defined(QSP_WGMMA_PROBE)
    if (kt == 0)
      QSP_PROBE(kProbeFirst, mbar_wait(full0 + 8 * slot, (kt / kS) & 1));
    else
#endif
      QSP_PROBE(kProbeFull, mbar_wait(full0 + 8 * slot, (kt / kS) & 1));
    const uint32_t st = base + slot * L::kStage;
    QSP_PROBE(kProbeDecode,
              Traits::wg_raw(st + L::kXBytes + v * L::kUnit, st + L::kXBytes + L::kQBytes + v * L::kSUnit, lane, r));
  };
  // wg_decode, or (ablation 1) the raw words as they are.
  auto frags = [&](const Raw& r, uint32_t(&A)[4][4]) {
    if (QSP_ABLATE(1)) {
      constexpr int kWords = int(sizeof(Raw) / 4);
      const uint32_t* w = reinterpret_cast<const uint32_t*>(&r);
#pragma unroll
      for (int i = 0; i < 16; ++i) A[i / 4][i % 4] = w[i % kWords];
    } else {
      wg_decode<Traits>(r, A);
    }
  };
  auto decode = [&](int kt, uint32_t(&A)[4][4]) {
    Raw r;
    load(kt, r);
    QSP_PROBE(kProbeDecode, frags(r, A));
  };
  // Chunks kt .. kt + N - 1's four wgmmas each on A[0 .. N - 1], committed as
  // one group (not waited for).
  auto issue = [&](int kt, auto& A) {
    constexpr int N = int(sizeof(A) / sizeof(A[0]));
    uint64_t desc[N][4];
#pragma unroll
    for (int j = 0; j < N; ++j)
#pragma unroll
      for (int s = 0; s < 4; ++s) {
        desc[j][s] = smem_desc(base + ((kt + j) % kS) * L::kStage + 32 * s);
        fence_reg(desc[j][s]);
#pragma unroll
        for (int r = 0; r < 4; ++r) fence_reg(A[j][s][r]);  // every input defined before the fence
      }
    wgmma_fence();
#pragma unroll
    for (int j = 0; j < N; ++j)
#pragma unroll
      for (int s = 0; s < 4; ++s) Mma<BT>::run(acc, A[j][s], desc[j][s]);
    wgmma_commit();
  };
  // Every lane's reads of chunk kt's slot (wg_raw) done: hand it back.
  auto release = [&](int kt) {
    const int slot = kt % kS;
    // Every lane's reads of the slot (wg_raw) before lane 0 hands it back
    // (bar.warp.sync orders them before lane 0's release-arrive). racecheck
    // does not follow that chain and reports WAR hazards between lanes 1..31's
    // LDS and the producer's next bulk copy into the slot; a named barrier of
    // the warpgroup and one arrive per warpgroup did not satisfy it either.
    // Racecheck builds (QSP_RACECHECK_ARRIVE) have every thread arrive, which
    // it follows (0 hazards; 256 arrivals per stage cost ~20% at M = 2048).
#if defined(QSP_RACECHECK_ARRIVE)
    mbar_arrive(empty0 + 8 * slot);
#else
    __syncwarp();
    if (lane == 0) mbar_arrive(empty0 + 8 * slot);
#endif
  };
#if defined(QSP_WGMMA_PROBE)
  const long long probe_loop = clock64();
  probe[kProbeChunks] = nk;
#endif
  // Chunks a round: kRound at a time through decode, one wgmma group and
  // its wait, then one at a time for the rest. Two for the 64-token tile
  // (H100: every M = 64 GEMM 1-4% faster than one a round; the one-chunk
  // kernels were dropped), one for the others.
  constexpr bool kPair = BT == kTokTileTiny;
  constexpr int kRound = kPair ? 2 : 1;
  // Loading the next round's words (full-barrier waits and shared loads)
  // while this round's wgmmas run, into registers that are no wgmma operand
  // (QSP_WGMMA_AHEAD, thirty-third session), was equal or slower at M = 64
  // (H100, thirty-fifth: 12288x4096 Q4_0 25.9 -> 26.1 us, the 64-sequence
  // step 6.61 -> 6.67 ms) and removed; the ablations of that session put
  // the loop's time in neither the decode nor the copies (bench/RESULTS.md).
  int kt = 0;
  for (; kt + kRound <= nk; kt += kRound) {
    uint32_t A[kRound][4][4];
#pragma unroll
    for (int j = 0; j < kRound; ++j) decode(kt + j, A[j]);
    issue(kt, A);
    // Waiting for this round's group before decoding the next one keeps
    // ptxas from serializing the wgmmas (C7513: registers defined while a
    // group is in flight); the other warpgroup's group covers the gap.
    QSP_PROBE(kProbeMma, wgmma_wait<0>());
#pragma unroll
    for (int j = 0; j < kRound; ++j) release(kt + j);
  }
  if constexpr (kRound > 1) {
    for (; kt < nk; ++kt) {
      uint32_t A[1][4][4];
      decode(kt, A[0]);
      issue(kt, A);
      QSP_PROBE(kProbeMma, wgmma_wait<0>());
      release(kt);
    }
  }
#pragma unroll
  for (int i = 0; i < BT / 2; ++i) fence_reg(acc[i]);
#if defined(QSP_WGMMA_PROBE)
  const long long probe_epi = clock64();
  probe[kProbeLoop] = probe_epi - probe_loop;
#endif

  // ---- Epilogue: D[row][token] -> smem [token][row] -> rows of Y.
  named_sync(1, 128 * kConsumers);  // every consumer is done with the pipeline smem
  float* red = reinterpret_cast<float*>(smem_raw + (base - raw0));
  {
    const int g = lane >> 2, t = lane & 3;
    const int row = 16 * v + g;
#pragma unroll
    for (int j = 0; j < BT / 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) red[(8 * j + 2 * t + (e & 1)) * kLdr + row + 8 * (e >> 1)] = acc[4 * j + e];
  }
  constexpr int kRealCols = kDual ? kBlockRows / 2 : kBlockRows;
  constexpr int kQuads = kRealCols / 4;
  const int n0 = (int(blockIdx.y) + a.y0) * kRealCols;
  // Token rows ml0 .. ml0 + rows of the tile: all (unsplit), or this rank's
  // share of the sum over the cluster.
  const int rows = kSplit ? BT / int(gridDim.z) : BT, ml0 = kSplit ? int(blockIdx.z) * rows : 0;
  if (kSplit) {
    cluster_sync();  // every rank's partial tile written
  } else {
    named_sync(1, 128 * kConsumers);
  }
#if defined(QSP_WGMMA_PROBE)
  const long long probe_sync = clock64();
  probe[kProbeEpiSync] = probe_sync - probe_epi;
  probe[kProbeSplit] = gridDim.z;
#endif
  auto load4 = [&](int off) {
    if (!kSplit) return *reinterpret_cast<const float4*>(red + off);
    float4 x = make_float4(0.f, 0.f, 0.f, 0.f);
    for (uint32_t r = 0; r < gridDim.z; ++r) {
      const float4 y = *reinterpret_cast<const float4*>(cluster_peer(red, r) + off);
      x.x += y.x, x.y += y.y, x.z += y.z, x.w += y.w;
    }
    return x;
  };
  // Element e of the rank's share: token row ml0 + e / kQuads, columns c ..
  // c + 3 (and the up half's for SwiGLU); a thread's elements kThreadsC apart.
  // kSlots: float4 loads a batch. Kernels at one block per SM only: in the
  // two-per-SM kernel (80 registers) any form of the batch moved ptxas's
  // spills (8 slots: its unsplit kAddF32 kernels 112 -> 212 bytes; 4 slots:
  // the split f16 / f32 ones 104 -> 200), so that kernel keeps the loop and
  // its code is what it was; the one-per-SM kernels' registers and spills
  // are unchanged by the batch (ptxas -v before and after).
  constexpr int kThreadsC = 128 * kConsumers, kHalves = kDual ? 2 : 1, kSlots = 8;
  constexpr bool kBatchOk = MinB == 1;
  const int n_el = rows * kQuads;
  const int per = kHalves * (kSplit ? int(gridDim.z) : 1);  // loads an element: a power of two
  if (kBatchOk && a.epi_batch && per <= kSlots) {
    // Args::epi_batch: the loads of kSlots / per elements (every rank's
    // partial of each half; the residual for kAddF32) issued before any is
    // used, then the same sums in the same order as load4 and the same
    // stores as store2: the same bits. Slot q holds element j = q / per's
    // load w = q % per, the partial of rank w / kHalves and half w % kHalves.
    // A split SwiGLU of 8 ranks (16 loads an element) takes the loop below.
    const int lp = __ffs(per) - 1, step = (kSlots >> lp) * kThreadsC;
    for (int e0 = int(threadIdx.x); e0 < n_el; e0 += step) {
      float4 buf[kSlots];
      float2 res[kSlots][2];  // kAddF32: the residual of the element whose last load is slot q
#pragma unroll
      for (int q = 0; q < kSlots; ++q) {
        const int w = q & (per - 1), e = e0 + (q >> lp) * kThreadsC;
        const int ml = ml0 + e / kQuads, c = (e % kQuads) * 4, m = m0 + ml;
        const bool ok = e < n_el && m < a.o.M;
        const int off = ml * kLdr + (w % kHalves) * kRealCols + c;
        const float* src = kSplit ? cluster_peer(red, uint32_t(w / kHalves)) + off : red + off;
        buf[q] = ok ? *reinterpret_cast<const float4*>(src) : make_float4(0.f, 0.f, 0.f, 0.f);
        if (EP == Epilogue::kAddF32) {
          const bool last = ok && w == per - 1;
          res[q][0] = last ? resid2(a.o, m, n0 + c) : make_float2(0.f, 0.f);
          res[q][1] = last ? resid2(a.o, m, n0 + c + 2) : make_float2(0.f, 0.f);
        }
      }
      float4 x = make_float4(0.f, 0.f, 0.f, 0.f), u = x;
#pragma unroll
      for (int q = 0; q < kSlots; ++q) {
        const int w = q & (per - 1), e = e0 + (q >> lp) * kThreadsC;
        const float4 y = buf[q];
        if (w < kHalves) {  // rank 0's partial: load4's first term
          const float4 f = kSplit ? make_float4(0.f + y.x, 0.f + y.y, 0.f + y.z, 0.f + y.w) : y;
          if (kDual && w == 1) u = f; else x = f;
        } else if (kDual && (w & 1)) {
          u.x += y.x, u.y += y.y, u.z += y.z, u.w += y.w;
        } else {
          x.x += y.x, x.y += y.y, x.z += y.z, x.w += y.w;
        }
        const int m = m0 + ml0 + e / kQuads, c = (e % kQuads) * 4;
        if (w != per - 1 || e >= n_el || m >= a.o.M) continue;
        if (kDual) x.x = silu(x.x) * u.x, x.y = silu(x.y) * u.y, x.z = silu(x.z) * u.z, x.w = silu(x.w) * u.w;
        if (EP == Epilogue::kAddF32) {
          add2(a.o, m, n0 + c, x.x, x.y, res[q][0]);
          add2(a.o, m, n0 + c + 2, x.z, x.w, res[q][1]);
        } else {
          store2<EP>(a.o, m, n0 + c, x.x, x.y);
          store2<EP>(a.o, m, n0 + c + 2, x.z, x.w);
        }
      }
    }
  } else {
    for (int e = threadIdx.x; e < n_el; e += kThreadsC) {
      const int ml = ml0 + e / kQuads, c = (e % kQuads) * 4;
      const int m = m0 + ml;
      if (m >= a.o.M) break;  // rows only grow with e
      float4 x = load4(ml * kLdr + c);
      if (kDual) {
        const float4 u = load4(ml * kLdr + kRealCols + c);
        x.x = silu(x.x) * u.x, x.y = silu(x.y) * u.y, x.z = silu(x.z) * u.z, x.w = silu(x.w) * u.w;
      }
      store2<EP>(a.o, m, n0 + c, x.x, x.y);
      store2<EP>(a.o, m, n0 + c + 2, x.z, x.w);
    }
  }
#if defined(QSP_WGMMA_PROBE)
  probe[kProbeEpiStore] = clock64() - probe_sync;
#endif
  if (kSplit) cluster_sync();  // the peers' tiles stay alive until every rank has read them
#if defined(QSP_WGMMA_PROBE)
  if (lane == 0) {
    const long long end = clock64();
    probe[kProbeEpi] = end - probe_epi;
    probe[kProbeBlock] = end - probe_start;
    probe[kProbeWarps] = 1;
    probe_flush();
  }
#endif
#endif
}

// ---- Host side ------------------------------------------------------------------------------
template <WFormat F, int BT, Epilogue EP, bool kSplit, int MinB>
cudaError_t launch_one(const Args& a, const CUtensorMap& map, const WMaps& wm, dim3 grid, cudaStream_t stream) {
  using L = Layout<F, BT, MinB>;
  auto kernel = wgmma_kernel<F, BT, EP, kSplit, MinB>;
  int dev = 0;
  cudaError_t e = cudaGetDevice(&dev);
  if (e != cudaSuccess) return e;
  static PerDevice smem_once;
  if (set_smem_once(smem_once, dev, kernel, L::kBytes) != cudaSuccess) {
    (void)cudaGetLastError();
    return cudaErrorNotSupported;
  }
  if (!kSplit) return launch_pdl(PdlKernel::kWgmma, kernel, grid, dim3(kThreads), L::kBytes, stream, map, wm, a);
  const ClusterZLaunch cl(grid, kThreads, L::kBytes, stream, pdl_enabled(stream, PdlKernel::kWgmma));
  const prof::Scope timed(pdl_name(PdlKernel::kWgmma), grid, dim3(kThreads), stream);
  return cudaLaunchKernelEx(&cl.cfg, kernel, map, wm, a);
}

// The tensor maps of Args::tma_w's copies (WMaps); false where a map cannot
// be made (the kernel then copies per tile).
template <WFormat F>
bool encode_wmaps(const Args& a, bool dual, WMaps& m) {
  using T = WTraits<F>;
  if (!tma_w_fits<F>()) return false;
  const uint32_t box = dual ? kVT / 2 : kVT, KC = uint32_t(a.KC);
  const auto pair = [&](int i, const uint8_t* w, uint32_t soff, int32_t tiles) {
    return sm90::encode_units_3d(&m.q[i], w, T::kUnit, KC, uint32_t(tiles), box) &&
           sm90::encode_units_3d(&m.s[i], w + soff, T::kScaleUnit, KC, uint32_t(tiles), box);
  };
  if (dual) return pair(0, a.w[0], a.scale_off, a.tiles) && pair(1, a.w[1], a.scale_off, a.tiles);
  const int32_t first[3] = {0, a.grp.tend[0], a.grp.tend[1]}, end[3] = {a.grp.tend[0], a.grp.tend[1], a.tiles};
  for (int i = 0; i < 3; ++i)
    if (end[i] > first[i] && !pair(i, a.grp.w[i], a.grp.soff[i], end[i] - first[i])) return false;
  return true;
}

template <WFormat F, int BT, Epilogue EP, int MinB>
cudaError_t launch(const Args& a, int splits, cudaStream_t stream) {
#if defined(QSP_WGMMA_PROBE)
  // Only when asked for: a copy to the symbol inside a graph capture (a
  // probe build's model run) would break the capture; g_ablate starts at 0.
  static const bool ablate_set = [] {
    const char* e = std::getenv("QSP_WGMMA_ABLATE");
    const int v = e ? std::atoi(e) : 0;
    return v == 0 || cudaMemcpyToSymbol(g_ablate, &v, sizeof v) == cudaSuccess;
  }();
  (void)ablate_set;
#endif
  CUtensorMap map;
  if (!sm90::encode_f16_2d(&map, a.x, uint64_t(a.K), uint64_t(a.o.M), uint64_t(a.ldx) * 2, BT)) {
    return cudaErrorInvalidValue;
  }
  constexpr bool kDual = EP == Epilogue::kSwiGLU;
  const int32_t blocks = row_blocks(a.tiles, kDual);
  if (a.y0 < 0 || a.y_blocks < 0 || a.y0 + a.y_blocks > blocks || (a.y_blocks == 0 && a.y0 >= blocks))
    return cudaErrorInvalidValue;
  const dim3 grid((a.o.M + BT - 1) / BT, unsigned(a.y_blocks ? a.y_blocks : blocks - a.y0), 1);
  Args args = a;
  WMaps wm;
  std::memset(&wm, 0, sizeof wm);
  args.tma_w = a.tma_w && encode_wmaps<F>(a, kDual, wm);
  if (a.tma_w == 2 && !args.tma_w) return cudaErrorNotSupported;
  args.chunks_per_split = a.KC;
  if (splits > 1) {
    args.chunks_per_split = (a.KC + splits - 1) / splits;
    const cudaError_t e = launch_one<F, BT, EP, true, MinB>(args, map, wm, dim3(grid.x, grid.y, splits), stream);
    if (e == cudaSuccess) return cudaGetLastError();
    // A cluster that cannot be scheduled is a launch-configuration error (not
    // sticky): run unsplit rather than fail the forward pass.
    (void)cudaGetLastError();
    args.chunks_per_split = a.KC;
  }
  return launch_one<F, BT, EP, false, MinB>(args, map, wm, grid, stream);
}

}  // namespace

bool available(int dev) {
#if defined(QSP_WGMMA)
  static PerDevice once;
  return runs_on(once, dev, wgmma_kernel<WFormat::kQ4_0, kTokTileLarge, Epilogue::kStoreF16, false, 1>);
#else
  (void)dev;
  return false;
#endif
}

bool probe_take(unsigned long long (&out)[kProbeSlots]) {
#if defined(QSP_WGMMA) && defined(QSP_WGMMA_PROBE)
  unsigned long long zero[kProbeSlots] = {};
  return cudaDeviceSynchronize() == cudaSuccess && cudaMemcpyFromSymbol(out, g_probe, sizeof out) == cudaSuccess &&
         cudaMemcpyToSymbol(g_probe, zero, sizeof zero) == cudaSuccess;
#else
  (void)out;
  return false;
#endif
}

#if defined(QSP_WGMMA)
namespace {
// Blocks of the split kernel's (1, 1, ks) clusters (ks = 1, 2, 4, 8) with
// token tile BT at MinB blocks per SM that device `dev` runs at once (the
// driver's cudaOccupancyMaxActiveClusters, once per device and ks); -1 when
// unknown.
template <int BT, int MinB>
int cluster_blocks(int dev, int ks) {
  static PerDevice waves[4];
  return waves[ks == 1 ? 0 : ks == 2 ? 1 : ks == 4 ? 2 : 3].get(dev, [&] {
    using L = Layout<WFormat::kQ4_0, BT, MinB>;
    auto kernel = wgmma_kernel<WFormat::kQ4_0, BT, Epilogue::kStoreF16, true, MinB>;
    static PerDevice smem_once;
    int n = 0;
    const ClusterZLaunch cl(dim3(1, 1, unsigned(ks)), kThreads, L::kBytes, nullptr);
    if (set_smem_once(smem_once, dev, kernel, L::kBytes) != cudaSuccess ||
        cudaOccupancyMaxActiveClusters(&n, kernel, &cl.cfg) != cudaSuccess || n <= 0) {
      (void)cudaGetLastError();
      return -1;
    }
    return n * ks;
  });
}
}  // namespace
#endif

int cluster_wave(int dev, int ks) {
#if defined(QSP_WGMMA)
  return ks == 2 || ks == 4 || ks == 8 ? cluster_blocks<kTokTileLarge, 1>(dev, ks) : -1;
#else
  (void)dev, (void)ks;
  return -1;
#endif
}

int cluster_wave_dense(int dev, int ks) {
#if defined(QSP_WGMMA)
  return ks == 1 || ks == 2 || ks == 4 || ks == 8 ? cluster_blocks<kTokTileTiny, 2>(dev, ks) : -1;
#else
  (void)dev, (void)ks;
  return -1;
#endif
}

bool maps_fit(WFormat fmt) {
#if defined(QSP_WGMMA)
  return dispatch_format(fmt, false, [](auto f) {
    using T = typename decltype(f)::T;
    if constexpr (!T::kWgmma) {
      return false;
    } else {
      return tma_w_fits<decltype(f)::kFormat>();
    }
  });
#else
  (void)fmt;
  return false;
#endif
}

cudaError_t run(const Args& a, WFormat fmt, Epilogue ep, int tok_tile, int splits, cudaStream_t stream) {
#if defined(QSP_WGMMA)
  if (tok_tile != kTokTileLarge && tok_tile != kTokTileSmall && tok_tile != kTokTileTiny) return cudaErrorInvalidValue;
  if (a.per_sm != 1 && !(a.per_sm == 2 && tok_tile == kTokTileTiny)) return cudaErrorInvalidValue;
  if (splits != 1 && splits != 2 && splits != 4 && splits != 8) return cudaErrorInvalidValue;

  return dispatch_format(fmt, cudaErrorNotSupported, [&](auto f) {
    using T = typename decltype(f)::T;
    if constexpr (!T::kWgmma) {
      return cudaErrorNotSupported;
    } else {
      constexpr WFormat F = decltype(f)::kFormat;
      return dispatch_epilogue(ep, [&](auto e) {
        constexpr Epilogue EP = decltype(e)::value;
        if (tok_tile == kTokTileLarge) return launch<F, kTokTileLarge, EP, 1>(a, splits, stream);
        if (tok_tile == kTokTileSmall) return launch<F, kTokTileSmall, EP, 1>(a, splits, stream);
        if (a.per_sm == 2) return launch<F, kTokTileTiny, EP, 2>(a, splits, stream);
        return launch<F, kTokTileTiny, EP, 1>(a, splits, stream);
      });
    }
  });
#else
  (void)a, (void)fmt, (void)ep, (void)tok_tile, (void)splits, (void)stream;
  return cudaErrorNotSupported;
#endif
}

}  // namespace wgmma
}  // namespace kern
}  // namespace qsp
