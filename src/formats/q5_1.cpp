// Q5_1: blocks of 32 weights, an fp16 scale d, an fp16 offset m, 32 high bits
// qh (little-endian uint32) and 16 bytes of nibbles; x[i] = d * q[i] + m, q[i]
// = low | high << 4 with low the low nibble of qs[i] (i < 16) or the high
// nibble of qs[i - 16] (i >= 16), high bit i of qh (GGML's block_q5_1).
#include "formats/quant_util.h"

#include <cfloat>

#include "common/quant.h"
#include "formats/format.h"

namespace qsp {
namespace fmt {
namespace {

struct BlockQ5_1 {
  uint16_t d;  // fp16 bits
  uint16_t m;  // fp16 bits
  uint8_t qh[4];
  uint8_t qs[16];
};
static_assert(sizeof(BlockQ5_1) == 24, "Q5_1 block is 24 bytes in GGUF");

uint32_t load_le32(const uint8_t* p) {
  return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
}

void dequantize(const void* src, float* out, uint64_t n) {
  const BlockQ5_1* b = static_cast<const BlockQ5_1*>(src);
  for (uint64_t k = 0; k < n / 32; ++k, out += 32) {
    const float d = fp16_to_fp32(b[k].d), m = fp16_to_fp32(b[k].m);
    const uint32_t qh = load_le32(b[k].qh);
    for (int j = 0; j < 16; ++j) {
      const int q0 = int((b[k].qs[j] & 0x0f) | ((qh >> j) & 1) << 4);
      const int q1 = int((b[k].qs[j] >> 4) | ((qh >> (j + 16)) & 1) << 4);
      out[j] = float(q0) * d + m;
      out[j + 16] = float(q1) * d + m;
    }
  }
}

// GGML's quantize_row_q5_1_ref: d = (max - min) / 31, m = min,
// q = trunc((x - min) / d + 0.5) (no clamp, as in GGML).
void quantize(const float* src, void* dst, uint64_t n) {
  BlockQ5_1* y = static_cast<BlockQ5_1*>(dst);
  for (uint64_t k = 0; k < n / 32; ++k, src += 32) {
    float min = FLT_MAX, max = -FLT_MAX;
    for (int j = 0; j < 32; ++j) {
      if (src[j] < min) min = src[j];
      if (src[j] > max) max = src[j];
    }
    const float d = (max - min) / 31;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[k].d = fp32_to_fp16(d);
    y[k].m = fp32_to_fp16(min);
    uint32_t qh = 0;
    for (int j = 0; j < 16; ++j) {
      const uint8_t q0 = uint8_t(qutil::trunc_i32((src[j] - min) * id + 0.5f));
      const uint8_t q1 = uint8_t(qutil::trunc_i32((src[j + 16] - min) * id + 0.5f));
      y[k].qs[j] = uint8_t((q0 & 0x0f) | ((q1 & 0x0f) << 4));
      qh |= uint32_t((q0 & 0x10u) >> 4) << j;
      qh |= uint32_t((q1 & 0x10u) >> 4) << (j + 16);
    }
    for (int i = 0; i < 4; ++i) y[k].qh[i] = uint8_t(qh >> (8 * i));
  }
}

}  // namespace

extern const Format kFormatQ5_1 = {QSP_DTYPE_Q5_1, "q5_1", 32, sizeof(BlockQ5_1), dequantize, quantize};

}  // namespace fmt
}  // namespace qsp
