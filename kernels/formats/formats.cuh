// Every weight format the kernels decode, and the one dispatch from a
// run-time WFormat to its compile-time traits (WTraits<F>, one header per
// format in this folder; kernels/qweight.cuh lists what each provides).
// The list itself is QSP_KERNEL_FORMATS (kernels/kernels.h).
#pragma once

#include "kernels/formats/f16.cuh"
#include "kernels/formats/q4_0.cuh"
#include "kernels/formats/q8_0.cuh"
#include "kernels/kernels.h"
#include "kernels/qweight.cuh"

namespace qsp {
namespace kern {

// The compile-time name of a format: tag.kFormat, and its traits as
// typename decltype(tag)::T.
template <WFormat F>
struct FormatTag {
  static constexpr WFormat kFormat = F;
  using T = WTraits<F>;
};

// fn(FormatTag<f>{}) for the run-time format f; `fallback` for a value
// outside the enum (host code: the launchers, the repacking).
template <class R, class Fn>
R dispatch_format(WFormat f, R fallback, Fn&& fn) {
  switch (f) {
#define QSP_CASE_FORMAT(N, n) \
  case WFormat::k##N:         \
    return fn(FormatTag<WFormat::k##N>{});
    QSP_KERNEL_FORMATS(QSP_CASE_FORMAT)
#undef QSP_CASE_FORMAT
  }
  return fallback;
}

// Dequantized columns [col8, col8 + 8) of `row` of w, whatever its format
// (embed, debugging); col8 % 8 == 0.
__device__ inline void load8(const DWeight& w, int64_t row, int64_t col8, float (&out)[8]) {
#define QSP_LOAD8_FORMAT(N, n)                                  \
  if (w.fmt == WFormat::k##N) {                                 \
    WTraits<WFormat::k##N>::load8(w, row, col8, out);           \
    return;                                                     \
  }
  QSP_KERNEL_FORMATS(QSP_LOAD8_FORMAT)
#undef QSP_LOAD8_FORMAT
}

}  // namespace kern
}  // namespace qsp
