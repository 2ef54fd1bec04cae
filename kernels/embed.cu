// Embedding lookup: out[m][c] = dequantized table row tokens[m] (fp32).
// Reads the GEMM layout through load8 (each format's decoder,
// kernels/formats/), so the table shares its upload path with the (tied) LM
// head.
#include "kernels/formats/formats.cuh"
#include "kernels/kernels.h"
#include "kernels/pdl.h"

namespace qsp {
namespace kern {
namespace {

constexpr int kEmbedThreads = 128;

// grid = (ceil(cols / 8 / kEmbedThreads), min(M, 65535)); each thread writes
// 8 columns (two float4) of rows blockIdx.y, blockIdx.y + gridDim.y, ...
// A token outside [0, rows) yields a zero row: the host validates tokens,
// this only keeps a bad id from reading out of bounds.
__global__ void __launch_bounds__(kEmbedThreads) embed_kernel(const DWeight table, const int32_t* __restrict__ tokens,
                                                              int32_t M, float* __restrict__ out) {
  pdl_wait();  // kernels/pdl.h
  pdl_launch_dependents();
  const int64_t col = (int64_t(blockIdx.x) * kEmbedThreads + threadIdx.x) * 8;
  if (col >= table.cols) return;
  for (int m = blockIdx.y; m < M; m += gridDim.y) {
    const int32_t tok = tokens[m];
    float v[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
    if (tok >= 0 && tok < table.rows) load8(table, tok, col, v);
    float4* o = reinterpret_cast<float4*>(out + int64_t(m) * table.cols + col);
    o[0] = make_float4(v[0], v[1], v[2], v[3]);
    o[1] = make_float4(v[4], v[5], v[6], v[7]);
  }
}

}  // namespace

cudaError_t embed(const DWeight& table, const int32_t* tokens, int32_t M, float* out, cudaStream_t stream) {
  if (M < 0 || table.data == nullptr || tokens == nullptr || out == nullptr) return cudaErrorInvalidValue;
  if (table.rows < 1 || table.cols < 32 || table.cols % 32 != 0) return cudaErrorInvalidValue;
  if (!dispatch_format(table.fmt, false, [](auto) { return true; })) return cudaErrorInvalidValue;
  if (table.cols % cols_multiple(table.fmt) != 0) return cudaErrorInvalidValue;
  if (reinterpret_cast<uintptr_t>(out) % 16 != 0) return cudaErrorInvalidValue;  // float4 stores
  if (M == 0) return cudaSuccess;
  const int groups = table.cols / 8;
  const dim3 grid((groups + kEmbedThreads - 1) / kEmbedThreads, M < 65535 ? M : 65535);
  return launch_pdl(PdlKernel::kEmbed, embed_kernel, grid, dim3(kEmbedThreads), 0, stream, table, tokens, M, out);
}

}  // namespace kern
}  // namespace qsp
