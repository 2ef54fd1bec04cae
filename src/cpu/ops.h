// The CPU reference ops, one function per op of the layer. fp32 activations
// and fp32 accumulation; weights dequantized exactly as GGUF defines them.
// Row-major: x[t * dim + i] is feature i of token t.
#pragma once

#include <cstdint>

#include "cpu/thread_pool.h"

namespace qsp {
namespace cpu {

// A weight matrix in its original bytes (rows x cols, dtype as given), or a
// view of some of its rows and columns: row r starts at data + r * row_bytes.
struct Matrix {
  int32_t dtype;
  uint64_t rows, cols;
  const uint8_t* data;
  uint64_t row_bytes = 0;  // bytes from one row to the next; 0: packed rows of `cols`

  uint64_t stride() const;  // row_bytes, or the packed row size
  // Rows [r0, r1) / columns [c0, c1) (c0 a multiple of the dtype's block).
  Matrix rows_view(uint64_t r0, uint64_t r1) const;
  Matrix cols_view(uint64_t c0, uint64_t c1) const;
};

// The order in which matmul sums a row's products (kStripes, tree_dot in
// ops.cpp): K is halved kStripeLevels times (8 stripes; the lower half
// first), each stripe summed in 8 interleaved lanes, the halves added
// pairwise back up the tree. A caller holding a contiguous 1/2^j of the
// columns (a tensor-parallel shard of wo / w_down) passes levels
// kStripeLevels - j and gets that subtree's value exactly: adding the 2^j
// shards' partial sums pairwise in the same tree (tree_sum) gives the
// unsplit matmul bit for bit.
constexpr int kStripeLevels = 3;
constexpr int kStripes = 1 << kStripeLevels;

// y[t] = x[t] * w / rms(x[t]) for n tokens of dim features.
void rmsnorm(const float* x, const float* w, float* y, int64_t n, int64_t dim, float eps, ThreadPool& pool);

// Which code computes the dot products of matmul and attention; every code
// gives the same bits (the same operations in the same order for each
// output): the plain loops, one output at a time; or, on x86 CPUs with
// AVX2, several outputs at once in 256-bit registers (matmul: 4 weight rows
// x 2 tokens, ~2x faster; attention: a query against 4 keys). kAuto: the
// fastest this CPU runs; kAvx2 where the CPU lacks AVX2 runs the plain loops.
// Tests compare them (code_runs: whether one runs here).
enum class Code { kAuto, kPlain, kAvx2 };
bool code_runs(Code code);

// y[t][r] = sum_c W[r][c] x[t][c]; x has row stride W.cols, y row stride ldy
// (>= W.rows). Each sum in the stripe order above, with `levels` halvings.
void matmul(const Matrix& W, const float* x, int64_t n, float* y, int64_t ldy, ThreadPool& pool,
            int levels = kStripeLevels, Code code = Code::kAuto);

// out[i] = the pairwise tree sum of parts[0..n_parts)[i] (n_parts a power of
// two): ((p0 + p1) + (p2 + p3)) + ... , the order tree_dot adds its halves in.
// n_parts == 1 copies (out may be parts[0]).
void tree_sum(const float* const* parts, int n_parts, float* out, int64_t count, ThreadPool& pool);

// out[t] = dequantized row tokens[t] of the table.
void embed(const Matrix& table, const int32_t* tokens, int64_t n, float* out, ThreadPool& pool);

// In place over n tokens of n_heads x head_dim: optional per-head RMSNorm with
// norm_w (head_dim; nullptr = none), then RoPE at positions pos0 + t.
void qk_norm_rope(float* x, int64_t n, int64_t n_heads, int64_t head_dim, const float* norm_w, float eps,
                  int64_t pos0, float theta, int32_t rope_style, ThreadPool& pool);

// Causal GQA attention of n queries at positions past..past+n-1 against the
// cache k/v ([n_kv_heads][max_seq][head_dim], valid up to past + n).
// q: [n][n_heads][head_dim]; out: [n][n_heads][head_dim].
void attention(const float* q, const float* k_cache, const float* v_cache, float* out, int64_t n, int64_t past,
               int64_t n_heads, int64_t n_kv_heads, int64_t head_dim, int64_t max_seq, ThreadPool& pool,
               Code code = Code::kAuto);

// out[i] = silu(gate[i]) * up[i].
void swiglu(const float* gate, const float* up, float* out, int64_t count, ThreadPool& pool);

// y[i] += x[i].
void add_inplace(float* y, const float* x, int64_t count, ThreadPool& pool);

// Copies the chunk's K and V rows (k, v: [n][n_kv_heads * head_dim]) into the
// cache ([n_kv_heads][max_seq][head_dim]) at positions past .. past + n - 1.
void kv_write(const float* k, const float* v, int64_t n, int64_t past, int64_t n_kv_heads, int64_t head_dim,
              int64_t max_seq, float* k_cache, float* v_cache);

// The lowest index of the maximum of v[0..n); NaN never wins; 0 when every
// value is NaN (the contract of kern::argmax, which the GPU op tests compare
// against).
int32_t argmax(const float* v, int64_t n);

}  // namespace cpu
}  // namespace qsp
