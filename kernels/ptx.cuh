// Tiny device helpers shared by the kernels, each named after the PTX it
// wraps: the one set of PTX wrappers of the mma.sync kernels, the GEMV and
// the weight decoders (kernels/formats/), and the cluster barrier and peer
// address of the split-K kernels (sm_90+). The Hopper-only ones (mbarriers,
// TMA, wgmma) are in kernels/sm90.cuh.
#pragma once

#include <cuda_fp16.h>

#include <cstdint>
#include <utility>

namespace qsp {
namespace kern {

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
// Waits until at most N committed cp.async groups are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

// D = A * B + D: A 16x16 (row), B 16x8 (col), fp16 inputs, fp32 accumulators.
__device__ __forceinline__ void mma_m16n8k16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Compile-time loop: f(std::integral_constant<int, I>{}) for I = 0 .. N-1.
// Lets per-iteration offsets be PTX immediates: with a plain unrolled loop
// the compiler hoists every `base + i * stride` into its own register.
template <class F, int... I>
__device__ __forceinline__ void static_for_impl(F&& f, std::integer_sequence<int, I...>) {
  (f(std::integral_constant<int, I>{}), ...);
}
template <int N, class F>
__device__ __forceinline__ void static_for(F&& f) {
  static_for_impl(f, std::make_integer_sequence<int, N>{});
}

// 16-byte global -> shared copy that bypasses L1, at [dst + kDstImm] from
// [src + kSrcImm]; src-size 0 zero-fills the destination without reading
// the source (keys past the valid range become zeros, never whatever the
// cache holds there, which may be NaN).
template <int kDstImm, int kSrcImm>
__device__ __forceinline__ void cp_async_cg_16(uint32_t dst, const void* src, bool valid) {
  const int n = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0+%3], [%1+%4], 16, %2;\n" ::"r"(dst), "l"(src), "r"(n), "n"(kDstImm),
               "n"(kSrcImm));
}
// 16-byte global -> shared copy with an L2 128-byte prefetch hint; zero-fills
// when !pred (src is not read). The GEMM's activation and weight stages.
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, bool pred) {
  asm volatile("cp.async.cg.shared.global.L2::128B [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
               "r"(pred ? 16 : 0));
}

// Shared-memory loads of 16, 8 and 4 bytes.
__device__ __forceinline__ void lds128(uint32_t& a, uint32_t& b, uint32_t& c, uint32_t& d, uint32_t addr) {
  asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n" : "=r"(a), "=r"(b), "=r"(c), "=r"(d) : "r"(addr));
}
__device__ __forceinline__ void lds64(uint32_t& a, uint32_t& b, uint32_t addr) {
  asm volatile("ld.shared.v2.u32 {%0, %1}, [%2];\n" : "=r"(a), "=r"(b) : "r"(addr));
}
__device__ __forceinline__ void lds32(uint32_t& a, uint32_t addr) {
  asm volatile("ld.shared.u32 %0, [%1];\n" : "=r"(a) : "r"(addr));
}

// Streaming weight loads: read once, kept out of L1 (activations live there).
__device__ __forceinline__ void ldg128_stream(uint32_t& a, uint32_t& b, uint32_t& c, uint32_t& d, const void* p) {
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(a), "=r"(b), "=r"(c), "=r"(d)
               : "l"(p));
}
__device__ __forceinline__ void ldg64_stream(uint32_t& a, uint32_t& b, const void* p) {
  asm volatile("ld.global.nc.L1::no_allocate.v2.u32 {%0, %1}, [%2];\n" : "=r"(a), "=r"(b) : "l"(p));
}
__device__ __forceinline__ void ldg32_stream(uint32_t& a, const void* p) {
  asm volatile("ld.global.nc.L1::no_allocate.u32 %0, [%1];\n" : "=r"(a) : "l"(p));
}
// Activation loads (re-read by every block, cached): what an earlier kernel
// of the pass wrote, so a coherent load, never ld.global.nc, whose promise of
// data read-only for the grid's whole life lets it be scheduled or served
// ahead of griddepcontrol.wait (kernels/pdl.h).
__device__ __forceinline__ void ldg32_dep(uint32_t& a, const void* p) {
  asm volatile("ld.global.u32 %0, [%1];\n" : "=r"(a) : "l"(p));
}
__device__ __forceinline__ void ldg128_dep(uint32_t& a, uint32_t& b, uint32_t& c, uint32_t& d, const void* p) {
  asm volatile("ld.global.v4.u32 {%0, %1, %2, %3}, [%4];\n" : "=r"(a), "=r"(b), "=r"(c), "=r"(d) : "l"(p));
}

// Four 8x8 b16 matrices from [base + kImm] (lane i addresses row i % 8 of
// matrix i / 8); .trans transposes each.
template <int kImm = 0>
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t base) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4+%5];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(base), "n"(kImm));
}
template <int kImm = 0>
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t base) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4+%5];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(base), "n"(kImm));
}

// 2^x on the SFU; ex2(-inf) = 0, which is how masked scores vanish.
__device__ __forceinline__ float ex2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

__device__ __forceinline__ uint32_t pack_half2(float lo, float hi) {
  const __half2 h = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&h);
}

__device__ __forceinline__ float quad_max(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
__device__ __forceinline__ float quad_sum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

// ---- Thread-block clusters (sm_90+: call only from code built for it) --------------------------
// Every non-exited thread of the cluster arrives (release: its shared-memory
// writes become visible cluster-wide) and waits (acquire). Not .aligned: the
// threads of a warp may arrive at different points (a producer lane after
// its copies, its idle lanes at once).
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;\n" ::: "memory");
}
// The address of the same shared-memory variable in block `rank` of the cluster.
__device__ __forceinline__ const float* cluster_peer(const float* p, uint32_t rank) {
  uint64_t out;
  asm volatile("mapa.u64 %0, %1, %2;\n" : "=l"(out) : "l"(reinterpret_cast<uint64_t>(p)), "r"(rank));
  return reinterpret_cast<const float*>(out);
}

}  // namespace kern
}  // namespace qsp
