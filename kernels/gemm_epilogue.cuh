// What the GEMM kernels share, kernels/gemm_mma.cu (mma.sync),
// kernels/gemv.cu (GEMV) and kernels/gemm_wgmma.cu (wgmma): the weight row
// groups (Q, K and V as one launch), where the result goes, how one pair of
// columns of a token row is stored under each Epilogue, and the dispatch from
// a run-time Epilogue to a template argument.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "kernels/kernels.h"

namespace qsp {
namespace kern {

// Up to three weight matrices of one format and K, stacked along the rows:
// group i starts at global 16-row tile tend[i - 1] (tend[-1] = 0) and its
// output columns follow the previous group's. A single matrix has
// w[0..2] = it and tend = {tiles, tiles}.
struct WGroup {
  const uint8_t* w[3];
  uint32_t soff[3];  // byte offset of each matrix's scale array
  int32_t tend[2];
};
struct WLoc {
  const uint8_t* base;
  uint32_t soff;
  int tile;  // tile inside that matrix
};
__device__ __forceinline__ WLoc locate(const WGroup& g, int tile) {
  if (tile < g.tend[0]) return WLoc{g.w[0], g.soff[0], tile};
  if (tile < g.tend[1]) return WLoc{g.w[1], g.soff[1], tile - g.tend[0]};
  return WLoc{g.w[2], g.soff[2], tile - g.tend[1]};
}

struct OutArgs {
  __half* out_h;
  float* out_f;
  int32_t ldo;
  int32_t M, N;
  int32_t vec;  // row stride and base allow paired (4 / 8-byte) stores
};

__device__ __forceinline__ float silu(float x) { return x / (1.0f + __expf(-x)); }

// Stores columns n, n+1 of row m (both predicated on N; m checked by caller).
template <Epilogue EP>
__device__ __forceinline__ void store2(const OutArgs& o, int m, int n, float v0, float v1) {
  const size_t i = size_t(m) * size_t(o.ldo) + size_t(n);
  if (EP == Epilogue::kStoreF16 || EP == Epilogue::kSwiGLU) {
    if (o.vec && n + 1 < o.N) {
      *reinterpret_cast<__half2*>(o.out_h + i) = __floats2half2_rn(v0, v1);
    } else {
      if (n < o.N) o.out_h[i] = __float2half_rn(v0);
      if (n + 1 < o.N) o.out_h[i + 1] = __float2half_rn(v1);
    }
  } else if (EP == Epilogue::kStoreF32) {
    if (o.vec && n + 1 < o.N) {
      *reinterpret_cast<float2*>(o.out_f + i) = make_float2(v0, v1);
    } else {
      if (n < o.N) o.out_f[i] = v0;
      if (n + 1 < o.N) o.out_f[i + 1] = v1;
    }
  } else {
    if (o.vec && n + 1 < o.N) {
      float2* p = reinterpret_cast<float2*>(o.out_f + i);
      const float2 r = *p;
      *p = make_float2(r.x + v0, r.y + v1);
    } else {
      if (n < o.N) o.out_f[i] += v0;
      if (n + 1 < o.N) o.out_f[i + 1] += v1;
    }
  }
}

// kAddF32 in two steps, for a caller that loads the residual early:
// resid2 loads what store2's paired path would (zeros where store2 takes
// its scalar path), add2 stores what store2 would given that pair.
__device__ __forceinline__ float2 resid2(const OutArgs& o, int m, int n) {
  if (!(o.vec && n + 1 < o.N)) return make_float2(0.0f, 0.0f);
  return *reinterpret_cast<const float2*>(o.out_f + size_t(m) * size_t(o.ldo) + size_t(n));
}
__device__ __forceinline__ void add2(const OutArgs& o, int m, int n, float v0, float v1, float2 r) {
  if (o.vec && n + 1 < o.N) {
    *reinterpret_cast<float2*>(o.out_f + size_t(m) * size_t(o.ldo) + size_t(n)) = make_float2(r.x + v0, r.y + v1);
  } else {
    store2<Epilogue::kAddF32>(o, m, n, v0, v1);
  }
}

// fn(std::integral_constant<Epilogue, ep>{}) for the run-time epilogue ep;
// cudaErrorInvalidValue for a value outside the enum.
template <class Fn>
cudaError_t dispatch_epilogue(Epilogue ep, Fn&& fn) {
  switch (ep) {
    case Epilogue::kStoreF16: return fn(std::integral_constant<Epilogue, Epilogue::kStoreF16>{});
    case Epilogue::kStoreF32: return fn(std::integral_constant<Epilogue, Epilogue::kStoreF32>{});
    case Epilogue::kAddF32: return fn(std::integral_constant<Epilogue, Epilogue::kAddF32>{});
    case Epilogue::kSwiGLU: return fn(std::integral_constant<Epilogue, Epilogue::kSwiGLU>{});
  }
  return cudaErrorInvalidValue;
}

}  // namespace kern
}  // namespace qsp
