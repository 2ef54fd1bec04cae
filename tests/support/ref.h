// Float64 reference helpers shared by the tests: error measures and the
// textbook form of each op of the layer (the specification in qsp.h, written
// independently of src/cpu). Plain C++, no Catch2.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

#include "qsp/qsp.h"

namespace qsp_test {

// ||got - want||_2 / ||want||_2 accumulated over pairs; also the max abs error.
struct RelL2 {
  double num = 0.0, den = 0.0, max_abs = 0.0;
  void add(double got, double want) {
    const double d = got - want;
    num += d * d;
    den += want * want;
    if (!(std::fabs(d) <= max_abs)) max_abs = std::fabs(d);  // NaN sticks
  }
  double value() const { return den > 0.0 ? std::sqrt(num / den) : std::sqrt(num); }
};

inline double rel_l2(const float* a, const float* ref, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; ++i) {
    const double d = double(a[i]) - double(ref[i]);
    num += d * d;
    den += double(ref[i]) * double(ref[i]);
  }
  return std::sqrt(num / (den > 0 ? den : 1e-300));
}

inline double rel_l2(const std::vector<float>& a, const std::vector<double>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double d = double(a[i]) - ref[i];
    num += d * d;
    den += ref[i] * ref[i];
  }
  return std::sqrt(num / (den > 0 ? den : 1e-300));
}

namespace ref {

inline double silu(double v) { return v / (1.0 + std::exp(-v)); }

inline double dot(const float* a, const float* b, size_t n) {
  double acc = 0.0;
  for (size_t i = 0; i < n; ++i) acc += double(a[i]) * double(b[i]);
  return acc;
}

// x / sqrt(mean(x^2) + eps) * w over x[0 .. dim), in place.
template <class W>
void rmsnorm(double* x, size_t dim, const W* w, double eps) {
  double ss = 0.0;
  for (size_t i = 0; i < dim; ++i) ss += x[i] * x[i];
  const double inv = 1.0 / std::sqrt(ss / double(dim) + eps);
  for (size_t i = 0; i < dim; ++i) x[i] = x[i] * inv * double(w[i]);
}

// RoPE of one head vector at position pos: freq_i = theta^(-2i/d), i < d/2;
// NEOX rotates (i, i + d/2), interleaved (2i, 2i+1);
// (a, b) -> (a cos - b sin, a sin + b cos).
inline void rope(double* v, size_t d, double pos, double theta, int32_t style) {
  for (size_t i = 0; i < d / 2; ++i) {
    const double ang = pos * std::pow(theta, -2.0 * double(i) / double(d));
    const size_t i0 = style == QSP_ROPE_NEOX ? i : 2 * i;
    const size_t i1 = style == QSP_ROPE_NEOX ? i + d / 2 : 2 * i + 1;
    const double a = v[i0], b = v[i1];
    v[i0] = a * std::cos(ang) - b * std::sin(ang);
    v[i1] = a * std::sin(ang) + b * std::cos(ang);
  }
}

// Causal softmax(q.k * scale) v of one query against keys 0 .. last of one
// KV head; k, v point at that head's rows (row stride d).
inline void attention_row(const float* q, const float* k, const float* v, size_t d, size_t last, double scale,
                          std::vector<double>& out) {
  std::vector<double> s(last + 1);
  double mx = -std::numeric_limits<double>::infinity();
  for (size_t j = 0; j <= last; ++j) {
    s[j] = dot(q, k + j * d, d) * scale;
    mx = std::max(mx, s[j]);
  }
  double sum = 0.0;
  for (size_t j = 0; j <= last; ++j) sum += (s[j] = std::exp(s[j] - mx));
  out.assign(d, 0.0);
  for (size_t j = 0; j <= last; ++j) {
    const double w = s[j] / sum;
    for (size_t i = 0; i < d; ++i) out[i] += w * double(v[j * d + i]);
  }
}

// The lowest index of the maximum; NaN never wins; none (all NaN) gives 0.
inline int32_t argmax(const float* v, size_t n) {
  int32_t best = -1;
  for (size_t i = 0; i < n; ++i)
    if (!std::isnan(v[i]) && (best < 0 || v[i] > v[best])) best = int32_t(i);
  return best < 0 ? 0 : best;
}

}  // namespace ref
}  // namespace qsp_test
