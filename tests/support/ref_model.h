// The whole model in float64, written from the specification in qsp.h
// (nothing from src/cpu): the reference of the CPU forward-pass tests. It runs
// on the exact dequantized values of a TestModel (support/model.h).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <vector>

#include "model.h"
#include "ref.h"

namespace qsp_test {
namespace ref {

using Vec = std::vector<double>;

// y = W x for a rows x cols weight (row-major, column index contiguous).
inline Vec matvec(const HostTensor& W, const Vec& x) {
  if (W.values.size() != W.rows * W.cols || x.size() != W.cols) throw std::invalid_argument("reference matvec: bad shapes");
  Vec y(W.rows, 0.0);
  for (uint64_t r = 0; r < W.rows; ++r) {
    const float* w = W.values.data() + r * W.cols;
    double acc = 0.0;
    for (uint64_t c = 0; c < W.cols; ++c) acc += double(w[c]) * x[c];
    y[r] = acc;
  }
  return y;
}

// The input rows (n x hidden) for token ids: the dequantized embedding rows.
inline std::vector<Vec> embed(const TestModel& m, const std::vector<int32_t>& tokens) {
  std::vector<Vec> x;
  for (int32_t t : tokens) {
    const float* row = m.embd.values.data() + uint64_t(t) * m.spec.hidden;
    x.emplace_back(row, row + m.spec.hidden);
  }
  return x;
}

// Runs the whole prompt (positions 0..n-1) and returns the logits at each of
// `positions` (the logits of the prefix that ends there: attention is causal).
inline std::vector<Vec> reference_logits(const TestModel& m, std::vector<Vec> x, const std::vector<size_t>& positions) {
  const qsp_context_params& p = m.params;
  const size_t n = x.size(), H = p.hidden_size, D = p.head_dim, NH = p.n_heads, NKV = p.n_kv_heads;
  const size_t group = NH / NKV;
  const double eps = p.rms_eps, theta = p.rope_theta;
  for (uint32_t l = 0; l < p.n_layers; ++l) {
    const auto& L = m.layers[l];
    std::vector<Vec> q(n), k(n), v(n);
    for (size_t t = 0; t < n; ++t) {
      Vec xn = x[t];
      ref::rmsnorm(xn.data(), H, L[kAttnNorm].values.data(), eps);
      q[t] = matvec(L[kWq], xn);
      k[t] = matvec(L[kWk], xn);
      v[t] = matvec(L[kWv], xn);
      for (size_t h = 0; h < NH; ++h) {
        if (p.qk_norm) ref::rmsnorm(q[t].data() + h * D, D, L[kQNorm].values.data(), eps);
        ref::rope(q[t].data() + h * D, D, t, theta, p.rope_style);
      }
      for (size_t h = 0; h < NKV; ++h) {
        if (p.qk_norm) ref::rmsnorm(k[t].data() + h * D, D, L[kKNorm].values.data(), eps);
        ref::rope(k[t].data() + h * D, D, t, theta, p.rope_style);
      }
    }
    const double scale = 1.0 / std::sqrt(double(D));
    for (size_t t = 0; t < n; ++t) {
      Vec att(NH * D, 0.0);
      for (size_t h = 0; h < NH; ++h) {
        const size_t kvh = h / group;
        Vec s(t + 1);
        double mx = -INFINITY;
        for (size_t j = 0; j <= t; ++j) {
          double dot = 0.0;
          for (size_t i = 0; i < D; ++i) dot += q[t][h * D + i] * k[j][kvh * D + i];
          s[j] = dot * scale;
          mx = std::max(mx, s[j]);
        }
        double sum = 0.0;
        for (size_t j = 0; j <= t; ++j) sum += (s[j] = std::exp(s[j] - mx));
        for (size_t j = 0; j <= t; ++j)
          for (size_t i = 0; i < D; ++i) att[h * D + i] += s[j] / sum * v[j][kvh * D + i];
      }
      const Vec o = matvec(L[kWo], att);
      for (size_t i = 0; i < H; ++i) x[t][i] += o[i];
      Vec xn = x[t];
      ref::rmsnorm(xn.data(), H, L[kFfnNorm].values.data(), eps);
      const Vec g = matvec(L[kWGate], xn), u = matvec(L[kWUp], xn);
      Vec a(g.size());
      for (size_t i = 0; i < a.size(); ++i) a[i] = ref::silu(g[i]) * u[i];
      const Vec dn = matvec(L[kWDown], a);
      for (size_t i = 0; i < H; ++i) x[t][i] += dn[i];
    }
  }
  std::vector<Vec> out;
  for (size_t pos : positions) {
    if (pos >= n) throw std::invalid_argument("reference logits: position past the prompt");
    Vec xn = x[pos];
    ref::rmsnorm(xn.data(), H, m.out_norm.values.data(), eps);
    out.push_back(matvec(m.head(), xn));
  }
  return out;
}

}  // namespace ref
}  // namespace qsp_test
