// The GEMV (M <= 16) with its weights streamed by bulk copies (sm_90): the
// same arithmetic as kernels/gemv.cu (kernels/gemv_chunk.cuh), but a warp's
// weights come through a ring of shared-memory stages that one lane keeps
// full with cp.async.bulk, each completing on the stage's mbarrier, instead
// of 16-byte register loads issued a round at a time.
//
// Why: the register GEMV has at most U chunks per warp in flight and waits
// for all of them before it issues the next round, so a warp alternates
// between waiting and computing and the SM's bytes in flight sag between
// rounds: 1.3-2.0 TB/s of weights on the H200 (bench/RESULTS.md), where the
// copy bandwidth is 4.2. A ring of S stages keeps S - 1 stages loading while
// one is consumed, with no registers held for them: 2 blocks x 8 warps x 4
// stages x ~2.3 KB = ~150 KB per SM can be in flight.
//
// Layout use: the units of one 16-row tile are contiguous along K
// (kernels/qweight_layout.h), and so are its side data (scales), so U
// consecutive chunks of a tile are two contiguous byte ranges: a stage is
// [units U x kUnit | side U x kScaleUnit] per matrix (two for kSwiGLU),
// exactly the smem layout WTraits::lds_raw reads (its `tiles` = U, `v` = the
// chunk). Row-major formats (F16) have no units: the register GEMV serves
// them.
//
// Grid and warps as the register GEMV: a block per 16-row tile, up to 8 warps
// that take groups of U chunks round-robin; each warp owns its ring and its
// S mbarriers, lane 0 issues its copies. Built only into the sm_90a object
// (CMakeLists.txt, qsp_wgmma); kernels/gemm.cu reaches it through
// kernels/gemv_bulk.h.
#include "kernels/gemv_bulk.h"

#include <algorithm>

#include "kernels/formats/formats.cuh"
#include "kernels/gemv_chunk.cuh"
#include "kernels/pdl.h"
#include "kernels/per_device.h"

#if defined(QSP_WGMMA)
#include "kernels/sm90.cuh"
#endif

namespace qsp {
namespace kern {
namespace gemv_bulk {

#if defined(QSP_WGMMA)
namespace {

constexpr int kStages = 4;
constexpr int kStageTarget = 2304;  // bytes a stage aims at (Q4_0: 4 chunks)

// Chunks per stage for format T and NM matrices: ~kStageTarget bytes, 1 to 4.
template <class T>
constexpr int chunks_per_stage(int nm) {
  const int per = nm * (T::kUnit + T::kScaleUnit);
  return kStageTarget / per < 1 ? 1 : kStageTarget / per > 4 ? 4 : kStageTarget / per;
}

template <WFormat F, int MT, Epilogue EP>
__global__ void __launch_bounds__(gemv::kMaxWarps * 32, 2) gemv_bulk_kernel(const KArgs a) {
  using T = WTraits<F>;
  constexpr bool kDual = EP == Epilogue::kSwiGLU;
  constexpr int NM = kDual ? 2 : 1;
  constexpr int U = chunks_per_stage<T>(NM);
  constexpr int kMatBytes = U * (T::kUnit + T::kScaleUnit);  // one matrix's part of a stage
  constexpr int kStageBytes = NM * kMatBytes;
  static_assert(T::kUnit % 16 == 0 && T::kScaleUnit % 16 == 0, "bulk copies move 16-byte multiples");
  __shared__ float red[gemv::kMaxWarps][NM][MT * 8][gemv::kRedLd];
  __shared__ uint64_t bars[gemv::kMaxWarps][kStages];
  extern __shared__ __align__(128) uint8_t ring[];  // [warp][kStages][kStageBytes]

  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, kw = blockDim.x >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int tile = blockIdx.x;

  float acc[NM][MT][4];
  gemv::zero(acc);
  const WLoc loc = gemv::tile_loc<kDual>(a, tile);

  // This warp's groups of U chunks: warp, warp + kw, ... (group j: chunks
  // [j U, j U + U) of the tile, fewer in the last).
  const int n_groups = (a.KC + U - 1) / U;
  const int mine = warp < n_groups ? (n_groups - warp + kw - 1) / kw : 0;
  const uint32_t ring_w = smem_u32(ring) + uint32_t(warp * kStages * kStageBytes);
  const uint32_t bar0 = smem_u32(&bars[warp][0]);
  if (lane == 0) {
    sm90::mbar_init_stages(bar0, kStages, 1);
    sm90::mbar_init_fence();
  }
  __syncwarp();
  // Lane 0: group i of this warp into stage i % kStages. Weights only (no
  // kernel of the pass writes them): allowed before pdl_wait.
  const auto issue = [&](int i) {
    const int c0 = (warp + i * kw) * U, cn = min(U, a.KC - c0);
    const uint32_t st = ring_w + uint32_t((i % kStages) * kStageBytes), bar = bar0 + uint32_t(8 * (i % kStages));
    sm90::mbar_expect_tx(bar, uint32_t(NM * cn * (T::kUnit + T::kScaleUnit)));
#pragma unroll
    for (int w = 0; w < NM; ++w) {
      const uint8_t* base = w == 0 ? loc.base : a.w[1];
      const size_t soff = w == 0 ? size_t(loc.soff) : a.scale_off;
      const size_t unit0 = size_t(w == 0 ? loc.tile : tile) * size_t(a.KC) + size_t(c0);
      const uint32_t dst = st + uint32_t(w * kMatBytes);
      sm90::bulk_load(dst, base + unit0 * T::kUnit, uint32_t(cn * T::kUnit), bar);
      sm90::bulk_load(dst + uint32_t(U * T::kUnit), base + soff + unit0 * T::kScaleUnit, uint32_t(cn * T::kScaleUnit),
                      bar);
    }
  };
  if (lane == 0)
    for (int i = 0; i < min(kStages, mine); ++i) issue(i);
  // The first stages are loading; the activations are the previous kernel's
  // output (kernels/pdl.h).
  pdl_wait();
  pdl_launch_dependents();

  for (int i = 0; i < mine; ++i) {
    const int c0 = (warp + i * kw) * U, cn = min(U, a.KC - c0);
    uint32_t xb[U][MT][4][2];
#pragma unroll
    for (int u = 0; u < U; ++u) gemv::load_x<MT>(xb[u], a, c0 + u, u < cn, g, t);
    sm90::mbar_wait(bar0 + uint32_t(8 * (i % kStages)), uint32_t((i / kStages) & 1));
    const uint32_t st = ring_w + uint32_t((i % kStages) * kStageBytes);
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (u >= cn) break;  // warp-uniform
      typename T::Raw raw[NM];
#pragma unroll
      for (int w = 0; w < NM; ++w) {
        T::lds_raw(raw[w], st + uint32_t(w * kMatBytes), U, u, lane, 0);
        T::lds_raw(raw[w], st + uint32_t(w * kMatBytes), U, u, lane, 1);
      }
      gemv::chunk_mma<T, NM, MT>(acc, raw, xb[u]);
    }
    // Every lane has read the stage: refill it.
    __syncwarp();
    if (lane == 0 && i + kStages < mine) issue(i + kStages);
  }

  gemv::reduce_store<EP, NM, MT>(red, acc, a, tile);
}

template <WFormat F, int MT, Epilogue EP>
cudaError_t launch(const KArgs& a, cudaStream_t stream) {
  using T = WTraits<F>;
  constexpr int NM = EP == Epilogue::kSwiGLU ? 2 : 1;
  constexpr int U = chunks_per_stage<T>(NM);
  constexpr int kStageBytes = NM * U * (T::kUnit + T::kScaleUnit);
  const int n_groups = (a.KC + U - 1) / U;
  const int kw = std::max(1, std::min(gemv::kMaxWarps, n_groups));
  const int smem = kw * kStages * kStageBytes;
  auto kernel = gemv_bulk_kernel<F, MT, EP>;
  int dev = 0;
  cudaError_t e = cudaGetDevice(&dev);
  if (e != cudaSuccess) return e;
  static PerDevice smem_once;
  e = set_smem_once(smem_once, dev, kernel, gemv::kMaxWarps * kStages * kStageBytes);
  if (e != cudaSuccess) return e;
  return launch_pdl(PdlKernel::kGemv, kernel, dim3(unsigned(a.tiles)), dim3(unsigned(kw * 32)), size_t(smem), stream,
                    a);
}

}  // namespace

bool available(int dev) {
  static PerDevice once;
  return sm90::runs_on(once, dev, gemv_bulk_kernel<WFormat::kQ4_0, 1, Epilogue::kStoreF32>);
}

cudaError_t run(const KArgs& a, WFormat f, Epilogue ep, cudaStream_t stream) {
  if (a.o.M > 16) return cudaErrorInvalidValue;
  return dispatch_format(f, cudaErrorInvalidValue, [&](auto fmt) {
    constexpr WFormat F = decltype(fmt)::kFormat;
    if constexpr (decltype(fmt)::T::kRowMajor) {
      return cudaErrorNotSupported;
    } else {
      return dispatch_epilogue(ep, [&](auto e) {
        constexpr Epilogue EP = decltype(e)::value;
        return a.o.M <= 8 ? launch<F, 1, EP>(a, stream) : launch<F, 2, EP>(a, stream);
      });
    }
  });
}

#else  // no sm_90a in this build: the register GEMV serves every device

bool available(int) { return false; }
cudaError_t run(const KArgs&, WFormat, Epilogue, cudaStream_t) { return cudaErrorNotSupported; }

#endif

bool supports(WFormat f) {
  return dispatch_format(f, false, [](auto fmt) { return !decltype(fmt)::T::kRowMajor; });
}

}  // namespace gemv_bulk
}  // namespace kern
}  // namespace qsp
