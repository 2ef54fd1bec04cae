#include "cpu/ops.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "formats/format.h"
#include "qsp/qsp.h"

// The sums below are defined operation by operation (a product rounded,
// then added): no fused multiply-add, whatever -march the build uses, so
// that the two codes of matmul and attention (Code) give the same bits.
#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define QSP_CPU_AVX2 1
#else
#define QSP_CPU_AVX2 0
#endif

namespace qsp {
namespace cpu {

// A dot product's end: its 8 lanes and the tail, in this fixed order.
static inline float lanes_sum(const float* acc, float tail) {
  return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7])) + tail;
}

// Dot product with 8 independent partial sums: the compiler can keep them in
// one SIMD register without reassociating (no -ffast-math needed), which is
// ~6x faster than a single running sum. The sum order is fixed, so results
// are deterministic for a given K.
static inline float dot(const float* a, const float* b, int64_t K) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t c = 0;
  for (; c + 8 <= K; c += 8)
    for (int j = 0; j < 8; ++j) acc[j] += a[c + j] * b[c + j];
  float tail = 0.0f;
  for (; c < K; ++c) tail += a[c] * b[c];
  return lanes_sum(acc, tail);
}

// The sum of a matmul row, in the order ops.h documents (kStripeLevels):
// split at K / 2 (rounded down, so every K has one order), the lower half
// first, `levels` times; the stripes at the leaves in dot()'s lanes. When 2^j
// shards split K evenly, the top j levels cut K exactly at the shard
// boundaries, so a shard's tree_dot(levels - j) is that subtree.
static float tree_dot(const float* a, const float* b, int64_t K, int levels) {
  if (levels == 0) return dot(a, b, K);
  const int64_t h = K / 2;
  return tree_dot(a, b, h, levels - 1) + tree_dot(a + h, b + h, K - h, levels - 1);
}

static float tree_sum_at(const float* const* parts, int n, int64_t i) {
  if (n == 1) return parts[0][i];
  return tree_sum_at(parts, n / 2, i) + tree_sum_at(parts + n / 2, n - n / 2, i);
}

uint64_t Matrix::stride() const { return row_bytes ? row_bytes : fmt::find(dtype)->row_bytes(cols); }

Matrix Matrix::rows_view(uint64_t r0, uint64_t r1) const {
  return {dtype, r1 - r0, cols, data + r0 * stride(), stride()};
}

Matrix Matrix::cols_view(uint64_t c0, uint64_t c1) const {
  return {dtype, rows, c1 - c0, data + fmt::find(dtype)->row_bytes(c0), stride()};
}

void rmsnorm(const float* x, const float* w, float* y, int64_t n, int64_t dim, float eps, ThreadPool& pool) {
  pool.parallel_for(n, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      const float* xr = x + t * dim;
      float ss = 0.0f;
      for (int64_t i = 0; i < dim; ++i) ss += xr[i] * xr[i];
      const float scale = 1.0f / std::sqrt(ss / float(dim) + eps);
      for (int64_t i = 0; i < dim; ++i) y[t * dim + i] = xr[i] * scale * w[i];
    }
  });
}

// ---- matmul's blocked code (Code::kAvx2) -------------------------------------------
// The same sums as tree_dot, every output's operations in the same order,
// only several outputs at once: tree_dot's leaves (its stripes) listed
// first, then for each stripe kRows weight rows x kToks tokens of dot()'s
// eight lanes, each output's lanes in one 256-bit register. One output's
// dot() is a chain of dependent adds (~4 flops a cycle); eight independent
// chains keep both floating-point pipes busy: ~2x the plain loops on an
// AMD EPYC (Zen 4), 46-51 against 19-29 GFLOPS a core at K = 4096.
namespace {

#if QSP_CPU_AVX2
struct Stripe {
  int64_t off, len;
};

// tree_dot's leaves over [off, off + K), in its order (the lower half first).
void list_stripes(int64_t off, int64_t K, int levels, Stripe*& out) {
  if (levels == 0) {
    *out++ = {off, K};
    return;
  }
  const int64_t h = K / 2;
  list_stripes(off, h, levels - 1, out);
  list_stripes(off + h, K - h, levels - 1, out);
}

// tree_dot's additions of its leaves' values: the halves pairwise, up the tree.
float tree_add(const float* leaf, int n) {
  return n == 1 ? leaf[0] : tree_add(leaf, n / 2) + tree_add(leaf + n / 2, n - n / 2);
}

// out[t * ldo + r] = tree_dot(w + r * K, x[t], K, levels) for R rows, T tokens.
template <int R, int T>
__attribute__((target("avx2"))) void dot_block_avx2(const float* w, int64_t K, const float* const* x,
                                                    const Stripe* st, int ns, float* out, int64_t ldo) {
  float leaf[T][R][1 << kStripeLevels];
  for (int s = 0; s < ns; ++s) {
    const int64_t o = st[s].off, len = st[s].len, l8 = len / 8 * 8;
    __m256 acc[T][R];
    for (int t = 0; t < T; ++t)
      for (int r = 0; r < R; ++r) acc[t][r] = _mm256_setzero_ps();
    for (int64_t c = 0; c < l8; c += 8) {
      __m256 xv[T];
      for (int t = 0; t < T; ++t) xv[t] = _mm256_loadu_ps(x[t] + o + c);
      for (int r = 0; r < R; ++r) {
        const __m256 wv = _mm256_loadu_ps(w + r * K + o + c);
        for (int t = 0; t < T; ++t) acc[t][r] = _mm256_add_ps(acc[t][r], _mm256_mul_ps(wv, xv[t]));
      }
    }
    for (int t = 0; t < T; ++t)
      for (int r = 0; r < R; ++r) {
        alignas(32) float a[8];
        _mm256_store_ps(a, acc[t][r]);
        float tail = 0.0f;
        for (int64_t c = l8; c < len; ++c) tail += w[r * K + o + c] * x[t][o + c];
        leaf[t][r][s] = lanes_sum(a, tail);
      }
  }
  for (int t = 0; t < T; ++t)
    for (int r = 0; r < R; ++r) out[t * ldo + r] = tree_add(leaf[t][r], ns);
}

// out[j] = dot(q, k + j * d, d) for J keys (rows of d floats), dot()'s lanes
// and order for each.
template <int J>
__attribute__((target("avx2"))) void dot_keys_avx2(const float* q, const float* k, int64_t d, float* out) {
  const int64_t d8 = d / 8 * 8;
  __m256 acc[J];
  for (int j = 0; j < J; ++j) acc[j] = _mm256_setzero_ps();
  for (int64_t c = 0; c < d8; c += 8) {
    const __m256 qv = _mm256_loadu_ps(q + c);
    for (int j = 0; j < J; ++j) acc[j] = _mm256_add_ps(acc[j], _mm256_mul_ps(_mm256_loadu_ps(k + j * d + c), qv));
  }
  for (int j = 0; j < J; ++j) {
    alignas(32) float a[8];
    _mm256_store_ps(a, acc[j]);
    float tail = 0.0f;
    for (int64_t c = d8; c < d; ++c) tail += q[c] * k[j * d + c];
    out[j] = lanes_sum(a, tail);
  }
}
#endif

bool avx2_runs() {
#if QSP_CPU_AVX2
  static const bool yes = __builtin_cpu_supports("avx2");
  return yes;
#else
  return false;
#endif
}

}  // namespace

bool code_runs(Code code) {
  return code == Code::kAuto || code == Code::kPlain || (code == Code::kAvx2 && avx2_runs());
}

void matmul(const Matrix& W, const float* x, int64_t n, float* y, int64_t ldy, ThreadPool& pool, int levels,
            Code code) {
  const int64_t K = int64_t(W.cols);
  const fmt::Format& f = *fmt::find(W.dtype);
  const uint64_t row_bytes = W.stride();
  constexpr int64_t kRows = 4;  // weight rows dequantized together: each x row is read once per 4
  const int64_t n_blocks = (int64_t(W.rows) + kRows - 1) / kRows;
  // (The blocked code holds at most 2^kStripeLevels leaves an output.)
  // (kAvx2 on a CPU without AVX2 runs the plain loops: the same bits.)
  const bool blocked = code != Code::kPlain && avx2_runs() && levels >= 0 && levels <= kStripeLevels;
#if QSP_CPU_AVX2
  Stripe st[1 << kStripeLevels];
  Stripe* st_end = st;
  if (blocked) list_stripes(0, K, levels, st_end);
  const int ns = int(st_end - st);
#endif
  pool.parallel_for(n_blocks, [&](int64_t b, int64_t e) {
    std::vector<float> wrows(kRows * K);
    for (int64_t blk = b; blk < e; ++blk) {
      const int64_t r0 = blk * kRows, nr = std::min<int64_t>(kRows, int64_t(W.rows) - r0);
      for (int64_t i = 0; i < nr; ++i)
        f.dequantize(W.data + (r0 + i) * row_bytes, wrows.data() + i * K, K);
      int64_t t = 0;
#if QSP_CPU_AVX2
      if (blocked && nr == kRows) {
        constexpr int kToks = 2;  // 4 x 2 outputs: 8 accumulators of the 16 ymm registers
        for (; t + kToks <= n; t += kToks) {
          const float* xs[kToks] = {x + t * K, x + (t + 1) * K};
          dot_block_avx2<kRows, kToks>(wrows.data(), K, xs, st, ns, y + t * ldy + r0, ldy);
        }
        for (; t < n; ++t) {
          const float* xs[1] = {x + t * K};
          dot_block_avx2<kRows, 1>(wrows.data(), K, xs, st, ns, y + t * ldy + r0, ldy);
        }
      }
#else
      (void)blocked;
#endif
      for (; t < n; ++t) {
        const float* xr = x + t * K;
        for (int64_t i = 0; i < nr; ++i) y[t * ldy + r0 + i] = tree_dot(wrows.data() + i * K, xr, K, levels);
      }
    }
  });
}

void tree_sum(const float* const* parts, int n_parts, float* out, int64_t count, ThreadPool& pool) {
  pool.parallel_for(count, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) out[i] = tree_sum_at(parts, n_parts, i);
  });
}

void embed(const Matrix& table, const int32_t* tokens, int64_t n, float* out, ThreadPool& pool) {
  const fmt::Format& f = *fmt::find(table.dtype);
  const uint64_t row_bytes = table.stride();
  pool.parallel_for(n, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t)
      f.dequantize(table.data + uint64_t(tokens[t]) * row_bytes, out + t * table.cols, table.cols);
  });
}

void qk_norm_rope(float* x, int64_t n, int64_t n_heads, int64_t head_dim, const float* norm_w, float eps,
                  int64_t pos0, float theta, int32_t rope_style, ThreadPool& pool) {
  const int64_t half = head_dim / 2;
  pool.parallel_for(n * n_heads, [&](int64_t b, int64_t e) {
    for (int64_t th = b; th < e; ++th) {
      float* v = x + th * head_dim;
      const int64_t pos = pos0 + th / n_heads;
      if (norm_w) {
        float ss = 0.0f;
        for (int64_t i = 0; i < head_dim; ++i) ss += v[i] * v[i];
        const float scale = 1.0f / std::sqrt(ss / float(head_dim) + eps);
        for (int64_t i = 0; i < head_dim; ++i) v[i] = v[i] * scale * norm_w[i];
      }
      for (int64_t i = 0; i < half; ++i) {
        // freq_i = theta^(-2i/d), as both NEOX and GGML's interleaved mode use.
        const double freq = std::pow(double(theta), -2.0 * double(i) / double(head_dim));
        const double ang = double(pos) * freq;
        const float c = float(std::cos(ang)), s = float(std::sin(ang));
        const int64_t i0 = rope_style == QSP_ROPE_NEOX ? i : 2 * i;
        const int64_t i1 = rope_style == QSP_ROPE_NEOX ? i + half : 2 * i + 1;
        const float a = v[i0], bb = v[i1];
        v[i0] = a * c - bb * s;
        v[i1] = a * s + bb * c;
      }
    }
  });
}

void attention(const float* q, const float* k_cache, const float* v_cache, float* out, int64_t n, int64_t past,
               int64_t n_heads, int64_t n_kv_heads, int64_t head_dim, int64_t max_seq, ThreadPool& pool, Code code) {
  const int64_t group = n_heads / n_kv_heads;
  const float scale = 1.0f / std::sqrt(float(head_dim));
  const bool blocked = code != Code::kPlain && avx2_runs();
  (void)blocked;
  pool.parallel_for(n * n_heads, [&](int64_t b, int64_t e) {
    std::vector<float> p(past + n);
    for (int64_t th = b; th < e; ++th) {
      const int64_t t = th / n_heads, h = th % n_heads, kvh = h / group;
      const int64_t len = past + t + 1;  // causal: keys 0..past+t
      const float* qv = q + th * head_dim;
      const float* kb = k_cache + kvh * max_seq * head_dim;
      const float* vb = v_cache + kvh * max_seq * head_dim;
      int64_t j0 = 0;
#if QSP_CPU_AVX2
      if (blocked) {
        constexpr int kKeys = 4;  // the query's 8 lanes against 4 keys' at once
        for (; j0 + kKeys <= len; j0 += kKeys) dot_keys_avx2<kKeys>(qv, kb + j0 * head_dim, head_dim, &p[j0]);
      }
#endif
      for (int64_t j = j0; j < len; ++j) p[j] = dot(qv, kb + j * head_dim, head_dim);
      float mx = -INFINITY;
      for (int64_t j = 0; j < len; ++j) {
        p[j] = p[j] * scale;
        mx = std::fmax(mx, p[j]);
      }
      float sum = 0.0f;
      for (int64_t j = 0; j < len; ++j) {
        p[j] = std::exp(p[j] - mx);
        sum += p[j];
      }
      float* o = out + th * head_dim;
      for (int64_t i = 0; i < head_dim; ++i) o[i] = 0.0f;
      for (int64_t j = 0; j < len; ++j) {
        const float w = p[j] / sum;
        for (int64_t i = 0; i < head_dim; ++i) o[i] += w * vb[j * head_dim + i];
      }
    }
  });
}

void swiglu(const float* gate, const float* up, float* out, int64_t count, ThreadPool& pool) {
  pool.parallel_for(count, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) out[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
  });
}

void add_inplace(float* y, const float* x, int64_t count, ThreadPool& pool) {
  pool.parallel_for(count, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) y[i] += x[i];
  });
}

void kv_write(const float* k, const float* v, int64_t n, int64_t past, int64_t n_kv_heads, int64_t head_dim,
              int64_t max_seq, float* k_cache, float* v_cache) {
  const int64_t kv = n_kv_heads * head_dim;
  for (int64_t t = 0; t < n; ++t)
    for (int64_t h = 0; h < n_kv_heads; ++h) {
      const int64_t dst = (h * max_seq + past + t) * head_dim;
      std::copy_n(k + t * kv + h * head_dim, head_dim, k_cache + dst);
      std::copy_n(v + t * kv + h * head_dim, head_dim, v_cache + dst);
    }
}

int32_t argmax(const float* v, int64_t n) {
  int64_t best = -1;
  for (int64_t i = 0; i < n; ++i)
    if (!std::isnan(v[i]) && (best < 0 || v[i] > v[best])) best = i;
  return best < 0 ? 0 : int32_t(best);
}

}  // namespace cpu
}  // namespace qsp
