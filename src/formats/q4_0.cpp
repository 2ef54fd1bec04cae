// Q4_0: blocks of 32 weights, an fp16 scale d and 16 bytes of nibbles;
// x[i] = d * (q[i] - 8), q[i] for i < 16 the low nibble of qs[i], for i >= 16
// the high nibble of qs[i - 16] (GGML's block_q4_0).
#include <algorithm>
#include <cmath>

#include "common/quant.h"
#include "formats/format.h"

namespace qsp {

void quantize_row_q4_0(const float* x, BlockQ4_0* y, uint64_t n) {
  for (uint64_t k = 0; k < n / kQBlock; ++k, x += kQBlock) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < kQBlock; ++j) {
      if (std::fabs(x[j]) > amax) { amax = std::fabs(x[j]); max = x[j]; }
    }
    const float d = max / -8.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[k].d = fp32_to_fp16(d);
    for (int j = 0; j < 16; ++j) {
      const int q0 = std::min(15, int(int8_t(x[j] * id + 8.5f)));
      const int q1 = std::min(15, int(int8_t(x[j + 16] * id + 8.5f)));
      y[k].qs[j] = uint8_t(q0 | (q1 << 4));
    }
  }
}

namespace fmt {
namespace {

void dequantize(const void* src, float* out, uint64_t n) {
  const BlockQ4_0* b = static_cast<const BlockQ4_0*>(src);
  for (uint64_t k = 0; k < n / kQBlock; ++k, out += kQBlock) {
    const float d = fp16_to_fp32(b[k].d);
    for (int j = 0; j < 16; ++j) {
      out[j] = d * float(int(b[k].qs[j] & 0x0f) - 8);
      out[j + 16] = d * float(int(b[k].qs[j] >> 4) - 8);
    }
  }
}

void quantize(const float* src, void* dst, uint64_t n) { quantize_row_q4_0(src, static_cast<BlockQ4_0*>(dst), n); }

}  // namespace

extern const Format kFormatQ4_0 = {QSP_DTYPE_Q4_0, "q4_0", kQBlock, sizeof(BlockQ4_0), dequantize, quantize};

}  // namespace fmt
}  // namespace qsp
