// Programmatic dependent launch (PDL, sm_90+): a kernel launched with
// cudaLaunchAttributeProgrammaticStreamSerialization may start while the
// kernel before it on the stream is still finishing, and waits for it
// (griddepcontrol.wait: the previous grid complete, its writes visible) only
// where it first needs its results. The decode step is ~290 short kernels,
// most of them GEMVs that read weights nothing writes during a forward pass:
// a GEMV issues its first round of weight loads, then waits, so the DRAM
// latency of that round and the launch of the grid overlap the previous
// kernel's tail instead of following it.
//
// Every kernel of a forward pass launches with the attribute (launch_pdl, or
// ClusterZLaunch's `pdl` for the split-K GEMMs), so each grid is resident
// and waiting when the one before it drains: at 128-512 tokens a layer's ~10
// kernels are a few microseconds each. The rule each of them keeps:
//   - before pdl_wait(): read only memory no kernel of the forward pass
//     writes (weights, the model's constants), write nothing;
//   - pdl_wait() on every path before the first other global access;
//   - pdl_launch_dependents() only after its own pdl_wait(), so at most one
//     grid runs ahead of the one still computing (no chain of grids resident
//     and spinning on their waits).
// Completion is transitive: a grid's wait returns when the previous grid has
// completed, which it can only do after its own wait returned.
//
// Both device calls are no-ops in a grid launched without the attribute, and
// compile to nothing before sm_90. The host side launches with the attribute
// only where QSP_PDL=1 is set in the environment (read once; or a list of
// kernel families, PdlKernel below), on sm_90+:
// OFF BY DEFAULT. On the H200 (2026-12-04, bench/RESULTS.md) it took the
// 0.6B decode step from 0.806 to 0.710 ms but made 0.6B 128-token prompts
// 8% slower and the 8B step 2% slower, and every K-quant whole-model test
// returned NaN logits with it (the Q4_0 / Q8_0 / legacy ones and every op
// test passed; with QSP_PDL=0 the same build passed the K-quant tests).
// Suspected: activations read with ld.global.nc (ldg32; `const __restrict__`
// pointers compile to it too). A non-coherent load promises data read-only
// for the grid's whole life, so it may be scheduled, or served from cache,
// ahead of griddepcontrol.wait; under PDL the previous grid is still writing
// it then. The failures fit: every K-quant model test has K-quant
// projections, which the one-token prefill runs through the factored GEMV
// (a different schedule from the legacy formats' fragment path), and the
// legacy mixes passed with K-quant-free layers. Since 2026-12-05 (not yet
// run on a GPU) everything a previous kernel wrote is read with coherent
// loads: the GEMV's activations through ldg32_dep (kernels/ptx.cuh), and
// no `__restrict__` on the pointers of rmsnorm, attention_combine, argmax
// and add (with it the compiler proves them read-only and emits
// ld.global.nc); the PTX of every kernel of a pass now has ld.global.nc for
// weights and host-copied metadata only. `scripts/gpu-session pdl` checks
// whether the K-quant NaNs are gone.
#pragma once

#include <cuda_runtime.h>

#include <cstdlib>
#include <cstring>
#include <utility>

#include "kernels/per_device.h"

namespace qsp {
namespace kern {

__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

__device__ __forceinline__ void pdl_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

// The launchers, for QSP_PDL's list (one family at a time: which kernel a
// failure with PDL needs).
enum class PdlKernel {
  kGemv, kGemm, kWgmma, kRmsnorm, kQkRope, kAttention, kAttnWgmma, kCombine, kEmbed, kArgmax, kCopy
};
inline const char* pdl_name(PdlKernel k) {
  static const char* const names[] = {"gemv",      "gemm",       "wgmma",   "rmsnorm", "qk_rope", "attention",
                                      "attn_wgmma", "combine",   "embed",   "argmax",  "copy"};
  return names[int(k)];
}

// Whether a launch of family k on `stream` on the current device uses PDL:
// QSP_PDL=1 (or "all"; or a comma list of family names, e.g. "gemv,rmsnorm"),
// compute capability >= 9, and a stream of qsp's own (the backends launch on
// theirs; a test's launch on the legacy default stream, with its implicit
// synchronization, stays a plain launch).
inline bool pdl_enabled(cudaStream_t stream, PdlKernel k) {
  if (stream == nullptr || stream == cudaStreamLegacy || stream == cudaStreamPerThread) return false;
  static const unsigned mask = [] {
    const char* v = std::getenv("QSP_PDL");
    if (!v || !*v || std::strcmp(v, "0") == 0) return 0u;
    if (std::strcmp(v, "1") == 0 || std::strcmp(v, "all") == 0) return ~0u;
    unsigned m = 0;
    for (int i = 0; i <= int(PdlKernel::kCopy); ++i) {
      const char* name = pdl_name(PdlKernel(i));
      const size_t n = std::strlen(name);
      for (const char* at = std::strstr(v, name); at; at = std::strstr(at + 1, name))
        if ((at == v || at[-1] == ',') && (at[n] == ',' || at[n] == 0)) m |= 1u << i;
    }
    return m;
  }();
  if (!(mask >> int(k) & 1u)) return false;
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  static PerDevice major;
  return major.get(dev, [dev] {
           int m = 0;
           if (cudaDeviceGetAttribute(&m, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess) {
             (void)cudaGetLastError();
             return -1;
           }
           return m;
         }) >= 9;
}

// kernel<<<grid, block, smem, stream>>>(args...), with the PDL attribute
// where pdl_enabled(stream, family). The kernel must keep the rule above.
template <class... P, class... A>
cudaError_t launch_pdl(PdlKernel family, void (*kernel)(P...), dim3 grid, dim3 block, size_t smem,
                       cudaStream_t stream, A&&... args) {
  cudaLaunchAttribute attr[1] = {};
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cfg.attrs = attr;
  cfg.numAttrs = pdl_enabled(stream, family) ? 1 : 0;
  return cudaLaunchKernelEx(&cfg, kernel, std::forward<A>(args)...);
}

}  // namespace kern
}  // namespace qsp
