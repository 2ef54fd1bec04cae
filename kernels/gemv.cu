// The GEMV (M <= 16): decode and the LM head. Memory bound: every weight
// byte is read once with 16-byte streaming loads. One block per 16-row tile;
// its warps split K and reduce through shared memory. The per-format part
// (global -> raw words -> fragments) is the format's WTraits; the arithmetic
// per chunk is kernels/gemv_chunk.cuh, shared with the sm_90 bulk-copy GEMV
// (kernels/gemv_bulk.cu).
//
// With kNorm the block first computes the RMSNorm scale of its M fp32
// activation rows (every block the same few KB from L2) and normalizes them
// as it loads them: the decode step's two rmsnorm launches per layer and the
// final one fold into the GEMVs after them (opt-in in the CUDA backend,
// QSP_FUSE_NORM=1, until measured).
#include <algorithm>

#include "kernels/formats/formats.cuh"
#include "kernels/gemm_internal.cuh"
#include "kernels/gemv_chunk.cuh"
#include "kernels/pdl.h"
#include "kernels/ptx.cuh"
#include "kernels/qweight.cuh"

namespace qsp {
namespace kern {
namespace {

constexpr int kGemvMaxWarps = gemv::kMaxWarps;

// grid = (tiles); block = 32 * kw threads, kw <= kGemvMaxWarps warps that
// split the K chunks round-robin (warp w: chunks w, w + kw, ...).
template <WFormat F,
          int MT,      // m8 token tiles: 1 (M <= 8) or 2 (M <= 16)
          int U,       // chunks a warp has in flight per round (loads issued before any use)
          Epilogue EP,
          bool kNorm>  // the RMSNorm fused into the activation load (KArgs::xf)
__global__ void __launch_bounds__(kGemvMaxWarps * 32, MT == 1 ? 3 : 2) gemv_kernel(const KArgs a) {
  using T = WTraits<F>;
  constexpr bool kDual = EP == Epilogue::kSwiGLU;
  constexpr int NM = kDual ? 2 : 1;  // weight matrices
  __shared__ float red[kGemvMaxWarps][NM][MT * 8][gemv::kRedLd];
  __shared__ float norm_part[kNorm ? kGemvMaxWarps : 1][16], norm_inv[kNorm ? 16 : 1];

  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, kw = blockDim.x >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int tile = blockIdx.x;
  const int N = a.o.N;

  float acc[NM][MT][4];
  gemv::zero(acc);
  const WLoc loc = gemv::tile_loc<kDual>(a, tile);

  for (int c0 = warp; c0 < a.KC; c0 += kw * U) {
    typename T::Raw raw[U][NM];
    uint32_t xb[U][MT][4][2];  // X row mt*8+g, k step s: cols 16s+2t, +1 and 16s+2t+8, +9
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int c = c0 + u * kw;
      const bool ok = c < a.KC;
#pragma unroll
      for (int w = 0; w < NM; ++w) {
        if constexpr (T::kRowMajor) {
          const __half* wb = reinterpret_cast<const __half*>(a.w[w]);
          const int n = tile * 16 + g;
          const __half* rg = ok && n < N ? wb + size_t(n) * size_t(a.K) + c * 64 : nullptr;
          const __half* rg8 = ok && n + 8 < N ? wb + size_t(n + 8) * size_t(a.K) + c * 64 : nullptr;
          T::ldg_rows(raw[u][w], rg, rg8, t, c * 64 + 32 < a.K);
        } else if (ok) {
          const uint8_t* base = w == 0 ? loc.base : a.w[1];
          const size_t soff = w == 0 ? size_t(loc.soff) : a.scale_off;
          T::ldg_raw(raw[u][w], base, soff, size_t(w == 0 ? loc.tile : tile) * size_t(a.KC) + size_t(c), lane);
        }
      }
    }
    // The first round's weight loads are in flight; the activations are the
    // previous kernel's output (kernels/pdl.h).
    if (c0 == warp) {
      pdl_wait();
      pdl_launch_dependents();
      // Every warp is here once (kw <= KC / U: each has a first round).
      if constexpr (kNorm) gemv::norm_scales(a, norm_part, norm_inv);
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int c = c0 + u * kw;
      if constexpr (kNorm) {
        gemv::load_x_norm<MT>(xb[u], a, norm_inv, c, c < a.KC, g, t);
      } else {
        gemv::load_x<MT>(xb[u], a, c, c < a.KC, g, t);
      }
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (c0 + u * kw >= a.KC) break;  // warp-uniform
      gemv::chunk_mma<T, NM, MT>(acc, raw[u], xb[u]);
    }
  }

  pdl_wait();  // a warp with no chunk (kw <= KC / U: none today) still waits before the epilogue
  gemv::reduce_store<EP, NM, MT>(red, acc, a, tile);
}

// Registers counted per chunk of each of the two matrices of the SwiGLU
// GEMV: WTraits::kGemvDualRawRegs where a format declares it (its decode's
// temporaries spill there otherwise), else kGemvRawRegs.
template <class T, class = void>
struct DualRawRegs {
  static constexpr int value = T::kGemvRawRegs;
};
template <class T>
struct DualRawRegs<T, std::void_t<decltype(T::kGemvDualRawRegs)>> {
  static constexpr int value = T::kGemvDualRawRegs;
};

// Chunks a GEMV warp keeps in flight: as many as fit ~56 registers of
// undecoded weights + activations (Q4_0, M <= 8: 4 chunks = 2 KB per warp).
template <WFormat F>
constexpr int gemv_unroll(int mt, bool dual) {
  const int per = dual ? 2 * DualRawRegs<WTraits<F>>::value + mt * 8 : WTraits<F>::kGemvRawRegs + mt * 8;
  return 56 / per < 1 ? 1 : 56 / per > 4 ? 4 : 56 / per;
}

template <WFormat F, int MT, Epilogue EP>
cudaError_t launch_mt(const KArgs& a, cudaStream_t stream) {
  constexpr int U = gemv_unroll<F>(MT, EP == Epilogue::kSwiGLU);
  // Enough warps to cover K with U chunks each, at most kGemvMaxWarps.
  const int kw = std::max(1, std::min(kGemvMaxWarps, a.KC / U));
  const dim3 grid(unsigned(a.tiles)), block(unsigned(kw * 32));
  // The fused norm feeds Q | K | V (kStoreF32), gate / up (kSwiGLU) and the
  // LM head (kStoreF32): only those are built with it.
  if constexpr (EP == Epilogue::kStoreF32 || EP == Epilogue::kSwiGLU) {
    if (a.xf) return launch_pdl(PdlKernel::kGemv, gemv_kernel<F, MT, U, EP, true>, grid, block, 0, stream, a);
  } else {
    if (a.xf) return cudaErrorInvalidValue;
  }
  return launch_pdl(PdlKernel::kGemv, gemv_kernel<F, MT, U, EP, false>, grid, block, 0, stream, a);
}

}  // namespace

cudaError_t launch_gemv(const KArgs& a, WFormat f, Epilogue ep, cudaStream_t stream) {
  return dispatch_format(f, cudaErrorInvalidValue, [&](auto fmt) {
    constexpr WFormat F = decltype(fmt)::kFormat;
    return dispatch_epilogue(ep, [&](auto e) {
      constexpr Epilogue EP = decltype(e)::value;
      return a.o.M <= 8 ? launch_mt<F, 1, EP>(a, stream) : launch_mt<F, 2, EP>(a, stream);
    });
  });
}

}  // namespace kern
}  // namespace qsp
