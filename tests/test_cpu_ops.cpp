// The CPU backend's ops (src/cpu/ops.h), which the GPU op tests
// (tests/ops/) use as the reference, against float64 references written
// from the specification (tests/support/ref.h) on random data of realistic
// scale, at odd sizes and the real Qwen3 head shapes. The CPU ops accumulate
// in fp32, so the tolerances are fp32's: rel L2 <= 1e-5 (a K = 4096 dot
// product in fp32 with 8 partial sums errs ~1e-6), exact for data movement
// (embed, kv_write) and argmax. matmul's sum order is partition-invariant:
// a column split into 2, 4 or 8 shards, summed pairwise, is bit for bit the
// whole.
#include <catch2/catch.hpp>

#include <limits>
#include <vector>

#include "cpu/ops.h"
#include "cpu/thread_pool.h"
#include "support/api.h"
#include "support/model.h"
#include "support/ref.h"
#include "support/rng.h"

using namespace qsp_test;
namespace cpu = qsp::cpu;

namespace {

qsp::ThreadPool& pool() {
  static qsp::ThreadPool p(2);
  return p;
}

// A matmul case: N x K weights of `dtype`, M tokens.
struct MatCase {
  int32_t dtype;
  int64_t N, K, M;
};

// Its random weights (quantized; N(0, 0.03) before) and activations (N(0, 1)).
struct MatData {
  std::vector<uint8_t> bytes;
  std::vector<float> x;
  cpu::Matrix W;
};
MatData random_matmul(const MatCase& c, Rng& rng) {
  MatData d;
  const std::vector<float> src = randn(size_t(c.N * c.K), 0.03f, rng);
  d.bytes = quantize_rows(c.dtype, src.data(), uint64_t(c.N), uint64_t(c.K));
  d.x = randn(size_t(c.M * c.K), 1.0f, rng);
  d.W = cpu::Matrix{c.dtype, uint64_t(c.N), uint64_t(c.K), d.bytes.data()};
  return d;
}

}  // namespace

TEST_CASE("cpu ops: matmul of every dtype against float64", "[cpu_ops]") {
  const MatCase cases[] = {
      {QSP_DTYPE_Q4_0, 40, 96, 1},   {QSP_DTYPE_Q8_0, 96, 256, 3},    {QSP_DTYPE_F16, 33, 160, 17},
      {QSP_DTYPE_BF16, 64, 64, 5},   {QSP_DTYPE_F32, 7, 100, 2},      {QSP_DTYPE_Q4_0, 256, 4096, 3},
      {QSP_DTYPE_Q8_0, 128, 1024, 17},
  };
  Rng rng(11);
  for (const MatCase& c : cases) {
    INFO(qsp_dtype_name(c.dtype) << " " << c.N << "x" << c.K << ", M " << c.M);
    const std::vector<float> src = randn(size_t(c.N * c.K), 0.03f, rng);
    const std::vector<uint8_t> bytes = quantize_rows(c.dtype, src.data(), uint64_t(c.N), uint64_t(c.K));
    std::vector<float> w(src.size());
    const uint64_t row_bytes = bytes.size() / uint64_t(c.N);
    for (int64_t r = 0; r < c.N; ++r) qsp::dequantize_row(c.dtype, bytes.data() + r * row_bytes, w.data() + r * c.K, c.K);
    const std::vector<float> x = randn(size_t(c.M * c.K), 1.0f, rng);
    const int64_t ldy = c.N + 3;
    std::vector<float> y(size_t(c.M * ldy), 7.0f);
    cpu::matmul(cpu::Matrix{c.dtype, uint64_t(c.N), uint64_t(c.K), bytes.data()}, x.data(), c.M, y.data(), ldy, pool());
    RelL2 err;
    bool gap_ok = true;
    for (int64_t m = 0; m < c.M; ++m) {
      for (int64_t n = 0; n < c.N; ++n) err.add(y[m * ldy + n], ref::dot(x.data() + m * c.K, w.data() + n * c.K, c.K));
      for (int64_t n = c.N; n < ldy; ++n) gap_ok = gap_ok && y[m * ldy + n] == 7.0f;
    }
    INFO("rel L2 " << err.value());
    CHECK(err.value() <= 1e-5);
    CHECK(gap_ok);
  }
}

TEST_CASE("cpu ops: matmul of a column split into 2, 4, 8 shards, tree-summed, equals the whole bit for bit",
          "[cpu_ops][shard]") {
  // K / 8 whole blocks (32; 256 for Q4_K); F32 K = 8 * 13 (stripes of odd length).
  const MatCase cases[] = {{QSP_DTYPE_Q4_0, 24, 256, 3},   {QSP_DTYPE_Q8_0, 17, 1024, 5}, {QSP_DTYPE_Q4_K, 9, 2048, 2},
                           {QSP_DTYPE_Q6_K, 8, 2048, 1},   {QSP_DTYPE_F32, 11, 104, 4},   {QSP_DTYPE_F16, 5, 768, 7}};
  Rng rng(21);
  for (const MatCase& c : cases) {
    const MatData d = random_matmul(c, rng);
    const std::vector<float>& x = d.x;
    const cpu::Matrix& W = d.W;
    std::vector<float> whole(size_t(c.M * c.N));
    cpu::matmul(W, x.data(), c.M, whole.data(), c.N, pool());
    for (int levels = 1; levels <= cpu::kStripeLevels; ++levels) {
      const int n = 1 << levels;
      const int64_t kc = c.K / n;
      INFO(qsp_dtype_name(c.dtype) << " " << c.N << "x" << c.K << ", M " << c.M << ", " << n << " shards");
      std::vector<std::vector<float>> part(n, std::vector<float>(whole.size()));
      std::vector<const float*> ptr;
      for (int s = 0; s < n; ++s) {
        std::vector<float> xs(size_t(c.M * kc));  // the shard's columns of x
        for (int64_t m = 0; m < c.M; ++m)
          std::copy_n(x.begin() + m * c.K + s * kc, kc, xs.begin() + m * kc);
        cpu::matmul(W.cols_view(uint64_t(s * kc), uint64_t((s + 1) * kc)), xs.data(), c.M, part[s].data(), c.N,
                    pool(), cpu::kStripeLevels - levels);
        ptr.push_back(part[s].data());
      }
      std::vector<float> sum(whole.size());
      cpu::tree_sum(ptr.data(), n, sum.data(), int64_t(sum.size()), pool());
      CHECK(bit_equal(sum, whole));
      // In place, as the CPU backend sums (into the first part).
      cpu::tree_sum(ptr.data(), n, part[0].data(), int64_t(sum.size()), pool());
      CHECK(bit_equal(part[0], whole));
    }
    // Row views: the rows alone give the same values.
    std::vector<float> rows(size_t(c.M * c.N), 0.0f);
    cpu::matmul(W.rows_view(2, uint64_t(c.N)), x.data(), c.M, rows.data() + 2, c.N, pool());
    for (int64_t m = 0; m < c.M; ++m)
      for (int64_t r = 2; r < c.N; ++r) CHECK(rows[m * c.N + r] == whole[m * c.N + r]);
  }
}

// matmul's blocked code (4 rows x 2 tokens in AVX2 registers) against its
// plain loops: the same bits for every dtype, odd K (stripes with tails and
// empty ones), ragged row blocks and token counts, every stripe depth, and
// row / column views. Where the CPU has no AVX2 the case says so and skips.
TEST_CASE("cpu ops: matmul's blocked code gives the plain loops' bits", "[cpu_ops]") {
  if (!cpu::code_runs(cpu::Code::kAvx2)) {
    WARN("SKIPPED: this CPU has no AVX2 (matmul's blocked code does not run here)");
    return;
  }
  const MatCase cases[] = {
      {QSP_DTYPE_F32, 1, 1, 1},        {QSP_DTYPE_F32, 5, 7, 3},        {QSP_DTYPE_F32, 8, 100, 2},
      {QSP_DTYPE_F32, 13, 1001, 17},   {QSP_DTYPE_F16, 9, 72, 4},       {QSP_DTYPE_BF16, 4, 64, 1},
      {QSP_DTYPE_Q4_0, 40, 4096, 3},   {QSP_DTYPE_Q8_0, 33, 1024, 5},   {QSP_DTYPE_Q4_K, 12, 2048, 2},
      {QSP_DTYPE_Q6_K, 7, 768, 9},     {QSP_DTYPE_Q2_K, 6, 512, 1},     {QSP_DTYPE_Q5_0, 17, 96, 100},
  };
  Rng rng(31);
  for (const MatCase& c : cases) {
    const MatData d = random_matmul(c, rng);
    const std::vector<float>& x = d.x;
    const cpu::Matrix& W = d.W;
    for (int levels = 0; levels <= cpu::kStripeLevels; ++levels) {
      INFO(qsp_dtype_name(c.dtype) << " " << c.N << "x" << c.K << ", M " << c.M << ", levels " << levels);
      const int64_t ldy = c.N + 1;
      std::vector<float> plain(size_t(c.M * ldy), 7.0f), blocked(plain), automatic(plain);
      cpu::matmul(W, x.data(), c.M, plain.data(), ldy, pool(), levels, cpu::Code::kPlain);
      cpu::matmul(W, x.data(), c.M, blocked.data(), ldy, pool(), levels, cpu::Code::kAvx2);
      cpu::matmul(W, x.data(), c.M, automatic.data(), ldy, pool(), levels);
      CHECK(bit_equal(blocked, plain));
      CHECK(bit_equal(automatic, plain));
    }
    // A row view starting off the 4-row grid (ragged blocks at both ends).
    if (c.N > 3) {
      std::vector<float> plain(size_t(c.M * c.N)), blocked(plain.size());
      const cpu::Matrix V = W.rows_view(1, uint64_t(c.N));
      cpu::matmul(V, x.data(), c.M, plain.data(), c.N, pool(), cpu::kStripeLevels, cpu::Code::kPlain);
      cpu::matmul(V, x.data(), c.M, blocked.data(), c.N, pool(), cpu::kStripeLevels, cpu::Code::kAvx2);
      CHECK(bit_equal(blocked, plain));
    }
  }
}

TEST_CASE("cpu ops: rmsnorm, swiglu, add against float64", "[cpu_ops]") {
  Rng rng(12);
  for (int64_t dim : {3, 64, 1000, 4096}) {
    const int64_t n = 5;
    const std::vector<float> x = randn(size_t(n * dim), 2.0f, rng), w = randn(size_t(dim), 0.2f, rng, 1.0f);
    std::vector<float> y(x.size());
    cpu::rmsnorm(x.data(), w.data(), y.data(), n, dim, 1e-6f, pool());
    RelL2 err;
    for (int64_t t = 0; t < n; ++t) {
      std::vector<double> r(x.begin() + t * dim, x.begin() + (t + 1) * dim);
      ref::rmsnorm(r.data(), size_t(dim), w.data(), 1e-6);
      for (int64_t i = 0; i < dim; ++i) err.add(y[t * dim + i], r[i]);
    }
    INFO("rmsnorm dim " << dim << ": rel L2 " << err.value());
    CHECK(err.value() <= 1e-5);
  }
  const std::vector<float> g = randn(1000, 3.0f, rng), u = randn(1000, 1.0f, rng);
  std::vector<float> o(1000), a(u);
  cpu::swiglu(g.data(), u.data(), o.data(), 1000, pool());
  cpu::add_inplace(a.data(), g.data(), 1000, pool());
  RelL2 es, ea;
  for (size_t i = 0; i < 1000; ++i) {
    es.add(o[i], ref::silu(g[i]) * u[i]);
    ea.add(a[i], double(u[i]) + g[i]);
  }
  CHECK(es.value() <= 1e-6);
  CHECK(ea.value() <= 1e-7);
}

TEST_CASE("cpu ops: qk_norm_rope against float64 (NEOX and interleaved, long positions)", "[cpu_ops]") {
  Rng rng(13);
  struct Case {
    int64_t D, heads, n, pos0;
    int32_t style;
    bool norm;
  };
  const Case cases[] = {{128, 8, 3, 0, QSP_ROPE_NEOX, true},        {64, 4, 17, 1000, QSP_ROPE_INTERLEAVED, false},
                        {128, 2, 5, 32000, QSP_ROPE_NEOX, false},   {64, 3, 1, 30000, QSP_ROPE_INTERLEAVED, true}};
  for (const Case& c : cases) {
    INFO("D " << c.D << ", heads " << c.heads << ", n " << c.n << ", pos0 " << c.pos0 << ", style " << c.style);
    const std::vector<float> x0 = randn(size_t(c.n * c.heads * c.D), 1.5f, rng), w = randn(size_t(c.D), 0.2f, rng, 1.0f);
    std::vector<float> x(x0);
    const float theta = 1e6f;
    cpu::qk_norm_rope(x.data(), c.n, c.heads, c.D, c.norm ? w.data() : nullptr, 1e-6f, c.pos0, theta, c.style, pool());
    RelL2 err;
    for (int64_t th = 0; th < c.n * c.heads; ++th) {
      std::vector<double> r(x0.begin() + th * c.D, x0.begin() + (th + 1) * c.D);
      if (c.norm) ref::rmsnorm(r.data(), size_t(c.D), w.data(), 1e-6);
      ref::rope(r.data(), size_t(c.D), double(c.pos0 + th / c.heads), theta, c.style);
      for (int64_t i = 0; i < c.D; ++i) err.add(x[th * c.D + i], r[i]);
    }
    INFO("rel L2 " << err.value());
    CHECK(err.value() <= 1e-5);
  }
}

TEST_CASE("cpu ops: causal GQA attention against float64", "[cpu_ops]") {
  Rng rng(14);
  struct Case {
    int64_t D, H, KVH, n, past;
  };
  const Case cases[] = {{64, 8, 8, 3, 0}, {128, 32, 8, 17, 5}, {128, 16, 8, 1, 100}, {64, 10, 2, 7, 30}, {128, 8, 1, 4, 0}};
  for (const Case& c : cases) {
    INFO("D " << c.D << ", heads " << c.H << "/" << c.KVH << ", n " << c.n << ", past " << c.past);
    const int64_t max_seq = c.past + c.n + 3;
    const std::vector<float> q = randn(size_t(c.n * c.H * c.D), 1.0f, rng);
    std::vector<float> k = randn(size_t(c.KVH * max_seq * c.D), 1.0f, rng), v = randn(k.size(), 1.0f, rng);
    std::vector<float> out(q.size());
    cpu::attention(q.data(), k.data(), v.data(), out.data(), c.n, c.past, c.H, c.KVH, c.D, max_seq, pool());
    RelL2 err;
    std::vector<double> r;
    const double scale = double(1.0f / std::sqrt(float(c.D)));
    for (int64_t t = 0; t < c.n; ++t)
      for (int64_t h = 0; h < c.H; ++h) {
        const int64_t kvh = h / (c.H / c.KVH);
        ref::attention_row(q.data() + (t * c.H + h) * c.D, k.data() + kvh * max_seq * c.D,
                           v.data() + kvh * max_seq * c.D, size_t(c.D), size_t(c.past + t), scale, r);
        for (int64_t i = 0; i < c.D; ++i) err.add(out[(t * c.H + h) * c.D + i], r[i]);
      }
    INFO("rel L2 " << err.value());
    CHECK(err.value() <= 1e-5);
  }
}

// attention's blocked query-key dots (4 keys at once in AVX2 registers)
// against the plain loop: the same bits, key counts that leave every
// remainder of 4, head_dim 64 / 128 and an odd one (a lane tail).
TEST_CASE("cpu ops: attention's blocked code gives the plain loop's bits", "[cpu_ops]") {
  if (!cpu::code_runs(cpu::Code::kAvx2)) {
    WARN("SKIPPED: this CPU has no AVX2 (attention's blocked code does not run here)");
    return;
  }
  Rng rng(15);
  struct Case {
    int64_t D, H, KVH, n, past;
  };
  const Case cases[] = {{64, 8, 8, 3, 0},  {128, 32, 8, 17, 5}, {128, 16, 8, 1, 102},
                        {36, 4, 2, 6, 9}, {128, 8, 1, 5, 1},   {100, 6, 3, 2, 700}};
  for (const Case& c : cases) {
    INFO("D " << c.D << ", heads " << c.H << "/" << c.KVH << ", n " << c.n << ", past " << c.past);
    const int64_t max_seq = c.past + c.n + 3;
    const std::vector<float> q = randn(size_t(c.n * c.H * c.D), 1.0f, rng);
    std::vector<float> k = randn(size_t(c.KVH * max_seq * c.D), 1.0f, rng), v = randn(k.size(), 1.0f, rng);
    std::vector<float> plain(q.size()), blocked(q.size()), automatic(q.size());
    cpu::attention(q.data(), k.data(), v.data(), plain.data(), c.n, c.past, c.H, c.KVH, c.D, max_seq, pool(),
                   cpu::Code::kPlain);
    cpu::attention(q.data(), k.data(), v.data(), blocked.data(), c.n, c.past, c.H, c.KVH, c.D, max_seq, pool(),
                   cpu::Code::kAvx2);
    cpu::attention(q.data(), k.data(), v.data(), automatic.data(), c.n, c.past, c.H, c.KVH, c.D, max_seq, pool());
    CHECK(bit_equal(blocked, plain));
    CHECK(bit_equal(automatic, plain));
  }
}

TEST_CASE("cpu ops: embed, kv_write and argmax are exact", "[cpu_ops]") {
  Rng rng(15);
  for (int32_t dt : {QSP_DTYPE_Q4_0, QSP_DTYPE_Q8_0, QSP_DTYPE_F16, QSP_DTYPE_BF16, QSP_DTYPE_F32}) {
    const int64_t rows = 50, cols = 96;
    const std::vector<float> src = randn(size_t(rows * cols), 0.05f, rng);
    const std::vector<uint8_t> bytes = quantize_rows(dt, src.data(), rows, cols);
    const std::vector<int32_t> tok = {0, 49, 7, 7, 23};
    std::vector<float> out(tok.size() * cols), row(static_cast<size_t>(cols));
    cpu::embed(cpu::Matrix{dt, uint64_t(rows), uint64_t(cols), bytes.data()}, tok.data(), int64_t(tok.size()),
               out.data(), pool());
    bool same = true;
    for (size_t t = 0; t < tok.size(); ++t) {
      qsp::dequantize_row(dt, bytes.data() + size_t(tok[t]) * (bytes.size() / rows), row.data(), cols);
      same = same && std::equal(row.begin(), row.end(), out.begin() + t * cols);
    }
    INFO(qsp_dtype_name(dt));
    CHECK(same);
  }
  // kv_write: rows land at [head][past + t], nothing else changes.
  const int64_t n = 3, KVH = 2, D = 4, max_seq = 8, past = 4;
  const std::vector<float> k = randn(size_t(n * KVH * D), 1.0f, rng), v = randn(k.size(), 1.0f, rng);
  std::vector<float> kc(size_t(KVH * max_seq * D), -9.0f), vc(kc);
  cpu::kv_write(k.data(), v.data(), n, past, KVH, D, max_seq, kc.data(), vc.data());
  for (int64_t h = 0; h < KVH; ++h)
    for (int64_t j = 0; j < max_seq; ++j)
      for (int64_t i = 0; i < D; ++i) {
        const size_t c = size_t((h * max_seq + j) * D + i);
        const bool in = j >= past && j < past + n;
        CHECK(kc[c] == (in ? k[size_t(((j - past) * KVH + h) * D + i)] : -9.0f));
        CHECK(vc[c] == (in ? v[size_t(((j - past) * KVH + h) * D + i)] : -9.0f));
      }
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  for (int64_t len : {1, 5, 100, 151936}) {
    std::vector<float> x = randn(size_t(len), 3.0f, rng);
    if (len > 4) x[1] = nan, x[len - 1] = x[len - 2] = 50.0f;
    CHECK(cpu::argmax(x.data(), len) == ref::argmax(x.data(), size_t(len)));
  }
  const std::vector<float> edge = {nan, -inf, -inf, nan};
  CHECK(cpu::argmax(edge.data(), 4) == 1);
  const std::vector<float> all_nan(5, nan);
  CHECK(cpu::argmax(all_nan.data(), 5) == 0);
}
