// Q4_1: blocks of 32 weights, an fp16 scale d, an fp16 offset m and 16 bytes
// of nibbles; x[i] = d * q[i] + m, q[i] for i < 16 the low nibble of qs[i],
// for i >= 16 the high nibble of qs[i - 16] (GGML's block_q4_1).
#include "formats/quant_util.h"

#include <algorithm>
#include <cfloat>

#include "common/quant.h"
#include "formats/format.h"

namespace qsp {
namespace fmt {
namespace {

struct BlockQ4_1 {
  uint16_t d;  // fp16 bits
  uint16_t m;  // fp16 bits
  uint8_t qs[16];
};
static_assert(sizeof(BlockQ4_1) == 20, "Q4_1 block is 20 bytes in GGUF");

void dequantize(const void* src, float* out, uint64_t n) {
  const BlockQ4_1* b = static_cast<const BlockQ4_1*>(src);
  for (uint64_t k = 0; k < n / 32; ++k, out += 32) {
    const float d = fp16_to_fp32(b[k].d), m = fp16_to_fp32(b[k].m);
    for (int j = 0; j < 16; ++j) {
      out[j] = float(b[k].qs[j] & 0x0f) * d + m;
      out[j + 16] = float(b[k].qs[j] >> 4) * d + m;
    }
  }
}

// GGML's quantize_row_q4_1_ref: d = (max - min) / 15, m = min, q = trunc((x - min) / d + 0.5).
void quantize(const float* src, void* dst, uint64_t n) {
  BlockQ4_1* y = static_cast<BlockQ4_1*>(dst);
  for (uint64_t k = 0; k < n / 32; ++k, src += 32) {
    float min = FLT_MAX, max = -FLT_MAX;
    for (int j = 0; j < 32; ++j) {
      if (src[j] < min) min = src[j];
      if (src[j] > max) max = src[j];
    }
    const float d = (max - min) / 15;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[k].d = fp32_to_fp16(d);
    y[k].m = fp32_to_fp16(min);
    for (int j = 0; j < 16; ++j) {
      const int q0 = std::min(15, int(int8_t(qutil::trunc_i32((src[j] - min) * id + 0.5f))));
      const int q1 = std::min(15, int(int8_t(qutil::trunc_i32((src[j + 16] - min) * id + 0.5f))));
      y[k].qs[j] = uint8_t(uint8_t(q0) | (uint8_t(q1) << 4));
    }
  }
}

}  // namespace

extern const Format kFormatQ4_1 = {QSP_DTYPE_Q4_1, "q4_1", 32, sizeof(BlockQ4_1), dequantize, quantize};

}  // namespace fmt
}  // namespace qsp
