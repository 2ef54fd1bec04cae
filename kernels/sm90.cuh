// Hopper (sm_90a) building blocks shared by the wgmma kernels
// (kernels/gemm_wgmma.cu, kernels/attention_wgmma.cu): mbarriers, TMA and
// bulk copies, setmaxnreg, wgmma with its shared-memory descriptors, and the
// host side: the lookup of cuTensorMapEncodeTiled and runs_on(), whether a
// wgmma kernel can run on a device. Include only from sm_90a sources.
#pragma once

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/per_device.h"

namespace qsp {
namespace kern {
namespace sm90 {

// ---- mbarriers -------------------------------------------------------------------------------
__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count));
}
// `n` consecutive barriers (one per pipeline stage, 8 bytes apart).
__device__ __forceinline__ void mbar_init_stages(uint32_t first, int n, uint32_t count) {
  for (int s = 0; s < n; ++s) mbar_init(first + 8 * s, count);
}
// Makes the initialized barriers visible to the async proxy (TMA).
__device__ __forceinline__ void mbar_init_fence() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
__device__ __forceinline__ void mbar_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  asm volatile(
      "{\n.reg .pred done;\n"
      "WAIT:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT;\n}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}

// ---- Copies ----------------------------------------------------------------------------------
// Box of a 2D tensor map at (col, row), completing on mbarrier `bar`.
__device__ __forceinline__ void tma_load_2d(uint32_t dst, const CUtensorMap* map, int col, int row, uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(col), "r"(row), "r"(bar)
      : "memory");
}
// Box of a 3D tensor map at (x, y, z), completing on mbarrier `bar`.
__device__ __forceinline__ void tma_load_3d(uint32_t dst, const CUtensorMap* map, int x, int y, int z, uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], [%5];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(x), "r"(y), "r"(z), "r"(bar)
      : "memory");
}
__device__ __forceinline__ void bulk_load(uint32_t dst, const void* src, uint32_t bytes, uint32_t bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(dst),
               "l"(src), "r"(bytes), "r"(bar)
               : "memory");
}
// Generic-proxy shared-memory writes become visible to wgmma / TMA reads.
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
__device__ __forceinline__ void named_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// ---- Registers -------------------------------------------------------------------------------
template <int R>
__device__ __forceinline__ void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(R));
}
template <int R>
__device__ __forceinline__ void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(R));
}
// Keeps the compiler from moving register reads / writes across this point.
__device__ __forceinline__ void fence_reg(uint32_t& r) { asm volatile("" : "+r"(r)::"memory"); }
__device__ __forceinline__ void fence_reg(float& r) { asm volatile("" : "+f"(r)::"memory"); }
__device__ __forceinline__ void fence_reg(uint64_t& r) { asm volatile("" : "+l"(r)::"memory"); }

// ---- wgmma -----------------------------------------------------------------------------------
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}

// Shared-memory matrix descriptors, 128-byte swizzle (rows of 128 bytes,
// 8-row atoms of 1024 bytes, as TMA writes a box of 64 fp16 columns).
//  - K-major operand (K contiguous): atoms along M/N 1024 bytes apart (SBO);
//    a k16 step inside the atom is +32 bytes on the start address.
//  - MN-major operand (M/N contiguous, B with the transpose flag): rows are K,
//    8-row groups along K 1024 bytes apart (SBO), the next 64 columns of M/N
//    `lbo` bytes further (LBO); a k16 step is +2048 bytes (16 rows).
__device__ __forceinline__ uint64_t smem_desc(uint32_t addr) {
  return uint64_t((addr & 0x3FFFFu) >> 4) | (uint64_t(1) << 16) | (uint64_t(1024 >> 4) << 32) | (uint64_t(1) << 62);
}
__device__ __forceinline__ uint64_t smem_desc_mn(uint32_t addr, uint32_t lbo) {
  return uint64_t((addr & 0x3FFFFu) >> 4) | (uint64_t((lbo >> 4) & 0x3FFFu) << 16) | (uint64_t(1024 >> 4) << 32) |
         (uint64_t(1) << 62);
}

// The accumulator operands of the wgmma asm below: fp32 registers d[0..63]
// (m64n128) or d[0..127] (m64n256), as "+f" constraints and as the operand
// names %0.. of the instruction's D list.
#define QSP_WG_F8(d, i) \
  "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), "+f"(d[i + 6]), "+f"(d[i + 7])
#define QSP_WG_ACC32(d) QSP_WG_F8(d, 0), QSP_WG_F8(d, 8), QSP_WG_F8(d, 16), QSP_WG_F8(d, 24)
#define QSP_WG_NAMES_0_31 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
#define QSP_WG_ACC64(d) \
  QSP_WG_F8(d, 0), QSP_WG_F8(d, 8), QSP_WG_F8(d, 16), QSP_WG_F8(d, 24), QSP_WG_F8(d, 32), QSP_WG_F8(d, 40), \
      QSP_WG_F8(d, 48), QSP_WG_F8(d, 56)
#define QSP_WG_ACC128(d) \
  QSP_WG_ACC64(d), QSP_WG_F8(d, 64), QSP_WG_F8(d, 72), QSP_WG_F8(d, 80), QSP_WG_F8(d, 88), QSP_WG_F8(d, 96), \
      QSP_WG_F8(d, 104), QSP_WG_F8(d, 112), QSP_WG_F8(d, 120)
#define QSP_WG_NAMES_0_63 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define QSP_WG_NAMES_64_127 "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"

// D[64 x N] (+)= A[64 x 16] (registers, fp16) * B[16 x N] (smem descriptor);
// acc = 0 overwrites D; TB = 1: B is MN-major (transposed).
template <int N, int TB = 0>
struct Mma;
template <int TB>
struct Mma<256, TB> {
  __device__ __forceinline__ static void run(float (&d)[128], const uint32_t (&a)[4], uint64_t desc, int acc = 1) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %133, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16 "
        "{" QSP_WG_NAMES_0_63 ", " QSP_WG_NAMES_64_127 "}, "
        "{%128, %129, %130, %131}, %132, p, 1, 1, %134;\n}\n"
        : QSP_WG_ACC128(d)
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "r"(acc), "n"(TB));
  }
};

template <int TB>
struct Mma<128, TB> {
  __device__ __forceinline__ static void run(float (&d)[64], const uint32_t (&a)[4], uint64_t desc, int acc = 1) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 "
        "{" QSP_WG_NAMES_0_63 "}, "
        "{%64, %65, %66, %67}, %68, p, 1, 1, %70;\n}\n"
        : QSP_WG_ACC64(d)
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "r"(acc), "n"(TB));
  }
};

template <int TB>
struct Mma<64, TB> {
  __device__ __forceinline__ static void run(float (&d)[32], const uint32_t (&a)[4], uint64_t desc, int acc = 1) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 "
        "{" QSP_WG_NAMES_0_31 "}, "
        "{%32, %33, %34, %35}, %36, p, 1, 1, %38;\n}\n"
        : QSP_WG_ACC32(d)
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "r"(acc), "n"(TB));
  }
};

// D[64 x 128] (+)= A[64 x 16] * B[16 x 128], both from shared memory
// (K-major descriptors).
__device__ __forceinline__ void mma_ss_n128(float (&d)[64], uint64_t adesc, uint64_t bdesc, int acc) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 "
      "{" QSP_WG_NAMES_0_63 "}, "
      "%64, %65, p, 1, 1, 0, 0;\n}\n"
      : QSP_WG_ACC64(d)
      : "l"(adesc), "l"(bdesc), "r"(acc));
}

#undef QSP_WG_F8
#undef QSP_WG_ACC32
#undef QSP_WG_NAMES_0_31
#undef QSP_WG_ACC64
#undef QSP_WG_ACC128
#undef QSP_WG_NAMES_0_63
#undef QSP_WG_NAMES_64_127

// ---- Host ------------------------------------------------------------------------------------
// The driver's cuTensorMapEncodeTiled (nullptr when the driver has none),
// looked up once per process through the runtime: no link to libcuda.
inline PFN_cuTensorMapEncodeTiled_v12000 encode_fn() {
  static PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &q) != cudaSuccess ||
        q != cudaDriverEntryPointSuccess) {
      (void)cudaGetLastError();
      p = nullptr;
    }
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(p);
  }();
  return fn;
}

// A 2D fp16 tensor map over rows x cols (row stride in bytes), box of
// 64 columns x box_rows rows, 128-byte swizzle, out-of-range elements read
// as zero. false when the driver cannot encode it.
inline bool encode_f16_2d(CUtensorMap* map, const void* base, uint64_t cols, uint64_t rows, uint64_t row_stride,
                          uint32_t box_rows) {
  PFN_cuTensorMapEncodeTiled_v12000 encode = encode_fn();
  if (!encode) return false;
  const cuuint64_t dims[2] = {cuuint64_t(cols), cuuint64_t(rows)};
  const cuuint64_t strides[1] = {cuuint64_t(row_stride)};
  const cuuint32_t box[2] = {64, cuuint32_t(box_rows)};
  const cuuint32_t estr[2] = {1, 1};
  return encode(map, CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 2, const_cast<void*>(base), dims, strides, box, estr,
                CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

// A 3D tensor map over an array of `tiles` x `chunks` units of `unit_bytes`
// (a weight matrix's quant units or scales in the tiled layout of
// kernels/qweight_layout.h: unit (tile, chunk) at (tile * chunks + chunk) *
// unit_bytes), box: one chunk of `box_tiles` consecutive tiles, landing as
// box_tiles whole units one after another; tiles past the end read as zero.
// 32-bit elements, so unit_bytes % 16 == 0 and unit_bytes <= 1024 (a box
// dimension holds at most 256 elements); false otherwise or when the driver
// cannot encode it.
inline bool encode_units_3d(CUtensorMap* map, const void* base, uint32_t unit_bytes, uint32_t chunks,
                            uint32_t tiles, uint32_t box_tiles) {
  PFN_cuTensorMapEncodeTiled_v12000 encode = encode_fn();
  if (!encode || unit_bytes % 16 != 0 || unit_bytes > 1024 || chunks == 0 || tiles == 0 || box_tiles == 0 ||
      box_tiles > 256 || reinterpret_cast<uintptr_t>(base) % 16 != 0)
    return false;
  const cuuint64_t dims[3] = {cuuint64_t(unit_bytes / 4), cuuint64_t(chunks), cuuint64_t(tiles)};
  const cuuint64_t strides[2] = {cuuint64_t(unit_bytes), cuuint64_t(unit_bytes) * chunks};
  const cuuint32_t box[3] = {unit_bytes / 4, 1, box_tiles};
  const cuuint32_t estr[3] = {1, 1, 1};
  return encode(map, CU_TENSOR_MAP_DATA_TYPE_UINT32, 3, const_cast<void*>(base), dims, strides, box, estr,
                CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

// Whether the sm_90a kernel `kernel` can run on device `dev`: a compute
// capability 9.0 device (sm_90a code runs on nothing else), a driver that
// has cuTensorMapEncodeTiled, and an sm_90a image of the kernel in this
// binary. Remembered per device in `once` (the caller's static).
template <class Kernel>
bool runs_on(PerDevice& once, int dev, Kernel kernel) {
  return once.get(dev, [&]() -> int {
    int major = 0, minor = 0;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess) {
      (void)cudaGetLastError();
      return 0;
    }
    if (major != 9 || minor != 0 || encode_fn() == nullptr) return 0;
    cudaFuncAttributes fa;
    if (cudaFuncGetAttributes(&fa, kernel) != cudaSuccess) {
      (void)cudaGetLastError();  // no sm_90a image for this device
      return 0;
    }
    return 1;
  }) == 1;
}

}  // namespace sm90
}  // namespace kern
}  // namespace qsp
