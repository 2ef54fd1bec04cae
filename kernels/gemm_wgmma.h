// The Hopper GEMM (kernels/gemm_wgmma.cu, sm_90a machine code only): the
// prefill path of kern::gemm() for the weight formats with kWgmma (Q4_0,
// Q8_0) when the device runs it. gemm() (kernels/gemm.cu) validates the
// arguments and picks the path.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/gemm_epilogue.cuh"
#include "kernels/gemm_plan.h"
#include "kernels/kernels.h"

namespace qsp {
namespace kern {
namespace wgmma {

struct Args {
  const __half* x;  // [M][K], row stride ldx; 16-byte aligned, ldx % 8 == 0
  int32_t ldx;
  int32_t K;
  int32_t KC;             // 64-column chunks
  int32_t tiles;          // 16-row weight tiles
  const uint8_t* w[2];    // W (or gate, up for kSwiGLU) in the tiled layout
  uint32_t scale_off;     // byte offset of the scale array (kSwiGLU: of w[0] and w[1])
  WGroup grp;             // other epilogues: the row groups of W
  OutArgs o;
  int32_t chunks_per_split;  // set by run(): K chunks per cluster rank
  // The weights of a stage by tensor-map copies, one per matrix and array
  // (quants, scales) instead of one bulk copy per 16-row tile and array
  // (the default since the fourteenth session: +9% at M = 2048, up to 1.9x
  // at M = 64-128; $QSP_WGMMA_TMA_W=0 and GemmArgs::wgmma_weights turn it
  // off): 0 no; 1 where the maps can be made (else per tile); 2 yes, or
  // run() returns cudaErrorNotSupported.
  int32_t tma_w;
  // The launch covers weight-row blocks [y0, y0 + y_blocks) (y_blocks 0: to
  // the end): the plan's hybrid runs the whole waves of blocks unsplit and
  // the ragged rest as a split launch of its own (gemm.cu).
  int32_t y0, y_blocks;
  // Blocks per SM the kernel is built for: 1, or 2 with the 64-token tile
  // (consumers at 104 registers instead of 232, pipeline stages within
  // 100 KB of shared memory: two blocks hide each other's per-chunk latency
  // where the grid is below a wave; forced only, GemmArgs::wg_per_sm).
  int32_t per_sm = 1;
  // Nonzero: the epilogue's loads in batches (WgmmaEpilogue::kBatched,
  // GemmArgs::wgmma_epilogue / $QSP_WGMMA_EPI_BATCH); the same bits.
  int32_t epi_batch = 0;
};

// The tile constants kTokTileLarge / kTokTileSmall (token rows per block) and
// kBlockRows (weight rows per block) are in kernels/gemm_plan.h, where the
// host-only plan model sees them.

// Whether the sm_90a kernels are in this build and can run on device `dev`.
bool available(int dev);

// Weight-row blocks of a matrix of `tiles` 16-row tiles (kBlockRows rows per
// block, kBlockRows / 2 of gate and of up for kSwiGLU).
inline int32_t row_blocks(int32_t tiles, bool dual) {
  const int32_t per = (dual ? kBlockRows / 2 : kBlockRows) / 16;
  return (tiles + per - 1) / per;
}

// Blocks of the split kernel's (1, 1, ks)-block clusters (ks = 2, 4, 8) that
// device `dev` runs at once: whole clusters, each inside one GPC, so fewer
// than the SM count (the driver's cudaOccupancyMaxActiveClusters, once per
// device). Negative when unknown.
int cluster_wave(int dev, int ks);
// The same for the 64-token tile at two blocks per SM (Args::per_sm = 2),
// ks = 1, 2, 4, 8: its clusters may share SMs, so a GPC whose SM count is not
// a multiple of ks can hold more than twice cluster_wave's (measurement
// only so far: bench_gemm --waves).
int cluster_wave_dense(int dev, int ks);

// Whether format fmt's stage weights fit the tensor-map copies (Args::tma_w;
// where they do not, the kernel copies per tile).
bool maps_fit(WFormat fmt);

// Where the kernel's time goes, in builds with -DQSP_WGMMA_PROBE=ON (CMake;
// bench_gemm --probe prints it): clock64 cycles summed over every block's
// consumer warps (lane 0) or producer thread since the last probe_take,
// which returns them and zeroes the sums (false in other builds).
enum ProbeSlot {
  kProbeFull,      // consumers: waiting for a stage to land (full barrier), the first chunk's apart
  kProbeFirst,     // consumers: waiting for the first chunk's stage (the prologue: PDL wait, first copies)
  kProbeDecode,    // consumers: a stage's A fragments (shared loads, decode)
  kProbeMma,       // consumers: waiting for their wgmma groups
  kProbeLoop,      // consumers: the whole main loop
  kProbeEpi,       // consumers: the epilogue (split: its cluster barriers)
  kProbeBlock,     // consumers: start to end
  kProbeEmpty,     // producer: waiting for a slot to come back (empty barrier)
  kProbeProducer,  // producer: start to end
  kProbeWarps,     // consumer warps summed (8 a block; the producer threads are a block each)
  kProbeChunks,    // consumers: K chunks
  kProbeEpiSync,   // consumers: the epilogue's partial tile into smem and the wait for every
                   // consumer (split: every rank of the cluster: the slowest rank's loop)
  kProbeEpiStore,  // consumers: the epilogue's sums over the ranks (split) and stores
  kProbeSplit,     // consumers: the cluster's ranks (gridDim.z; 1 unsplit)
  kProbeSlots
};
bool probe_take(unsigned long long (&out)[kProbeSlots]);

// Launches Y = X W^T with epilogue ep; fmt is a format with kWgmma
// (cudaErrorNotSupported otherwise). tok_tile: one of the token tiles;
// splits: 1, 2, 4 or 8 clustered K splits (a cluster that cannot be
// scheduled runs unsplit). Args::y0 / y_blocks: only those weight-row blocks.
cudaError_t run(const Args& a, WFormat fmt, Epilogue ep, int tok_tile, int splits, cudaStream_t stream);

}  // namespace wgmma
}  // namespace kern
}  // namespace qsp
