// dst[r][0 .. cols) = src[r * ld_src ..] for r < rows, each row to its own
// destination, read from a device table: a batched pass delivers each
// sequence's logits row into its context's buffer (src/cuda/cuda_batch.cu)
// with one launch whose destinations are data, so a captured batch graph
// replays for any set of contexts of the same shape (one memcpy node per row
// baked the contexts into the graph: 2026-12-05, the 64-sequence step
// re-captured every step). Memory bound: float4 where the row starts allow.
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/kernels.h"
#include "kernels/pdl.h"

namespace qsp {
namespace kern {
namespace {

constexpr int kThreads = 256;

// grid = (column blocks, rows).
__global__ void __launch_bounds__(kThreads) copy_rows_kernel(const float* src, int64_t ld_src, int32_t cols,
                                                             float* const* dst, bool vec) {
  pdl_wait();  // kernels/pdl.h
  pdl_launch_dependents();
  const int r = int(blockIdx.y);
  const float* s = src + int64_t(r) * ld_src;
  float* d = dst[r];
  const int64_t i = int64_t(blockIdx.x) * kThreads + threadIdx.x;
  if (vec) {
    if (4 * i + 3 < cols) {
      reinterpret_cast<float4*>(d)[i] = reinterpret_cast<const float4*>(s)[i];
    } else {
      for (int64_t j = 4 * i; j < cols; ++j) d[j] = s[j];
    }
  } else if (i < cols) {
    d[i] = s[i];
  }
}

}  // namespace

cudaError_t copy_rows(const float* src, int64_t ld_src, int32_t cols, float* const* dst, int32_t rows, bool dst_aligned,
                      cudaStream_t stream) {
  if (rows < 0 || cols < 0 || ld_src < cols || (rows > 0 && (src == nullptr || dst == nullptr)) || rows > 65535)
    return cudaErrorInvalidValue;
  if (rows == 0 || cols == 0) return cudaSuccess;
  const bool vec = dst_aligned && reinterpret_cast<uintptr_t>(src) % 16 == 0 && ld_src % 4 == 0;
  const int64_t items = vec ? (int64_t(cols) + 3) / 4 : cols;
  return launch_pdl(PdlKernel::kCopy, copy_rows_kernel, dim3(unsigned((items + kThreads - 1) / kThreads), unsigned(rows)),
                    dim3(kThreads), 0, stream, src, ld_src, cols, dst, vec);
}

}  // namespace kern
}  // namespace qsp
