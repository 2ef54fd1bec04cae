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
//     writes before this kernel ends (weights, the model's constants, what
//     the host copied in before the pass: a batched pass's pieces; past,
//     which only the pass's last kernel advances), write nothing; exceptions,
//     memory whose last writer is two or more launches back, which has
//     finished with it (the rules below; read from L2, never ld.global.nc):
//     the attention's copies of the cache rows of keys below past
//     (AttnArgs::prefetch; qk_rope, the launch before, writes keys past..),
//     and the GEMV's residual in a kAddF32 epilogue (gemv::early_resid: the
//     O and down projections, whose launch before writes other buffers);
//   - pdl_wait() on every path before the first other global access;
//   - pdl_launch_dependents() only after its own pdl_wait(), so at most one
//     grid runs ahead of the one still computing (no chain of grids resident
//     and spinning on their waits).
// Completion is transitive: a grid's wait returns when the previous grid has
// completed, which it can only do after its own wait returned.
//
// Both device calls are no-ops in a grid launched without the attribute, and
// compile to nothing before sm_90. The host side launches with the attribute
// on sm_90+ where pdl_enabled() says so: by default in decode-sized passes
// for the families kPdlDecodeMask names (below), or as QSP_PDL says.
// History. On the H200 (2026-12-04, bench/RESULTS.md), with every family on,
// it took the 0.6B decode step from 0.806 to 0.710 ms but made 0.6B
// 128-token prompts 8% slower and the 8B step 2% slower, and every K-quant
// whole-model test returned NaN logits with it. The cause: activations read
// with ld.global.nc (ldg32; `const __restrict__` pointers compile to it
// too). A non-coherent load promises data read-only for the grid's whole
// life, so it may be scheduled, or served from cache, ahead of
// griddepcontrol.wait; under PDL the previous grid is still writing it
// then. Since 2026-12-05 everything a previous kernel wrote is read with
// coherent loads: the GEMV's activations through ldg32_dep
// (kernels/ptx.cuh), and no `__restrict__` on the pointers of rmsnorm,
// attention_combine, argmax and add; the PTX of every kernel of a pass has
// ld.global.nc for weights and host-copied metadata only. With that, the
// K-quant model test passed on an H100 with QSP_PDL set to each family in
// turn and to all of them (`scripts/gpu-session pdl`, 2026-12-05).
#pragma once

#include <cuda_runtime.h>

#include <cstdlib>
#include <cstring>
#include <utility>

#include "kernels/launch_profile.h"
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
// kGemv is a GEMV that streams at most kPdlGemvSmallBytes of weights,
// kGemvLarge one that streams more (the default treats them differently).
enum class PdlKernel {
  kGemv, kGemm, kWgmma, kRmsnorm, kQkRope, kAttention, kAttnWgmma, kCombine, kEmbed, kArgmax, kCopy, kGemvLarge
};
inline const char* pdl_name(PdlKernel k) {
  static const char* const names[] = {"gemv",       "gemm",    "wgmma", "rmsnorm", "qk_rope", "attention",
                                      "attn_wgmma", "combine", "embed", "argmax",  "copy",    "gemv_large"};
  return names[int(k)];
}
constexpr int kPdlFamilies = int(PdlKernel::kGemvLarge) + 1;
constexpr size_t kPdlGemvSmallBytes = size_t(8) << 20;

// THE DEFAULT (QSP_PDL unset), since 2026-12-05: PDL in the passes of up
// to 16 tokens (the decode step: PdlPass) for every family but the GEMMs
// and the GEMVs that stream more than 8 MB; in longer passes for all.
// Measured on an H100 (bench/RESULTS.md, fifteenth session), decode step
// against no PDL: the
// small kernels' PDL -1.2% (8B Q4_0), -1.7 / -4.9% (8B Q4_K_M, 1 / 2048
// cached), -5% (0.6B); the GEMV's PDL -11% on the 0.6B (1-7 MB per GEMV)
// but +2.4% on the 8B (9-57 MB), hence the size cut (no GEMV lies between
// 7 and 9 MB in those models: the cut itself is not measured).
constexpr unsigned kPdlDecodeMask = ~0u & ~(1u << int(PdlKernel::kGemm)) & ~(1u << int(PdlKernel::kWgmma)) &
                                    ~(1u << int(PdlKernel::kGemvLarge));
// And since 2026-12-05 (sixteenth session), in the passes of more than 16
// tokens (a context's prompt chunks) every family, the wgmma GEMM
// issuing its first stages' weights before its wait (kernels/
// gemm_wgmma.cu). Measured on an H100, QSP_PDL=1 against 0, same binaries,
// random codes: 0.6B Q4_0 128 tokens 1.615-1.625 -> 1.519-1.525 ms (-6%),
// 512 2.381-2.391 -> 2.246-2.259 (-5.5%), 2048 6.69-6.72 -> 6.58-6.62
// (-1.5%); 8B Q4_0 128 5.749 -> 5.449 (-5.2%), 512 11.95 -> 11.75, 2048
// 46.34 -> 46.00; the 64-sequence decode step, a batched pass, 6.563 ->
// 6.533 (batched passes, src/cuda/cuda_batch.cu, set no PdlPass: plain
// launches unless QSP_PDL says otherwise; within noise). (Before the
// early weights, waiting first, the ninth session measured 0.6B 128 tokens
// 8% slower with PDL, 512-2048 1% faster: the overlap is the weights'.)
constexpr unsigned kPdlPrefillMask = ~0u;

// The families a launch on this thread may give PDL when QSP_PDL is unset:
// inside a PdlPass kPdlDecodeMask or kPdlPrefillMask by its size, else none.
inline unsigned& pdl_pass_mask() {
  static thread_local unsigned mask = 0;
  return mask;
}
// For the launches of one forward pass on this thread (graph captures
// included): the default PDL of a pass of `tokens` tokens.
class PdlPass {
 public:
  explicit PdlPass(int64_t tokens) : saved_(pdl_pass_mask()) {
    pdl_pass_mask() = tokens < 1 ? 0u : tokens <= 16 ? kPdlDecodeMask : kPdlPrefillMask;
  }
  ~PdlPass() { pdl_pass_mask() = saved_; }
  PdlPass(const PdlPass&) = delete;
  PdlPass& operator=(const PdlPass&) = delete;

 private:
  unsigned saved_;
};

// Whether a launch of family k on `stream` on the current device uses PDL:
// the family in QSP_PDL's set where the variable is set (0: none; 1 or
// "all": every launch of every pass; or a comma list of family names, e.g.
// "gemv,rmsnorm", in every pass), else in the default's (PdlPass); compute
// capability >= 9; and a stream of qsp's own (the backends launch on
// theirs; a test's launch on the legacy default stream, with its implicit
// synchronization, stays a plain launch).
inline bool pdl_enabled(cudaStream_t stream, PdlKernel k) {
  if (stream == nullptr || stream == cudaStreamLegacy || stream == cudaStreamPerThread) return false;
  // The variable's set; -1 where it is unset (the default).
  static const long long env_mask = [] {
    const char* v = std::getenv("QSP_PDL");
    if (!v) return -1LL;
    if (!*v || std::strcmp(v, "0") == 0) return 0LL;
    if (std::strcmp(v, "1") == 0 || std::strcmp(v, "all") == 0) return (long long)(~0u);
    unsigned m = 0;
    for (int i = 0; i < kPdlFamilies; ++i) {
      const char* name = pdl_name(PdlKernel(i));
      const size_t n = std::strlen(name);
      for (const char* at = std::strstr(v, name); at; at = std::strstr(at + 1, name))
        if ((at == v || at[-1] == ',') && (at[n] == ',' || at[n] == 0)) m |= 1u << i;
    }
    return (long long)m;
  }();
  const unsigned mask = env_mask < 0 ? pdl_pass_mask() : unsigned(env_mask);
  if (!(mask >> int(k) & 1u)) return false;
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return cc_major(dev) >= 9;
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
  const prof::Scope timed(pdl_name(family), grid, block, stream);  // bench_prefill --profile
  return cudaLaunchKernelEx(&cfg, kernel, std::forward<A>(args)...);
}

}  // namespace kern
}  // namespace qsp
