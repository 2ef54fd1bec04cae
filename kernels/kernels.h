// The device ops of the CUDA backend: one op per .cu file in kernels/, each
// with a host launcher declared here. Launchers validate what they need,
// enqueue on `stream` and return the launch's cudaError_t (never abort).
//
// Conventions
//  - Activations are row-major, token-major: x[m * ld + i] is feature i of
//    token m. M is the number of tokens in the chunk.
//  - The residual stream is fp32; GEMM inputs (normed activations, attention
//    output, SwiGLU output) are fp16; accumulation is always fp32.
//  - KV cache, per layer: k_cache / v_cache are [n_kv_heads][max_seq][head_dim]
//    fp16. `past` is a DEVICE pointer to the number of tokens already cached
//    before this chunk: token m of the chunk sits at position *past + m. It is
//    read on the device so that a CUDA graph captured once (decode, M = 1)
//    stays valid at every position.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace qsp {
namespace kern {

// ---- Weights on the device --------------------------------------------------
// The formats the kernels decode: X(NAME, name) for WFormat::kNAME, whose
// traits are in kernels/formats/<name>.cuh. Several GGUF dtypes may share
// one (F16, BF16 and F32 are all stored as kF16); each format's serves()
// says which. kernels/qweight_layout.h documents the layouts.
#define QSP_KERNEL_FORMATS(X) \
  X(Q4_0, q4_0)               \
  X(Q8_0, q8_0)               \
  X(F16, f16)

enum class WFormat : int32_t {
#define QSP_ENUM_FORMAT(N, n) k##N,
  QSP_KERNEL_FORMATS(QSP_ENUM_FORMAT)
#undef QSP_ENUM_FORMAT
};

// A weight matrix of `rows` outputs x `cols` inputs in the device layout that
// repack_weight() produced (private to the kernels: kernels/qweight_layout.h).
struct DWeight {
  const void* data = nullptr;
  WFormat fmt = WFormat::kQ4_0;
  int32_t rows = 0;
  int32_t cols = 0;
};

// Whether the kernels implement GGUF dtype `gguf_dtype` (QSP_DTYPE_*).
bool format_supported(int32_t gguf_dtype);

// Bytes the device layout of a rows x cols matrix takes.
size_t dweight_bytes(WFormat fmt, int64_t rows, int64_t cols);

// Host-side conversion of GGUF bytes of a supported dtype into the device
// layout of format_for(dtype), written to dst (host memory of
// dweight_bytes(format_for(dtype), rows, cols) bytes). format_for of an
// unsupported dtype is kF16 (callers check format_supported first).
WFormat format_for(int32_t gguf_dtype);
void repack_weight(int32_t gguf_dtype, const void* src, int64_t rows, int64_t cols, void* dst);

// Whether gemm() supports this weight shape; on false, *why says why.
bool gemm_supported(WFormat fmt, int64_t rows, int64_t cols, const char** why);

// Whether more rows may follow w's in one gemm() row group (GemmArgs::wcat):
// w is in a tiled format and its rows are whole 16-row tiles.
bool gemm_row_group_ok(const DWeight& w);

// ---- Quantized GEMM with fused epilogues (kernels/gemm.cu) -----------------
// acc[m][n] = sum_k x[m][k] * W[n][k], fp32 accumulation, then:
enum class Epilogue : int32_t {
  kStoreF16 = 0,  // out_h[m * ldo + n] = acc
  kStoreF32 = 1,  // out_f[m * ldo + n] = acc
  kAddF32 = 2,    // out_f[m * ldo + n] += acc          (residual add)
  kSwiGLU = 3,    // out_h[m * ldo + n] = silu(acc_w) * acc_w2   (w = gate, w2 = up)
};

// Which kernel family gemm() may use. kAuto picks by shape and device; the
// others exist for tests and benchmarks. kWgmma returns cudaErrorNotSupported
// where that path cannot run (no sm_90a image for the device, fp16 weights,
// M <= 16, which always takes the GEMV).
enum class GemmPath : int32_t { kAuto = 0, kMma = 1, kWgmma = 2 };

struct GemmArgs {
  const __half* x = nullptr;  // [M][K], row stride ldx (>= K)
  int32_t ldx = 0;
  int32_t M = 0;
  DWeight w;                  // N = w.rows, K = w.cols
  DWeight w2;                 // kSwiGLU only: same shape and format as w
  // Optional, not with kSwiGLU: more weights of w's format and K whose rows
  // follow w's (output columns w.rows .. and after), so that Q, K and V run
  // as one launch. Every matrix but the last must pass gemm_row_group_ok().
  // Unused entries have data == nullptr.
  DWeight wcat[2];
  Epilogue ep = Epilogue::kStoreF16;
  __half* out_h = nullptr;
  float* out_f = nullptr;
  int32_t ldo = 0;            // row stride of the output (>= N)
  GemmPath path = GemmPath::kAuto;
};

// Any M >= 1 (small M takes a GEMV path). Returns cudaErrorInvalidValue for
// unsupported shapes.
cudaError_t gemm(const GemmArgs& a, cudaStream_t stream);

// ---- Embedding lookup (kernels/embed.cu) -----------------------------------
// out[m][c] = dequantized row tokens[m] of table (fp32), M rows of table.cols.
cudaError_t embed(const DWeight& table, const int32_t* tokens, int32_t M, float* out, cudaStream_t stream);

// ---- RMSNorm to fp16 (kernels/rmsnorm.cu) -----------------------------------
// y[m][i] = half(x[m][i] * w[i] / rms(x[m])); x row stride ldx, y row stride dim.
cudaError_t rmsnorm_f16(const float* x, int32_t ldx, const float* w, __half* y, int32_t M, int32_t dim,
                        float eps, cudaStream_t stream);

// ---- QK-norm + RoPE + KV-cache write (kernels/qk_rope.cu) -------------------
struct QkRopeArgs {
  const float* qkv = nullptr;    // [M][ld]: q at column 0, k at q_dim, v at q_dim + kv_dim
  int32_t ld = 0;
  const float* q_norm = nullptr; // [head_dim] fp32, or nullptr (no QK-norm)
  const float* k_norm = nullptr;
  __half* q_out = nullptr;       // [M][n_heads][head_dim]
  __half* k_cache = nullptr;     // this layer's [n_kv_heads][max_seq][head_dim]
  __half* v_cache = nullptr;
  int32_t M = 0, n_heads = 0, n_kv_heads = 0, head_dim = 0, max_seq = 0;
  const int32_t* past = nullptr; // device pointer
  float eps = 1e-6f;
  float theta = 1e6f;
  int32_t rope_style = 0;        // QSP_ROPE_NEOX (pairs i, i+d/2) or QSP_ROPE_INTERLEAVED (2i, 2i+1)
};
cudaError_t qk_rope(const QkRopeArgs& a, cudaStream_t stream);

// ---- Batched causal flash attention (kernels/attention.cu) -------------------
// One launch per layer for the whole chunk: query m (position *past + m)
// attends to keys 0 .. *past + m of its KV head (GQA: head h uses KV head
// h / (n_heads / n_kv_heads)), softmax(q.k * scale) v, online softmax.
enum class AttnPath : int32_t { kAuto = 0, kMma = 1, kWgmma = 2 };
struct AttnArgs {
  const __half* q = nullptr;       // [M][n_heads][head_dim]
  const __half* k_cache = nullptr; // [n_kv_heads][max_seq][head_dim]
  const __half* v_cache = nullptr;
  __half* out = nullptr;           // [M][n_heads][head_dim]
  int32_t M = 0, n_heads = 0, n_kv_heads = 0, head_dim = 0, max_seq = 0;
  const int32_t* past = nullptr;   // device pointer
  float scale = 0.0f;              // 1/sqrt(head_dim)
  // Split-KV scratch (16-byte aligned): at least attention_scratch_bytes()
  // for this shape. nullptr / too small is allowed: the kernel then splits
  // the key range less (or not at all), correct but slower for small M.
  void* scratch = nullptr;
  size_t scratch_bytes = 0;
  // Tests and benchmarks: force one kernel family. kWgmma (the sm_90a
  // kernel, head_dim 128, never split) returns cudaErrorNotSupported where
  // it cannot run; kMma is the mma.sync family of every device.
  AttnPath path = AttnPath::kAuto;
};
bool attention_supported(int32_t head_dim);
// Scratch attention() can use for any chunk of M <= max_M tokens with this
// many query heads (any KV head count) on the current device; 0 when none.
// At most 32768 * (head_dim + 1) * 4 bytes.
size_t attention_scratch_bytes(int32_t max_M, int32_t n_heads, int32_t head_dim, int32_t max_seq);
cudaError_t attention(const AttnArgs& a, cudaStream_t stream);

// ---- Argmax (kernels/argmax.cu) ----------------------------------------------
// *out = the lowest index of the maximum of v[0..n); NaN never wins.
cudaError_t argmax(const float* v, int32_t n, int32_t* out, cudaStream_t stream);

}  // namespace kern
}  // namespace qsp
