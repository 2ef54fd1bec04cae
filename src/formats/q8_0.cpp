// Q8_0: blocks of 32 weights, an fp16 scale d and 32 int8; x[i] = d * qs[i]
// (GGML's block_q8_0).
#include <algorithm>
#include <cmath>

#include "common/quant.h"
#include "formats/format.h"

namespace qsp {

void quantize_row_q8_0(const float* x, BlockQ8_0* y, uint64_t n) {
  for (uint64_t k = 0; k < n / kQBlock; ++k, x += kQBlock) {
    float amax = 0.0f;
    for (int j = 0; j < kQBlock; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[k].d = fp32_to_fp16(d);
    for (int j = 0; j < kQBlock; ++j) y[k].qs[j] = int8_t(std::lround(x[j] * id));
  }
}

namespace fmt {
namespace {

void dequantize(const void* src, float* out, uint64_t n) {
  const BlockQ8_0* b = static_cast<const BlockQ8_0*>(src);
  for (uint64_t k = 0; k < n / kQBlock; ++k, out += kQBlock) {
    const float d = fp16_to_fp32(b[k].d);
    for (int j = 0; j < kQBlock; ++j) out[j] = d * float(b[k].qs[j]);
  }
}

void quantize(const float* src, void* dst, uint64_t n) { quantize_row_q8_0(src, static_cast<BlockQ8_0*>(dst), n); }

}  // namespace

extern const Format kFormatQ8_0 = {QSP_DTYPE_Q8_0, "q8_0", kQBlock, sizeof(BlockQ8_0), dequantize, quantize};

}  // namespace fmt
}  // namespace qsp
